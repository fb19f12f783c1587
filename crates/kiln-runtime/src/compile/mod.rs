//! The compile stage, between decoding a method and executing it.
//!
//! ```text
//! MethodPlan chain --> Graph (one node per instruction, each its own origin)
//!                  --> passes: alias copies (contiguous views, squeezes, clones and outer
//!                      slices become aliases placed by the memory plan),
//!                      lift (convolution/addmm/mm with constant weights become
//!                      Conv/Linear nodes, a constant weight's permute_copy folded away,
//!                      max pooling whose indices nothing reads becomes MaxPool, a mean
//!                      over height and width becomes Mean, a mul by a factor per
//!                      channel becomes ChannelScale), an attention block's safe softmax
//!                      (the softmax and the six nodes zeroing fully masked rows) becomes
//!                      SafeSoftmax, an XNNPACK QS8 convolution with constant filters
//!                      becomes Qs8Conv (an int8 clamp after it narrows its output range),
//!                      elementwise float operators between converts from and to int8
//!                      become a Qs8Lookup table,
//!                      fold batch norm into the convolution, fuse the epilogue
//!                      (residual add, relu/hardtanh/clamp/hardswish/sigmoid/silu/gelu, and
//!                      sigmoid+mul as silu),
//!                      groups of float32 elementwise operators fused into one map
//!                      (a cell's gates: several inputs and outputs),
//!                      channels-last activations between convolutions, max
//!                      poolings and channel scales ([`layout`]), a pointwise
//!                      convolution fused with the depthwise one reading its large
//!                      output, outer concatenations
//!                      removed (their inputs written in place inside the output)
//!                  --> lower: one step per live node; fused nodes get a prepared kernel
//!                      (weights folded and laid out once, here) behind Callee::Prepared
//! ```
//!
//! The passes decide what only the graph knows: who reads a value, whether two are adjacent,
//! which constants are static. What an operator's arguments mean, which layouts it runs in
//! and its prepared form are the operator's own, in kiln-kernels beside its kernel: max
//! pooling's [`MaxPool2dArgs`](kiln_kernels::pool::MaxPool2dArgs) (read from the call's lists,
//! `supports` a layout pair, `prepare`), convolution's
//! [`Conv2dArgs`](kiln_kernels::compute::conv2d::Conv2dArgs),
//! [`PackedConv2d::supports`](kiln_kernels::compute::conv2d::PackedConv2d::supports) and
//! [`PackedConv2d::prepare`](kiln_kernels::compute::conv2d::PackedConv2d::prepare) (batch
//! norm folded, packed, output checked).
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
//! the node. SiLU exported as `sigmoid(y)` then `mul(y, s)` is the one value read twice: the
//! two reads are the absorbed pair's. A map is the one exception to the single written value:
//! it writes every value of its group that something after it reads, and skips only those
//! read inside the group.
//! Only straight-line methods of kernel calls are rewritten, and they get a new memory plan for the compiled order ([`memory`]).
//! Their inputs that no step writes are read where the caller gave them ([`inputs`]).

mod alias;
pub(crate) mod bound;
mod graph;
mod inputs;
mod layout;
mod memory;
mod nodes;
mod passes;
mod prepared;
mod quantized;

pub(crate) use alias::{aliases, Aliases};
pub(crate) use graph::{Graph, NodeOp};
pub(crate) use inputs::inputs_in_place;
pub(crate) use memory::replan;
pub(crate) use prepared::{lower_node, PreparedKernel, StepScratch};

/// The memory layout of a node's activations.
pub(crate) use kiln_kernels::compute::conv2d::Layout;

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
    /// mean reads or a max pooling or channel scale runs in (`"nhwc"`).
    pub layout: Option<String>,
    /// How a compiled kernel with a choice computes: a convolution's `gemm`, `im2col`,
    /// `igemm`, `winograd`, `few-pixels`, `depthwise`, `depthwise-blocks`, `grouped` or
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
    passes::lift_channel_scales(g);
    passes::fuse_safe_softmaxes(g);
    quantized::lift_qs8_convolutions(g);
    quantized::fuse_qs8_clamps(g);
    quantized::fuse_qs8_lookups(g);
    passes::fold_batch_norms(g);
    passes::fuse_epilogues(g);
    passes::fuse_elementwise(g);
    layout::choose_layouts(g);
    passes::fuse_pointwise_depthwise(g);
    passes::alias_concat_inputs(g);
}
