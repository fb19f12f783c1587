//! The rewrites of the compile stage, each over a whole [`Graph`]. See the module docs of
//! [`crate::compile`] for when a fusion is allowed.

use kiln_kernels::compute::conv2d::{Conv2dArgs, PointwiseDepthwise};
use kiln_kernels::compute::elementwise::{MapProgram, MAX_OPERANDS};
use kiln_kernels::pool::MaxPool2dArgs;
use kiln_kernels::{Capacity, DType};

use crate::plan::InstrDef;
use crate::value::Val;

use super::graph::{Graph, NodeOp};
use super::nodes::{
    BatchNormValues, ChannelScaleNode, ConvNode, LinearNode, MapNode, MaxPoolNode, MeanNode,
    PointwiseDepthwiseNode, SafeSoftmaxNode,
};
use super::prepared::conv_geometry;
use kiln_kernels::compute::conv2d::{Layout, Layouts};
use kiln_kernels::compute::elementwise::{BinaryOp, MapInstr, UnaryOp};
use kiln_kernels::compute::sgemm::Activation;

/// The kernel instruction of node `n`: its operator and arguments.
pub(super) fn kernel_call<'m>(g: &Graph<'m>, n: usize) -> Option<(&'m str, &'m [u32])> {
    match g.instruction(n)? {
        ins @ InstrDef::Kernel { args, .. } => Some((g.operator(ins)?, args.as_slice())),
        _ => None,
    }
}

/// The written tensor of a single-output `.out` kernel call: the position before the
/// trailing return value.
pub(super) fn out_arg(args: &[u32]) -> Option<u32> {
    args.len().checked_sub(2).and_then(|p| args.get(p).copied())
}

/// Copies whose output has the bytes of a contiguous part of their input
/// (`view_copy`, `_unsafe_view`, `squeeze_copy`, `unsqueeze_copy`, `alias_copy`, `clone`,
/// `_clone_dim_order` and `expand_copy` that change no element count (between contiguous
/// tensors), and `slice_copy`/`select_copy` along the outermost dimension that is not 1) are
/// removed:
/// the output becomes an alias of the input at the right byte offset, so the memory plan puts
/// it there and nothing is copied. Both must be planned, contiguous, of static shape, and
/// written by one instruction each (so neither changes while the other is read). The removed
/// node's origin goes to the node before it (or after it, for the first), and its read of
/// the input is no longer counted.
pub(crate) fn alias_copies(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let Some((op, args)) = kernel_call(g, n) else { continue };
        // The removed node's origin must go to a neighbour: a method of this one instruction
        // keeps it.
        let Some(into) = neighbour(g, n) else { continue };
        if op == "aten::split_with_sizes_copy.out" {
            if let Some(parts) = outer_split(g, args) {
                for (item, delta) in parts {
                    g.alias(item, args[0], delta);
                }
                g.absorb(into, n);
            }
            continue;
        }
        let (Some(&x), Some(y)) = (args.first(), out_arg(args)) else { continue };
        let (Some(xt), Some(yt)) = (g.tensor(x), g.tensor(y)) else { continue };
        let ok = xt.dtype == yt.dtype && aliasable(g, x) && aliasable(g, y) && x != y;
        if !ok {
            continue;
        }
        let sizes = xt.shape.sizes();
        let elem = xt.dtype.size();
        let delta = match (op, args) {
            (
                "aten::view_copy.out"
                | "aten::_unsafe_view.out"
                | "aten::squeeze_copy.dim_out"
                | "aten::squeeze_copy.dims_out"
                | "aten::squeeze_copy.out"
                | "aten::unsqueeze_copy.out"
                | "aten::alias_copy.out"
                | "aten::clone.out"
                | "dim_order_ops::_clone_dim_order.out"
                | "aten::expand_copy.out",
                _,
            ) => (xt.shape.numel() == yt.shape.numel()).then_some(0),
            ("aten::slice_copy.Tensor_out", &[_, dim, start, end, step, _, _]) => {
                outer_range(g, sizes, dim, Some((start, end, step))).and_then(|(d, lo, hi)| {
                    let inner: usize = sizes[d + 1..].iter().product();
                    let want = (hi - lo) * inner;
                    (yt.shape.numel() == want).then_some(lo * inner * elem)
                })
            }
            ("aten::select_copy.int_out", &[_, dim, index, _, _]) => {
                outer_index(g, sizes, dim, index).and_then(|(d, i)| {
                    let inner: usize = sizes[d + 1..].iter().product();
                    (yt.shape.numel() == inner).then_some(i * inner * elem)
                })
            }
            _ => None,
        };
        let Some(delta) = delta else { continue };
        // The copy's read of `x` goes with it; the reads of `y` become reads of `x`.
        g.drop_read(x);
        g.alias(y, x, delta);
        g.absorb(into, n);
    }
}

/// The node a removed node's origin goes to: the live node before it, or after it for the
/// first.
fn neighbour(g: &Graph<'_>, n: usize) -> Option<usize> {
    (0..n).rev().find(|&m| !matches!(g.nodes[m].op, NodeOp::Removed)).or_else(|| g.next_live(n))
}

/// Whether tensor `v` may become an alias: planned, contiguous, static, written once.
fn aliasable(g: &Graph<'_>, v: u32) -> bool {
    g.tensor(v).is_some_and(|t| t.shape.is_dense_row_major() && t.capacity == Capacity::Static)
        && g.planned(v)
        && g.written_once(v)
}

/// `split_with_sizes_copy(x, sizes, dim, out)` along a dimension with only 1s before it:
/// each output item with its byte offset in `x`.
fn outer_split(g: &Graph<'_>, args: &[u32]) -> Option<Vec<(u32, usize)>> {
    let &[x, split, dim, out, _] = args else { return None };
    let xt = g.tensor(x)?;
    if !aliasable(g, x) {
        return None;
    }
    let sizes = xt.shape.sizes();
    let d = dim_of(g, sizes, dim)?;
    if !outermost(sizes, d) {
        return None;
    }
    let Some(Val::TensorList(items)) = g.values.get(out as usize) else { return None };
    let split = g.ints(split)?;
    if split.len() != items.len() || split.iter().map(|&s| s.max(0)).sum::<i64>() != sizes[d] as i64
    {
        return None;
    }
    let inner: usize = sizes[d + 1..].iter().product();
    let elem = xt.dtype.size();
    let mut at = 0usize;
    let mut parts = Vec::with_capacity(items.len());
    for (&item, &len) in items.iter().zip(&split) {
        let len = usize::try_from(len).ok()?;
        let t = g.tensor(item)?;
        let ok = aliasable(g, item)
            && item != x
            && t.dtype == xt.dtype
            && t.shape.numel() == len * inner
            && !parts.iter().any(|&(p, _)| p == item);
        if !ok {
            return None;
        }
        parts.push((item, at * inner * elem));
        at += len;
    }
    Some(parts)
}

/// `cat(items, dim, out)` along a dimension with only 1s before it, where every item can live
/// inside `out`: each item is its own planned, static, dense tensor written once (directly,
/// or through a view of all its bytes), none repeats, and none is written channels-last.
/// Each item's root value with its byte offset in `out`.
fn outer_cat(g: &Graph<'_>, args: &[u32]) -> Option<Vec<(u32, usize)>> {
    let &[list, dim, out, _] = args else { return None };
    let ot = g.tensor(out)?;
    if !aliasable(g, out) || g.root(out).1 != 0 {
        return None;
    }
    let sizes = ot.shape.sizes();
    let d = dim_of(g, sizes, dim)?;
    if !outermost(sizes, d) {
        return None;
    }
    let Some(Val::TensorList(items)) = g.values.get(list as usize) else { return None };
    let out_root = g.root(out).0;
    let mut at = 0usize;
    let mut parts: Vec<(u32, usize)> = Vec::with_capacity(items.len());
    for &item in items.iter() {
        let t = g.tensor(item)?;
        let (root, delta) = g.root(item);
        let rt = g.tensor(root)?;
        let ok = aliasable(g, root)
            && delta == 0
            && rt.cap_bytes == t.nbytes()
            && t.dtype == ot.dtype
            && t.shape.is_dense_row_major()
            && t.capacity == Capacity::Static
            && root != out_root
            && !writes_channels_last(g, root)
            && !parts.iter().any(|&(p, _)| p == root);
        if !ok {
            return None;
        }
        parts.push((root, at));
        at += t.nbytes();
    }
    (at == ot.nbytes()).then_some(parts)
}

/// Whether a compiled node writes `v` channels-last (its bytes are then not NCHW).
fn writes_channels_last(g: &Graph<'_>, v: u32) -> bool {
    g.nodes.iter().any(|node| match &node.op {
        NodeOp::Conv(c) => c.output == v && c.layouts.output == Layout::Nhwc,
        NodeOp::PointwiseDepthwise(p) => {
            p.depthwise.output == v && p.depthwise.layouts.output == Layout::Nhwc
        }
        NodeOp::MaxPool(m) => m.output == v && m.layout == Layout::Nhwc,
        NodeOp::ChannelScale(m) => m.output == v && m.layout == Layout::Nhwc,
        _ => false,
    })
}

/// A `cat` along its outermost dimension (an RNN's stacked hidden states, channels of a batch
/// of one) is removed: each item's producer writes it in place inside the output (the item
/// becomes an alias of the output at its offset), so nothing is copied. Runs after the
/// layouts are chosen, so no item is written channels-last.
pub(crate) fn alias_concat_inputs(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let Some(("aten::cat.out", args)) = kernel_call(g, n) else { continue };
        let Some(into) = neighbour(g, n) else { continue };
        let Some(parts) = outer_cat(g, args) else { continue };
        let Some(out) = out_arg(args) else { continue };
        for (root, delta) in parts {
            g.alias(root, out, delta);
        }
        g.absorb(into, n);
    }
}

/// A dimension index of `sizes`, normalized.
fn dim_of(g: &Graph<'_>, sizes: &[usize], dim: u32) -> Option<usize> {
    let d = g.int(dim)?;
    let rank = sizes.len() as i64;
    let d = if d < 0 { d + rank } else { d };
    usize::try_from(d).ok().filter(|&d| d < sizes.len())
}

/// Whether every dimension before `d` has size 1 (a block of dimension `d` is contiguous).
fn outermost(sizes: &[usize], d: usize) -> bool {
    sizes[..d].iter().all(|&s| s == 1)
}

/// `slice(dim, start, end, step 1)` on a dimension with only 1s before it: the dimension and
/// the clamped `start..end`, as PyTorch normalizes them.
fn outer_range(
    g: &Graph<'_>,
    sizes: &[usize],
    dim: u32,
    range: Option<(u32, u32, u32)>,
) -> Option<(usize, usize, usize)> {
    let d = dim_of(g, sizes, dim)?;
    let (start, end, step) = range?;
    if !outermost(sizes, d) || g.int(step) != Some(1) {
        return None;
    }
    let size = sizes[d] as i64;
    let bound = |v: u32, none: i64| -> Option<i64> {
        if g.is_none(v) {
            return Some(none);
        }
        let x = g.int(v)?;
        Some(if x < 0 { (x + size).max(0) } else { x.min(size) })
    };
    let lo = bound(start, 0)?;
    let hi = bound(end, size)?.max(lo);
    Some((d, usize::try_from(lo).ok()?, usize::try_from(hi).ok()?))
}

/// `select(dim, index)` on a dimension with only 1s before it: the dimension and the index.
fn outer_index(g: &Graph<'_>, sizes: &[usize], dim: u32, index: u32) -> Option<(usize, usize)> {
    let d = dim_of(g, sizes, dim)?;
    if !outermost(sizes, d) {
        return None;
    }
    let size = sizes[d] as i64;
    let i = g.int(index)?;
    let i = if i < 0 { i + size } else { i };
    Some((d, usize::try_from(i).ok().filter(|&i| (i as i64) < size)?))
}

/// `aten::addmm.out(bias, x, permute_copy(W, [1, 0]), 1, 1)` and `aten::mm.out(x, ...)` with a
/// constant `W`, and `aten::linear.out(x, W, bias)` (ExecuTorch's optimized library; `x` of
/// any rank, its leading dimensions the rows) become [`NodeOp::Linear`]; a weight's
/// `permute_copy` is absorbed (its result is then never computed: the prepared kernel lays the
/// constant out once at load).
pub(crate) fn fold_weight_permutes_into_linear(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let Some((op, args)) = kernel_call(g, n) else { continue };
        // `nk`: the product takes the weight [N, K] (linear) rather than [K, N] (mm).
        let (bias, x, w, nk) = match (op, args) {
            ("aten::addmm.out", &[bias, x, w, beta, alpha, _, _]) => {
                if g.number(beta) != Some(1.0) || g.number(alpha) != Some(1.0) {
                    continue;
                }
                (Some(bias), x, w, false)
            }
            ("aten::mm.out", &[x, w, _, _]) => (None, x, w, false),
            ("aten::linear.out", &[x, w, bias, _, _]) => {
                ((!g.is_none(bias)).then_some(bias), x, w, true)
            }
            _ => continue,
        };
        let Some(out) = out_arg(args) else { continue };
        let (Some(xt), Some(ot)) = (g.dense_f32(x), g.dense_f32(out)) else { continue };
        let rank = xt.shape.rank();
        if rank != ot.shape.rank() || rank != 2 && !(nk && rank > 2) {
            continue;
        }
        // The weight: a constant in the product's layout, or a constant in the other one
        // through a permute read only here.
        let (weight, weight_is_nk, permute) = match g.const_f32(w) {
            Some(_) => (w, nk, None),
            None => {
                let Some(p) = producer(g, n, w) else { continue };
                let Some(("aten::permute_copy.out", &[src, dims, _, _])) = kernel_call(g, p) else {
                    continue;
                };
                if g.ints(dims).as_deref() != Some(&[1, 0]) || !g.read_once(w) {
                    continue;
                }
                if g.const_f32(src).is_none() {
                    continue;
                }
                (src, !nk, Some(p))
            }
        };
        let Some(ws) = g.sizes(weight).filter(|s| s.len() == 2) else { continue };
        let (k, nn) = if weight_is_nk { (ws[1], ws[0]) } else { (ws[0], ws[1]) };
        let (xs, os) = (xt.shape.sizes(), ot.shape.sizes());
        if xs[rank - 1] != k || os[rank - 1] != nn || xs[..rank - 1] != os[..rank - 1] {
            continue;
        }
        if let Some(b) = bias {
            match g.const_f32(b) {
                Some(bt) if bt.shape.sizes() == [nn] => {}
                _ => continue,
            }
        }
        let mut fused = Vec::new();
        if permute.is_some() {
            fused.push("aten::permute_copy.out".to_string());
        }
        fused.push(op.to_string());
        g.replace(
            n,
            NodeOp::Linear(LinearNode {
                input: x,
                weight,
                weight_is_nk,
                bias,
                residual: None,
                act: Activation::None,
                output: out,
                fused,
            }),
        );
        if let Some(p) = permute {
            g.absorb(n, p);
        }
    }
}

/// The node before `n` whose kernel writes `v`, if it is an unchanged instruction.
fn producer(g: &Graph<'_>, n: usize, v: u32) -> Option<usize> {
    (0..n).rev().find(|&m| kernel_call(g, m).and_then(|(_, args)| out_arg(args)) == Some(v))
}

/// `aten::convolution.out` over a float32 NCHW activation with a constant 4-D weight (not
/// transposed, static shapes) becomes [`NodeOp::Conv`].
pub(crate) fn lift_convolutions(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let Some(("aten::convolution.out", args)) = kernel_call(g, n) else { continue };
        let &[x, w, bias, stride, padding, dilation, transposed, _, groups, out, _] = args else {
            continue;
        };
        let (Some(xt), Some(ot), Some(wt)) = (g.dense_f32(x), g.dense_f32(out), g.const_f32(w))
        else {
            continue;
        };
        let static_shapes = xt.capacity == Capacity::Static && ot.capacity == Capacity::Static;
        if !static_shapes || xt.shape.rank() != 4 || ot.shape.rank() != 4 || wt.shape.rank() != 4 {
            continue;
        }
        if g.boolean(transposed) != Some(false) {
            continue;
        }
        let c_out = wt.shape.sizes()[0];
        let bias = if g.is_none(bias) {
            None
        } else {
            match g.const_f32(bias) {
                Some(bt) if bt.shape.sizes() == [c_out] => Some(bias),
                _ => continue,
            }
        };
        let (Some(stride), Some(padding), Some(dilation), Some(groups)) =
            (g.ints(stride), g.ints(padding), g.ints(dilation), g.int(groups))
        else {
            continue;
        };
        let Some(conv_args) = Conv2dArgs::from_lists(&stride, &padding, &dilation, groups) else {
            continue;
        };
        g.replace(
            n,
            NodeOp::Conv(ConvNode {
                input: x,
                weight: w,
                bias,
                args: conv_args,
                bn: None,
                residual: None,
                act: Activation::None,
                output: out,
                layouts: Layouts::default(),
                fused: vec!["aten::convolution.out".to_string()],
            }),
        );
    }
}

/// `aten::max_pool2d_with_indices.out` over a float32 NCHW (or CHW) tensor of static shape
/// becomes [`NodeOp::MaxPool`] when nothing reads its indices (nor its returned tuple), so
/// they are never computed.
pub(crate) fn lift_max_pools(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let Some(("aten::max_pool2d_with_indices.out", args)) = kernel_call(g, n) else {
            continue;
        };
        let &[x, kernel, stride, padding, dilation, ceil, out, indices, ref rest @ ..] = args
        else {
            continue;
        };
        if std::iter::once(&indices).chain(rest).any(|&v| g.reads(v) != 0) {
            continue;
        }
        let (Some(xt), Some(ot)) = (g.dense_f32(x), g.dense_f32(out)) else { continue };
        let static_shapes = xt.capacity == Capacity::Static && ot.capacity == Capacity::Static;
        if !static_shapes || !(3..=4).contains(&xt.shape.rank()) {
            continue;
        }
        let (Some(kernel), Some(stride), Some(padding), Some(dilation)) =
            (g.ints(kernel), g.ints(stride), g.ints(padding), g.ints(dilation))
        else {
            continue;
        };
        let Some(ceil) = g.boolean(ceil) else { continue };
        let Some(pool_args) =
            MaxPool2dArgs::from_lists(&kernel, &stride, &padding, &dilation, ceil)
        else {
            continue;
        };
        g.replace(
            n,
            NodeOp::MaxPool(MaxPoolNode {
                input: x,
                layout: Layout::Nchw,
                args: pool_args,
                output: out,
                fused: vec!["aten::max_pool2d_with_indices.out".to_string()],
            }),
        );
    }
}

/// `aten::mean.out` over dims 2 and 3 (or -1 and -2) of a float32 4-D tensor of static shape,
/// with no dtype, becomes [`NodeOp::Mean`].
pub(crate) fn lift_means(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let Some(("aten::mean.out", &[x, dims, _keepdim, dtype, out, _])) = kernel_call(g, n)
        else {
            continue;
        };
        let (Some(xt), Some(ot)) = (g.dense_f32(x), g.dense_f32(out)) else { continue };
        let static_shapes = xt.capacity == Capacity::Static && ot.capacity == Capacity::Static;
        if !static_shapes || xt.shape.rank() != 4 || !g.is_none(dtype) {
            continue;
        }
        let Some(mut dims) = g.ints(dims) else { continue };
        dims.iter_mut().for_each(|d| *d = d.rem_euclid(4));
        dims.sort_unstable();
        let sizes = xt.shape.sizes();
        if dims != [2, 3] || ot.shape.sizes().iter().product::<usize>() != sizes[0] * sizes[1] {
            continue;
        }
        g.replace(
            n,
            NodeOp::Mean(MeanNode {
                input: x,
                layout: Layout::Nchw,
                output: out,
                fused: vec!["aten::mean.out".to_string()],
            }),
        );
    }
}

/// `aten::mul.out` of a float32 4-D `[N, C, H, W]` tensor by a `[N, C, 1, 1]` one (either
/// order), both of static shape, becomes [`NodeOp::ChannelScale`]: a squeeze-excite block's
/// scale, which can then run channels-last between its convolutions.
pub(crate) fn lift_channel_scales(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let Some(("aten::mul.out", &[a, b, out, _])) = kernel_call(g, n) else { continue };
        let dense_static = |v: u32| {
            g.dense_f32(v)
                .filter(|t| t.capacity == Capacity::Static && t.shape.rank() == 4)
                .map(|t| t.shape.sizes().to_vec())
        };
        let (Some(sa), Some(sb), Some(so)) = (dense_static(a), dense_static(b), dense_static(out))
        else {
            continue;
        };
        let factors = |x: &[usize], s: &[usize]| s == [x[0], x[1], 1, 1] && x[2] * x[3] > 1;
        let (input, scale) = if factors(&sa, &sb) {
            (a, b)
        } else if factors(&sb, &sa) {
            (b, a)
        } else {
            continue;
        };
        let same_as_input = if input == a { sa == so } else { sb == so };
        if !same_as_input || g.may_overlap(out, input) || g.may_overlap(out, scale) {
            continue;
        }
        g.replace(
            n,
            NodeOp::ChannelScale(ChannelScaleNode {
                input,
                scale,
                layout: Layout::Nchw,
                output: out,
                fused: vec!["aten::mul.out".to_string()],
            }),
        );
    }
}

/// A float32 per-channel constant of `c` elements, or None (an absent optional).
fn channel_const(g: &Graph<'_>, v: u32, c: usize) -> Option<Option<u32>> {
    if g.is_none(v) {
        return Some(None);
    }
    g.const_f32(v).filter(|t| t.shape.sizes() == [c]).map(|_| Some(v))
}

/// `_native_batch_norm_legit_no_training` right after a convolution, reading only its
/// output, is absorbed into it (the prepared kernel folds the statistics into the weights).
pub(crate) fn fold_batch_norms(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let NodeOp::Conv(conv) = &g.nodes[n].op else { continue };
        if conv.bn.is_some() || conv.act != Activation::None || conv.residual.is_some() {
            continue;
        }
        let Some(next) = g.next_live(n) else { continue };
        let Some(("aten::_native_batch_norm_legit_no_training.out", args)) = kernel_call(g, next)
        else {
            continue;
        };
        let &[x, weight, bias, mean, var, _, eps, out, save_mean, save_invstd, _] = args else {
            continue;
        };
        if x != conv.output || !g.read_once(x) || !g.unread(save_mean) || !g.unread(save_invstd) {
            continue;
        }
        let c = g.sizes(x).map_or(0, |s| s[1]);
        let (Some(weight), Some(bias), Some(Some(mean)), Some(Some(var)), Some(eps)) = (
            channel_const(g, weight, c),
            channel_const(g, bias, c),
            channel_const(g, mean, c),
            channel_const(g, var, c),
            g.number(eps),
        ) else {
            continue;
        };
        if g.dense_f32(out).is_none() || g.sizes(out) != g.sizes(x) {
            continue;
        }
        if g.may_overlap(out, conv.input) {
            continue;
        }
        let mut conv = conv.clone();
        conv.bn = Some(BatchNormValues { weight, bias, mean, var, eps });
        conv.output = out;
        conv.fused.push("aten::_native_batch_norm_legit_no_training.out".to_string());
        g.replace(n, NodeOp::Conv(conv));
        g.absorb(n, next);
    }
}

/// The parts of a Conv or Linear node the epilogue fusion changes.
struct Tail {
    input: u32,
    residual: Option<u32>,
    act: Activation,
    output: u32,
}

fn tail(op: &NodeOp) -> Option<Tail> {
    match op {
        NodeOp::Conv(c) => {
            Some(Tail { input: c.input, residual: c.residual, act: c.act, output: c.output })
        }
        NodeOp::Linear(l) => {
            Some(Tail { input: l.input, residual: l.residual, act: l.act, output: l.output })
        }
        _ => None,
    }
}

fn set_tail(op: &mut NodeOp, t: Tail, operators: &[&str]) {
    let (residual, act, output, fused) = match op {
        NodeOp::Conv(c) => (&mut c.residual, &mut c.act, &mut c.output, &mut c.fused),
        NodeOp::Linear(l) => (&mut l.residual, &mut l.act, &mut l.output, &mut l.fused),
        _ => return,
    };
    *residual = t.residual;
    *act = t.act;
    *output = t.output;
    fused.extend(operators.iter().map(|o| o.to_string()));
}

/// SiLU as XNNPACK exports it, `x * sigmoid(x)` in two nodes: `sigmoid(y) -> s` at node `n`
/// and `mul(y, s)` (either order) as the next live node, where `is_y` says which values are
/// `y` and `s` is read only by that `mul`. The `mul`'s node and the value it writes.
fn silu_at(g: &Graph<'_>, n: usize, is_y: impl Fn(u32) -> bool) -> Option<(usize, u32)> {
    let ("aten::sigmoid.out", &[x, s, _]) = kernel_call(g, n)? else { return None };
    let mul = g.next_live(n)?;
    let ("aten::mul.out", &[a, b, out, _]) = kernel_call(g, mul)? else { return None };
    let ok = is_y(x) && g.read_once(s) && ((is_y(a) && b == s) || (a == s && is_y(b)));
    ok.then_some((mul, out))
}

/// The node right after a Conv or Linear node that reads only its output is absorbed into
/// its epilogue, as often as it applies: a residual `add` (alpha 1, same shape, before any
/// activation) and then one activation. SiLU written as `sigmoid` and `mul` ([`silu_at`]) is
/// one activation: both nodes are absorbed when they are the only two reads of the output.
pub(crate) fn fuse_epilogues(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        while let Some(t) = tail(&g.nodes[n].op) {
            let Some(next) = g.next_live(n) else { break };
            let Some((op, args)) = kernel_call(g, next) else { break };
            let Some(out) = out_arg(args) else { break };
            let y = t.output;
            // A linear's output may be read through a view of other sizes with the same
            // elements (ExecuTorch leaves `[M, N]` -> `[1, M, N]` views as shared memory).
            let linear = matches!(g.nodes[n].op, NodeOp::Linear(_));
            let same_shape = |v: u32| match (g.sizes(v), g.sizes(y)) {
                (Some(a), Some(b)) if linear => {
                    squeezed(&a) == squeezed(&b)
                        && g.tensor(v).is_some_and(|t| t.capacity == Capacity::Static)
                }
                (a, b) => a.is_some() && a == b,
            };
            let is_y = |v: u32| v == y || linear && g.root(v) == (y, 0) && same_shape(v);
            // SiLU as a sigmoid then a mul: the mul's output is the one written, and `y`'s two
            // reads are the pair's.
            let pair = t.act == Activation::None && g.reads(y) == 2;
            let silu = if pair { silu_at(g, next, is_y) } else { None };
            let out = silu.map_or(out, |(_, out)| out);
            let read = silu.is_some() || g.read_once(y);
            if !read || g.dense_f32(out).is_none() || !same_shape(out) {
                break;
            }
            let fused = if silu.is_some() {
                Some(Tail { act: Activation::Silu, output: out, ..t })
            } else if let ("aten::add.out", &[a, b, alpha, _, _]) = (op, args) {
                let other = if is_y(a) { b } else { a };
                let ok = is_y(a) != is_y(b)
                    && t.act == Activation::None
                    && t.residual.is_none()
                    && g.number(alpha) == Some(1.0)
                    && g.dense_f32(other).is_some()
                    && same_shape(other)
                    && !g.may_overlap(out, other);
                ok.then_some(Tail { residual: Some(other), output: out, ..t })
            } else if args.first().is_some_and(|&x| is_y(x)) && t.act == Activation::None {
                g.activation_of(op, args).map(|act| Tail { act, output: out, ..t })
            } else {
                None
            };
            let Some(fused) = fused else { break };
            let reads_overlap = g.may_overlap(out, fused.input)
                || fused.residual.is_some_and(|r| g.may_overlap(out, r));
            if reads_overlap {
                break;
            }
            let names: &[&str] = if silu.is_some() { &[op, "aten::mul.out"] } else { &[op] };
            set_tail(&mut g.nodes[n].op, fused, names);
            g.absorb(n, next);
            if let Some((mul, _)) = silu {
                g.absorb(n, mul);
            }
        }
    }
}

/// One float32 elementwise call: its instruction over its operands (as values), and the value
/// it writes.
struct Elementwise {
    op: ElemOp,
    /// The operands (a unary call's twice).
    operands: [u32; 2],
    output: u32,
    /// The sizes every operand and the output share, leading 1s left out.
    shape: Vec<usize>,
}

/// The operator of an elementwise call.
#[derive(Clone, Copy)]
enum ElemOp {
    Unary(UnaryOp),
    Binary(BinaryOp),
}

/// Sizes without their leading 1s: tensors whose sizes differ only there hold their elements
/// in the same order, and an elementwise operator between them needs no broadcast.
fn squeezed(sizes: &[usize]) -> &[usize] {
    let lead = sizes.iter().take_while(|&&d| d == 1).count();
    &sizes[lead..]
}

/// A float32 elementwise call over static dense tensors of one shape (up to leading 1s) that
/// writes a planned value written nowhere else, if node `n` is one.
fn elementwise(g: &Graph<'_>, n: usize) -> Option<Elementwise> {
    let (op, args) = kernel_call(g, n)?;
    let output = out_arg(args)?;
    let (op, operands) = match (op, args) {
        ("aten::sigmoid.out", &[x, _, _]) => (ElemOp::Unary(UnaryOp::Sigmoid), [x, x]),
        ("aten::tanh.out", &[x, _, _]) => (ElemOp::Unary(UnaryOp::Tanh), [x, x]),
        ("aten::add.out" | "aten::sub.out", &[a, b, alpha, _, _]) => {
            if g.number(alpha) != Some(1.0) {
                return None;
            }
            let op = if op == "aten::add.out" { BinaryOp::Add } else { BinaryOp::Sub };
            (ElemOp::Binary(op), [a, b])
        }
        ("aten::mul.out", &[a, b, _, _]) => (ElemOp::Binary(BinaryOp::Mul), [a, b]),
        ("aten::div.out", &[a, b, _, _]) => (ElemOp::Binary(BinaryOp::Div), [a, b]),
        _ => return None,
    };
    let sizes = g.sizes(output)?;
    let shape = squeezed(&sizes);
    let same = |v: u32| {
        g.tensor(v).is_some_and(|t| {
            t.dtype == kiln_kernels::DType::Float
                && t.shape.is_dense_row_major()
                && t.capacity == Capacity::Static
                && squeezed(t.shape.sizes()) == shape
        })
    };
    let ok = operands.iter().all(|&v| same(v))
        && same(output)
        && g.dense_f32(output).is_some()
        && g.written_once(output);
    let shape = shape.to_vec();
    ok.then_some(Elementwise { op, operands, output, shape })
}

/// Instructions at most in one map (its scratch is a block per instruction).
const MAP_INSTRS: usize = 64;

/// An operand inside a [`MapGroup`]: one of its inputs, or the result of one of its calls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reg {
    Input(usize),
    Result(usize),
}

/// A group of elementwise calls being gathered into one map.
#[derive(Default)]
struct MapGroup {
    /// The nodes, in order.
    members: Vec<usize>,
    inputs: Vec<u32>,
    /// Per call: its operator, operands, and the value it writes.
    calls: Vec<(ElemOp, [Reg; 2], u32)>,
    /// Per read of a value inside the group, that value.
    reads: Vec<u32>,
    fused: Vec<String>,
}

impl MapGroup {
    /// Adds call `e` (node `n`) to the group, or returns `false` leaving the group as it was:
    /// when an operand shares bytes with a result of the group without being it (the step
    /// writes only its outputs), when the result shares bytes with an input, or when the group
    /// is full.
    fn add(&mut self, g: &Graph<'_>, n: usize, e: &Elementwise) -> bool {
        if self.calls.len() == MAP_INSTRS {
            return false;
        }
        let result_root = |v: u32| self.calls.iter().any(|c| g.root(c.2).0 == g.root(v).0);
        let out_root = g.root(e.output).0;
        if result_root(e.output) || self.inputs.iter().any(|&i| g.root(i).0 == out_root) {
            return false;
        }
        let used = if let ElemOp::Unary(_) = e.op { &e.operands[..1] } else { &e.operands[..] };
        let mut regs = [Reg::Input(0); 2];
        let mut inputs = self.inputs.clone();
        for (reg, &v) in regs.iter_mut().zip(used) {
            *reg = match self.calls.iter().position(|c| c.2 == v) {
                Some(i) => Reg::Result(i),
                None if result_root(v) || g.root(v).0 == out_root => return false,
                None => match inputs.iter().position(|&i| i == v) {
                    Some(k) => Reg::Input(k),
                    None => {
                        inputs.push(v);
                        Reg::Input(inputs.len() - 1)
                    }
                },
            };
        }
        if inputs.len() > MAX_OPERANDS {
            return false;
        }
        self.inputs = inputs;
        self.reads.extend_from_slice(used);
        self.calls.push((e.op, regs, e.output));
        self.members.push(n);
        self.fused.push(kernel_call(g, n).map_or(String::new(), |(o, _)| o.to_string()));
        true
    }

    /// The map's instructions, over registers `0..inputs` then one per call.
    fn instrs(&self) -> Vec<MapInstr> {
        let reg = |r: Reg| match r {
            Reg::Input(k) => k,
            Reg::Result(i) => self.inputs.len() + i,
        };
        self.calls
            .iter()
            .map(|&(op, [a, b], _)| match op {
                ElemOp::Unary(op) => MapInstr::Unary { op, a: reg(a) },
                ElemOp::Binary(op) => MapInstr::Binary { op, a: reg(a), b: reg(b) },
            })
            .collect()
    }

    /// The results something after the group reads (or the method returns), as (register,
    /// value).
    fn outputs(&self, g: &Graph<'_>) -> Vec<(usize, u32)> {
        self.calls
            .iter()
            .enumerate()
            .filter(|&(_, c)| {
                let inside = self.reads.iter().filter(|&&r| r == c.2).count() as u64;
                u64::from(g.reads(c.2)) > inside
            })
            .map(|(i, c)| (self.inputs.len() + i, c.2))
            .collect()
    }
}

/// Runs of consecutive float32 elementwise calls over tensors of one shape become one
/// [`NodeOp::Map`] step: a group's results read only inside it are never written, the others
/// are its outputs (an LSTM cell's gates become one step writing the new cell and hidden
/// states).
pub(crate) fn fuse_elementwise(g: &mut Graph<'_>) {
    let mut n = 0;
    while n < g.nodes.len() {
        let Some(first) = elementwise(g, n) else {
            n += 1;
            continue;
        };
        let mut group = MapGroup::default();
        if !group.add(g, n, &first) {
            n += 1;
            continue;
        }
        let mut at = n;
        while let Some(next) = g.next_live(at) {
            let Some(e) = elementwise(g, next) else { break };
            if e.shape != first.shape || !group.add(g, next, &e) {
                break;
            }
            at = next;
        }
        let outputs = group.outputs(g);
        let instrs = group.instrs();
        let regs = outputs.iter().map(|&(r, _)| r).collect();
        if group.members.len() >= 2
            && MapProgram::new(group.inputs.len(), instrs.clone(), regs).is_ok()
        {
            let MapGroup { members, inputs, fused, .. } = group;
            g.replace(n, NodeOp::Map(MapNode { inputs, instrs, outputs, fused }));
            for &m in &members[1..] {
                g.absorb(n, m);
            }
        }
        n = at + 1;
    }
}

/// A pointwise convolution (no residual) and the depthwise convolution right after it that is
/// the only reader of its output become one step, when the kernels run the pair fused
/// ([`PointwiseDepthwise::supports`]: channels-last between them, and an expanded activation
/// large enough to pay). The pointwise node is replaced and absorbs the depthwise one.
pub(crate) fn fuse_pointwise_depthwise(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        let NodeOp::Conv(pw) = &g.nodes[n].op else { continue };
        let Some(next) = g.next_live(n) else { continue };
        let NodeOp::Conv(dw) = &g.nodes[next].op else { continue };
        let (Ok(pw_g), Ok(dw_g)) = (conv_geometry(g, pw), conv_geometry(g, dw)) else { continue };
        let ok = pw.residual.is_none()
            && dw.input == pw.output
            && g.read_once(pw.output)
            && pw.layouts.output == Layout::Nhwc
            && dw.layouts == Layouts { input: Layout::Nhwc, output: Layout::Nhwc }
            && PointwiseDepthwise::supports(&pw_g, pw.layouts.input, &dw_g)
            && !g.may_overlap(dw.output, pw.input)
            && dw.residual.is_none_or(|r| !g.may_overlap(dw.output, r));
        if !ok {
            continue;
        }
        let node = PointwiseDepthwiseNode { pointwise: pw.clone(), depthwise: dw.clone() };
        g.replace(n, NodeOp::PointwiseDepthwise(Box::new(node)));
        g.absorb(n, next);
    }
}

/// PyTorch's `_safe_softmax` (what `scaled_dot_product_attention` exports) as seven nodes
/// (in a row, or with a few unrelated nodes between when the compile stage plans the memory):
/// `_softmax(s, -1) -> p`, `eq(s, -inf) -> m`, `full_like(p, 0) -> z`,
/// `logical_not(m) -> n`, `any(n, -1, keepdim) -> a`, `logical_not(a) -> r` and
/// `where(r, z, p) -> y`, over float32 scores of static shape, becomes one
/// [`NodeOp::SafeSoftmax`] reading `s` and writing `y`: the rows whose every score is `-inf`
/// give zeros. Every value between is read only inside the pattern (`p` twice) and is no
/// method output.
pub(crate) fn fuse_safe_softmaxes(g: &mut Graph<'_>) {
    for n in 0..g.nodes.len() {
        if let Some((nodes, node, scores)) = safe_softmax_at(g, n) {
            g.replace(n, NodeOp::SafeSoftmax(node));
            for absorbed in nodes {
                g.absorb(n, absorbed);
            }
            // `eq`'s read of the scores is gone with it.
            g.drop_read(scores);
        }
    }
}

/// Other nodes a `_safe_softmax` pattern may have between its nodes.
const MAX_BETWEEN: usize = 2;

/// The six nodes after softmax node `n` of a `_safe_softmax` pattern
/// ([`fuse_safe_softmaxes`]), the node standing for all seven, and the scores `eq` read.
fn safe_softmax_at(g: &Graph<'_>, n: usize) -> Option<([usize; 6], SafeSoftmaxNode, u32)> {
    let ("aten::_softmax.out", &[s, dim, half, p, _]) = kernel_call(g, n)? else { return None };
    let st = g.dense_f32(s).filter(|t| t.capacity == Capacity::Static)?;
    let (rank, row) = (st.shape.rank() as i64, *st.shape.sizes().last()?);
    let numel = st.shape.sizes().iter().product::<usize>();
    if g.int(dim)?.rem_euclid(rank) != rank - 1 || g.boolean(half)? {
        return None;
    }
    // The pattern's next node: the next live one, or (when the compile stage plans the
    // memory, so that running the fused node early reorders nothing else) one of the next
    // few, other nodes between (a permutation of the values for the next product).
    let skip = if g.rewritable() { MAX_BETWEEN } else { 0 };
    let mut next = n;
    let mut call = |op: &str| {
        for _ in 0..=skip {
            next = g.next_live(next)?;
            let (name, args) = kernel_call(g, next)?;
            if name == op {
                return Some((next, args));
            }
        }
        None
    };
    let (eq, &[s2, inf, m, _]) = call("aten::eq.Scalar_out")? else { return None };
    let (full, &[p2, zero, _, z, _]) = call("aten::full_like.out")? else { return None };
    let (not1, &[m2, nm, _]) = call("aten::logical_not.out")? else { return None };
    let (any, &[nm2, any_dim, keep, a, _]) = call("aten::any.out")? else { return None };
    let (not2, &[a2, r, _]) = call("aten::logical_not.out")? else { return None };
    let (sel, &[r2, z2, p3, y, _]) = call("aten::where.self_out")? else { return None };
    // The scores `eq` reads may be another view of the softmax's input (an XNNPACK
    // delegate's value and the method's share their bytes).
    let chained = g.root(s2) == g.root(s) && p2 == p && m2 == m && nm2 == nm && a2 == a && r2 == r;
    if !chained || z2 != z || p3 != p || g.number(inf)? != f64::NEG_INFINITY {
        return None;
    }
    let sizes = g.sizes(s2)?;
    let last = sizes.len().checked_sub(1)?;
    let is_last = |d: i64| d.rem_euclid(sizes.len() as i64) as usize == last;
    let any_last = g.int(any_dim).or_else(|| match g.ints(any_dim)?.as_slice() {
        &[d] => Some(d),
        _ => None,
    });
    if g.number(zero)? != 0.0 || !any_last.is_some_and(is_last) || g.boolean(keep) != Some(true) {
        return None;
    }
    // The shapes and dtypes the pattern has, and values read only inside it: the masks have
    // the scores' sizes, the float values their elements in rows of the same length.
    let mut row_sizes = sizes.clone();
    row_sizes[last] = 1;
    let has = |v: u32, dtype: DType, want: &[usize]| {
        g.tensor(v).is_some_and(|t| t.dtype == dtype && t.shape.sizes() == want)
    };
    let rows_like = |v: u32| {
        g.dense_f32(v).is_some_and(|t| {
            let s = t.shape.sizes();
            s.last() == Some(&row) && s.iter().product::<usize>() == numel
        })
    };
    let shapes = sizes.last() == Some(&row)
        && sizes.iter().product::<usize>() == numel
        && [p, z, y].iter().all(|&v| rows_like(v))
        && has(m, DType::Bool, &sizes)
        && has(nm, DType::Bool, &sizes)
        && has(a, DType::Bool, &row_sizes)
        && has(r, DType::Bool, &row_sizes);
    let inner = g.reads(p) == 2 && [m, z, nm, a, r].iter().all(|&v| g.read_once(v));
    // Nodes between may neither change the scores nor see the output before it is written.
    let once = g.written_once(g.root(s).0) && g.written_once(y);
    if !shapes || !inner || !once || g.may_overlap(y, s) {
        return None;
    }
    let fused = [
        "aten::_softmax.out",
        "aten::eq.Scalar_out",
        "aten::full_like.out",
        "aten::logical_not.out",
        "aten::any.out",
        "aten::logical_not.out",
        "aten::where.self_out",
    ];
    let fused = fused.iter().map(|o| o.to_string()).collect();
    let node = SafeSoftmaxNode { input: s, row, output: y, fused };
    Some(([eq, full, not1, any, not2, sel], node, s2))
}
