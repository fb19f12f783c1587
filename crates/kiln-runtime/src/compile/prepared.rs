//! Lowering fused nodes to prepared kernels: the node's constants folded and laid out once,
//! at load, and a run function the executor calls with the node's tensors.

use kiln_kernels::compute::channel_scale::scale_channels;
use kiln_kernels::compute::conv2d::{
    BatchNorm, Conv2dGeometry, ConvScratch, Layout, PackedConv2d, PointwiseDepthwise,
};
use kiln_kernels::compute::elementwise::MapProgram;
use kiln_kernels::compute::f32_values::F32Values;
use kiln_kernels::compute::global_pool::mean_pixels;
use kiln_kernels::compute::linear::{LinearScratch, PackedLinear, WeightLayout};
use kiln_kernels::compute::sgemm::GemmError;
use kiln_kernels::compute::softmax::{self, Softmax};
use kiln_kernels::compute::xnn_lut::Qs8Table;
use kiln_kernels::compute::xnn_qconv::PackedQs8Conv;
use kiln_kernels::pool::PreparedMaxPool2d;
use kiln_kernels::xnnpack;
use kiln_kernels::{Arg, KernelContext, KernelError, Out, OutKind, TensorMut, TensorRef};

use crate::error::{Error, Result};
use crate::step::{Call, Callee, Role};
use crate::value::{TensorSlot, Val};

use super::graph::{Graph, NodeOp};
use super::nodes::{
    ChannelScaleNode, ConvNode, LinearNode, MaxPoolNode, MeanNode, PointwiseDepthwiseNode,
    Qs8ConvNode, Qs8LookupNode,
};

/// A bound step reads at most this many tensors, and writes at most this many.
pub(crate) const MAX_TENSORS: usize = 16;

/// The buffers the prepared kernels reuse from step to step and run to run: one set per
/// execution state, shared by its steps (they run one at a time; each kernel writes every
/// value it reads back, so what another step left there does not matter), grown to what the
/// largest needs. The kernels themselves are shared by every state of their method.
#[derive(Debug, Default)]
pub(crate) struct StepScratch {
    conv: ConvScratch,
    linear: LinearScratch,
    /// A map's register blocks.
    map: Vec<f32>,
}

impl StepScratch {
    /// Bytes its buffers hold.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.conv.heap_bytes() + self.linear.heap_bytes() + self.map.capacity() * 4
    }
}

/// A fused node's kernel, prepared at load and shared by the method's execution states (each
/// brings its own [`StepScratch`]). The executor passes the node's read tensors in order as
/// `args` (then an `Arg::Output` for each written one) and its outputs in order as `outs`
/// (one, except for a map).
pub(crate) trait PreparedKernel: Send + Sync {
    /// Runs the node: by default, on its tensors' float32 data through
    /// [`PreparedKernel::run_bound`]. Kernels whose work follows the tensors' run-time shapes
    /// (a linear layer's rows, a convolution's batch) override it.
    fn run(
        &self,
        scratch: &mut StepScratch,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> std::result::Result<(), KernelError> {
        let too_many = |ctx: &KernelContext| ctx.invalid("input", "more tensors than a step takes");
        let mut reads: [&[f32]; MAX_TENSORS] = Default::default();
        let mut n_reads = 0;
        for t in args.iter().filter_map(|a| if let Arg::Tensor(t) = a { Some(t) } else { None }) {
            let slot = reads.get_mut(n_reads).ok_or_else(|| too_many(ctx))?;
            *slot = t.as_slice::<f32>().map_err(|e| ctx.tensor_err("input", e))?;
            n_reads += 1;
        }
        let n_writes = outs.len();
        if n_writes > MAX_TENSORS {
            return Err(too_many(ctx));
        }
        let mut writes: [&mut [f32]; MAX_TENSORS] = Default::default();
        for (slot, out) in writes.iter_mut().zip(outs.iter_mut()) {
            let Out::Tensor(t) = out else {
                return Err(ctx.invalid("out", "expected an output tensor"));
            };
            *slot = t.as_mut_slice::<f32>().map_err(|e| ctx.tensor_err("out", e))?;
        }
        self.run_bound(scratch, ctx, &reads[..n_reads], &mut writes[..n_writes])
    }

    /// Runs the node on its tensors' float32 data alone, reads then writes in the step's
    /// order. When every tensor of a step has a static shape and a fixed place, loading binds
    /// the step ([`super::bound`]): a run borrows the bytes and passes them straight through,
    /// with no views, shapes or argument lists built.
    fn run_bound(
        &self,
        scratch: &mut StepScratch,
        ctx: &mut KernelContext,
        reads: &[&[f32]],
        writes: &mut [&mut [f32]],
    ) -> std::result::Result<(), KernelError>;

    /// Bytes of prepared constants it holds (packed weights, folded biases, index tables),
    /// counted against the method's memory limit.
    fn heap_bytes(&self) -> usize;

    /// How the kernel computes, for reports, where it has a choice (a convolution's
    /// `winograd`, `igemm`, ...; see [`PackedConv2d::algorithm`]).
    fn algorithm(&self) -> Option<&'static str> {
        None
    }
}

/// The bytes of a constant tensor, from the mapped file or an external source.
pub(crate) type ConstBytes<'a> = dyn Fn(&TensorSlot) -> Option<&'a [u8]> + 'a;

/// The call and prepared kernel of fused node `n` (any node but an instruction); `index` is the
/// kernel's index in the method's prepared kernels.
pub(crate) fn lower_node(
    g: &Graph<'_>,
    n: usize,
    index: usize,
    bytes: &ConstBytes<'_>,
) -> Result<(Call, Box<dyn PreparedKernel>)> {
    let origins = g.origin_ids(n);
    let first = origins.first().copied().unwrap_or(0);
    let err = |reason: String| Error::InvalidProgram {
        method: g.plan.name.clone(),
        location: format!("instruction {first}"),
        reason,
    };
    let (name, reads, output, kernel): (String, Vec<u32>, Vec<u32>, Box<dyn PreparedKernel>) =
        match &g.nodes[n].op {
            NodeOp::Conv(c) => {
                let k = PreparedConv::new(g, c, bytes).map_err(err)?;
                let reads = std::iter::once(c.input).chain(c.residual).collect();
                (describe("conv2d", &c.fused), reads, vec![c.output], Box::new(k))
            }
            NodeOp::PointwiseDepthwise(pair) => {
                let k = PreparedConv::pair(g, pair, bytes).map_err(err)?;
                let (pw, dw) = (&pair.pointwise, &pair.depthwise);
                let reads = std::iter::once(pw.input).chain(dw.residual).collect();
                let fused: Vec<String> = pw.fused.iter().chain(&dw.fused).cloned().collect();
                (describe("conv2d+depthwise", &fused), reads, vec![dw.output], Box::new(k))
            }
            NodeOp::Linear(l) => {
                let k = PreparedLinear::new(g, l, bytes).map_err(err)?;
                let reads = std::iter::once(l.input).chain(l.residual).collect();
                (describe("linear", &l.fused), reads, vec![l.output], Box::new(k))
            }
            NodeOp::MaxPool(m) => {
                let k = PreparedMaxPool::new(g, m).map_err(err)?;
                (describe("max_pool2d", &m.fused), vec![m.input], vec![m.output], Box::new(k))
            }
            NodeOp::Mean(m) => {
                let k = PreparedChannelwise::mean(g, m).map_err(err)?;
                (describe("mean", &m.fused), vec![m.input], vec![m.output], Box::new(k))
            }
            NodeOp::ChannelScale(m) => {
                let k = PreparedChannelwise::scale(g, m).map_err(err)?;
                let reads = vec![m.input, m.scale];
                (describe("channel_scale", &m.fused), reads, vec![m.output], Box::new(k))
            }
            NodeOp::SafeSoftmax(m) => {
                if m.row == 0 {
                    return Err(err("softmax: rows of no values".into()));
                }
                let k = PreparedSafeSoftmax { row: m.row };
                (describe("softmax", &m.fused), vec![m.input], vec![m.output], Box::new(k))
            }
            NodeOp::Qs8Conv(c) => {
                let k = PreparedQs8Conv::new(g, c, bytes).map_err(err)?;
                let reads = vec![c.args[0]];
                (describe("qs8_conv2d", &c.fused), reads, vec![c.output], Box::new(k))
            }
            NodeOp::Qs8Lookup(l) => {
                let k = PreparedQs8Lookup::new(g, l).map_err(err)?;
                let fused: Vec<String> = l.calls.iter().map(|(op, _)| op.clone()).collect();
                (describe("qs8_lookup", &fused), vec![l.input], vec![l.output], Box::new(k))
            }
            NodeOp::Map(m) => {
                let regs = m.outputs.iter().map(|&(r, _)| r).collect();
                let program = MapProgram::new(m.inputs.len(), m.instrs.clone(), regs)
                    .map_err(|e| err(format!("map: {e}")))?;
                let k = PreparedMap { program };
                let writes = m.outputs.iter().map(|&(_, v)| v).collect();
                (describe("map", &m.fused), m.inputs.clone(), writes, Box::new(k))
            }
            _ => return Err(err("only fused nodes have prepared kernels".into())),
        };
    let mut roles = vec![Role::In; reads.len()];
    roles.resize(reads.len() + output.len(), Role::Out(OutKind::Tensor));
    let outs = (reads.len()..roles.len()).map(|p| (p as u32, OutKind::Tensor)).collect();
    let mut args = reads;
    args.extend(output);
    let call = Call {
        callee: Callee::Prepared(index),
        name: name.into(),
        instruction: first,
        args: args.into_boxed_slice(),
        roles: roles.into_boxed_slice(),
        outs,
    };
    Ok((call, kernel))
}

/// `conv2d[convolution.out+_native_batch_norm_legit_no_training.out+hardtanh.out]`.
fn describe(kind: &str, fused: &[String]) -> String {
    let short: Vec<&str> = fused.iter().map(|o| o.strip_prefix("aten::").unwrap_or(o)).collect();
    format!("{kind}[{}]", short.join("+"))
}

/// The float32 elements of constant value `v`, in row-major order of its sizes whatever its
/// dim order (an XNNPACK filter is stored OHWI and declared OIHW with a channels-last order):
/// the constant's own bytes where they are already that (row-major, aligned, a little-endian
/// machine), else a copy. A weight read in place is one fresh buffer fewer for its packing to
/// fill (the OS zeroes every fresh page: 37-40% of a resnet50 load on the development
/// machine).
fn const_f32<'a>(
    g: &Graph<'_>,
    v: u32,
    bytes: &ConstBytes<'a>,
) -> std::result::Result<F32Values<'a>, String> {
    let t = g.const_f32(v).ok_or_else(|| format!("values[{v}] is not a float32 constant"))?;
    let b = bytes(t)
        .and_then(|b| b.get(..t.nbytes()))
        .ok_or_else(|| format!("constant values[{v}] is outside its data"))?;
    // The values in place when the bytes are aligned on a little-endian host.
    let in_place =
        bytemuck::try_cast_slice::<u8, f32>(b).ok().filter(|_| cfg!(target_endian = "little"));
    let stored = |i: usize| match in_place {
        Some(values) => values[i],
        None => f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]),
    };
    let copy_error = |e: GemmError| format!("values[{v}]: {e}");
    if t.shape.is_dense_row_major() {
        return match in_place {
            Some(values) => Ok(F32Values::Borrowed(values)),
            None => F32Values::filled(b.len() / 4, |dst| {
                dst.iter_mut().enumerate().for_each(|(i, d)| *d = stored(i))
            })
            .map_err(copy_error),
        };
    }
    // Laid out row-major from where the values lie: one copy (a row-major copy of the
    // stored order first was a second, 9.4 MB for each of resnet50's largest XNNPACK
    // filters, stored channels-last).
    let rank = t.shape.rank();
    let strides = t.shape.strides();
    let mut row_major = [0usize; kiln_kernels::MAX_RANK];
    let mut acc = 1;
    for d in (0..rank).rev() {
        row_major[d] = acc;
        acc *= t.shape.sizes()[d];
    }
    F32Values::filled(acc, |out| {
        kiln_kernels::compute::strided::walk(
            t.shape.sizes(),
            [&row_major[..rank], &strides[..rank]],
            |[o, i]| out[o] = stored(i),
        )
    })
    .map_err(copy_error)
}

/// The read tensor at position `i` of a prepared call.
fn tensor_arg<'a>(
    ctx: &KernelContext,
    args: &[Arg<'a>],
    i: usize,
    name: &'static str,
) -> std::result::Result<TensorRef<'a>, KernelError> {
    match args.get(i) {
        Some(Arg::Tensor(t)) => Ok(*t),
        _ => Err(ctx.invalid(name, "expected a tensor")),
    }
}

/// The tensors of a Conv or Linear step: the input, the residual when the node has one, and
/// the output.
#[allow(clippy::type_complexity)]
fn fused_io<'a, 'o, 'x>(
    ctx: &KernelContext,
    args: &[Arg<'a>],
    outs: &'o mut [Out<'_, 'x>],
    residual: bool,
) -> std::result::Result<(TensorRef<'a>, Option<TensorRef<'a>>, &'o mut TensorMut<'x>), KernelError>
{
    let x = tensor_arg(ctx, args, 0, "input")?;
    let r = if residual { Some(tensor_arg(ctx, args, 1, "residual")?) } else { None };
    match outs.first_mut() {
        Some(Out::Tensor(out)) => Ok((x, r, out)),
        _ => Err(ctx.invalid("out", "expected an output tensor")),
    }
}

/// The geometry of convolution node `c`, from its input's and weight's sizes.
pub(crate) fn conv_geometry(
    g: &Graph<'_>,
    c: &ConvNode,
) -> std::result::Result<Conv2dGeometry, GemmError> {
    let (xs, ws) = (g.sizes(c.input).unwrap_or_default(), g.sizes(c.weight).unwrap_or_default());
    c.args.geometry(&xs, &ws)
}

/// A convolution, or a pointwise convolution fused with the depthwise one reading its
/// output, with batch norm folded into the weights and bias, packed once.
struct PreparedConv {
    kernel: ConvKernel,
    residual: bool,
    /// The batch of the input's declared sizes: a bound step's (its shapes are static).
    batch: usize,
}

/// The packed kernel a [`PreparedConv`] runs (one per step, and the step is boxed: the size
/// of its variants does not matter).
#[allow(clippy::large_enum_variant)]
enum ConvKernel {
    One(PackedConv2d),
    PointwiseDepthwise(PointwiseDepthwise),
}

/// Convolution node `c` prepared ([`PackedConv2d::prepare`]): batch norm folded into its
/// weight and bias, packed once.
fn packed_conv(
    g: &Graph<'_>,
    c: &ConvNode,
    bytes: &ConstBytes<'_>,
) -> std::result::Result<PackedConv2d, String> {
    let weight = const_f32(g, c.weight, bytes)?;
    let owned = |v: u32| const_f32(g, v, bytes).map(|values| values.to_vec());
    let bias = c.bias.map(owned).transpose()?;
    let bn = match &c.bn {
        Some(bn) => Some(BatchNorm {
            gamma: bn.weight.map(owned).transpose()?,
            beta: bn.bias.map(owned).transpose()?,
            mean: owned(bn.mean)?,
            var: owned(bn.var)?,
            eps: bn.eps,
        }),
        None => None,
    };
    let geometry = conv_geometry(g, c).map_err(|e| e.to_string())?;
    let out = g.sizes(c.output).unwrap_or_default();
    PackedConv2d::prepare(geometry, weight, bias, bn, c.act, c.layouts, &out)
        .map_err(|e| e.to_string())
}

impl PreparedConv {
    fn new(
        g: &Graph<'_>,
        c: &ConvNode,
        bytes: &ConstBytes<'_>,
    ) -> std::result::Result<PreparedConv, String> {
        let kernel = ConvKernel::One(packed_conv(g, c, bytes)?);
        let residual = c.residual.is_some();
        let batch = declared_batch(g, c.input);
        Ok(PreparedConv { kernel, residual, batch })
    }

    /// The fused pair of `node`, each convolution prepared as [`PreparedConv::new`] does.
    fn pair(
        g: &Graph<'_>,
        node: &PointwiseDepthwiseNode,
        bytes: &ConstBytes<'_>,
    ) -> std::result::Result<PreparedConv, String> {
        let pointwise = packed_conv(g, &node.pointwise, bytes)?;
        let depthwise = packed_conv(g, &node.depthwise, bytes)?;
        let pair = PointwiseDepthwise::new(pointwise, depthwise)
            .map_err(|e| format!("convolution: {e}"))?;
        let residual = node.depthwise.residual.is_some();
        let kernel = ConvKernel::PointwiseDepthwise(pair);
        let batch = declared_batch(g, node.pointwise.input);
        Ok(PreparedConv { kernel, residual, batch })
    }

    /// Runs the convolution (or pair) over `batch` images.
    fn compute(
        &self,
        scratch: &mut ConvScratch,
        ctx: &mut KernelContext,
        batch: usize,
        xs: &[f32],
        r: Option<&[f32]>,
        o: &mut [f32],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = "aten::convolution.out";
        if r.is_some() != self.residual || r.is_some_and(|r| r.len() != o.len()) {
            return Err(ctx.invalid("residual", "the residual's size differs from the output's"));
        }
        let threads = &ctx.threads;
        match &self.kernel {
            ConvKernel::One(conv) => conv.run(batch, xs, r, o, scratch, threads),
            ConvKernel::PointwiseDepthwise(pair) => pair.run(batch, xs, r, o, scratch, threads),
        }
        .map_err(|e| ctx.invalid("input", e.to_string()))
    }
}

/// The first declared size of value `v` (its batch), 0 when it has none.
fn declared_batch(g: &Graph<'_>, v: u32) -> usize {
    g.sizes(v).and_then(|s| s.first().copied()).unwrap_or(0)
}

impl PreparedKernel for PreparedConv {
    fn heap_bytes(&self) -> usize {
        match &self.kernel {
            ConvKernel::One(c) => c.heap_bytes(),
            ConvKernel::PointwiseDepthwise(p) => p.heap_bytes(),
        }
    }

    fn algorithm(&self) -> Option<&'static str> {
        Some(match &self.kernel {
            ConvKernel::One(conv) => conv.algorithm(),
            ConvKernel::PointwiseDepthwise(pair) => pair.algorithm(),
        })
    }

    fn run(
        &self,
        scratch: &mut StepScratch,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = "aten::convolution.out";
        let (x, residual, out) = fused_io(ctx, args, outs, self.residual)?;
        let batch = x.sizes().first().copied().unwrap_or(0);
        let xs = x.as_slice::<f32>().map_err(|e| ctx.tensor_err("input", e))?;
        let r = residual.map(|r| r.as_slice::<f32>()).transpose();
        let r = r.map_err(|e| ctx.tensor_err("residual", e))?;
        let o = out.as_mut_slice::<f32>().map_err(|e| ctx.tensor_err("out", e))?;
        self.compute(&mut scratch.conv, ctx, batch, xs, r, o)
    }

    fn run_bound(
        &self,
        scratch: &mut StepScratch,
        ctx: &mut KernelContext,
        reads: &[&[f32]],
        writes: &mut [&mut [f32]],
    ) -> std::result::Result<(), KernelError> {
        let (&[x, ref rest @ ..], [o]) = (reads, writes) else {
            return Err(ctx.invalid("input", "the step's tensors do not match its convolution"));
        };
        let batch = self.batch;
        self.compute(&mut scratch.conv, ctx, batch, x, rest.first().copied(), o)
    }
}

/// Max pooling without indices ([`MaxPool2dArgs::prepare`](kiln_kernels::pool::MaxPool2dArgs::prepare)).
struct PreparedMaxPool(PreparedMaxPool2d);

impl PreparedMaxPool {
    fn new(g: &Graph<'_>, m: &MaxPoolNode) -> std::result::Result<PreparedMaxPool, String> {
        let (xs, out) =
            (g.sizes(m.input).unwrap_or_default(), g.sizes(m.output).unwrap_or_default());
        let pool = m.args.prepare(&xs, &out, m.layout).map_err(|e| format!("max_pool2d: {e}"))?;
        Ok(PreparedMaxPool(pool))
    }
}

impl PreparedKernel for PreparedMaxPool {
    fn heap_bytes(&self) -> usize {
        0
    }

    fn run_bound(
        &self,
        _: &mut StepScratch,
        ctx: &mut KernelContext,
        reads: &[&[f32]],
        writes: &mut [&mut [f32]],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = "aten::max_pool2d_with_indices.out";
        let (&[x], [y]) = (reads, writes) else {
            return Err(ctx.invalid("self", "the step's tensors do not match its max pooling"));
        };
        self.0.run(x, y, &ctx.threads).map_err(|e| ctx.invalid("self", e.to_string()))
    }
}

/// A squeeze-excite block's two steps over an NCHW or NHWC activation `[N, C, H, W]`: the
/// mean of each channel (global average pooling), or each channel multiplied by its factor.
struct PreparedChannelwise {
    /// `[N, C, H * W]`.
    sizes: [usize; 3],
    layout: Layout,
    /// Scaling (reads the activation and the factors) rather than the mean.
    scale: bool,
}

impl PreparedChannelwise {
    fn mean(g: &Graph<'_>, m: &MeanNode) -> std::result::Result<PreparedChannelwise, String> {
        let sizes @ [n, c, _] = pixel_sizes(g, m.input, "mean")?;
        let out = g.sizes(m.output).unwrap_or_default();
        if out.iter().product::<usize>() != n * c {
            return Err(format!("mean: the output {out:?} does not hold [{n}, {c}]"));
        }
        Ok(PreparedChannelwise { sizes, layout: m.layout, scale: false })
    }

    fn scale(
        g: &Graph<'_>,
        m: &ChannelScaleNode,
    ) -> std::result::Result<PreparedChannelwise, String> {
        let sizes = pixel_sizes(g, m.input, "channel scale")?;
        Ok(PreparedChannelwise { sizes, layout: m.layout, scale: true })
    }
}

/// The sizes `[N, C, H * W]` of 4-D value `v`.
fn pixel_sizes(g: &Graph<'_>, v: u32, what: &str) -> std::result::Result<[usize; 3], String> {
    let xs = g.sizes(v).unwrap_or_default();
    let &[n, c, h, w] = xs.as_slice() else {
        return Err(format!("{what}: the input {xs:?} is not 4-D"));
    };
    Ok([n, c, h * w])
}

impl PreparedKernel for PreparedChannelwise {
    fn heap_bytes(&self) -> usize {
        0
    }

    fn run_bound(
        &self,
        _: &mut StepScratch,
        ctx: &mut KernelContext,
        reads: &[&[f32]],
        writes: &mut [&mut [f32]],
    ) -> std::result::Result<(), KernelError> {
        let done = match (self.scale, reads, writes) {
            (false, &[x], [y]) => {
                ctx.op = "aten::mean.out";
                mean_pixels(x, self.sizes, self.layout, y)
            }
            (true, &[x, s], [y]) => {
                ctx.op = "aten::mul.out";
                scale_channels(x, s, self.sizes, self.layout, y, &ctx.threads)
            }
            _ => return Err(ctx.invalid("self", "the step's tensors do not match its kernel")),
        };
        done.map_err(|e| ctx.invalid("self", e.to_string()))
    }
}

/// PyTorch's `_safe_softmax` over rows of `row` values
/// ([`SafeSoftmaxNode`](super::nodes::SafeSoftmaxNode)).
struct PreparedSafeSoftmax {
    row: usize,
}

impl PreparedKernel for PreparedSafeSoftmax {
    fn heap_bytes(&self) -> usize {
        0
    }

    fn run_bound(
        &self,
        _: &mut StepScratch,
        ctx: &mut KernelContext,
        reads: &[&[f32]],
        writes: &mut [&mut [f32]],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = "aten::_softmax.out";
        let (&[x], [y]) = (reads, writes) else {
            return Err(ctx.invalid("self", "the step's tensors do not match its kernel"));
        };
        if x.len() != y.len() || !x.len().is_multiple_of(self.row) {
            return Err(ctx.invalid("self", "the scores are not whole rows of the output's size"));
        }
        let kind = Softmax { log: false, zero_masked_rows: true };
        softmax::rows(x, self.row, y, kind, &ctx.threads);
        Ok(())
    }
}

/// A graph value an operator takes as a number, flag, string or `None`, as the kernel
/// argument it stands for.
fn scalar_arg(val: Option<&Val>) -> Option<Arg<'_>> {
    match val? {
        Val::Int(i) => Some(Arg::Int(*i)),
        Val::Double(d) => Some(Arg::Double(*d)),
        Val::Bool(b) => Some(Arg::Bool(*b)),
        Val::String(s) => Some(Arg::String(s)),
        Val::None => Some(Arg::None),
        _ => None,
    }
}

/// The int8 input an int8 step reads first (its only tensor argument).
fn int8_input<'a, 'x>(
    ctx: &KernelContext,
    args: &'a [Arg<'x>],
) -> std::result::Result<&'a TensorRef<'x>, KernelError> {
    match args.first() {
        Some(Arg::Tensor(x)) => Ok(x),
        _ => Err(ctx.invalid("x", "the step's tensors do not match its kernel")),
    }
}

/// What an int8 step answers when asked to run on bound float32 slices: it has none.
fn no_float_binding(ctx: &KernelContext) -> KernelError {
    ctx.invalid("x", "an int8 step has no float32 binding")
}

/// XNNPACK's QS8 convolution ([`Qs8ConvNode`]), checked and laid out once by the operator's
/// own [`xnnpack::prepare_qs8_convolution`]. Its int8 tensors are never bound (binding is
/// for float32 steps): it runs through [`PreparedKernel::run`].
struct PreparedQs8Conv {
    conv: PackedQs8Conv,
}

impl PreparedQs8Conv {
    fn new(
        g: &Graph<'_>,
        c: &Qs8ConvNode,
        bytes: &ConstBytes<'_>,
    ) -> std::result::Result<PreparedQs8Conv, String> {
        let x = g.sizes(c.args[0]).ok_or("qs8 convolution: the input is not a tensor")?;
        let lists: Vec<Option<Vec<i64>>> = c.args.iter().map(|&v| g.ints(v)).collect();
        let mut args = Vec::with_capacity(c.args.len());
        for (p, (&v, list)) in c.args.iter().zip(&lists).enumerate() {
            let val = g.values.get(v as usize);
            args.push(match (p, val) {
                // The input's data is not read when preparing.
                (0, _) => Arg::None,
                (_, Some(Val::IntList(_))) => {
                    Arg::IntList(list.as_deref().ok_or("a list of non-constant ints")?)
                }
                (_, Some(Val::Tensor(t))) => {
                    let b = bytes(t)
                        .and_then(|b| b.get(..t.nbytes()))
                        .ok_or_else(|| format!("constant values[{v}] is outside its data"))?;
                    Arg::Tensor(TensorRef::new(t.dtype, t.shape, b).map_err(|e| e.to_string())?)
                }
                _ => scalar_arg(val)
                    .ok_or_else(|| format!("qs8 convolution: argument {p} is not a constant"))?,
            });
        }
        let ctx = KernelContext::new("kiln_xnnpack::qs8_convolution.out");
        let mut conv =
            xnnpack::prepare_qs8_convolution(&ctx, &args, &x).map_err(|e| e.to_string())?;
        if let Some((lo, hi)) = c.clamp {
            conv.clamp_output(lo, hi)
                .ok_or("qs8 convolution: the clamp's bounds miss its range")?;
        }
        Ok(PreparedQs8Conv { conv })
    }
}

impl PreparedKernel for PreparedQs8Conv {
    fn run(
        &self,
        _: &mut StepScratch,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = "kiln_xnnpack::qs8_convolution.out";
        xnnpack::run_qs8_convolution(ctx, &self.conv, int8_input(ctx, args)?, outs)
    }

    fn run_bound(
        &self,
        _: &mut StepScratch,
        ctx: &mut KernelContext,
        _: &[&[f32]],
        _: &mut [&mut [f32]],
    ) -> std::result::Result<(), KernelError> {
        Err(no_float_binding(ctx))
    }

    fn heap_bytes(&self) -> usize {
        self.conv.heap_bytes()
    }

    fn algorithm(&self) -> Option<&'static str> {
        Some(self.conv.algorithm())
    }
}

/// Elementwise operators between converts from and to int8 ([`Qs8LookupNode`]) as a table:
/// the node's own calls, run once at load on the 256 int8 values through their registered
/// kernels, so each entry is the chain's result for that input. Its int8 tensors are never
/// bound: it runs through [`PreparedKernel::run`].
struct PreparedQs8Lookup {
    table: Qs8Table,
}

impl PreparedQs8Lookup {
    fn new(g: &Graph<'_>, l: &Qs8LookupNode) -> std::result::Result<PreparedQs8Lookup, String> {
        let inputs: Vec<i8> = (i8::MIN..=i8::MAX).collect();
        let mut floats = Vec::new();
        let mut table = [0i8; 256];
        for (i, (op, args)) in l.calls.iter().enumerate() {
            let def = kiln_kernels::find_kernel(op).ok_or_else(|| format!("no kernel {op}"))?;
            let tensor_err = |e: kiln_kernels::TensorError| format!("{op}: {e}");
            let x = match i {
                0 => TensorRef::from_slice(&[256], &inputs),
                _ => TensorRef::from_slice(&[256], &floats),
            }
            .map_err(tensor_err)?;
            let last = i + 1 == l.calls.len();
            let (mut qs, mut fs) = (vec![0i8; 256], vec![0f32; 256]);
            let out = match last {
                true => TensorMut::from_slice(&[256], &mut qs),
                false => TensorMut::from_slice(&[256], &mut fs),
            }
            .map_err(tensor_err)?;
            let written =
                |p: usize| p + 1 == args.len() || def.outs.iter().any(|o| o.position as usize == p);
            let mut a = Vec::with_capacity(args.len());
            for (p, &v) in args.iter().enumerate() {
                a.push(match p {
                    0 => Arg::Tensor(x),
                    _ if written(p) => Arg::Output,
                    _ => scalar_arg(g.values.get(v as usize))
                        .ok_or_else(|| format!("{op}: argument {p} is not a constant scalar"))?,
                });
            }
            let mut outs = [Out::Tensor(out)];
            let mut ctx = KernelContext::new(def.name);
            (def.run)(&mut ctx, &a, &mut outs).map_err(|e| format!("{op}: {e}"))?;
            drop((outs, a));
            match last {
                true => table.copy_from_slice(&qs),
                false => floats = fs,
            }
        }
        Ok(PreparedQs8Lookup { table })
    }
}

impl PreparedKernel for PreparedQs8Lookup {
    fn run(
        &self,
        _: &mut StepScratch,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = "qs8_lookup";
        xnnpack::run_qs8_lookup(ctx, &self.table, int8_input(ctx, args)?, outs)
    }

    fn run_bound(
        &self,
        _: &mut StepScratch,
        ctx: &mut KernelContext,
        _: &[&[f32]],
        _: &mut [&mut [f32]],
    ) -> std::result::Result<(), KernelError> {
        Err(no_float_binding(ctx))
    }

    fn heap_bytes(&self) -> usize {
        self.table.len()
    }
}

/// `x @ W (+ bias)` with W packed once.
struct PreparedLinear {
    linear: PackedLinear,
    k: usize,
    n: usize,
    residual: bool,
    name: &'static str,
}

impl PreparedLinear {
    fn new(
        g: &Graph<'_>,
        l: &LinearNode,
        bytes: &ConstBytes<'_>,
    ) -> std::result::Result<PreparedLinear, String> {
        let w = const_f32(g, l.weight, bytes)?;
        let ws = g.sizes(l.weight).unwrap_or_default();
        let [r, c] = ws.as_slice() else { return Err("the weight is not 2-D".into()) };
        let (k, n) = if l.weight_is_nk { (*c, *r) } else { (*r, *c) };
        let bias = l.bias.map(|b| const_f32(g, b, bytes)).transpose()?;
        // PyTorch's [N, K] linear weight, or a product's [K, N] right operand.
        let layout = if l.weight_is_nk { WeightLayout::OutIn } else { WeightLayout::InOut };
        let linear = PackedLinear::with_weight(k, n, &w, layout, bias.as_deref(), l.act)
            .map_err(|e| format!("linear: {e}"))?;
        let name = if l.fused.iter().any(|o| o == "aten::linear.out") {
            "aten::linear.out"
        } else if l.bias.is_some() {
            "aten::addmm.out"
        } else {
            "aten::mm.out"
        };
        Ok(PreparedLinear { linear, k, n, residual: l.residual.is_some(), name })
    }
}

impl PreparedKernel for PreparedLinear {
    fn heap_bytes(&self) -> usize {
        self.linear.heap_bytes()
    }

    fn run(
        &self,
        scratch: &mut StepScratch,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = self.name;
        let (x, residual, out) = fused_io(ctx, args, outs, self.residual)?;
        let (k, n) = (self.k, self.n);
        // Rows: every dimension of the input but the last (a linear's input has any rank).
        let (m, lead) = match x.sizes().split_last() {
            Some((&xk, lead)) if xk == k && !lead.is_empty() => (lead.iter().product(), lead),
            _ => return Err(ctx.shape_err("input", format!("[M, {k}]"), x.sizes())),
        };
        // An output of the input's rank follows its rows; another rank (an absorbed add's
        // `[1, M, N]`) is static and must already hold M * N elements.
        if out.shape().rank() == x.sizes().len() {
            let mut sizes = [0usize; kiln_kernels::MAX_RANK];
            sizes[..lead.len()].copy_from_slice(lead);
            sizes[lead.len()] = n;
            out.resize(&sizes[..=lead.len()]).map_err(|e| ctx.tensor_err("out", e))?;
        } else if out.shape().numel() != m * n {
            return Err(ctx.shape_err("out", format!("{} elements", m * n), out.sizes()));
        }
        if let Some(r) = &residual {
            if r.shape().numel() != m * n {
                return Err(ctx.shape_err("residual", format!("[{m}, {n}]"), r.sizes()));
            }
        }
        let xs = x.as_slice::<f32>().map_err(|e| ctx.tensor_err("input", e))?;
        let r = residual.map(|r| r.as_slice::<f32>()).transpose();
        let r = r.map_err(|e| ctx.tensor_err("residual", e))?;
        let o = out.as_mut_slice::<f32>().map_err(|e| ctx.tensor_err("out", e))?;
        self.linear
            .run(m, xs, r, o, &mut scratch.linear, &ctx.threads)
            .map_err(|e| ctx.invalid("input", e.to_string()))
    }

    fn run_bound(
        &self,
        scratch: &mut StepScratch,
        ctx: &mut KernelContext,
        reads: &[&[f32]],
        writes: &mut [&mut [f32]],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = self.name;
        let (&[x, ref rest @ ..], [o]) = (reads, writes) else {
            return Err(ctx.invalid("input", "the step's tensors do not match its linear"));
        };
        let m = x.len() / self.k.max(1);
        let r = rest.first().copied();
        let fits = x.len() == m * self.k
            && o.len() == m * self.n
            && r.is_none_or(|r| r.len() == o.len())
            && r.is_some() == self.residual;
        if !fits {
            return Err(ctx.invalid("input", "the step's tensors do not match its linear"));
        }
        self.linear
            .run(m, x, r, o, &mut scratch.linear, &ctx.threads)
            .map_err(|e| ctx.invalid("input", e.to_string()))
    }
}

/// A group of elementwise operators run as one pass ([`MapProgram`]); its registers' blocks
/// are the step's scratch.
struct PreparedMap {
    program: MapProgram,
}

impl PreparedKernel for PreparedMap {
    fn heap_bytes(&self) -> usize {
        0
    }

    fn run_bound(
        &self,
        scratch: &mut StepScratch,
        ctx: &mut KernelContext,
        reads: &[&[f32]],
        writes: &mut [&mut [f32]],
    ) -> std::result::Result<(), KernelError> {
        self.program
            .run(reads, writes, &mut scratch.map)
            .map_err(|e| ctx.invalid("input", e.to_string()))
    }
}
