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

use kiln_format::xnnpack::{
    Constant, DataType, Graph, Node, Op, Payload, Scales, FLAG_EXTERNAL_INPUT, FLAG_EXTERNAL_OUTPUT,
};
use kiln_kernels::{DType, Shape};

use crate::data::{DataPlace, ProgramData};
use crate::plan::{DataDef, InstrDef, MethodPlan, TensorDef, ValueDef, XNodeInfo};

/// The kernel calls one delegate call became.
pub(crate) struct Lowered {
    pub instrs: Vec<InstrDef>,
    /// Per instruction, the index of the XNNPACK node it computes (`None` for the copies
    /// that bind the call's inputs and outputs).
    pub nodes: Vec<Option<u32>>,
    /// The graph's nodes: schema kind and debug handle.
    pub xnodes: Vec<XNodeInfo>,
}

/// For each node, the nodes without instructions that it absorbs: those whose outputs it
/// reads, directly or through other such nodes. `emitted[i]` says whether node `i` became
/// instructions. Nodes whose values no emitting node reads go to the last emitting node, or
/// to node 0 when none emitted (the call's binding copies then stand for node 0).
fn absorbed_nodes(graph: &Graph, emitted: &[bool]) -> Vec<Vec<u32>> {
    let mut carried: Vec<Vec<u32>> = vec![Vec::new(); graph.values.len()];
    let mut absorbed = vec![Vec::new(); graph.nodes.len()];
    let mut taken = vec![false; graph.nodes.len()];
    for (i, node) in graph.nodes.iter().enumerate() {
        let mut reads: Vec<u32> = node
            .op
            .inputs()
            .iter()
            .filter_map(|&v| carried.get(v as usize))
            .flatten()
            .copied()
            .collect();
        if emitted[i] {
            reads.retain(|&n| !std::mem::replace(&mut taken[n as usize], true));
            absorbed[i] = reads;
        } else {
            reads.push(i as u32);
            for v in node.op.outputs() {
                if let Some(slot) = carried.get_mut(v as usize) {
                    slot.clone_from(&reads);
                }
            }
        }
    }
    // Node 0 stands for the call's binding copies when no node emitted (see `lower`).
    let last = emitted.iter().rposition(|&e| e).unwrap_or(0);
    if let Some(a) = absorbed.get_mut(last) {
        let n = graph.nodes.len() as u32;
        a.extend(
            (0..n).filter(|&i| !emitted[i as usize] && !taken[i as usize] && i != last as u32),
        );
    }
    absorbed.iter_mut().for_each(|a| {
        a.sort_unstable();
        a.dedup();
    });
    absorbed
}

pub(super) type R<T> = Result<T, String>;

/// XNNPACK value `id` as method value `value` seen through `perm`: XNNPACK dim `i` is dim
/// `perm[i]` of the method value.
#[derive(Clone, Debug)]
pub(super) struct Rep {
    pub value: u32,
    pub perm: Vec<usize>,
}

pub(super) fn identity(rank: usize) -> Vec<usize> {
    (0..rank).collect()
}

pub(super) fn is_identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &d)| i == d)
}

/// `inverse(p)[p[i]] = i`.
pub(super) fn inverse(p: &[usize]) -> Vec<usize> {
    let mut q = vec![0; p.len()];
    for (i, &d) in p.iter().enumerate() {
        q[d] = i;
    }
    q
}

/// NCHW seen as NHWC.
pub(super) const NHWC: [usize; 4] = [0, 2, 3, 1];

pub(super) struct Lowerer<'p, 'd> {
    plan: &'p mut MethodPlan,
    graph: &'d Graph,
    payload: &'d Payload<'d>,
    pub file: &'d [u8],
    named: &'d ProgramData<'d>,
    reps: Vec<Option<Rep>>,
    instrs: Vec<InstrDef>,
    /// The extra arena the lowered activations are placed in (`memory_id`), and its size.
    arena: u32,
    arena_size: u64,
    /// Whether the call's inputs have dynamic shapes (then every new tensor is dynamic, bounded
    /// by its serialized size).
    dynamic: bool,
    /// Per XNNPACK value: the call's output tensor it may be written into directly (an
    /// external output of the same dtype and sizes, row-major), so no copy moves it there.
    direct: Vec<Option<u32>>,
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
        direct: vec![None; graph.values.len()],
    };
    l.bind_inputs(args)?;
    l.find_direct_outputs(args)?;
    let mut nodes = vec![None; l.instrs.len()];
    let mut emitted = Vec::with_capacity(graph.nodes.len());
    for (i, node) in graph.nodes.iter().enumerate() {
        l.node(node).map_err(|e| format!("xnodes[{i}] ({}): {e}", node.kind))?;
        emitted.push(l.instrs.len() > nodes.len());
        nodes.resize(l.instrs.len(), Some(i as u32));
    }
    l.bind_outputs(args)?;
    // When no node became instructions, the copies binding the call's values stand for them.
    let unbound = if emitted.contains(&true) { None } else { Some(0) };
    nodes.resize(l.instrs.len(), None);
    nodes.iter_mut().filter(|n| n.is_none()).for_each(|n| *n = unbound);
    let size = l.arena_size;
    let instrs = std::mem::take(&mut l.instrs);
    plan.arena_sizes[arena as usize - 1] = size;
    let xnodes = graph
        .nodes
        .iter()
        .zip(absorbed_nodes(graph, &emitted))
        .map(|(n, absorbed)| XNodeInfo { kind: n.kind, debug_handle: n.debug_handle, absorbed })
        .collect();
    Ok(Lowered { instrs, nodes, xnodes })
}

/// Whether values of `dt` are floating point (computed in float32).
pub(super) fn is_float(dt: DataType) -> bool {
    matches!(dt, DataType::Fp32 | DataType::Fp16)
}

pub(super) fn dtype_of(dt: DataType) -> R<DType> {
    Ok(match dt {
        // float16 graphs compute in float32 (their values are widened at the call's inputs
        // and narrowed at its outputs).
        DataType::Fp32 | DataType::Fp16 => DType::Float,
        DataType::QInt8 | DataType::QCInt8 => DType::Char,
        DataType::QUInt8 | DataType::QCInt4 | DataType::QBInt4 => DType::Byte,
        DataType::QInt32 | DataType::QCInt32 | DataType::Int32 => DType::Int,
        other => return Err(format!("values of type {} are not supported", other.name())),
    })
}

impl<'d> Lowerer<'_, 'd> {
    // ---- method values -------------------------------------------------------------------

    pub(super) fn push(&mut self, v: ValueDef) -> u32 {
        self.plan.values.push(v);
        (self.plan.values.len() - 1) as u32
    }

    pub(super) fn int(&mut self, x: i64) -> u32 {
        self.push(ValueDef::Int(x))
    }

    pub(super) fn double(&mut self, x: f64) -> u32 {
        self.push(ValueDef::Double(x))
    }

    pub(super) fn boolean(&mut self, b: bool) -> u32 {
        self.push(ValueDef::Bool(b))
    }

    pub(super) fn none(&mut self) -> u32 {
        self.push(ValueDef::None)
    }

    pub(super) fn ints(&mut self, xs: &[i64]) -> u32 {
        let items: Vec<u32> = xs.iter().map(|&x| self.int(x)).collect();
        self.push(ValueDef::IntList(items.into()))
    }

    /// A scalar bound, or None for an infinite one.
    pub(super) fn bound(&mut self, x: f32) -> u32 {
        if x.is_finite() {
            self.double(f64::from(x))
        } else {
            self.none()
        }
    }

    /// A new activation of `sizes`, placed in the delegate's arena.
    pub(super) fn tensor(&mut self, dtype: DType, sizes: &[usize]) -> R<u32> {
        let order: Vec<u8> = (0..sizes.len() as u8).collect();
        let shape = Shape::new(sizes, &order).map_err(|e| format!("shape {sizes:?}: {e}"))?;
        let nbytes = (shape.numel() * dtype.size()) as u64;
        let offset = self.arena_size.next_multiple_of(64);
        self.arena_size = offset + nbytes;
        let data = DataDef::Planned { memory_id: self.arena, offset };
        Ok(self.push(ValueDef::Tensor(TensorDef { dtype, shape, dynamic: self.dynamic, data })))
    }

    /// A constant tensor over `bytes`: borrowed from the file when they are in it, else owned.
    pub(super) fn constant(&mut self, dtype: DType, sizes: &[usize], bytes: Bytes) -> R<u32> {
        let order: Vec<u8> = (0..sizes.len() as u8).collect();
        self.constant_in(dtype, sizes, &order, bytes)
    }

    /// A constant tensor of `sizes` whose bytes are stored in dim order `order`.
    pub(super) fn constant_in(
        &mut self,
        dtype: DType,
        sizes: &[usize],
        order: &[u8],
        bytes: Bytes,
    ) -> R<u32> {
        let shape = Shape::new(sizes, order).map_err(|e| format!("shape {sizes:?}: {e}"))?;
        let need = shape.numel() * dtype.size();
        // The first `need` bytes of a borrowed range, or an error when it is shorter.
        let first = |r: std::ops::Range<usize>| {
            if r.len() < need {
                return Err(format!("constant of {need} bytes has only {} bytes of data", r.len()));
            }
            Ok(r.start..r.start + need)
        };
        let data = match bytes {
            Bytes::FileRange(r) => DataDef::Constant(first(r)?),
            Bytes::Source { source, range, .. } => {
                DataDef::SourceBytes { source, range: first(range)? }
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

    pub(super) fn f32_constant(&mut self, values: &[f32]) -> R<u32> {
        let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        self.constant(DType::Float, &[values.len()], Bytes::Owned(bytes))
    }

    pub(super) fn emit(&mut self, op: &str, args: Vec<u32>) {
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
    pub(super) fn call(
        &mut self,
        op: &str,
        mut inputs: Vec<u32>,
        dtype: DType,
        sizes: &[usize],
    ) -> R<u32> {
        let out = self.tensor(dtype, sizes)?;
        inputs.push(out);
        inputs.push(out);
        self.emit(op, inputs);
        Ok(out)
    }

    // ---- XNNPACK values ------------------------------------------------------------------

    pub(super) fn xvalue(&self, id: u32) -> &'d kiln_format::xnnpack::Value {
        &self.graph.values[id as usize]
    }

    pub(super) fn dims(&self, id: u32) -> Vec<usize> {
        self.xvalue(id).dims.clone()
    }

    /// The method-value sizes behind XNNPACK dims `dims` seen through `perm`.
    pub(super) fn method_sizes(dims: &[usize], perm: &[usize]) -> Vec<usize> {
        let mut s = vec![0; dims.len()];
        for (i, &p) in perm.iter().enumerate() {
            s[p] = dims[i];
        }
        s
    }

    /// The representation of value `id` (a constant is created on first use).
    pub(super) fn rep(&mut self, id: u32) -> R<Rep> {
        if let Some(r) = &self.reps[id as usize] {
            return Ok(r.clone());
        }
        let v = self.xvalue(id);
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
        let bytes = if v.datatype == DataType::Fp16 {
            let widened: Vec<u8> = bytes
                .resolve(self.file)
                .chunks_exact(2)
                .flat_map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32().to_le_bytes())
                .collect();
            Bytes::Owned(widened)
        } else {
            bytes
        };
        let value = self.constant(dtype, &sizes, bytes)?;
        let r = Rep { value, perm: identity(sizes.len()) };
        self.reps[id as usize] = Some(r.clone());
        Ok(r)
    }

    /// The bytes of constant `index`.
    pub(super) fn constant_bytes(&self, index: u32) -> R<Bytes<'d>> {
        let c = self.graph.constants.get(index as usize).cloned().flatten();
        match c {
            Some(Constant::Region(_)) | Some(Constant::Inline(_)) => {
                let b = self.payload.constant_bytes(index).unwrap_or(&[]);
                Ok(self.file_or_owned(b))
            }
            Some(Constant::Named { key, .. }) => match self.named.locate(&key) {
                Some((b, DataPlace::File)) => Ok(self.file_or_owned(b)),
                Some((data, DataPlace::Source { source, range })) => {
                    Ok(Bytes::Source { source, range, data })
                }
                None => Err(format!("constant {index}: named data {key:?} is in neither the program nor its data files")),
            },
            None => Err(format!("constant {index} has no data")),
        }
    }

    /// Gives back the resident pages of `bytes` where they lie (the program file, or an
    /// external source): bytes converted into a constant of the plan's own and not read
    /// again while decoding.
    pub(super) fn release(&self, bytes: &Bytes<'_>) {
        match bytes {
            Bytes::FileRange(r) => (self.named.release)(r.clone()),
            Bytes::Source { source, range, .. } => {
                if let Some(s) = self.named.sources.get(*source as usize) {
                    s.release(range.clone());
                }
            }
            Bytes::Owned(_) => {}
        }
    }

    /// `b` by its range of the program file, or (not in the file) a copy.
    pub(super) fn file_or_owned(&self, b: &[u8]) -> Bytes<'d> {
        let start = (b.as_ptr() as usize).wrapping_sub(self.file.as_ptr() as usize);
        if start.checked_add(b.len()).is_some_and(|e| e <= self.file.len()) {
            Bytes::FileRange(start..start + b.len())
        } else {
            Bytes::Owned(b.to_vec())
        }
    }

    /// Float32 elements of constant `index` (per-channel scales), `bf16` when asked.
    pub(super) fn floats(&self, scales: &Scales, bf16: bool) -> R<Vec<f32>> {
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

    /// Sets the representation of value `id` (what the node writing it produced).
    pub(super) fn set(&mut self, id: u32, rep: Rep) {
        self.reps[id as usize] = Some(rep);
    }

    /// A new method value for output `id` seen through `perm`.
    pub(super) fn output(&mut self, id: u32, perm: Vec<usize>) -> R<Rep> {
        let v = self.xvalue(id);
        let dtype = dtype_of(v.datatype)?;
        let dims = v.dims.clone();
        if perm.len() != dims.len() {
            return Err(format!("value {id} has rank {}, expected {}", dims.len(), perm.len()));
        }
        // The first tensor made for an external output is the call's output itself (a node
        // that writes the value again, a clamp after its producer, gets a tensor of its own:
        // no kernel reads and writes one tensor).
        if is_identity(&perm) {
            if let Some(arg) = self.direct.get_mut(id as usize).and_then(Option::take) {
                return Ok(Rep { value: arg, perm });
            }
        }
        let sizes = Self::method_sizes(&dims, &perm);
        let value = self.tensor(dtype, &sizes)?;
        Ok(Rep { value, perm })
    }

    /// Value `id` as a method value whose XNNPACK view is `perm` (copying when it is seen
    /// through another permutation).
    pub(super) fn as_perm(&mut self, id: u32, perm: &[usize]) -> R<u32> {
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
    pub(super) fn plain(&mut self, id: u32) -> R<u32> {
        let rank = self.dims(id).len();
        self.as_perm(id, &identity(rank))
    }

    /// The external values with `flag`: (value id, the call's argument, that argument's
    /// tensor), checked.
    fn externals(&self, args: &[u32], flag: u32) -> R<Vec<(u32, u32, TensorDef)>> {
        let mut out = Vec::new();
        for (id, v) in self.graph.values.iter().enumerate() {
            if v.flags & flag == 0 {
                continue;
            }
            let ext = v.external_id.unwrap_or(u32::MAX) as usize;
            let &arg = args.get(ext).ok_or_else(|| {
                format!(
                    "value {id}: external id {ext} is outside the call's {} arguments",
                    args.len()
                )
            })?;
            match self.plan.values.get(arg as usize) {
                Some(ValueDef::Tensor(t)) => out.push((id as u32, arg, t.clone())),
                _ => {
                    return Err(format!(
                        "value {id}: argument {ext} (values[{arg}]) is not a tensor"
                    ))
                }
            }
        }
        Ok(out)
    }

    /// The call's inputs become the external input values (a scalar, which XNNPACK writes
    /// as [1], through a view).
    pub(super) fn bind_inputs(&mut self, args: &[u32]) -> R<()> {
        for (id, arg, t) in self.externals(args, FLAG_EXTERNAL_INPUT)? {
            let dims = self.dims(id);
            let rank = dims.len();
            self.dynamic |= t.dynamic;
            let value = if t.shape.rank() == rank {
                arg
            } else if t.shape.rank() == 0 && dims == [1] {
                let shape = self.ints(&[1]);
                self.call("aten::view_copy.out", vec![arg, shape], t.dtype, &[1])?
            } else {
                return Err(format!(
                    "value {id}: its argument has rank {}, the graph expects {rank}",
                    t.shape.rank()
                ));
            };
            let value = if t.dtype == DType::Half {
                let sizes = self.dims(id);
                let (f, none) = (self.boolean(false), self.none());
                self.call("aten::_to_copy.out", vec![value, f, none], DType::Float, &sizes)?
            } else {
                value
            };
            self.set(id, Rep { value, perm: identity(rank) });
        }
        Ok(())
    }

    /// The external outputs a node may write straight into: float32 (or integer) values whose
    /// call output has their dtype and sizes in row-major order, and that are no external
    /// input.
    fn find_direct_outputs(&mut self, args: &[u32]) -> R<()> {
        for (id, arg, t) in self.externals(args, FLAG_EXTERNAL_OUTPUT)? {
            let v = self.xvalue(id);
            let fits = v.flags & FLAG_EXTERNAL_INPUT == 0
                && dtype_of(v.datatype).ok() == Some(t.dtype)
                && t.shape.sizes() == v.dims.as_slice()
                && t.shape.is_dense_row_major();
            let taken = self.direct.contains(&Some(arg));
            if fits && !taken {
                self.direct[id as usize] = Some(arg);
            }
        }
        Ok(())
    }

    /// The external output values are written into the call's outputs, in XNNPACK's memory
    /// order (NCHW for a convolution's output seen channels-last).
    pub(super) fn bind_outputs(&mut self, args: &[u32]) -> R<()> {
        for (id, arg, t) in self.externals(args, FLAG_EXTERNAL_OUTPUT)? {
            let mut r = self.rep(id)?;
            if r.value == arg {
                // A node wrote it there ([`Lowerer::output`]).
                continue;
            }
            let scalar = t.shape.rank() == 0 && self.dims(id) == [1];
            if t.dtype == DType::Half && !scalar && is_identity(&r.perm) {
                // Narrowed from float32 straight into the output.
                let (f, none) = (self.boolean(false), self.none());
                self.emit("aten::_to_copy.out", vec![r.value, f, none, arg, arg]);
                continue;
            }
            if t.dtype == DType::Half {
                // Narrowed from float32, then moved into the output below.
                let sizes = Self::method_sizes(&self.dims(id), &r.perm);
                let narrow = self.tensor(DType::Half, &sizes)?;
                let (f, none) = (self.boolean(false), self.none());
                self.emit("aten::_to_copy.out", vec![r.value, f, none, narrow, narrow]);
                r.value = narrow;
            }
            if scalar {
                let shape = self.ints(&[]);
                self.emit("aten::view_copy.out", vec![r.value, shape, arg, arg]);
            } else if is_identity(&r.perm) {
                let none = self.none();
                self.emit("aten::clone.out", vec![r.value, none, arg, arg]);
            } else {
                // XNNPACK dim i is dim perm[i] of the method value.
                let dims = self.ints(&r.perm.iter().map(|&d| d as i64).collect::<Vec<_>>());
                self.emit("aten::permute_copy.out", vec![r.value, dims, arg, arg]);
            }
        }
        Ok(())
    }

    // ---- nodes ---------------------------------------------------------------------------

    pub(super) fn node(&mut self, n: &Node) -> R<()> {
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
pub(super) enum Bytes<'d> {
    /// A range of the file (checked at creation).
    FileRange(std::ops::Range<usize>),
    /// A range of external source `source` (a `.ptd`), and its bytes.
    Source { source: u32, range: std::ops::Range<usize>, data: &'d [u8] },
    /// Owned bytes.
    Owned(Vec<u8>),
}

impl Bytes<'_> {
    pub(super) fn resolve<'f>(&'f self, file: &'f [u8]) -> &'f [u8] {
        match self {
            Bytes::FileRange(r) => file.get(r.clone()).unwrap_or(&[]),
            Bytes::Source { data, .. } => data,
            Bytes::Owned(v) => v,
        }
    }
}
