//! Lowering fused nodes to prepared kernels: the node's constants folded and laid out once,
//! at load, and a run function the executor calls with the node's tensors.

use kiln_kernels::compute::conv::{im2col, Geometry};
use kiln_kernels::compute::depthwise::depthwise;
use kiln_kernels::compute::gemm::{FastGemm, Mat, MatMut};
use kiln_kernels::compute::special::erf;
use kiln_kernels::{Arg, KernelContext, KernelError, Out, OutKind, TensorRef};

use crate::error::{Error, Result};
use crate::method::{Call, Callee, Role};
use crate::value::TensorSlot;

use super::graph::{Graph, NodeOp};
use super::{Activation, Binary, ConvNode, LinearNode, MapOp, Unary};

/// A fused node's kernel, prepared at load. The executor passes the node's read tensors in
/// order as `args` (then `Arg::Output` for the written one) and its output as `outs[0]`.
pub(crate) trait PreparedKernel: Send {
    /// Runs the node.
    fn run(
        &mut self,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> std::result::Result<(), KernelError>;
}

/// The bytes of a constant tensor, from the mapped file or an external source.
pub(crate) type ConstBytes<'a> = dyn Fn(&TensorSlot) -> Option<&'a [u8]> + 'a;

/// The call and prepared kernel of fused node `n` (a Conv or Linear node); `index` is the
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
    let (name, reads, output, kernel): (String, Vec<u32>, u32, Box<dyn PreparedKernel>) =
        match &g.nodes[n].op {
            NodeOp::Conv(c) => {
                let k = PreparedConv::new(g, c, bytes).map_err(err)?;
                let reads = std::iter::once(c.input).chain(c.residual).collect();
                (describe("conv2d", &c.fused), reads, c.output, Box::new(k))
            }
            NodeOp::Linear(l) => {
                let k = PreparedLinear::new(g, l, bytes).map_err(err)?;
                let reads = std::iter::once(l.input).chain(l.residual).collect();
                (describe("linear", &l.fused), reads, l.output, Box::new(k))
            }
            NodeOp::Map(m) => {
                let k = PreparedMap { ops: m.ops.clone() };
                (describe("map", &m.fused), m.inputs.clone(), m.output, Box::new(k))
            }
            _ => return Err(err("only fused nodes have prepared kernels".into())),
        };
    let mut args = reads;
    args.push(output);
    let mut roles = vec![Role::In; args.len()];
    let last = args.len() - 1;
    roles[last] = Role::Out(OutKind::Tensor);
    let call = Call {
        callee: Callee::Prepared(index),
        name: name.into(),
        instruction: first,
        args: args.into_boxed_slice(),
        roles: roles.into_boxed_slice(),
        outs: Box::new([(last as u32, OutKind::Tensor)]),
    };
    Ok((call, kernel))
}

/// `conv2d[convolution.out+_native_batch_norm_legit_no_training.out+hardtanh.out]`.
fn describe(kind: &str, fused: &[String]) -> String {
    let short: Vec<&str> = fused.iter().map(|o| o.strip_prefix("aten::").unwrap_or(o)).collect();
    format!("{kind}[{}]", short.join("+"))
}

/// The float32 elements of constant value `v`.
fn const_f32(
    g: &Graph<'_>,
    v: u32,
    bytes: &ConstBytes<'_>,
) -> std::result::Result<Vec<f32>, String> {
    let t = g.const_f32(v).ok_or_else(|| format!("values[{v}] is not a float32 constant"))?;
    let b = bytes(t)
        .and_then(|b| b.get(..t.nbytes()))
        .ok_or_else(|| format!("constant values[{v}] is outside its data"))?;
    Ok(b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

/// Residual add and activation over a finished output.
fn epilogue(out: &mut [f32], residual: Option<&[f32]>, act: Activation) {
    if let Some(r) = residual {
        for (o, &r) in out.iter_mut().zip(r) {
            *o += r;
        }
    }
    match act {
        Activation::None => {}
        Activation::Clamp { min, max } => {
            // Comparisons keep NaN, as PyTorch's clamp does.
            for o in out.iter_mut() {
                if *o < min {
                    *o = min;
                } else if *o > max {
                    *o = max;
                }
            }
        }
        Activation::Hardswish => {
            for o in out.iter_mut() {
                *o = *o * (*o + 3.0).clamp(0.0, 6.0) / 6.0;
            }
        }
        Activation::Sigmoid => {
            for o in out.iter_mut() {
                *o = 1.0 / (1.0 + (-*o).exp());
            }
        }
        Activation::Silu => {
            for o in out.iter_mut() {
                *o /= 1.0 + (-*o).exp();
            }
        }
        Activation::Gelu => {
            for o in out.iter_mut() {
                let x = f64::from(*o);
                *o = (0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))) as f32;
            }
        }
        Activation::GeluTanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            for o in out.iter_mut() {
                let x = f64::from(*o);
                *o = (0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())) as f32;
            }
        }
    }
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

/// A convolution with batch norm folded into its weight and bias.
struct PreparedConv {
    /// `[Cout, Cin / groups, kh, kw]`.
    weight: Vec<f32>,
    weight_sizes: [usize; 4],
    /// Per output channel (the folded batch norm shift included).
    bias: Option<Vec<f32>>,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
    residual: bool,
    act: Activation,
    /// im2col and row scratch, reused across runs.
    col: Vec<f32>,
}

impl PreparedConv {
    fn new(
        g: &Graph<'_>,
        c: &ConvNode,
        bytes: &ConstBytes<'_>,
    ) -> std::result::Result<PreparedConv, String> {
        let mut weight = const_f32(g, c.weight, bytes)?;
        let ws = g.tensor(c.weight).map(|t| t.shape.sizes().to_vec()).unwrap_or_default();
        let weight_sizes: [usize; 4] =
            ws.as_slice().try_into().map_err(|_| "the weight is not 4-D".to_string())?;
        let c_out = weight_sizes[0];
        if c.groups == 0 || c_out % c.groups != 0 {
            return Err(format!("{c_out} output channels do not split into {} groups", c.groups));
        }
        let mut bias = c.bias.map(|b| const_f32(g, b, bytes)).transpose()?;
        if let Some(bn) = &c.bn {
            // Fold in f64, rounding once: w' = w * s, b' = (b - mean) * s + beta with
            // s = gamma / sqrt(var + eps).
            let opt = |v: Option<u32>| v.map(|v| const_f32(g, v, bytes)).transpose();
            let gamma = opt(bn.weight)?;
            let beta = opt(bn.bias)?;
            let mean = const_f32(g, bn.mean, bytes)?;
            let var = const_f32(g, bn.var, bytes)?;
            let per = weight.len().checked_div(c_out).unwrap_or(0);
            let mut folded = vec![0f32; c_out];
            for o in 0..c_out {
                let gm = gamma.as_ref().map_or(1.0, |v| f64::from(v[o]));
                let bt = beta.as_ref().map_or(0.0, |v| f64::from(v[o]));
                let s = gm / (f64::from(var[o]) + bn.eps).sqrt();
                for w in &mut weight[o * per..(o + 1) * per] {
                    *w = (f64::from(*w) * s) as f32;
                }
                let b0 = bias.as_ref().map_or(0.0, |b| f64::from(b[o]));
                folded[o] = ((b0 - f64::from(mean[o])) * s + bt) as f32;
            }
            bias = Some(folded);
        }
        Ok(PreparedConv {
            weight,
            weight_sizes,
            bias,
            stride: c.stride,
            padding: c.padding,
            dilation: c.dilation,
            groups: c.groups,
            residual: c.residual.is_some(),
            act: c.act,
            col: Vec::new(),
        })
    }

    /// The convolution of one image `x` (`[C, H, W]`) into `out` (`[Cout, OH, OW]`), bias
    /// included. Returns `false` when an operand does not fit.
    fn image(
        &mut self,
        x: &[f32],
        [c, h, w]: [usize; 3],
        out: &mut [f32],
        [oh, ow]: [usize; 2],
    ) -> bool {
        let [c_out, cg, kh, kw] = self.weight_sizes;
        let groups = self.groups;
        let cog = c_out / groups;
        if cg * groups != c {
            return false;
        }
        let plane = oh * ow;
        let geo = Geometry {
            c: cg,
            h,
            w,
            kh,
            kw,
            oh,
            ow,
            stride: self.stride,
            pad: self.padding,
            dil: self.dilation,
        };
        if cg == 1 && cog == 1 {
            let all = Geometry { c, ..geo };
            let ok =
                depthwise(&all, x, [h * w, w, 1], &self.weight, out, [plane, ow, 1], &mut self.col);
            if let (true, Some(b)) = (ok, &self.bias) {
                for (row, &b) in out.chunks_exact_mut(plane.max(1)).zip(b) {
                    row.iter_mut().for_each(|o| *o += b);
                }
            }
            return ok;
        }
        if let Some(b) = &self.bias {
            for (row, &b) in out.chunks_exact_mut(plane.max(1)).zip(b) {
                row.fill(b);
            }
        }
        let k = cg * kh * kw;
        let direct =
            kh == 1 && kw == 1 && self.stride == [1, 1] && self.padding == [0, 0] && plane == h * w;
        for gi in 0..groups {
            let Some(xg) = x.get(gi * cg * h * w..(gi + 1) * cg * h * w) else { return false };
            let cols: &[f32] = if direct {
                xg
            } else {
                self.col.resize(k * plane, 0.0);
                im2col(&geo, xg, [h * w, w, 1], &mut self.col);
                &self.col
            };
            let wg = &self.weight[gi * cog * k..(gi + 1) * cog * k];
            let Some(og) = out.get_mut(gi * cog * plane..(gi + 1) * cog * plane) else {
                return false;
            };
            let ok = f32::gemm(
                cog,
                plane,
                k,
                Mat { data: wg, rs: k, cs: 1 },
                Mat { data: cols, rs: plane, cs: 1 },
                MatMut { data: og, rs: plane, cs: 1 },
                self.bias.is_some(),
            );
            if !ok {
                return false;
            }
        }
        true
    }
}

impl PreparedKernel for PreparedConv {
    fn run(
        &mut self,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = "aten::convolution.out";
        let x = tensor_arg(ctx, args, 0, "input")?;
        let residual =
            if self.residual { Some(tensor_arg(ctx, args, 1, "residual")?) } else { None };
        let Some(Out::Tensor(out)) = outs.first_mut() else {
            return Err(ctx.invalid("out", "expected an output tensor"));
        };
        let (&[n, c, h, w], &[on, _, oh, ow]) = (x.sizes(), out.sizes()) else {
            return Err(ctx.shape_err("input", "4-D input and output", x.sizes()));
        };
        if on != n {
            return Err(ctx.shape_err("out", format!("batch {n}"), out.sizes()));
        }
        let xs = x.as_slice::<f32>().map_err(|e| ctx.tensor_err("input", e))?;
        let r = residual.map(|r| r.as_slice::<f32>()).transpose();
        let r = r.map_err(|e| ctx.tensor_err("residual", e))?;
        let o = out.as_mut_slice::<f32>().map_err(|e| ctx.tensor_err("out", e))?;
        if r.is_some_and(|r| r.len() != o.len()) {
            return Err(ctx.invalid("residual", "the residual's size differs from the output's"));
        }
        let (xi, oi) = (c * h * w, o.len() / n.max(1));
        for b in 0..n {
            let ok = self.image(
                &xs[b * xi..(b + 1) * xi],
                [c, h, w],
                &mut o[b * oi..(b + 1) * oi],
                [oh, ow],
            );
            if !ok {
                return Err(ctx.invalid("input", "operands do not match the prepared convolution"));
            }
        }
        epilogue(o, r, self.act);
        Ok(())
    }
}

/// `x @ W (+ bias)` with W laid out [K, N] once.
struct PreparedLinear {
    /// W as [K, N], row-major.
    weight: Vec<f32>,
    k: usize,
    n: usize,
    bias: Option<Vec<f32>>,
    residual: bool,
    act: Activation,
    name: &'static str,
}

impl PreparedLinear {
    fn new(
        g: &Graph<'_>,
        l: &LinearNode,
        bytes: &ConstBytes<'_>,
    ) -> std::result::Result<PreparedLinear, String> {
        let w = const_f32(g, l.weight, bytes)?;
        let ws = g.tensor(l.weight).map(|t| t.shape.sizes().to_vec()).unwrap_or_default();
        let [r, c] = ws.as_slice() else { return Err("the weight is not 2-D".into()) };
        let (k, n) = if l.weight_is_nk { (*c, *r) } else { (*r, *c) };
        let weight = if l.weight_is_nk {
            // [N, K] -> [K, N]
            let mut t = vec![0f32; w.len()];
            for i in 0..n {
                for j in 0..k {
                    t[j * n + i] = w[i * k + j];
                }
            }
            t
        } else {
            w
        };
        let bias = l.bias.map(|b| const_f32(g, b, bytes)).transpose()?;
        let name = if l.bias.is_some() { "aten::addmm.out" } else { "aten::mm.out" };
        Ok(PreparedLinear { weight, k, n, bias, residual: l.residual.is_some(), act: l.act, name })
    }
}

impl PreparedKernel for PreparedLinear {
    fn run(
        &mut self,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> std::result::Result<(), KernelError> {
        ctx.op = self.name;
        let x = tensor_arg(ctx, args, 0, "input")?;
        let residual =
            if self.residual { Some(tensor_arg(ctx, args, 1, "residual")?) } else { None };
        let Some(Out::Tensor(out)) = outs.first_mut() else {
            return Err(ctx.invalid("out", "expected an output tensor"));
        };
        let (k, n) = (self.k, self.n);
        let m = match x.sizes() {
            &[m, xk] if xk == k => m,
            s => return Err(ctx.shape_err("input", format!("[M, {k}]"), s)),
        };
        out.resize(&[m, n]).map_err(|e| ctx.tensor_err("out", e))?;
        if let Some(r) = &residual {
            if r.sizes() != [m, n] {
                return Err(ctx.shape_err("residual", format!("[{m}, {n}]"), r.sizes()));
            }
        }
        let xs = x.as_slice::<f32>().map_err(|e| ctx.tensor_err("input", e))?;
        let o = out.as_mut_slice::<f32>().map_err(|e| ctx.tensor_err("out", e))?;
        if let Some(b) = &self.bias {
            for row in o.chunks_exact_mut(n.max(1)) {
                row.copy_from_slice(b);
            }
        }
        let done = f32::gemm(
            m,
            n,
            k,
            Mat { data: xs, rs: k, cs: 1 },
            Mat { data: &self.weight, rs: n, cs: 1 },
            MatMut { data: o, rs: n, cs: 1 },
            self.bias.is_some(),
        );
        if !done {
            return Err(ctx.invalid("input", "operands do not fit their data"));
        }
        let r = residual.map(|r| r.as_slice::<f32>()).transpose();
        let r = r.map_err(|e| ctx.tensor_err("residual", e))?;
        epilogue(o, r, self.act);
        Ok(())
    }
}

/// A chain of elementwise operators, each computed in f64 and rounded to float32 like the
/// separate kernels.
struct PreparedMap {
    ops: Vec<MapOp>,
}

impl PreparedKernel for PreparedMap {
    fn run(
        &mut self,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> std::result::Result<(), KernelError> {
        let operand = |i: usize| -> std::result::Result<&[f32], KernelError> {
            match args.get(i) {
                Some(Arg::Tensor(t)) => t.as_slice::<f32>().map_err(|e| ctx.tensor_err("input", e)),
                _ => Err(ctx.invalid("input", "expected a tensor")),
            }
        };
        let first = operand(0)?;
        let Some(Out::Tensor(out)) = outs.first_mut() else {
            return Err(ctx.invalid("out", "expected an output tensor"));
        };
        let o = out.as_mut_slice::<f32>().map_err(|e| ctx.tensor_err("out", e))?;
        if first.len() != o.len() {
            return Err(ctx.invalid("input", "operands differ in size from the output"));
        }
        o.copy_from_slice(first);
        for op in &self.ops {
            match *op {
                MapOp::Unary(Unary::Sigmoid) => {
                    for v in o.iter_mut() {
                        *v = (1.0 / (1.0 + (-f64::from(*v)).exp())) as f32;
                    }
                }
                MapOp::Unary(Unary::Tanh) => {
                    for v in o.iter_mut() {
                        *v = f64::from(*v).tanh() as f32;
                    }
                }
                MapOp::Binary { op, operand: k, left } => {
                    let other = operand(k)?;
                    if other.len() != o.len() {
                        return Err(ctx.invalid("input", "operands differ in size from the output"));
                    }
                    let f = |a: f32, b: f32| match op {
                        Binary::Add => a + b,
                        Binary::Sub => a - b,
                        Binary::Mul => a * b,
                        Binary::Div => a / b,
                    };
                    for (v, &w) in o.iter_mut().zip(other) {
                        *v = if left { f(*v, w) } else { f(w, *v) };
                    }
                }
            }
        }
        Ok(())
    }
}
