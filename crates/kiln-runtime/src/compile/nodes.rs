//! The fused nodes the compile stage's passes lift instructions into: what each computes,
//! on which values, in which layouts, and the original operators it stands for.

use kiln_kernels::compute::conv2d::{Conv2dArgs, Layout, Layouts};
use kiln_kernels::compute::elementwise::MapInstr;
use kiln_kernels::compute::sgemm::Activation;
use kiln_kernels::pool::MaxPool2dArgs;

/// The constants of an inference batch norm folded into a convolution (the prepared kernel
/// folds them: [`BatchNorm`](kiln_kernels::compute::conv2d::BatchNorm)).
#[derive(Clone, Debug)]
pub(crate) struct BatchNormValues {
    pub weight: Option<u32>,
    pub bias: Option<u32>,
    pub mean: u32,
    pub var: u32,
    pub eps: f64,
}

/// A 2-D convolution (NCHW, float32) with a constant weight and a fused epilogue.
#[derive(Clone, Debug)]
pub(crate) struct ConvNode {
    pub input: u32,
    pub weight: u32,
    pub bias: Option<u32>,
    pub args: Conv2dArgs,
    pub bn: Option<BatchNormValues>,
    pub residual: Option<u32>,
    pub act: Activation,
    pub output: u32,
    /// How the input and the output (and residual) are laid out ([`layout`]).
    pub layouts: Layouts,
    /// The operators this node stands for, in order.
    pub fused: Vec<String>,
}

/// A pointwise convolution whose output only the depthwise convolution right after it reads,
/// run as one step a few rows at a time
/// ([`PointwiseDepthwise`](kiln_kernels::compute::conv2d::PointwiseDepthwise)): the expanded
/// activation between them is never written.
#[derive(Clone, Debug)]
pub(crate) struct PointwiseDepthwiseNode {
    pub pointwise: ConvNode,
    pub depthwise: ConvNode,
}

/// `out = input @ W (+ bias)` (float32, input [M, K]) with a constant W and a fused epilogue.
#[derive(Clone, Debug)]
pub(crate) struct LinearNode {
    pub input: u32,
    /// The constant weight value.
    pub weight: u32,
    /// Whether `weight` is stored [N, K] (a `permute_copy` of it was folded away) rather than
    /// [K, N].
    pub weight_is_nk: bool,
    pub bias: Option<u32>,
    pub residual: Option<u32>,
    pub act: Activation,
    pub output: u32,
    pub fused: Vec<String>,
}

/// `max_pool2d_with_indices` (float32, static shapes) whose indices nothing reads: values
/// only, over NCHW planes or, when [`layout`] makes its 4-D input and output channels-last,
/// NHWC images.
#[derive(Clone, Debug)]
pub(crate) struct MaxPoolNode {
    pub input: u32,
    pub layout: Layout,
    pub args: MaxPool2dArgs,
    pub output: u32,
    pub fused: Vec<String>,
}

/// `mean` of a float32 `[N, C, H, W]` activation over `H` and `W` (global average pooling),
/// read in `layout` ([`layout`] may make it channels-last); the output `[N, C, 1, 1]` (or
/// `[N, C]`) is the same bytes in either layout.
#[derive(Clone, Debug)]
pub(crate) struct MeanNode {
    pub input: u32,
    pub layout: Layout,
    pub output: u32,
    pub fused: Vec<String>,
}

/// Float32 elementwise operators over tensors of one shape, run as one step
/// ([`MapProgram`](kiln_kernels::compute::elementwise::MapProgram)): registers `0..inputs.len()`
/// hold the read tensors, instruction `i` writes register `inputs.len() + i`, and each output
/// copies one register into its value. Only the values read after the step (or returned by the
/// method) are outputs; the others never leave the step. Every instruction rounds to float32 as
/// the separate kernels do, so results are the same bits.
#[derive(Clone, Debug)]
pub(crate) struct MapNode {
    pub inputs: Vec<u32>,
    pub instrs: Vec<MapInstr>,
    /// (register, value written).
    pub outputs: Vec<(usize, u32)>,
    pub fused: Vec<String>,
}

/// `mul` of a float32 `[N, C, H, W]` activation by a `[N, C, 1, 1]` factor per channel (a
/// squeeze-excite block's scale), read and written in `layout` ([`layout`] may make both
/// channels-last; the factors are the same bytes in either layout).
#[derive(Clone, Debug)]
pub(crate) struct ChannelScaleNode {
    pub input: u32,
    pub scale: u32,
    pub layout: Layout,
    pub output: u32,
    pub fused: Vec<String>,
}

/// PyTorch's `_safe_softmax` over the last dim of a float32 tensor of static shape (attention
/// scores): the softmax, with the rows whose every score is `-inf` set to zeros
/// ([`Softmax::zero_masked_rows`](kiln_kernels::compute::softmax::Softmax)), as one step in
/// place of the softmax and the six operators that zeroed those rows.
#[derive(Clone, Debug)]
pub(crate) struct SafeSoftmaxNode {
    pub input: u32,
    /// Values in a row (the last dim).
    pub row: usize,
    pub output: u32,
    pub fused: Vec<String>,
}

/// A chain of elementwise float32 operators between two XNNPACK converts, int8 to float32
/// and back (a hardswish on a quantized activation): the chain has 256 possible inputs, so it
/// runs once at load on each of them, and the step looks each element up in the resulting
/// table ([`lookup_qs8`](kiln_kernels::compute::xnn_lut::lookup_qs8)).
#[derive(Clone, Debug)]
pub(crate) struct Qs8LookupNode {
    pub input: u32,
    pub output: u32,
    /// The calls in order, converts included: operator and arguments.
    pub calls: Vec<(String, Vec<u32>)>,
}

/// XNNPACK's QS8 convolution (`kiln_xnnpack::qs8_convolution.out`, NHWC int8 activations of
/// static shape) whose weight, weight scales and bias are constants: checked and laid out once
/// at load ([`PackedQs8Conv`](kiln_kernels::compute::xnn_qconv::PackedQs8Conv)). An int8
/// `clamp` of its output, absorbed, narrows the output range instead of running as a pass.
#[derive(Clone, Debug)]
pub(crate) struct Qs8ConvNode {
    /// The call's arguments before its output: the input first.
    pub args: Vec<u32>,
    /// The integer bounds of an absorbed clamp.
    pub clamp: Option<(i32, i32)>,
    pub output: u32,
    pub fused: Vec<String>,
}
