//! kiln's float32 NPU operators, each launching one kiln CPU kernel through kiln's KILN_LAUNCH
//! op ([`kiln_format::txn::launch`]), so any chain of them fuses and runs on the reference
//! device:
//!
//! - elementwise: [`Add`], [`Mul`] (broadcasting), [`Sigmoid`], [`Clamp`], [`Gelu`],
//!   [`MulScalar`];
//! - linear algebra: [`MatMul`] (constant weight, optional bias), [`BatchMatMul`];
//! - convolution: [`Conv2d`];
//! - normalization: [`BatchNorm`], [`LayerNorm`];
//! - pooling: [`MaxPool2d`], [`AvgPool2d`];
//! - data movement: [`Transpose`], [`Concat`], [`Reshape`], [`Expand`];
//! - reductions: [`Mean`], [`Softmax`].
//!
//! Every one lays out its buffers alike (DD's elementwise layout): the output in kernel
//! argument 0, the tensor inputs in kernel argument 1 and the constant inputs in kernel
//! argument 2, each packed at the next multiple of [`crate::ARG_ALIGN`]; ONNX argument indices
//! are the inputs, then the constants, then the output. Its transaction is a DDR_PATCH per
//! buffer argument, writing the argument's address (its kernel argument plus offset) into the
//! register [`arg_reg`] names, then the launch, whose arguments are those registers in the
//! order inputs, constants, output, and whose words state every argument's shape and the
//! kernel's parameters. Fusion rewrites the patches, so a fused chain's launches read and write
//! the fused buffers. None of them needs super-kernel parameters.

mod conv;
mod elementwise;
mod linalg;
mod movement;
mod norm;
mod pool;
mod reduce;

pub use conv::Conv2d;
pub use elementwise::{Add, Clamp, Gelu, Mul, MulScalar, Sigmoid};
pub use linalg::{BatchMatMul, MatMul, WeightLayout};
pub use movement::{Concat, Expand, Reshape, Transpose};
pub use norm::{BatchNorm, LayerNorm};
pub use pool::{AvgPool2d, MaxPool2d};
pub use reduce::{Mean, Softmax};

mod launch;

pub use launch::{arg_reg, FLOAT32};
