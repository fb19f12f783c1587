//! Raw loops the ops call: strided walks, GEMM, convolution lowering.

pub mod special;
pub mod strided;
