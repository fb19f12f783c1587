//! Lowering one XNNPACK graph into kernel calls of the method.
//!
//! Every XNNPACK value becomes a method value and every node one or a few kernel calls:
//! `aten::` kernels where XNNPACK's float semantics are PyTorch's (convolution, addmm, the
//! elementwise and movement operators), `kiln_xnnpack::` kernels where XNNPACK's integer
//! arithmetic must be reproduced (converts, QS8 and QD8 products, QS8 elementwise).
//!
//! XNNPACK runs convolutions on channels-last values, and ExecuTorch puts explicit transposes
//! around them. Lowering does not copy data for those: each XNNPACK value is a method value
//! *seen through a permutation* ([`Rep`]), a transpose only changes the permutation, and a
//! float convolution reads its NHWC input as the NCHW method value it is a view of. Operators
//! that care about the memory order (reshape, matrix products, quantized kernels) get the
//! value materialized in the order they need by a `permute_copy`. The compile stage then
//! chooses channels-last layouts for the convolutions itself, as for portable programs.

use std::sync::Arc;

use kiln_format::xnnpack::{
    BinaryKind, Constant, Conv, ConvKind, DataType, Graph, Node, Op, Payload, Pool, Quant, Scales,
    UnaryKind, FLAG_EXTERNAL_INPUT, FLAG_EXTERNAL_OUTPUT,
};
use kiln_kernels::compute::xnn_quant::qs8_quantize_bound;
use kiln_kernels::{DType, Shape};

use crate::data::ProgramData;
use crate::plan::{DataDef, InstrDef, MethodPlan, TensorDef, ValueDef};

/// The kernel calls one delegate call became.
pub(crate) struct Lowered {
    pub instrs: Vec<InstrDef>,
}

type R<T> = Result<T, String>;

/// XNNPACK value `id` as method value `value` seen through `perm`: XNNPACK dim `i` is dim
/// `perm[i]` of the method value.
#[derive(Clone, Debug)]
struct Rep {
    value: u32,
    perm: Vec<usize>,
}

fn identity(rank: usize) -> Vec<usize> {
    (0..rank).collect()
}

fn is_identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &d)| i == d)
}

/// `inverse(p)[p[i]] = i`.
fn inverse(p: &[usize]) -> Vec<usize> {
    let mut q = vec![0; p.len()];
    for (i, &d) in p.iter().enumerate() {
        q[d] = i;
    }
    q
}

/// NCHW seen as NHWC.
const NHWC: [usize; 4] = [0, 2, 3, 1];

struct Lowerer<'p, 'd> {
    plan: &'p mut MethodPlan,
    graph: &'d Graph,
    payload: &'d Payload<'d>,
    file: &'d [u8],
    named: &'d ProgramData<'d>,
    reps: Vec<Option<Rep>>,
    instrs: Vec<InstrDef>,
    /// The extra arena the lowered activations are placed in (`memory_id`), and its size.
    arena: u32,
    arena_size: u64,
    /// Whether the call's inputs have dynamic shapes (then every new tensor is dynamic, bounded
    /// by its serialized size).
    dynamic: bool,
}

pub(crate) fn lower(
    plan: &mut MethodPlan,
    bytes: &[u8],
    file: &[u8],
    named: &ProgramData<'_>,
    args: &[u32],
) -> R<Lowered> {
    let payload = Payload::parse(bytes).map_err(|e| e.to_string())?;
    let graph = &payload.graph;
    plan.arena_sizes.push(0);
    let arena = plan.arena_sizes.len() as u32;
    let mut l = Lowerer {
        plan,
        graph,
        payload: &payload,
        file,
        named,
        reps: vec![None; graph.values.len()],
        instrs: Vec::new(),
        arena,
        arena_size: 0,
        dynamic: false,
    };
    l.bind_inputs(args)?;
    for (i, node) in graph.nodes.iter().enumerate() {
        l.node(node).map_err(|e| format!("xnodes[{i}] ({}): {e}", node.kind))?;
    }
    l.bind_outputs(args)?;
    let size = l.arena_size;
    let instrs = std::mem::take(&mut l.instrs);
    plan.arena_sizes[arena as usize - 1] = size;
    Ok(Lowered { instrs })
}

fn dtype_of(dt: DataType) -> R<DType> {
    Ok(match dt {
        DataType::Fp32 => DType::Float,
        DataType::Fp16 => DType::Half,
        DataType::QInt8 | DataType::QCInt8 => DType::Char,
        DataType::QUInt8 | DataType::QCInt4 | DataType::QBInt4 => DType::Byte,
        DataType::QInt32 | DataType::QCInt32 | DataType::Int32 => DType::Int,
        other => return Err(format!("values of type {} are not supported", other.name())),
    })
}

impl<'d> Lowerer<'_, 'd> {
    // ---- method values -------------------------------------------------------------------

    fn push(&mut self, v: ValueDef) -> u32 {
        self.plan.values.push(v);
        (self.plan.values.len() - 1) as u32
    }

    fn int(&mut self, x: i64) -> u32 {
        self.push(ValueDef::Int(x))
    }

    fn double(&mut self, x: f64) -> u32 {
        self.push(ValueDef::Double(x))
    }

    fn boolean(&mut self, b: bool) -> u32 {
        self.push(ValueDef::Bool(b))
    }

    fn none(&mut self) -> u32 {
        self.push(ValueDef::None)
    }

    fn ints(&mut self, xs: &[i64]) -> u32 {
        let items: Vec<u32> = xs.iter().map(|&x| self.int(x)).collect();
        self.push(ValueDef::IntList(items.into()))
    }

    /// A scalar bound, or None for an infinite one.
    fn bound(&mut self, x: f32) -> u32 {
        if x.is_finite() {
            self.double(f64::from(x))
        } else {
            self.none()
        }
    }

    /// A new activation of `sizes`, placed in the delegate's arena.
    fn tensor(&mut self, dtype: DType, sizes: &[usize]) -> R<u32> {
        let order: Vec<u8> = (0..sizes.len() as u8).collect();
        let shape = Shape::new(sizes, &order).map_err(|e| format!("shape {sizes:?}: {e}"))?;
        let nbytes = (shape.numel() * dtype.size()) as u64;
        let offset = self.arena_size.next_multiple_of(64);
        self.arena_size = offset + nbytes;
        let data = DataDef::Planned { memory_id: self.arena, offset };
        Ok(self.push(ValueDef::Tensor(TensorDef { dtype, shape, dynamic: self.dynamic, data })))
    }

    /// A constant tensor over `bytes`: borrowed from the file when they are in it, else owned.
    fn constant(&mut self, dtype: DType, sizes: &[usize], bytes: Bytes) -> R<u32> {
        let order: Vec<u8> = (0..sizes.len() as u8).collect();
        self.constant_in(dtype, sizes, &order, bytes)
    }

    /// A constant tensor of `sizes` whose bytes are stored in dim order `order`.
    fn constant_in(&mut self, dtype: DType, sizes: &[usize], order: &[u8], bytes: Bytes) -> R<u32> {
        let shape = Shape::new(sizes, order).map_err(|e| format!("shape {sizes:?}: {e}"))?;
        let need = shape.numel() * dtype.size();
        let data = match bytes {
            Bytes::FileRange(r) => {
                if r.len() < need {
                    return Err(format!(
                        "constant of {need} bytes has only {} bytes of data",
                        r.len()
                    ));
                }
                DataDef::Constant(r.start..r.start + need)
            }
            Bytes::Owned(v) => {
                if v.len() != need {
                    return Err(format!("constant of {need} bytes has {} bytes of data", v.len()));
                }
                DataDef::Owned(v.into())
            }
        };
        Ok(self.push(ValueDef::Tensor(TensorDef { dtype, shape, dynamic: false, data })))
    }

    fn f32_constant(&mut self, values: &[f32]) -> R<u32> {
        let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(DType::Float, &[values.len()], Bytes::Owned(bytes))
    }

    fn emit(&mut self, op: &str, args: Vec<u32>) {
        let idx = match self.plan.operators.iter().position(|o| o == op) {
            Some(i) => i,
            None => {
                self.plan.operators.push(op.to_string());
                self.plan.operators.len() - 1
            }
        };
        self.instrs.push(InstrDef::Kernel { op: idx, args });
    }

    /// `op(inputs..., out) -> out` into a new tensor.
    fn call(&mut self, op: &str, mut inputs: Vec<u32>, dtype: DType, sizes: &[usize]) -> R<u32> {
        let out = self.tensor(dtype, sizes)?;
        inputs.push(out);
        inputs.push(out);
        self.emit(op, inputs);
        Ok(out)
    }

    // ---- XNNPACK values ------------------------------------------------------------------

    fn xvalue(&self, id: u32) -> &'d kiln_format::xnnpack::Value {
        &self.graph.values[id as usize]
    }

    fn dims(&self, id: u32) -> Vec<usize> {
        self.xvalue(id).dims.clone()
    }

    /// The method-value sizes behind XNNPACK dims `dims` seen through `perm`.
    fn method_sizes(dims: &[usize], perm: &[usize]) -> Vec<usize> {
        let mut s = vec![0; dims.len()];
        for (i, &p) in perm.iter().enumerate() {
            s[p] = dims[i];
        }
        s
    }

    /// The representation of value `id` (a constant is created on first use).
    fn rep(&mut self, id: u32) -> R<Rep> {
        if let Some(r) = &self.reps[id as usize] {
            return Ok(r.clone());
        }
        let v = self.xvalue(id).clone();
        if v.constant.is_none() {
            return Err(format!("value {id} is read before any node writes it"));
        }
        let dtype = dtype_of(v.datatype)?;
        let sizes = match v.datatype {
            // Two 4-bit values per byte, rows padded to whole bytes.
            DataType::QCInt4 | DataType::QBInt4 => match v.dims.as_slice() {
                [n, k] => vec![*n, k.div_ceil(2)],
                d => return Err(format!("4-bit value {id} has dims {d:?}, not [N, K]")),
            },
            _ => v.dims.clone(),
        };
        let bytes = self.constant_bytes(v.constant.unwrap_or(0))?;
        let value = self.constant(dtype, &sizes, bytes)?;
        let r = Rep { value, perm: identity(sizes.len()) };
        self.reps[id as usize] = Some(r.clone());
        Ok(r)
    }

    /// The bytes of constant `index`.
    fn constant_bytes(&self, index: u32) -> R<Bytes> {
        let c = self.graph.constants.get(index as usize).cloned().flatten();
        match c {
            Some(Constant::Region(_)) | Some(Constant::Inline(_)) => {
                let b = self.payload.constant_bytes(index).unwrap_or(&[]);
                Ok(self.file_or_owned(b, true))
            }
            Some(Constant::Named { key, .. }) => match self.named.locate(&key) {
                Some((b, in_file)) => Ok(self.file_or_owned(b, in_file)),
                None => Err(format!("constant {index}: named data {key:?} is in neither the program nor its data files")),
            },
            None => Err(format!("constant {index} has no data")),
        }
    }

    fn file_or_owned(&self, b: &[u8], in_file: bool) -> Bytes {
        let start = (b.as_ptr() as usize).wrapping_sub(self.file.as_ptr() as usize);
        if in_file && start.checked_add(b.len()).is_some_and(|e| e <= self.file.len()) {
            Bytes::FileRange(start..start + b.len())
        } else {
            Bytes::Owned(b.to_vec())
        }
    }

    /// Float32 elements of constant `index` (per-channel scales), `bf16` when asked.
    fn floats(&self, scales: &Scales, bf16: bool) -> R<Vec<f32>> {
        match scales {
            Scales::Inline(v) => Ok(v.clone()),
            Scales::Constant(i) => {
                let owned = self.constant_bytes(*i)?;
                let b = owned.resolve(self.file);
                Ok(if bf16 {
                    b.chunks_exact(2)
                        .map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16))
                        .collect()
                } else {
                    b.chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect()
                })
            }
        }
    }

    /// Sets the representation of value `id`, checking that the method value's sizes agree
    /// with the serialized dims (which are only a bound when shapes are dynamic).
    fn set(&mut self, id: u32, rep: Rep) {
        self.reps[id as usize] = Some(rep);
    }

    /// A new method value for output `id` seen through `perm`.
    fn output(&mut self, id: u32, perm: Vec<usize>) -> R<Rep> {
        let v = self.xvalue(id);
        let dtype = dtype_of(v.datatype)?;
        let dims = v.dims.clone();
        if perm.len() != dims.len() {
            return Err(format!("value {id} has rank {}, expected {}", dims.len(), perm.len()));
        }
        let sizes = Self::method_sizes(&dims, &perm);
        let value = self.tensor(dtype, &sizes)?;
        Ok(Rep { value, perm })
    }

    /// Value `id` as a method value whose XNNPACK view is `perm` (copying when it is seen
    /// through another permutation).
    fn as_perm(&mut self, id: u32, perm: &[usize]) -> R<u32> {
        let r = self.rep(id)?;
        if r.perm == perm {
            return Ok(r.value);
        }
        if r.perm.len() != perm.len() {
            return Err(format!("value {id} has rank {}, expected {}", r.perm.len(), perm.len()));
        }
        // u = permute(x, inverse(perm)), x = permute(v, r.perm): u = permute(v, c) with
        // c[i] = r.perm[inverse(perm)[i]].
        let inv = inverse(perm);
        let c: Vec<usize> = inv.iter().map(|&q| r.perm[q]).collect();
        let dims = self.dims(id);
        let sizes = Self::method_sizes(&dims, perm);
        let dims_arg = self.ints(&c.iter().map(|&d| d as i64).collect::<Vec<_>>());
        let dtype = dtype_of(self.xvalue(id).datatype)?;
        self.call("aten::permute_copy.out", vec![r.value, dims_arg], dtype, &sizes)
    }

    /// Value `id` in XNNPACK's own memory order.
    fn plain(&mut self, id: u32) -> R<u32> {
        let rank = self.dims(id).len();
        self.as_perm(id, &identity(rank))
    }

    fn bind_inputs(&mut self, args: &[u32]) -> R<()> {
        for id in 0..self.graph.values.len() as u32 {
            let v = self.xvalue(id);
            if v.flags & FLAG_EXTERNAL_INPUT == 0 {
                continue;
            }
            let ext = v.external_id.unwrap_or(u32::MAX) as usize;
            let &arg = args.get(ext).ok_or_else(|| {
                format!(
                    "value {id}: external id {ext} is outside the call's {} arguments",
                    args.len()
                )
            })?;
            let rank = v.dims.len();
            let t = match self.plan.values.get(arg as usize) {
                Some(ValueDef::Tensor(t)) => t,
                _ => {
                    return Err(format!(
                        "value {id}: argument {ext} (values[{arg}]) is not a tensor"
                    ))
                }
            };
            let (method_rank, dtype, dynamic) = (t.shape.rank(), t.dtype, t.dynamic);
            self.dynamic |= dynamic;
            let value = if method_rank == rank {
                arg
            } else if method_rank == 0 && v.dims == [1] {
                // XNNPACK writes a scalar as [1].
                let shape = self.ints(&[1]);
                self.call("aten::view_copy.out", vec![arg, shape], dtype, &[1])?
            } else {
                return Err(format!(
                    "value {id}: argument {ext} has rank {method_rank}, the graph expects {rank}"
                ));
            };
            self.set(id, Rep { value, perm: identity(rank) });
        }
        Ok(())
    }

    fn bind_outputs(&mut self, args: &[u32]) -> R<()> {
        for id in 0..self.graph.values.len() as u32 {
            let v = self.xvalue(id);
            if v.flags & FLAG_EXTERNAL_OUTPUT == 0 {
                continue;
            }
            let ext = v.external_id.unwrap_or(u32::MAX) as usize;
            let &arg = args.get(ext).ok_or_else(|| {
                format!(
                    "value {id}: external id {ext} is outside the call's {} arguments",
                    args.len()
                )
            })?;
            let method_rank = match self.plan.values.get(arg as usize) {
                Some(ValueDef::Tensor(t)) => t.shape.rank(),
                _ => {
                    return Err(format!(
                        "value {id}: argument {ext} (values[{arg}]) is not a tensor"
                    ))
                }
            };
            let r = self.rep(id)?;
            let inv = inverse(&r.perm);
            if method_rank == 0 && self.dims(id) == [1] {
                // A scalar output, written [1] by XNNPACK.
                let shape = self.ints(&[]);
                self.emit("aten::view_copy.out", vec![r.value, shape, arg, arg]);
            } else if is_identity(&inv) {
                self.emit("aten::clone.out", vec![r.value, 0, arg, arg]);
                let none = self.none();
                if let Some(InstrDef::Kernel { args, .. }) = self.instrs.last_mut() {
                    args[1] = none;
                }
            } else {
                let dims = self.ints(&inv.iter().map(|&d| d as i64).collect::<Vec<_>>());
                self.emit("aten::permute_copy.out", vec![r.value, dims, arg, arg]);
            }
        }
        Ok(())
    }

    // ---- nodes ---------------------------------------------------------------------------

    fn node(&mut self, n: &Node) -> R<()> {
        match &n.op {
            Op::Conv(c) => self.conv(n, c),
            Op::FullyConnected { input, filter, bias, output, flags } => {
                self.fully_connected(n, *input, *filter, *bias, *output, *flags)
            }
            Op::Binary { kind, a, b, output, .. } => self.binary(n, *kind, *a, *b, *output),
            Op::Unary { kind, input, output, .. } => self.unary(n, *kind, *input, *output),
            Op::Transpose { perm, input, output } => {
                let r = self.rep(*input)?;
                if perm.len() != r.perm.len() || inverse_checked(perm).is_none() {
                    return Err(format!(
                        "perm {perm:?} is not a permutation of {} dims",
                        r.perm.len()
                    ));
                }
                // out dim i = in dim perm[i] = method dim r.perm[perm[i]].
                let p = perm.iter().map(|&q| r.perm[q as usize]).collect();
                self.set(*output, Rep { value: r.value, perm: p });
                Ok(())
            }
            Op::Reshape { input, output, .. } => {
                let x = self.plain(*input)?;
                let dims = self.dims(*output);
                let sizes = self.ints(&dims.iter().map(|&d| d as i64).collect::<Vec<_>>());
                let dtype = dtype_of(self.xvalue(*output).datatype)?;
                let out = self.call("aten::view_copy.out", vec![x, sizes], dtype, &dims)?;
                self.set(*output, Rep { value: out, perm: identity(dims.len()) });
                Ok(())
            }
            Op::Slice { offsets, sizes, input, output } => {
                self.slice(*input, offsets, sizes, *output)
            }
            Op::Pad { pre, post, value, input, output } => {
                self.pad(*input, pre, post, *value, *output)
            }
            Op::Concat { axis, inputs, output } => self.concat(*axis, inputs, *output),
            Op::Pool(p) => self.pool(n, p),
            Op::ResizeBilinear { height, width, input, output, flags } => {
                let x = self.as_perm(*input, &NHWC)?;
                let size = self.ints(&[i64::from(*height), i64::from(*width)]);
                let align = self.boolean(flags & 8 != 0);
                let none = self.none();
                let out = self.output(*output, NHWC.to_vec())?;
                self.emit(
                    "aten::upsample_bilinear2d.vec_out",
                    vec![x, size, align, none, out.value, out.value],
                );
                self.set(*output, out);
                Ok(())
            }
            Op::LeakyRelu { slope, input, output } => {
                let s = self.double(f64::from(*slope));
                self.same_perm_unary("aten::leaky_relu.out", *input, vec![s], *output)
            }
            Op::Elu { alpha, input, output } => {
                let a = self.double(f64::from(*alpha));
                let one = self.int(1);
                self.same_perm_unary("aten::elu.out", *input, vec![a, one, one], *output)
            }
            Op::ArgMaxPool { .. } => Err("ArgMaxPooling2d is not supported yet".into()),
            Op::Sdpa { .. } => {
                Err("ScaledDotProductAttention has no runtime in ExecuTorch either".into())
            }
        }
    }

    /// A unary method operator with extra arguments, applied in the input's permutation.
    fn same_perm_unary(&mut self, op: &str, input: u32, extra: Vec<u32>, output: u32) -> R<()> {
        let r = self.rep(input)?;
        let out = self.output(output, r.perm.clone())?;
        let mut args = vec![r.value];
        args.extend(extra);
        args.push(out.value);
        args.push(out.value);
        self.emit(op, args);
        self.set(output, out);
        Ok(())
    }

    /// A fused output clamp after the node's method value `v` (XNNPACK's `output_min_max`).
    fn clamp_after(&mut self, n: &Node, r: Rep, output: u32) -> R<Rep> {
        let Some((lo, hi)) = n.min_max else { return Ok(r) };
        if lo == f32::NEG_INFINITY && hi == f32::INFINITY {
            return Ok(r);
        }
        let (a, b) = (self.bound(lo), self.bound(hi));
        let out = self.output(output, r.perm.clone())?;
        self.emit("aten::clamp.out", vec![r.value, a, b, out.value, out.value]);
        Ok(out)
    }

    fn unary(&mut self, n: &Node, kind: UnaryKind, input: u32, output: u32) -> R<()> {
        use UnaryKind as U;
        let simple = |k: U| -> Option<&'static str> {
            Some(match k {
                U::Sigmoid => "aten::sigmoid.out",
                U::Floor => "aten::floor.out",
                U::SquareRoot => "aten::sqrt.out",
                U::Ceiling => "aten::ceil.out",
                U::Hardswish => "aten::hardswish.out",
                U::Negate => "aten::neg.out",
                U::Abs => "aten::abs.out",
                U::ReciprocalSquareRoot => "aten::rsqrt.out",
                U::Log => "aten::log.out",
                U::Tanh => "aten::tanh.out",
                U::Exp => "aten::exp.out",
                U::Sin => "aten::sin.out",
                U::Cos => "aten::cos.out",
                _ => return None,
            })
        };
        let quantized_ok = matches!(kind, U::Convert | U::GlobalAvgPooling2d | U::Clamp);
        if self.xvalue(input).datatype != DataType::Fp32 && !quantized_ok {
            return Err(format!(
                "{kind:?} on {} values is not supported yet",
                self.xvalue(input).datatype.name()
            ));
        }
        if let Some(op) = simple(kind) {
            return self.same_perm_unary(op, input, vec![], output);
        }
        match kind {
            U::Square => {
                let r = self.rep(input)?;
                let out = self.output(output, r.perm.clone())?;
                self.emit("aten::mul.out", vec![r.value, r.value, out.value, out.value]);
                self.set(output, out);
                Ok(())
            }
            U::Gelu => {
                let s = self.push(ValueDef::String(Arc::from("none")));
                self.same_perm_unary("aten::gelu.out", input, vec![s], output)
            }
            U::Copy => {
                let none = self.none();
                self.same_perm_unary("aten::clone.out", input, vec![none], output)
            }
            U::Clamp if self.xvalue(input).datatype == DataType::QInt8 => {
                // XNNPACK clamps the integers to the bounds quantized with the output's
                // parameters (the same as the input's).
                let (si, zi) = self.per_tensor(input)?;
                let (so, zo) = self.per_tensor(output)?;
                if (si, zi) != (so, zo) {
                    return Err(format!(
                        "a quantized clamp from scale {si} zero point {zi} to {so} {zo}"
                    ));
                }
                let r = self.rep(input)?;
                let (lo, hi) = n.min_max.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
                let q = |v: f32| i64::from(qs8_quantize_bound(v, so as f32, zo as i32));
                let (a, b) = (self.int(q(lo)), self.int(q(hi)));
                let out = self.output(output, r.perm.clone())?;
                self.emit("aten::clamp.out", vec![r.value, a, b, out.value, out.value]);
                self.set(output, out);
                Ok(())
            }
            U::Clamp => {
                let r = self.rep(input)?;
                let (lo, hi) = n.min_max.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
                let (a, b) = (self.bound(lo), self.bound(hi));
                let out = self.output(output, r.perm.clone())?;
                self.emit("aten::clamp.out", vec![r.value, a, b, out.value, out.value]);
                self.set(output, out);
                Ok(())
            }
            U::Softmax => {
                let r = self.rep(input)?;
                let last = r.perm.len().checked_sub(1).ok_or("softmax of a rank-0 value")?;
                let dim = self.int(r.perm[last] as i64);
                let f = self.boolean(false);
                self.same_perm_unary("aten::_softmax.out", input, vec![dim, f], output)
            }
            U::GlobalAvgPooling2d if self.xvalue(input).datatype == DataType::QInt8 => {
                let x = self.plain(input)?;
                let (si, zi) = self.per_tensor(input)?;
                let (so, zo) = self.per_tensor(output)?;
                let (lo, hi) = self.quant_bounds(n);
                let args =
                    vec![x, self.double(si), self.int(zi), self.double(so), self.int(zo), lo, hi];
                let out = self.output(output, identity(4))?;
                let mut all = args;
                all.extend([out.value, out.value]);
                self.emit("kiln_xnnpack::qs8_global_avg_pool.out", all);
                self.set(output, out);
                Ok(())
            }
            U::GlobalAvgPooling2d => {
                let x = self.as_perm(input, &NHWC)?;
                let dims = self.ints(&[2, 3]);
                let keep = self.boolean(true);
                let none = self.none();
                let out = self.output(output, NHWC.to_vec())?;
                self.emit("aten::mean.out", vec![x, dims, keep, none, out.value, out.value]);
                let out = self.clamp_after(n, out, output)?;
                self.set(output, out);
                Ok(())
            }
            U::Convert => self.convert(input, output),
            _ => Err(format!("{kind:?} is not supported")),
        }
    }

    fn binary(&mut self, n: &Node, kind: BinaryKind, a: u32, b: u32, output: u32) -> R<()> {
        let quantized = self.xvalue(a).datatype != DataType::Fp32;
        if kind == BinaryKind::BatchMatrixMultiply {
            return self.bmm(a, b, output);
        }
        // Both operands in one permutation: the output's rank, the smaller operand
        // broadcast from the right (numpy rules on XNNPACK's dims).
        let rank = self.dims(output).len();
        let perm = {
            let ra = self.rep(a)?;
            let rb = self.rep(b)?;
            if ra.perm.len() == rank {
                ra.perm
            } else if rb.perm.len() == rank {
                rb.perm
            } else {
                identity(rank)
            }
        };
        let x = self.broadcast_operand(a, &perm)?;
        let y = self.broadcast_operand(b, &perm)?;
        if quantized {
            return self.qs8_binary(n, kind, (a, x), (b, y), output, perm);
        }
        let out = self.output(output, perm.clone())?;
        let one = || ValueDef::Int(1);
        let (op, mut args) = match kind {
            BinaryKind::Add => ("aten::add.out", vec![x, y, self.push(one())]),
            BinaryKind::Subtract => ("aten::sub.out", vec![x, y, self.push(one())]),
            BinaryKind::Multiply => ("aten::mul.out", vec![x, y]),
            BinaryKind::Div => ("aten::div.out", vec![x, y]),
            BinaryKind::Minimum => ("aten::minimum.out", vec![x, y]),
            BinaryKind::Maximum => ("aten::maximum.out", vec![x, y]),
            BinaryKind::PReLU => {
                // x < 0 ? x * slope : x, as max(x, 0) + slope * min(x, 0) (exact).
                let dtype = DType::Float;
                let sizes = Self::method_sizes(&self.dims(output), &perm);
                let zero = self.double(0.0);
                let none = self.none();
                let pos = self.call("aten::clamp.out", vec![x, zero, none], dtype, &sizes)?;
                let neg = self.call("aten::clamp.out", vec![x, none, zero], dtype, &sizes)?;
                let scaled = self.call("aten::mul.out", vec![neg, y], dtype, &sizes)?;
                let one = self.push(one());
                ("aten::add.out", vec![pos, scaled, one])
            }
            BinaryKind::BatchMatrixMultiply => unreachable!("handled above"),
        };
        args.push(out.value);
        args.push(out.value);
        self.emit(op, args);
        let out = match kind {
            BinaryKind::PReLU => out,
            _ => self.clamp_after(n, out, output)?,
        };
        self.set(output, out);
        Ok(())
    }

    /// Operand `id` of a broadcasting node whose output is seen through `perm`: a value of
    /// the same rank is brought to `perm`; a lower-rank one is first reshaped to the full rank
    /// with leading ones (numpy alignment), then permuted.
    fn broadcast_operand(&mut self, id: u32, perm: &[usize]) -> R<u32> {
        let dims = self.dims(id);
        if dims.len() == perm.len() {
            return self.as_perm(id, perm);
        }
        if dims.len() > perm.len() {
            return Err(format!("operand {id} has a higher rank than the output"));
        }
        let x = self.plain(id)?;
        let mut full = vec![1usize; perm.len() - dims.len()];
        full.extend(&dims);
        let dtype = dtype_of(self.xvalue(id).datatype)?;
        let shape = self.ints(&full.iter().map(|&d| d as i64).collect::<Vec<_>>());
        let v = self.call("aten::view_copy.out", vec![x, shape], dtype, &full)?;
        if is_identity(perm) {
            return Ok(v);
        }
        let inv = inverse(perm);
        let sizes = Self::method_sizes(&full, perm);
        let dims_arg = self.ints(&inv.iter().map(|&d| d as i64).collect::<Vec<_>>());
        self.call("aten::permute_copy.out", vec![v, dims_arg], dtype, &sizes)
    }

    fn bmm(&mut self, a: u32, b: u32, output: u32) -> R<()> {
        let (da, db, dout) = (self.dims(a), self.dims(b), self.dims(output));
        if da.len() < 3 || da.len() != db.len() || da[..da.len() - 2] != db[..db.len() - 2] {
            return Err(format!("batch matrix multiply of {da:?} and {db:?} is not supported"));
        }
        let r = da.len();
        let batch: usize = da[..r - 2].iter().product();
        let x = self.plain(a)?;
        let y = self.plain(b)?;
        let (x, y) = if r == 3 {
            (x, y)
        } else {
            let sa = [batch, da[r - 2], da[r - 1]];
            let sb = [batch, db[r - 2], db[r - 1]];
            (self.reshape(x, &sa)?, self.reshape(y, &sb)?)
        };
        let m3 = [batch, da[r - 2], db[r - 1]];
        let z = self.call("aten::bmm.out", vec![x, y], DType::Float, &m3)?;
        let z = if r == 3 { z } else { self.reshape(z, &dout)? };
        self.set(output, Rep { value: z, perm: identity(r) });
        Ok(())
    }

    fn reshape(&mut self, x: u32, sizes: &[usize]) -> R<u32> {
        let shape = self.ints(&sizes.iter().map(|&d| d as i64).collect::<Vec<_>>());
        self.call("aten::view_copy.out", vec![x, shape], DType::Float, sizes)
    }

    fn slice(&mut self, input: u32, offsets: &[u32], sizes: &[u32], output: u32) -> R<()> {
        let r = self.rep(input)?;
        let dims = self.dims(input);
        if offsets.len() != dims.len() || sizes.len() != dims.len() {
            return Err(format!(
                "offsets/sizes of rank {} for a rank-{} value",
                offsets.len(),
                dims.len()
            ));
        }
        let dtype = dtype_of(self.xvalue(input).datatype)?;
        let mut cur = r.value;
        let mut cur_dims = dims.clone();
        for i in 0..dims.len() {
            let (o, s) = (offsets[i] as usize, sizes[i] as usize);
            // A size of 0 means "to the end" in XNNPACK's static slice.
            let s = if s == 0 { dims[i].saturating_sub(o) } else { s };
            if o == 0 && s == dims[i] {
                continue;
            }
            if o + s > dims[i] {
                return Err(format!("slice {o}..{} of dim {i} of size {}", o + s, dims[i]));
            }
            cur_dims[i] = s;
            let dim = self.int(r.perm[i] as i64);
            let start = self.int(o as i64);
            let end = self.int((o + s) as i64);
            let step = self.int(1);
            let msizes = Self::method_sizes(&cur_dims, &r.perm);
            cur = self.call(
                "aten::slice_copy.Tensor_out",
                vec![cur, dim, start, end, step],
                dtype,
                &msizes,
            )?;
        }
        let value = if cur == r.value {
            let none = self.none();
            let msizes = Self::method_sizes(&cur_dims, &r.perm);
            self.call("aten::clone.out", vec![cur, none], dtype, &msizes)?
        } else {
            cur
        };
        self.set(output, Rep { value, perm: r.perm });
        Ok(())
    }

    fn pad(&mut self, input: u32, pre: &[u32], post: &[u32], value: f32, output: u32) -> R<()> {
        let r = self.rep(input)?;
        let rank = r.perm.len();
        if pre.len() != rank || post.len() != rank {
            return Err(format!("paddings of rank {} for a rank-{rank} value", pre.len()));
        }
        // constant_pad_nd pads the last method dim first: [last_pre, last_post, ...].
        let mut by_dim = vec![(0i64, 0i64); rank];
        for i in 0..rank {
            by_dim[r.perm[i]] = (i64::from(pre[i]), i64::from(post[i]));
        }
        let pads: Vec<i64> = by_dim.iter().rev().flat_map(|&(a, b)| [a, b]).collect();
        let pads = self.ints(&pads);
        let v = self.double(f64::from(value));
        let out = self.output(output, r.perm.clone())?;
        self.emit("aten::constant_pad_nd.out", vec![r.value, pads, v, out.value, out.value]);
        self.set(output, out);
        Ok(())
    }

    fn concat(&mut self, axis: u32, inputs: &[u32], output: u32) -> R<()> {
        let perm = self.rep(inputs[0])?.perm;
        let axis = axis as usize;
        if axis >= perm.len() {
            return Err(format!("axis {axis} of a rank-{} value", perm.len()));
        }
        let mut items = Vec::with_capacity(inputs.len());
        for &i in inputs {
            items.push(self.as_perm(i, &perm)?);
        }
        let list = self.push(ValueDef::TensorList(items.into()));
        let dim = self.int(perm[axis] as i64);
        let out = self.output(output, perm)?;
        self.emit("aten::cat.out", vec![list, dim, out.value, out.value]);
        self.set(output, out);
        Ok(())
    }

    fn pool(&mut self, n: &Node, p: &Pool) -> R<()> {
        let [t, r, b, l] = p.padding.map(i64::from);
        let x = self.as_perm(p.input, &NHWC)?;
        let kernel = self.ints(&[i64::from(p.pooling[0]), i64::from(p.pooling[1])]);
        let stride = self.ints(&[i64::from(p.stride[0].max(1)), i64::from(p.stride[1].max(1))]);
        let out = self.output(p.output, NHWC.to_vec())?;
        let dtype = dtype_of(self.xvalue(p.input).datatype)?;
        if p.max {
            // Asymmetric padding (ceil mode) pads the input with -inf first: padded cells
            // never win.
            let (x, pad) = if t == b && l == r {
                (x, [t, l])
            } else {
                let sizes = self.dims(p.input);
                let msizes =
                    [sizes[0], sizes[3], sizes[1] + (t + b) as usize, sizes[2] + (l + r) as usize];
                let pads = self.ints(&[l, r, t, b]);
                let v = self.double(f64::NEG_INFINITY);
                (self.call("aten::constant_pad_nd.out", vec![x, pads, v], dtype, &msizes)?, [0, 0])
            };
            let padding = self.ints(&pad);
            let dil = [p.dilation[0].max(1), p.dilation[1].max(1)].map(i64::from);
            let dilation = self.ints(&dil);
            let ceil = self.boolean(false);
            let out_dims = Self::method_sizes(&self.dims(p.output), &NHWC);
            let indices = self.tensor(DType::Long, &out_dims)?;
            self.emit(
                "aten::max_pool2d_with_indices.out",
                vec![x, kernel, stride, padding, dilation, ceil, out.value, indices, out.value],
            );
        } else {
            if t != b || l != r {
                return Err(format!("average pooling with asymmetric padding {:?}", p.padding));
            }
            let padding = self.ints(&[t, l]);
            let f = self.boolean(false);
            let none = self.none();
            self.emit(
                "aten::avg_pool2d.out",
                vec![x, kernel, stride, padding, f, f, none, out.value, out.value],
            );
        }
        let out = self.clamp_after(n, out, p.output)?;
        self.set(p.output, out);
        Ok(())
    }

    fn conv(&mut self, n: &Node, c: &Conv) -> R<()> {
        let wv = self.xvalue(c.filter).clone();
        if self.xvalue(c.input).datatype != DataType::Fp32 {
            return self.qs8_conv(n, c);
        }
        if wv.datatype != DataType::Fp32 {
            return Err(format!("a float convolution with {} weights", wv.datatype.name()));
        }
        let [t, r, b, l] = c.padding;
        if t != b || l != r {
            return Err(format!("asymmetric padding {:?}", c.padding));
        }
        let x = self.as_perm(c.input, &NHWC)?;
        // The filter, in PyTorch's layout.
        let w = self.conv_filter(c, &wv)?;
        let bias = match c.bias {
            Some(bv) => self.plain(bv)?,
            None => self.none(),
        };
        let stride = self.ints(&c.stride.map(|s| i64::from(s.max(1))));
        let padding = self.ints(&[i64::from(t), i64::from(l)]);
        let dilation = self.ints(&c.dilation.map(|d| i64::from(d.max(1))));
        let transposed = self.boolean(c.kind == ConvKind::ConvTranspose2d);
        let output_padding = self.ints(&c.adjustment.map(i64::from));
        let groups = self.int(i64::from(c.groups.max(1)));
        let out = self.output(c.output, NHWC.to_vec())?;
        self.emit(
            "aten::convolution.out",
            vec![
                x,
                w,
                bias,
                stride,
                padding,
                dilation,
                transposed,
                output_padding,
                groups,
                out.value,
                out.value,
            ],
        );
        let out = self.clamp_after(n, out, c.output)?;
        self.set(c.output, out);
        Ok(())
    }

    /// A float convolution filter in PyTorch's layout. Convolution filters (OHWI), depthwise
    /// ones (1HWO) and one-group transposed ones ([O, KH, KW, I]) are PyTorch's filters in
    /// another dim order, so they borrow the payload's bytes, declared with that order; a
    /// grouped transposed filter ([G*O/G, KH, KW, I/G] -> [I, O/G, KH, KW]) is regrouped into
    /// a copy.
    fn conv_filter(&mut self, c: &Conv, wv: &kiln_format::xnnpack::Value) -> R<u32> {
        let d = wv.dims.clone();
        let [a, kh, kw, z] = d[..] else {
            return Err(format!("filter dims {d:?} are not 4-D"));
        };
        let Some(index) = wv.constant else {
            return Err("a convolution filter that is not a constant".into());
        };
        let bytes = self.constant_bytes(index)?;
        let groups = c.groups.max(1) as usize;
        match c.kind {
            // OIHW sizes stored O, H, W, I.
            ConvKind::Conv2d => {
                return self.constant_in(DType::Float, &[a, z, kh, kw], &[0, 2, 3, 1], bytes)
            }
            // [O, 1, KH, KW] stored 1, H, W, O.
            ConvKind::DepthwiseConv2d => {
                return self.constant_in(DType::Float, &[z, 1, kh, kw], &[1, 2, 3, 0], bytes)
            }
            // [I, O, KH, KW] stored O, H, W, I.
            ConvKind::ConvTranspose2d if groups == 1 => {
                return self.constant_in(DType::Float, &[z, a, kh, kw], &[1, 2, 3, 0], bytes)
            }
            ConvKind::ConvTranspose2d => {}
        }
        let raw = bytes.resolve(self.file);
        let w: Vec<f32> =
            raw.chunks_exact(4).map(|q| f32::from_le_bytes([q[0], q[1], q[2], q[3]])).collect();
        if w.len() != a * kh * kw * z {
            return Err(format!("filter {d:?} has {} elements of data", w.len()));
        }
        if a % groups != 0 {
            return Err(format!("{a} output channels in {groups} groups"));
        }
        let og = a / groups;
        let at = |o: usize, y: usize, x: usize, i: usize| w[((o * kh + y) * kw + x) * z + i];
        let mut out = Vec::with_capacity(w.len());
        // PyTorch [g*I/G + il, ol, y, x] = XNNPACK [g*O/G + ol, y, x, il].
        for gi in 0..groups {
            for il in 0..z {
                for ol in 0..og {
                    for y in 0..kh {
                        for x in 0..kw {
                            out.push(at(gi * og + ol, y, x, il));
                        }
                    }
                }
            }
        }
        let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant(DType::Float, &[groups * z, og, kh, kw], Bytes::Owned(bytes))
    }

    fn fully_connected(
        &mut self,
        n: &Node,
        input: u32,
        filter: u32,
        bias: Option<u32>,
        output: u32,
        flags: u32,
    ) -> R<()> {
        let (xv, wv) = (self.xvalue(input).clone(), self.xvalue(filter).clone());
        if xv.datatype == DataType::QDInt8 {
            return self.qd8_fully_connected(n, input, filter, bias, output, flags);
        }
        if xv.datatype != DataType::Fp32 {
            return self.qs8_fully_connected(n, input, filter, bias, output, flags);
        }
        if wv.datatype != DataType::Fp32 || wv.dims.len() != 2 {
            return Err(format!(
                "filter {} {:?} is not a float32 matrix",
                wv.datatype.name(),
                wv.dims
            ));
        }
        let transpose = flags & 1 != 0;
        let (nn, k) = if transpose { (wv.dims[1], wv.dims[0]) } else { (wv.dims[0], wv.dims[1]) };
        let xd = xv.dims.clone();
        if xd.last() != Some(&k) {
            return Err(format!("input {xd:?} does not end in the filter's {k} columns"));
        }
        let m: usize = xd[..xd.len() - 1].iter().product();
        let x = self.plain(input)?;
        let x2 = if xd.len() == 2 { x } else { self.reshape(x, &[m, k])? };
        let w = self.rep(filter)?.value;
        // addmm/mm take the weight [K, N]; a [N, K] one goes through a permute_copy the compile
        // stage folds into the packed weight.
        let wt = if transpose {
            w
        } else {
            let dims = self.ints(&[1, 0]);
            self.call("aten::permute_copy.out", vec![w, dims], DType::Float, &[k, nn])?
        };
        let y = match bias {
            Some(b) => {
                let b = self.plain(b)?;
                let one = self.int(1);
                self.call("aten::addmm.out", vec![b, x2, wt, one, one], DType::Float, &[m, nn])?
            }
            None => self.call("aten::mm.out", vec![x2, wt], DType::Float, &[m, nn])?,
        };
        let od = self.dims(output);
        let y = if od.len() == 2 { y } else { self.reshape(y, &od)? };
        let r = self.clamp_after(n, Rep { value: y, perm: identity(od.len()) }, output)?;
        self.set(output, r);
        Ok(())
    }

    // ---- quantized -----------------------------------------------------------------------

    /// The per-tensor scale and zero point of value `id`.
    fn per_tensor(&self, id: u32) -> R<(f64, i64)> {
        match &self.xvalue(id).quant {
            Some(Quant::PerTensor { scale, zero_point }) => {
                Ok((f64::from(*scale), i64::from(*zero_point)))
            }
            other => Err(format!("value {id} needs per-tensor quantization, has {other:?}")),
        }
    }

    fn convert(&mut self, input: u32, output: u32) -> R<()> {
        let (i, o) = (self.xvalue(input).datatype, self.xvalue(output).datatype);
        if o == DataType::QDInt8 {
            // Quantized per row by the product that reads it.
            let r = self.rep(input)?;
            self.set(output, r);
            return Ok(());
        }
        let (si, zi) = if i == DataType::Fp32 { (0.0, 0) } else { self.per_tensor(input)? };
        let (so, zo) = if o == DataType::Fp32 { (0.0, 0) } else { self.per_tensor(output)? };
        let args = vec![self.double(si), self.int(zi), self.double(so), self.int(zo)];
        let r = self.rep(input)?;
        let out = self.output(output, r.perm.clone())?;
        let mut all = vec![r.value];
        all.extend(args);
        all.push(out.value);
        all.push(out.value);
        self.emit("kiln_xnnpack::convert.out", all);
        self.set(output, out);
        Ok(())
    }

    /// Per-channel float scales of a quantized weight as an f32 tensor `[n]`.
    fn weight_scales(&mut self, id: u32, n: usize) -> R<u32> {
        let scales = match &self.xvalue(id).quant {
            Some(Quant::PerChannel { scales, .. }) => self.floats(&scales.clone(), false)?,
            Some(Quant::PerTensor { scale, zero_point: 0 }) => vec![*scale],
            other => return Err(format!("weight {id} quantization {other:?} is not supported")),
        };
        if scales.len() != n && scales.len() != 1 {
            return Err(format!("weight {id} has {} scales for {n} channels", scales.len()));
        }
        self.f32_constant(&scales)
    }

    fn quant_bounds(&mut self, n: &Node) -> (u32, u32) {
        let (lo, hi) = n.min_max.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        (self.double(f64::from(lo)), self.double(f64::from(hi)))
    }

    fn qs8_conv(&mut self, n: &Node, c: &Conv) -> R<()> {
        if c.kind == ConvKind::ConvTranspose2d {
            return Err("quantized transposed convolution is not supported yet".into());
        }
        let x = self.plain(c.input)?;
        let (sx, zx) = self.per_tensor(c.input)?;
        let w = self.rep(c.filter)?.value;
        let o = self.dims(c.output).last().copied().unwrap_or(0);
        let ws = self.weight_scales(c.filter, o)?;
        let bias = match c.bias {
            Some(b) => self.rep(b)?.value,
            None => self.none(),
        };
        let (so, zo) = self.per_tensor(c.output)?;
        let stride = self.ints(&c.stride.map(|s| i64::from(s.max(1))));
        let padding = self.ints(&c.padding.map(i64::from));
        let dilation = self.ints(&c.dilation.map(|d| i64::from(d.max(1))));
        let groups = self.int(i64::from(c.groups.max(1)));
        let depthwise = self.boolean(c.kind == ConvKind::DepthwiseConv2d);
        let (lo, hi) = self.quant_bounds(n);
        let (sx, zx, so, zo) = (self.double(sx), self.int(zx), self.double(so), self.int(zo));
        let out = self.output(c.output, identity(4))?;
        self.emit(
            "kiln_xnnpack::qs8_convolution.out",
            vec![
                x, sx, zx, w, ws, bias, stride, padding, dilation, groups, depthwise, so, zo, lo,
                hi, out.value, out.value,
            ],
        );
        self.set(c.output, out);
        Ok(())
    }

    fn qs8_fully_connected(
        &mut self,
        n: &Node,
        input: u32,
        filter: u32,
        bias: Option<u32>,
        output: u32,
        flags: u32,
    ) -> R<()> {
        if flags & 1 != 0 {
            return Err(
                "quantized fully connected with transposed weights is not supported yet".into()
            );
        }
        let x = self.plain(input)?;
        let (sx, zx) = self.per_tensor(input)?;
        let w = self.rep(filter)?.value;
        let nn = self.dims(filter).first().copied().unwrap_or(0);
        let ws = self.weight_scales(filter, nn)?;
        let bias = match bias {
            Some(b) => self.rep(b)?.value,
            None => self.none(),
        };
        let (so, zo) = self.per_tensor(output)?;
        let (lo, hi) = self.quant_bounds(n);
        let (sx, zx, so, zo) = (self.double(sx), self.int(zx), self.double(so), self.int(zo));
        let rank = self.dims(output).len();
        let out = self.output(output, identity(rank))?;
        self.emit(
            "kiln_xnnpack::qs8_fully_connected.out",
            vec![x, sx, zx, w, ws, bias, so, zo, lo, hi, out.value, out.value],
        );
        self.set(output, out);
        Ok(())
    }

    fn qd8_fully_connected(
        &mut self,
        n: &Node,
        input: u32,
        filter: u32,
        bias: Option<u32>,
        output: u32,
        flags: u32,
    ) -> R<()> {
        if flags & 1 != 0 {
            return Err("dynamically quantized fully connected with transposed weights is not supported yet".into());
        }
        let wv = self.xvalue(filter).clone();
        let x = self.plain(input)?;
        let w = self.rep(filter)?.value;
        let nn = wv.dims.first().copied().unwrap_or(0);
        let (kind, scales, block) = match (&wv.datatype, &wv.quant) {
            (DataType::QCInt8, Some(Quant::PerChannel { scales, .. })) => {
                (0, self.floats(&scales.clone(), false)?, 0)
            }
            (DataType::QCInt4, Some(Quant::PerChannel { scales, .. })) => {
                (1, self.floats(&scales.clone(), false)?, 0)
            }
            (DataType::QBInt4, Some(Quant::PerChannelGroup { scales, group_size, .. })) => {
                (2, self.floats(&scales.clone(), true)?, *group_size as i64)
            }
            (dt, q) => return Err(format!("weights {} with {q:?}", dt.name())),
        };
        let scales_t = if kind == 2 {
            let k = wv.dims.get(1).copied().unwrap_or(0);
            let blocks = k / (block.max(1) as usize);
            if scales.len() != nn * blocks {
                return Err(format!(
                    "{} block scales for [{nn}, {k}] in blocks of {block}",
                    scales.len()
                ));
            }
            let bytes: Vec<u8> = scales.iter().flat_map(|x| x.to_le_bytes()).collect();
            self.constant(DType::Float, &[nn, blocks], Bytes::Owned(bytes))?
        } else {
            if scales.len() != nn {
                return Err(format!("{} scales for {nn} channels", scales.len()));
            }
            self.f32_constant(&scales)?
        };
        let bias = match bias {
            Some(b) => self.plain(b)?,
            None => self.none(),
        };
        let (lo, hi) = self.quant_bounds(n);
        let kind = self.int(kind);
        let block = self.int(block);
        let rank = self.dims(output).len();
        let out = self.output(output, identity(rank))?;
        self.emit(
            "kiln_xnnpack::qd8_fully_connected.out",
            vec![x, w, kind, scales_t, block, bias, lo, hi, out.value, out.value],
        );
        self.set(output, out);
        Ok(())
    }

    fn qs8_binary(
        &mut self,
        n: &Node,
        kind: BinaryKind,
        (a, x): (u32, u32),
        (b, y): (u32, u32),
        output: u32,
        perm: Vec<usize>,
    ) -> R<()> {
        let op = match kind {
            BinaryKind::Add => "kiln_xnnpack::qs8_add.out",
            BinaryKind::Subtract => "kiln_xnnpack::qs8_subtract.out",
            BinaryKind::Multiply => "kiln_xnnpack::qs8_multiply.out",
            other => return Err(format!("quantized {other:?} is not supported yet")),
        };
        let (sa, za) = self.per_tensor(a)?;
        let (sb, zb) = self.per_tensor(b)?;
        let (so, zo) = self.per_tensor(output)?;
        let (lo, hi) = self.quant_bounds(n);
        let args = vec![
            x,
            self.double(sa),
            self.int(za),
            y,
            self.double(sb),
            self.int(zb),
            self.double(so),
            self.int(zo),
            lo,
            hi,
        ];
        let out = self.output(output, perm)?;
        let mut all = args;
        all.push(out.value);
        all.push(out.value);
        self.emit(op, all);
        self.set(output, out);
        Ok(())
    }
}

/// `Some(inverse)` when `p` is a permutation.
fn inverse_checked(p: &[u32]) -> Option<Vec<usize>> {
    let mut seen = vec![false; p.len()];
    for &d in p {
        let s = seen.get_mut(d as usize)?;
        if *s {
            return None;
        }
        *s = true;
    }
    Some(inverse(&p.iter().map(|&d| d as usize).collect::<Vec<_>>()))
}

/// Constant bytes: a range of the program file, or an owned copy.
enum Bytes {
    /// A range of the file (checked at creation).
    FileRange(std::ops::Range<usize>),
    /// Owned bytes.
    Owned(Vec<u8>),
}

impl Bytes {
    fn resolve<'f>(&'f self, file: &'f [u8]) -> &'f [u8] {
        match self {
            Bytes::FileRange(r) => file.get(r.clone()).unwrap_or(&[]),
            Bytes::Owned(v) => v,
        }
    }
}
