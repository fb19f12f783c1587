//! Raw loops the ops call: strided walks, GEMM, convolution lowering.

pub mod strided;
