//! Raw loops the ops call: strided walks, GEMM, convolution lowering.

pub mod conv;
pub mod depthwise;
pub mod gemm;
pub mod special;
pub mod strided;
