//! The compile stage, between decoding a method and executing it.
//!
//! ```text
//! MethodPlan chain --> Graph (one node per instruction, each its own origin)
//!                  --> passes: alias copies (contiguous views, squeezes, clones and outer
//!                      slices become aliases placed by the memory plan),
//!                      lift (convolution/addmm/mm with constant weights become
//!                      Conv/Linear nodes, a constant weight's permute_copy folded away,
//!                      max pooling whose indices nothing reads becomes MaxPool, a mean
//!                      over height and width becomes Mean),
//!                      fold batch norm into the convolution, fuse the epilogue
//!                      (residual add, relu/hardtanh/clamp/hardswish/sigmoid/silu/gelu),
//!                      groups of float32 elementwise operators fused into one map
//!                      (a cell's gates: several inputs and outputs),
//!                      channels-last activations between convolutions and max
//!                      poolings ([`layout`]), a pointwise convolution fused with the
//!                      depthwise one reading its large output, outer concatenations
//!                      removed (their inputs written in place inside the output)
//!                  --> lower: one step per live node; fused nodes get a prepared kernel
//!                      (weights folded and laid out once, here) behind Callee::Prepared
//! ```
//!
//! Every rewrite keeps origins with the rules of [`kiln_format::origins`]: a lifted node
//! replaces its instruction (rule 3), a node that takes in its consumer absorbs it (rule 1),
//! so each compiled step knows the original instructions it stands for
//! ([`CompiledNode::origins`], `kiln inspect --compiled`).
//!
//! Fused nodes run at the position of their first instruction and write the value the last
//! absorbed instruction wrote; the values in between are never written. A fusion is made only
//! when each skipped value is read exactly once (by the absorbed instruction) and is no method
//! output (reads of its [`alias`]es included), and the absorbed instruction comes right after
//! the node. A map is the one exception to the single written value: it writes every value of
//! its group that something after it reads, and skips only those read inside the group. Only straight-line methods of kernel calls are rewritten, and they get a new
//! memory plan for the compiled order ([`memory`]).

mod alias;
mod graph;
mod layout;
mod memory;
mod passes;
mod prepared;

pub(crate) use alias::{aliases, Aliases};
pub(crate) use graph::{Graph, NodeOp};
pub(crate) use memory::replan;
pub(crate) use prepared::{lower_node, PreparedKernel, StepScratch};

/// An activation applied to a fused node's output, after the bias and the residual: the
/// packed kernels' own, applied in registers (clamp) or over the finished tile.
pub(crate) use kiln_kernels::compute::sgemm::Activation;

/// The memory layouts of a convolution's activations.
pub(crate) use kiln_kernels::compute::conv2d::{Layout, Layouts};

/// The instructions of a [`MapNode`].
pub(crate) use kiln_kernels::compute::elementwise::{BinaryOp, MapInstr, UnaryOp};

/// Batch norm (inference) folded into a convolution: per output channel
/// `scale = weight / sqrt(var + eps)`, `shift = bias - mean * scale`.
#[derive(Clone, Debug)]
pub(crate) struct BatchNorm {
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
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    pub bn: Option<BatchNorm>,
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
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub ceil: bool,
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

/// One step of a compiled method, for `kiln inspect --compiled`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompiledNode {
    /// Chain index.
    pub chain: usize,
    /// What the step runs: an operator `name.overload`, `delegate:<id>`, an instruction kind,
    /// or a compiled kernel (`conv2d`, `linear`).
    pub kind: String,
    /// The original operators it stands for, in order (one for an unchanged instruction).
    pub operators: Vec<String>,
    /// The original instruction indices it stands for, ascending.
    pub origins: Vec<u32>,
    /// Inside an inlined XNNPACK delegate: the debug handles of the delegate graph's nodes it
    /// computes, ascending (ExecuTorch's delegate debug identifiers; empty elsewhere).
    pub debug_handles: Vec<u32>,
    /// The schema kinds of those nodes (`XNNConv2d`, ...), one per debug handle.
    pub delegate_ops: Vec<String>,
    /// A convolution's activation layouts, input then output (`"nchw>nhwc"`), or the layout a
    /// mean reads or a max pooling runs in (`"nhwc"`).
    pub layout: Option<String>,
    /// How a compiled kernel with a choice computes: a convolution's `gemm`, `im2col`,
    /// `igemm`, `winograd`, `few-pixels`, `depthwise`, `depthwise-blocks` or
    /// `gemm+depthwise-blocks` (chosen at load from the geometry and the CPU).
    pub algorithm: Option<String>,
}

/// Runs the passes over the graph of one chain; only methods whose aliases are known
/// (straight-line kernel calls) are rewritten.
pub(crate) fn optimize(g: &mut Graph<'_>) {
    if !g.rewritable() {
        return;
    }
    passes::alias_copies(g);
    passes::fold_weight_permutes_into_linear(g);
    passes::lift_convolutions(g);
    passes::lift_max_pools(g);
    passes::lift_means(g);
    passes::fold_batch_norms(g);
    passes::fuse_epilogues(g);
    passes::fuse_elementwise(g);
    layout::choose_layouts(g);
    passes::fuse_pointwise_depthwise(g);
    passes::alias_concat_inputs(g);
}
