//! Prepared 2-D convolution (f32, NCHW or channels-last activations, [`Layouts`]): weights
//! packed once at construction, fused bias, residual and activation. NCHW output, per image
//! and group: `out[Cout_g x OH*OW] = W[Cout_g x Cin_g*kh*kw] * B[Cin_g*kh*kw x OH*OW]`, so
//! the packed weights are the A operand and the output rows are exactly the NCHW planes. `B`
//! is the input itself for 1x1 / stride 1 / no padding, else the implicit im2col matrix packed
//! straight from the input. NHWC output swaps the operands: pixels are the product's rows and
//! the packed weights its right operand. A pointwise convolution reads its input where it
//! lies (`Plan::PixelRows`); any other reads a channels-last image through an indirection
//! buffer of one offset per output pixel and tap (`Plan::Indirect`, XNNPACK's IGEMM), with no
//! im2col matrix, an NCHW input being first copied channels-last; a channels-last 3x3
//! stride-1 one with enough channels and pixels runs as Winograd F(2x2, 3x3) instead
//! (`Plan::Winograd`, `conv2d/winograd.rs`). Depthwise layers
//! (`groups == Cin == Cout`) use a direct kernel per channel plane (`depthwise/rows.rs`), or
//! blocks of 16 channels laid out channels-last (`depthwise/channels.rs`) when the output
//! is narrow or the activations NHWC. Grouped layers of a few channels per group run
//! channels-last on a direct kernel over each pixel's window (`grouped.rs`). A pointwise
//! convolution of one-pixel images (squeeze-excite) is a linear layer (`Plan::Linear`). Large layers
//! split over the method's threads:
//! depthwise layers by channels or output rows, GEMMs by output channels or by pixels (see
//! [`PackedConv2d::run`]).

pub mod depthwise;
mod geometry;
mod grouped;
mod packed;
mod pointwise_depthwise;
mod prepare;
mod scratch;
mod winograd;

pub use geometry::{Conv2dGeometry, Layout, Layouts};
pub use packed::PackedConv2d;
pub use pointwise_depthwise::PointwiseDepthwise;
pub use prepare::{BatchNorm, Conv2dArgs};
pub use scratch::ConvScratch;
