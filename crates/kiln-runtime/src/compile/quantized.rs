//! The passes over the quantized calls an inlined XNNPACK delegate lowers to
//! (`kiln_xnnpack::*`, `xnnpack/quant.rs`): QS8 convolutions with constant filters become
//! [`NodeOp::Qs8Conv`] steps prepared once at load, an int8 `clamp` of such a convolution's
//! output (XNNPACK's clamp node after a convolution, which XNNPACK's own runtime fuses too)
//! narrows the convolution's output range, and elementwise float operators between two
//! converts (int8 to float32 and back) become a [`NodeOp::Qs8Lookup`] table.

use kiln_kernels::compute::xnn_qmath::qs8_output_range;
use kiln_kernels::{Capacity, DType};

use super::graph::{Graph, NodeOp};
use super::nodes::{Qs8ConvNode, Qs8LookupNode};
use super::passes::{kernel_call, out_arg};

/// The operator the convolution pass lifts.
const QS8_CONV: &str = "kiln_xnnpack::qs8_convolution.out";
/// Its arguments before the output (`ops/xnnpack.rs`).
const QS8_CONV_ARGS: usize = 15;
/// Argument positions of [`QS8_CONV`]: weight, weight scales, bias, output scale, output zero
/// point and the fused float bounds (the input is first).
const WEIGHT: usize = 3;
const WEIGHT_SCALES: usize = 4;
const BIAS: usize = 5;
const OUT_SCALE: usize = 11;
const OUT_ZP: usize = 12;
const OUT_MIN: usize = 13;

/// Whether `v` is an int8 activation of static 4-D shape the compiled step can read or write
/// in place.
fn int8_image(g: &Graph<'_>, v: u32) -> bool {
    g.dense(v, DType::Char).is_some_and(|t| t.capacity == Capacity::Static && t.shape.rank() == 4)
}

/// `kiln_xnnpack::qs8_convolution.out` over int8 activations of static shape, whose weight,
/// weight scales and bias (if any) are constants, becomes [`NodeOp::Qs8Conv`]. The arguments
/// are checked when the step is prepared, by the operator's own
/// [`prepare_qs8_convolution`](kiln_kernels::ops::xnnpack::prepare_qs8_convolution).
pub(crate) fn lift_qs8_convolutions(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let Some((QS8_CONV, args)) = kernel_call(g, n) else { continue };
        let (Some(out), true) = (out_arg(args), args.len() == QS8_CONV_ARGS + 2) else {
            continue;
        };
        let constant = |v: u32, dt: DType| g.constant(v, dt).is_some();
        let ok = int8_image(g, args[0])
            && int8_image(g, out)
            && constant(args[WEIGHT], DType::Char)
            && constant(args[WEIGHT_SCALES], DType::Float)
            && (g.is_none(args[BIAS]) || constant(args[BIAS], DType::Int));
        if !ok {
            continue;
        }
        let node = Qs8ConvNode {
            args: args[..QS8_CONV_ARGS].to_vec(),
            clamp: None,
            output: out,
            fused: vec![QS8_CONV.to_string()],
        };
        g.replace(n, NodeOp::Qs8Conv(node));
    }
}

/// An int8 `aten::clamp.out` right after a [`NodeOp::Qs8Conv`], reading only its output (of
/// the same sizes), is absorbed: the convolution's integer output range becomes the
/// intersection of its own (the fused float bounds quantized) and the clamp's bounds. That is
/// the clamp's result bit for bit: requantization clamps before rounding, rounding is monotone
/// and keeps integers, and clamping twice to integer ranges that meet is clamping once to
/// their intersection. Skipped when the ranges do not meet.
pub(crate) fn fuse_qs8_clamps(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let NodeOp::Qs8Conv(c) = &g.nodes[n].op else { continue };
        let (y, args) = (c.output, c.args.clone());
        let Some(next) = g.next_live(n) else { continue };
        let Some(("aten::clamp.out", &[x, lo, hi, out, _])) = kernel_call(g, next) else {
            continue;
        };
        if x != y || !g.read_once(y) || !int8_image(g, out) || g.sizes(out) != g.sizes(y) {
            continue;
        }
        let bound = |v: u32, none: i64| if g.is_none(v) { Some(none) } else { g.int(v) };
        let (Some(a), Some(b)) = (bound(lo, i64::MIN), bound(hi, i64::MAX)) else { continue };
        let Some((qmin, qmax)) = output_range(g, &args) else { continue };
        let (lo, hi) = (a.max(qmin.into()), b.min(qmax.into()));
        if a > b || lo > hi {
            continue;
        }
        let NodeOp::Qs8Conv(c) = &mut g.nodes[n].op else { continue };
        c.clamp = Some((lo as i32, hi as i32));
        c.output = out;
        c.fused.push("aten::clamp.out".to_string());
        g.absorb(n, next);
    }
}

/// The integer output range of a QS8 convolution call (its fused float bounds quantized, as
/// the operator does), when its arguments are the constants it needs.
fn output_range(g: &Graph<'_>, args: &[u32]) -> Option<(i32, i32)> {
    let scale = g.number(args[OUT_SCALE])? as f32;
    let zp = i32::try_from(g.int(args[OUT_ZP])?).ok()?;
    let (lo, hi) = (g.number(args[OUT_MIN])? as f32, g.number(args[OUT_MIN + 1])? as f32);
    Some(qs8_output_range(lo, hi, scale, zp))
}

/// The convert operator of XNNPACK's lowering.
const CONVERT: &str = "kiln_xnnpack::convert.out";

/// Elementwise float32 operators of one tensor whose other arguments (before the output) are
/// numbers, `None` or strings: a table may stand for a chain of them.
const ELEMENTWISE: &[&str] = &[
    "aten::hardswish.out",
    "aten::hardsigmoid.out",
    "aten::sigmoid.out",
    "aten::tanh.out",
    "aten::relu.out",
    "aten::hardtanh.out",
    "aten::clamp.out",
    "aten::gelu.out",
    "aten::silu.out",
    "aten::leaky_relu.out",
    "aten::elu.out",
];

/// `convert` (int8 to float32), one or more [`ELEMENTWISE`] operators, then `convert` (float32
/// to int8), each intermediate read once by the next and every tensor dense, of static and
/// equal sizes, become one [`NodeOp::Qs8Lookup`]: the prepared step runs the very calls on
/// the 256 int8 values once and looks the activation's elements up. The table's entries are
/// the chain's results bit for bit, because the operators are elementwise and their kernels
/// compute each element alike whatever its position (no element depends on another's lane).
pub(crate) fn fuse_qs8_lookups(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let Some(Chain { calls, nodes, output }) = lookup_chain(g, n) else { continue };
        let input = calls[0].1[0];
        let calls = calls.into_iter().map(|(op, a)| (op.to_string(), a.to_vec())).collect();
        g.replace(n, NodeOp::Qs8Lookup(Qs8LookupNode { input, output, calls }));
        for m in nodes.into_iter().skip(1) {
            g.absorb(n, m);
        }
    }
}

/// A lookup chain: its calls (operator and arguments), their nodes and the int8 value it
/// writes.
struct Chain<'m> {
    calls: Vec<(&'m str, &'m [u32])>,
    nodes: Vec<usize>,
    output: u32,
}

/// The lookup chain starting at node `n`, if one starts there.
fn lookup_chain<'m>(g: &Graph<'m>, n: usize) -> Option<Chain<'m>> {
    let (CONVERT, args) = kernel_call(g, n)? else { return None };
    let (x, first) = (args[0], out_arg(args)?);
    let sizes = g.sizes(x)?;
    let same = |v: u32, dt: DType| {
        g.dense(v, dt).is_some_and(|t| t.capacity == Capacity::Static)
            && g.sizes(v).as_ref() == Some(&sizes)
    };
    if !same(x, DType::Char) || !same(first, DType::Float) || !g.read_once(first) {
        return None;
    }
    let (mut calls, mut nodes) = (vec![(CONVERT, args)], vec![n]);
    let (mut at, mut value) = (n, first);
    loop {
        at = g.next_live(at)?;
        let (op, args) = kernel_call(g, at)?;
        let out = out_arg(args)?;
        if args.first() != Some(&value) {
            return None;
        }
        calls.push((op, args));
        nodes.push(at);
        if op == CONVERT {
            let whole = calls.len() > 2 && same(out, DType::Char);
            return whole.then_some(Chain { calls, nodes, output: out });
        }
        let scalars = args[1..args.len() - 2].iter().all(|&v| g.tensor(v).is_none());
        if !ELEMENTWISE.contains(&op) || !scalars || !same(out, DType::Float) || !g.read_once(out) {
            return None;
        }
        value = out;
    }
}
