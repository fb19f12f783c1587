//! Lowering a program to the NPU: every maximal run of consecutive instructions that NPU
//! operators take becomes one `KilnNpuBackend` delegate call, whose processed data
//! ([`kiln_format::npu_delegate`]) holds the run fused into one transaction.
//!
//! Per method chain, in instruction order:
//! 1. Each kernel call is matched ([`matcher`]) and checked: its operator accepts the tensors
//!    (`buffer_reqs` and `transaction_bin` succeed), its outputs are activations, and the
//!    outputs the operator does not write (max pooling's indices, layer norm's statistics)
//!    are read by nothing. A `permute_copy` of a constant weight read only by a matmul is
//!    absorbed into it (the weight goes to the const buffer transposed).
//! 2. Runs of consecutive matched instructions (absorbed ones inside a run or between runs
//!    drop out) are fused with [`crate::fuse_with_outputs`]: a run's inputs are the tensors its
//!    nodes read and it does not produce (constants among them when an operator takes them as
//!    a tensor input); its outputs are the tensors it produces that an instruction outside
//!    it, or the method's outputs, read. Everything else lives in the scratch buffer.
//! 3. The run is replaced by one `DelegateCall` with the inputs then the outputs as
//!    arguments, its processed data a new segment. The origins (each node's instruction
//!    indices in the original chain and their operators) go into the delegate's manifest.
//! 4. Operators no instruction calls any more leave the operator table, and constants no
//!    instruction reads any more lose their data (their tensor entries stay, so value indices
//!    do not move).
//!
//! Methods with control flow (`JumpFalseCall`) are left as they are.

mod matcher;

use std::collections::{BTreeMap, BTreeSet};

use kiln_format::npu_delegate::{
    ArgEntry, ArgKind, BufferSizes, Manifest, NodeOrigin, NpuDelegate, TensorBuffer, TensorSlot,
    FLOAT32,
};
use kiln_format::pte::model::{
    DelegateModel, InstructionModel, MethodModel, ProgramModel, SegmentModel, TensorModel,
    ValueModel,
};
use kiln_format::pte::DelegateData;

use crate::arg_type::OpArgType;
use crate::error::{Error, Result};
use crate::fuse::{fuse_with_outputs, Node};
use crate::op::{ConstTensor, TensorDesc};
use matcher::{match_call, Matched, Values};

pub use kiln_format::npu_delegate::BACKEND_ID;

/// A lowered program and what lowering did.
#[derive(Debug)]
pub struct Lowered {
    /// The rewritten program.
    pub model: ProgramModel,
    /// Per method, what happened.
    pub methods: Vec<MethodReport>,
}

/// What lowering did to one method (serialized as `kiln lower --json` prints it).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MethodReport {
    /// The method.
    pub method: String,
    /// Instructions before lowering.
    pub instructions_before: usize,
    /// Instructions after, the delegate calls included.
    pub instructions_after: usize,
    /// Instructions after that are not NPU delegate calls.
    #[serde(rename = "outside_delegates")]
    pub outside: usize,
    /// The NPU delegates made, in call order.
    pub delegates: Vec<DelegateReport>,
    /// Per operator, how many of its calls stayed outside the delegates.
    pub left: BTreeMap<String, usize>,
    /// Why the method was left as it is, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// One NPU delegate lowering made.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DelegateReport {
    /// Index in the method's delegate table.
    pub delegate: usize,
    /// The NPU operators, in order.
    pub ops: Vec<String>,
    /// The original instructions it replaced.
    pub instructions: Vec<usize>,
    /// Bytes of its processed data.
    #[serde(rename = "bytes")]
    pub size: usize,
}

/// The data of constant buffers, wherever the program keeps them.
struct ConstantData<'a> {
    model: &'a ProgramModel,
}

impl<'a> ConstantData<'a> {
    /// The bytes of constant buffer `idx`, if the program holds them.
    fn buffer(&self, idx: u32) -> Option<&'a [u8]> {
        let idx = idx as usize;
        match self.model.constant_segment {
            Some(s) => match self.model.segments.get(s as usize)? {
                SegmentModel::Buffers { buffers, .. } => buffers.get(idx).map(Vec::as_slice),
                SegmentModel::Raw(_) => None,
            },
            None => self.model.constant_buffer.get(idx).map(Vec::as_slice),
        }
    }
}

/// Lowers every method of `model` (see the module docs).
pub fn lower(model: &ProgramModel) -> Result<Lowered> {
    let mut out = model.clone();
    let data = ConstantData { model };
    let mut reports = Vec::with_capacity(model.methods.len());
    let mut new_segments = Vec::new();
    let first_segment = model.segments.len();
    for (mi, method) in model.methods.iter().enumerate() {
        let (rewritten, report) = lower_method(method, &data, first_segment, &mut new_segments)?;
        out.methods[mi] = rewritten;
        reports.push(report);
    }
    out.segments.extend(new_segments.into_iter().map(SegmentModel::Raw));
    drop_unread_constants(&mut out);
    Ok(Lowered { model: out, methods: reports })
}

/// Which instructions of a method read and write each value.
struct Access {
    /// Value → (chain, instruction) pairs that read it.
    readers: BTreeMap<usize, BTreeSet<(usize, usize)>>,
    /// Value → (chain, instruction) pairs that write it.
    writers: BTreeMap<usize, BTreeSet<(usize, usize)>>,
}

impl Access {
    fn new(method: &MethodModel) -> Access {
        let mut access = Access { readers: BTreeMap::new(), writers: BTreeMap::new() };
        for (c, chain) in method.chains.iter().enumerate() {
            for (i, instr) in chain.instructions.iter().enumerate() {
                access.add(method, (c, i), instr);
            }
        }
        access
    }

    fn add(&mut self, method: &MethodModel, at: (usize, usize), instr: &InstructionModel) {
        // A list's members are read (or written) with it.
        let read = |v: i32, map: &mut BTreeMap<usize, BTreeSet<(usize, usize)>>| {
            for m in with_members(&method.values, v) {
                map.entry(m).or_default().insert(at);
            }
        };
        match instr {
            InstructionModel::Kernel { op_index, args } => {
                let def =
                    operator_name(method, *op_index).and_then(|n| kiln_kernels::find_kernel(&n));
                for (p, &v) in args.iter().enumerate() {
                    match def {
                        Some(d) if d.is_out(p) || p + 1 == args.len() => read(v, &mut self.writers),
                        // An operator kiln does not know: every argument may be read.
                        _ => read(v, &mut self.readers),
                    }
                }
            }
            InstructionModel::Delegate { args, .. } => {
                for &v in args {
                    read(v, &mut self.readers);
                    read(v, &mut self.writers);
                }
            }
            InstructionModel::Move { from, to } => {
                read(*from, &mut self.readers);
                read(*to, &mut self.writers);
            }
            InstructionModel::JumpFalse { cond, .. } => read(*cond, &mut self.readers),
            InstructionModel::Free { value } => read(*value, &mut self.readers),
        }
    }

    /// Whether any instruction writes value `v`.
    fn is_written(&self, v: usize) -> bool {
        self.writers.get(&v).is_some_and(|w| !w.is_empty())
    }

    /// Whether anything but the instructions `inside` (of chain `chain`) reads value `v`.
    fn read_outside(&self, v: usize, chain: usize, inside: &BTreeSet<usize>) -> bool {
        self.readers
            .get(&v)
            .is_some_and(|r| r.iter().any(|&(c, i)| c != chain || !inside.contains(&i)))
    }
}

/// `name.overload` of operator `op_index`.
fn operator_name(method: &MethodModel, op_index: i32) -> Option<String> {
    let (name, overload) = method.operators.get(usize::try_from(op_index).ok()?)?;
    Some(if overload.is_empty() { name.clone() } else { format!("{name}.{overload}") })
}

/// Lowers one method; new delegate segments are pushed to `segments`, whose first entry
/// becomes program segment `segment_base`.
fn lower_method(
    method: &MethodModel,
    data: &ConstantData<'_>,
    segment_base: usize,
    segments: &mut Vec<Vec<u8>>,
) -> Result<(MethodModel, MethodReport)> {
    let before: usize = method.chains.iter().map(|c| c.instructions.len()).sum();
    let mut report = MethodReport {
        method: method.name.clone(),
        instructions_before: before,
        ..MethodReport::default()
    };
    let mut out = method.clone();
    let has_jump = method
        .chains
        .iter()
        .flat_map(|c| &c.instructions)
        .any(|i| matches!(i, InstructionModel::JumpFalse { .. }));
    if has_jump {
        report.skipped = Some("it has control flow (JumpFalseCall)".into());
    } else {
        let access = Access::new(method);
        let method_io: BTreeSet<usize> = method
            .inputs
            .iter()
            .chain(&method.outputs)
            .filter_map(|&v| usize::try_from(v).ok())
            .collect();
        for (c, chain) in method.chains.iter().enumerate() {
            let mut written = vec![Vec::new(); chain.instructions.len()];
            for (&v, writers) in &access.writers {
                for &(_, i) in writers.iter().filter(|w| w.0 == c) {
                    written[i].push(v);
                }
            }
            let ctx = ChainCtx {
                method,
                chain: c,
                written,
                access: &access,
                method_io: &method_io,
                data,
            };
            let mut moves = Vec::new();
            let (instructions, delegates) =
                ctx.lower(segment_base, segments, &mut out.delegates, &mut moves)?;
            for group in moves {
                relocate(&mut out, &group, &method.name)?;
            }
            out.chains[c].instructions = instructions;
            // Stack traces follow instructions one to one; rewritten chains drop them.
            if out.chains[c].instructions.len() != chain.instructions.len() {
                out.chains[c].stacktrace = None;
            }
            report.delegates.extend(delegates);
        }
        prune_operators(&mut out);
    }
    let is_npu = |i: &InstructionModel| match i {
        InstructionModel::Delegate { delegate_index, .. } => usize::try_from(*delegate_index)
            .ok()
            .and_then(|d| out.delegates.get(d))
            .is_some_and(|d| d.id == BACKEND_ID),
        _ => false,
    };
    for instr in out.chains.iter().flat_map(|c| &c.instructions) {
        report.instructions_after += 1;
        if !is_npu(instr) {
            report.outside += 1;
            let name = match instr {
                InstructionModel::Kernel { op_index, .. } => {
                    operator_name(&out, *op_index).unwrap_or_else(|| "?".into())
                }
                InstructionModel::Delegate { .. } => "(delegate call)".into(),
                InstructionModel::Move { .. } => "(move)".into(),
                InstructionModel::JumpFalse { .. } => "(jump)".into(),
                InstructionModel::Free { .. } => "(free)".into(),
            };
            *report.left.entry(name).or_default() += 1;
        }
    }
    Ok((out, report))
}

/// A run lowered into one delegate call.
struct RunCall {
    /// The call.
    instr: InstructionModel,
    /// The delegate entry.
    delegate: DelegateModel,
    /// Its processed data.
    bytes: Vec<u8>,
    /// What it holds.
    report: DelegateReport,
    /// Groups of tensors (an output and the views planned on it) that need fresh memory.
    moves: Vec<Vec<usize>>,
}

/// Where a run's input gets its bytes ([`ChainCtx::view_source`]).
enum Source {
    /// From memory, as a delegate input.
    Memory,
    /// From this tensor of the run.
    View(usize),
    /// From memory that a node of the run overwrote in part: the run cannot be lowered.
    Unsafe,
}

/// One chain being lowered.
struct ChainCtx<'a> {
    method: &'a MethodModel,
    chain: usize,
    /// Per instruction of the chain, the values it writes.
    written: Vec<Vec<usize>>,
    access: &'a Access,
    method_io: &'a BTreeSet<usize>,
    data: &'a ConstantData<'a>,
}

impl ChainCtx<'_> {
    fn instructions(&self) -> &[InstructionModel] {
        &self.method.chains[self.chain].instructions
    }

    /// The chain's instructions with every run lowered, and the delegates made.
    fn lower(
        &self,
        segment_base: usize,
        segments: &mut Vec<Vec<u8>>,
        delegates: &mut Vec<DelegateModel>,
        moves: &mut Vec<Vec<usize>>,
    ) -> Result<(Vec<InstructionModel>, Vec<DelegateReport>)> {
        let instrs = self.instructions();
        let matched: Vec<Option<Matched>> = (0..instrs.len()).map(|i| self.matched(i)).collect();
        // Weight permutes taken by a matmul: removed when that matmul is lowered.
        let absorbed: BTreeSet<usize> =
            matched.iter().flatten().filter_map(|m| m.absorbed).collect();
        // Runs: maximal spans of matched instructions (absorbed ones inside a span too),
        // each fused into a delegate unless its memory forbids it.
        let mut runs: Vec<(usize, usize, Option<_>)> = Vec::new();
        let mut i = 0;
        while i < instrs.len() {
            if absorbed.contains(&i) || matched[i].is_none() {
                i += 1;
                continue;
            }
            let mut j = i;
            while j < instrs.len() && (matched[j].is_some() || absorbed.contains(&j)) {
                j += 1;
            }
            let nodes: Vec<(usize, &Matched)> = (i..j)
                .filter(|k| !absorbed.contains(k))
                .filter_map(|k| matched[k].as_ref().map(|m| (k, m)))
                .collect();
            let index = delegates.len() + runs.iter().filter(|r| r.2.is_some()).count();
            let segment =
                segment_base + segments.len() + runs.iter().filter(|r| r.2.is_some()).count();
            runs.push((i, j, self.delegate(&nodes, index, segment)?));
            i = j;
        }
        // The weight permutes the lowered matmuls took; every other instruction stays.
        let dropped: BTreeSet<usize> = runs
            .iter()
            .filter(|r| r.2.is_some())
            .flat_map(|&(i, j, _)| {
                (i..j).filter_map(|k| matched[k].as_ref().and_then(|m| m.absorbed))
            })
            .collect();
        let mut out = Vec::with_capacity(instrs.len());
        let mut reports = Vec::new();
        let mut runs = runs.into_iter().peekable();
        let mut k = 0;
        while k < instrs.len() {
            let Some((start, end, call)) = runs.next_if(|r| r.0 == k) else {
                if !dropped.contains(&k) {
                    out.push(instrs[k].clone());
                }
                k += 1;
                continue;
            };
            match call {
                Some(call) => {
                    // A permute in the span that a matmul outside it was to take stays.
                    let kept =
                        (start..end).filter(|p| absorbed.contains(p) && !dropped.contains(p));
                    out.extend(kept.map(|p| instrs[p].clone()));
                    out.push(call.instr);
                    delegates.push(call.delegate);
                    segments.push(call.bytes);
                    reports.push(call.report);
                    moves.extend(call.moves);
                }
                // The run reads memory its own nodes overwrite in part: left as written.
                None => out.extend(
                    (start..end).filter(|p| !dropped.contains(p)).map(|p| instrs[p].clone()),
                ),
            }
            k = end;
        }
        Ok((out, reports))
    }

    /// The matched operator of instruction `i`, if an NPU operator takes it and the
    /// instruction passes the checks of the module docs.
    fn matched(&self, i: usize) -> Option<Matched> {
        let InstructionModel::Kernel { op_index, args } = &self.instructions()[i] else {
            return None;
        };
        let name = operator_name(self.method, *op_index)?;
        let has_data = |idx: u32| self.data.buffer(idx).is_some();
        let values = Values { values: &self.method.values, has_data: &has_data };
        let producer = |v: usize| -> Option<(usize, String, Vec<i32>)> {
            let writers = self.access.writers.get(&v)?;
            let &(c, at) = writers.iter().next().filter(|_| writers.len() == 1)?;
            if c != self.chain {
                return None;
            }
            match &self.instructions()[at] {
                InstructionModel::Kernel { op_index, args } => {
                    Some((at, operator_name(self.method, *op_index)?, args.clone()))
                }
                _ => None,
            }
        };
        let m = match_call(&name, args, &values, &producer)?;
        let activation = |v: usize| matches!(self.method.values.get(v), Some(ValueModel::Tensor(t)) if t.data_buffer_idx == 0);
        let only_here = |v: usize| {
            self.access.writers.get(&v).is_some_and(|w| w.len() == 1)
                && !self.method.inputs.iter().any(|&x| x as usize == v)
        };
        if !activation(m.output) || !only_here(m.output) {
            return None;
        }
        let here = BTreeSet::from([i]);
        if m.unwritten.iter().any(|&u| {
            !activation(u)
                || self.method_io.contains(&u)
                || self.access.read_outside(u, self.chain, &here)
        }) {
            return None;
        }
        if let Some(p) = m.absorbed {
            let InstructionModel::Kernel { args: pargs, .. } = &self.instructions()[p] else {
                return None;
            };
            let t = usize::try_from(*pargs.get(2)?).ok()?;
            if self.method_io.contains(&t) || self.access.read_outside(t, self.chain, &here) {
                return None;
            }
        }
        // The operator must accept these tensors.
        let (inputs, output) = self.node_descs(&m)?;
        let outputs = [output];
        m.op.buffer_reqs(&inputs, &outputs).ok()?;
        m.op.transaction_bin(&inputs, &outputs).ok()?;
        Some(m)
    }

    /// The descriptions of a node's inputs and output as its operator sees them.
    fn node_descs(&self, m: &Matched) -> Option<(Vec<TensorDesc>, TensorDesc)> {
        let mut inputs: Vec<TensorDesc> =
            m.inputs.iter().map(|&v| self.desc(v)).collect::<Option<_>>()?;
        let mut output = self.desc(m.output)?;
        if let Some((shapes, out)) = &m.shapes {
            for (d, s) in inputs.iter_mut().zip(shapes) {
                d.shape = s.clone();
            }
            output.shape = out.clone();
        }
        Some((inputs, output))
    }

    fn desc(&self, v: usize) -> Option<TensorDesc> {
        match self.method.values.get(v)? {
            ValueModel::Tensor(t) => Some(TensorDesc {
                name: tensor_name(v),
                shape: t.sizes.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<_>>()?,
                dtype: FLOAT32.into(),
            }),
            _ => None,
        }
    }

    /// The constant input of value `v`: its description and its bytes.
    fn constant(&self, v: usize) -> Option<ConstTensor> {
        let desc = self.desc(v)?;
        let ValueModel::Tensor(t) = self.method.values.get(v)? else { return None };
        let bytes = desc.shape.iter().try_fold(4usize, |a, &d| a.checked_mul(d))?;
        let data = self.data.buffer(t.data_buffer_idx)?.get(..bytes)?.to_vec();
        Some(ConstTensor { desc, data })
    }

    /// Fuses `nodes` (instruction index and match) into delegate `index`, stored as segment
    /// `segment`: the call, the delegate entry, its processed bytes and its report.
    fn delegate(
        &self,
        nodes: &[(usize, &Matched)],
        index: usize,
        segment: usize,
    ) -> Result<Option<RunCall>> {
        let run: BTreeSet<usize> =
            nodes.iter().flat_map(|(i, m)| std::iter::once(*i).chain(m.absorbed)).collect();
        let first = nodes.first().map_or(0, |n| n.0);
        let fail = |reason: String| Error::Lower {
            method: self.method.name.clone(),
            instruction: first,
            reason,
        };
        let produced: BTreeSet<usize> = nodes.iter().map(|(_, m)| m.output).collect();
        // Each node's inputs, a view that memory planning placed on a tensor of the run
        // replaced by that tensor.
        let mut node_inputs: Vec<Vec<(usize, usize)>> = Vec::with_capacity(nodes.len());
        let mut inputs: Vec<usize> = Vec::new();
        for (i, m) in nodes {
            let mut resolved = Vec::with_capacity(m.inputs.len());
            for &v in &m.inputs {
                let source = if produced.contains(&v) {
                    v
                } else {
                    match self.view_source(v, *i, &run, &produced) {
                        Source::Memory => {
                            if !inputs.contains(&v) {
                                inputs.push(v);
                            }
                            v
                        }
                        Source::View(p) => p,
                        Source::Unsafe => return Ok(None),
                    }
                };
                resolved.push((v, source));
            }
            node_inputs.push(resolved);
        }
        let outputs: Vec<usize> = nodes
            .iter()
            .map(|(_, m)| m.output)
            .filter(|&v| {
                self.method_io.contains(&v)
                    || self.access.read_outside(v, self.chain, &run)
                    || self.views_of(v).any(|a| {
                        self.method_io.contains(&a) || self.access.read_outside(a, self.chain, &run)
                    })
            })
            .collect();
        let missing = |v: usize| fail(format!("value {v} is not a float32 tensor with data"));
        let mut fuse_nodes = Vec::with_capacity(nodes.len());
        for ((i, m), resolved) in nodes.iter().zip(&node_inputs) {
            let (descs, output) = self.node_descs(m).ok_or_else(|| missing(m.output))?;
            // A view reads its source's bytes with its own shape.
            let inputs = descs
                .into_iter()
                .zip(resolved)
                .map(|(desc, &(_, source))| TensorDesc { name: tensor_name(source), ..desc })
                .collect();
            fuse_nodes.push(Node {
                name: node_name(*i),
                op: m.op.as_ref(),
                inputs,
                consts: m
                    .consts
                    .iter()
                    .map(|&c| self.constant(c).ok_or_else(|| missing(c)))
                    .collect::<Result<_>>()?,
                outputs: vec![output],
            });
        }
        let output_names: Vec<String> = outputs.iter().map(|&v| tensor_name(v)).collect();
        let fused = fuse_with_outputs(&fuse_nodes, &output_names)?;

        let sizes =
            fused.buffer_sizes().ok_or_else(|| fail("the fused buffers' sizes overflow".into()))?;
        // Every tensor is a value of the method, named after it; the manifest gives the
        // value's own shape (an operator may see the same bytes with another).
        let values: BTreeMap<String, usize> = node_inputs
            .iter()
            .flatten()
            .map(|&(_, source)| source)
            .chain(produced.iter().copied())
            .map(|v| (tensor_name(v), v))
            .collect();
        let shape_of = |name: &str| -> Vec<u64> {
            values
                .get(name)
                .and_then(|&v| self.desc(v))
                .map(|d| d.shape.iter().map(|&x| x as u64).collect())
                .unwrap_or_default()
        };
        let tensors = fused
            .tensors
            .iter()
            .map(|t| TensorSlot {
                name: t.name.clone(),
                buffer: match t.buffer {
                    OpArgType::Input => TensorBuffer::Input,
                    OpArgType::Output => TensorBuffer::Output,
                    _ => TensorBuffer::Scratch,
                },
                offset: t.offset,
                size: t.size,
                dtype: FLOAT32.into(),
                shape: shape_of(&t.name),
            })
            .collect();
        let arg_map = fused
            .arg_map
            .iter()
            .map(|a| ArgEntry {
                arg_type: match a.arg_type {
                    OpArgType::Input => ArgKind::Input,
                    OpArgType::Output => ArgKind::Output,
                    OpArgType::ScratchPad => ArgKind::Scratch,
                    OpArgType::ConstInput => ArgKind::Const,
                    OpArgType::ConstKernelParamInput => ArgKind::SuperKernelParams,
                },
                xrt_arg_idx: a.xrt_arg_idx as u64,
                onnx_arg_idx: a.onnx_arg_idx as u64,
                offset: a.offset,
                size: a.size,
            })
            .collect();
        let origins = nodes
            .iter()
            .map(|(i, m)| {
                let mut instructions: Vec<usize> = m.absorbed.into_iter().chain([*i]).collect();
                instructions.sort_unstable();
                NodeOrigin {
                    name: node_name(*i),
                    op: m.name.into(),
                    operators: instructions.iter().filter_map(|&k| self.operator_of(k)).collect(),
                    instructions: instructions.iter().map(|&k| k as u64).collect(),
                }
            })
            .collect();
        let delegate = NpuDelegate {
            manifest: Manifest {
                buffers: BufferSizes { input: sizes[0], output: sizes[1], scratch: sizes[2] },
                tensors,
                inputs: inputs.iter().map(|&v| tensor_name(v)).collect(),
                outputs: output_names,
                arg_map,
                nodes: origins,
            },
            txn: fused.txn,
            const_buffer: fused.const_buffer,
            super_kernel_params: fused.super_kernel_params,
        };
        let bytes = delegate.to_bytes().map_err(|e| fail(e.to_string()))?;
        let args = inputs.iter().chain(&outputs).map(|&v| v as i32).collect();
        let report = DelegateReport {
            delegate: index,
            ops: nodes.iter().map(|(_, m)| m.name.to_string()).collect(),
            instructions: run.iter().copied().collect(),
            size: bytes.len(),
        };
        // An output the plan put where an input (or an earlier output) of the call lives
        // moves to fresh memory, with the views planned on it: one call cannot read and
        // write one region.
        let mut taken: Vec<Region> = inputs.iter().filter_map(|&v| self.region(v)).collect();
        let mut moves = Vec::new();
        for &o in &outputs {
            let Some(r) = self.region(o) else { continue };
            if taken.iter().any(|&t| overlap(t, r)) {
                moves.push(std::iter::once(o).chain(self.planned_views_of(o)).collect());
            } else {
                taken.push(r);
            }
        }
        Ok(Some(RunCall {
            instr: InstructionModel::Delegate { delegate_index: index as i32, args },
            delegate: DelegateModel {
                id: BACKEND_ID.into(),
                data: DelegateData::Segment(segment as u32),
                compile_specs: Vec::new(),
            },
            bytes,
            report,
            moves,
        }))
    }

    /// Tensors no instruction writes whose bytes are tensor `p`'s: planned exactly on `p`,
    /// with `p` the last tensor written over that memory before their first reader.
    fn planned_views_of(&self, p: usize) -> Vec<usize> {
        let Some(region) = self.region(p) else { return Vec::new() };
        (0..self.method.values.len())
            .filter(|&a| a != p && !self.access.is_written(a) && self.region(a) == Some(region))
            .filter(|&a| {
                let Some(first) = self.access.readers.get(&a).and_then(|r| {
                    r.iter().filter(|(c, _)| *c == self.chain).map(|&(_, i)| i).min()
                }) else {
                    return false;
                };
                (0..first).rev().find_map(|k| {
                    self.written[k].iter().copied().find(|&w| self.overlaps(w, region))
                }) == Some(p)
            })
            .collect()
    }

    /// The planned memory of tensor `v`: memory id and byte range.
    fn region(&self, v: usize) -> Option<Region> {
        let ValueModel::Tensor(t) = self.method.values.get(v)? else { return None };
        let (mem, offset) = t.allocation?;
        Some((mem, offset, offset.checked_add(tensor_bytes(t)?)?))
    }

    /// Whether tensor `w`'s planned memory overlaps `region`.
    fn overlaps(&self, w: usize, region: Region) -> bool {
        self.region(w).is_some_and(|r| overlap(r, region))
    }

    /// Where run input `v`, read by the node of instruction `reader`, gets its bytes: from
    /// memory, or, for a tensor no instruction writes that memory planning placed exactly on
    /// a tensor the run produces (a view: `view_copy` planned away), from that tensor. When
    /// the last write before `reader` to memory overlapping `v` is a run's node writing
    /// something else there, the run cannot be lowered as one.
    fn view_source(
        &self,
        v: usize,
        reader: usize,
        run: &BTreeSet<usize>,
        produced: &BTreeSet<usize>,
    ) -> Source {
        let Some(region) = self.region(v) else { return Source::Memory };
        if self.access.is_written(v) || self.method_io.contains(&v) {
            return Source::Memory;
        }
        for k in (0..reader).rev() {
            let hit = self.written[k].iter().copied().find(|&w| self.overlaps(w, region));
            let Some(w) = hit else { continue };
            if !run.contains(&k) {
                return Source::Memory;
            }
            return if produced.contains(&w) && self.region(w) == Some(region) {
                Source::View(w)
            } else {
                Source::Unsafe
            };
        }
        Source::Memory
    }

    /// Tensors no instruction writes that memory planning placed exactly on tensor `p`.
    fn views_of(&self, p: usize) -> impl Iterator<Item = usize> + '_ {
        let region = self.region(p);
        (0..self.method.values.len()).filter(move |&a| {
            a != p && region.is_some() && self.region(a) == region && !self.access.is_written(a)
        })
    }

    /// `name.overload` of the kernel call at instruction `i`.
    fn operator_of(&self, i: usize) -> Option<String> {
        match self.instructions().get(i)? {
            InstructionModel::Kernel { op_index, .. } => operator_name(self.method, *op_index),
            _ => None,
        }
    }
}

/// Gives the tensors of `group` (which share one planned region) a fresh region at the end
/// of their arena, growing it.
fn relocate(method: &mut MethodModel, group: &[usize], name: &str) -> Result<()> {
    let fail =
        |reason: &str| Error::Lower { method: name.into(), instruction: 0, reason: reason.into() };
    let Some(&first) = group.first() else { return Ok(()) };
    let Some(ValueModel::Tensor(t)) = method.values.get(first) else {
        return Err(fail("a moved output is not a tensor"));
    };
    let (mem, _) = t.allocation.ok_or_else(|| fail("a moved output has no planned memory"))?;
    let bytes = tensor_bytes(t).ok_or_else(|| fail("a moved output's size overflows"))?;
    let size = method
        .non_const_buffer_sizes
        .get_mut(mem as usize)
        .ok_or_else(|| fail("a moved output names a memory id the method lacks"))?;
    let at = u64::try_from(*size).map_err(|_| fail("a negative arena size"))?.next_multiple_of(16);
    *size = at
        .checked_add(bytes)
        .and_then(|end| i64::try_from(end).ok())
        .ok_or_else(|| fail("the arena's size overflows"))?;
    for &v in group {
        if let Some(ValueModel::Tensor(t)) = method.values.get_mut(v) {
            t.allocation = Some((mem, at));
        }
    }
    Ok(())
}

/// Value `v` and, when it is a tensor list, its members (negative indices left out).
fn with_members(values: &[ValueModel], v: i32) -> impl Iterator<Item = usize> + '_ {
    let v = usize::try_from(v).ok();
    let members = match v.and_then(|v| values.get(v)) {
        Some(ValueModel::TensorList(items) | ValueModel::OptionalTensorList(items)) => &items[..],
        _ => &[],
    };
    v.into_iter().chain(members.iter().filter_map(|&m| usize::try_from(m).ok()))
}

/// Planned memory: memory id and byte range `[start, end)`.
type Region = (u32, u64, u64);

/// Whether two regions share a byte.
fn overlap(a: Region, b: Region) -> bool {
    a.0 == b.0 && a.1 < b.2 && b.1 < a.2
}

/// The bytes of tensor `t` at its declared sizes, or `None` on overflow or a negative size.
fn tensor_bytes(t: &TensorModel) -> Option<u64> {
    t.sizes
        .iter()
        .try_fold(t.scalar_type.size() as u64, |a, &d| a.checked_mul(u64::try_from(d).ok()?))
}

/// The manifest name of value `v`.
fn tensor_name(v: usize) -> String {
    format!("v{v}")
}

/// The manifest name of the node of instruction `i`.
fn node_name(i: usize) -> String {
    format!("i{i}")
}

/// Drops operators no kernel call uses, renumbering the calls' indices.
fn prune_operators(method: &mut MethodModel) {
    let used: BTreeSet<i32> = method
        .chains
        .iter()
        .flat_map(|c| &c.instructions)
        .filter_map(|i| match i {
            InstructionModel::Kernel { op_index, .. } => Some(*op_index),
            _ => None,
        })
        .collect();
    let mut renumber = BTreeMap::new();
    let mut kept = Vec::new();
    for (i, op) in method.operators.iter().enumerate() {
        if used.contains(&(i as i32)) {
            renumber.insert(i as i32, kept.len() as i32);
            kept.push(op.clone());
        }
    }
    method.operators = kept;
    for instr in method.chains.iter_mut().flat_map(|c| &mut c.instructions) {
        if let InstructionModel::Kernel { op_index, .. } = instr {
            if let Some(&n) = renumber.get(op_index) {
                *op_index = n;
            }
        }
    }
}

/// Empties the constant buffers no method reads any more: tensors no instruction, list or
/// method input/output names lose their buffer index, and buffers no tensor names (the
/// reserved entry 0 among them) keep no bytes.
fn drop_unread_constants(model: &mut ProgramModel) {
    let mut still_read: BTreeSet<u32> = BTreeSet::new();
    for method in &mut model.methods {
        let mut named: BTreeSet<usize> = BTreeSet::new();
        for instr in method.chains.iter().flat_map(|c| &c.instructions) {
            let args: Vec<i32> = match instr {
                InstructionModel::Kernel { args, .. } | InstructionModel::Delegate { args, .. } => {
                    args.clone()
                }
                InstructionModel::Move { from, to } => vec![*from, *to],
                InstructionModel::JumpFalse { cond, .. } => vec![*cond],
                InstructionModel::Free { value } => vec![*value],
            };
            for v in args {
                named.extend(with_members(&method.values, v));
            }
        }
        for &v in method.inputs.iter().chain(&method.outputs) {
            named.extend(with_members(&method.values, v));
        }
        for (i, value) in method.values.iter_mut().enumerate() {
            if let ValueModel::Tensor(t) = value {
                if t.data_buffer_idx == 0 || t.allocation.is_some() {
                    continue;
                }
                if named.contains(&i) {
                    still_read.insert(t.data_buffer_idx);
                } else {
                    t.data_buffer_idx = 0;
                }
            }
        }
    }
    // Entry 0 is reserved (no tensor has data there); reading a file can leave it holding
    // the bytes up to the next buffer's offset.
    let clear = |buffers: &mut Vec<Vec<u8>>| {
        for (i, b) in buffers.iter_mut().enumerate() {
            if !still_read.contains(&(i as u32)) {
                b.clear();
            }
        }
    };
    match model.constant_segment {
        Some(s) => {
            if let Some(SegmentModel::Buffers { buffers, .. }) = model.segments.get_mut(s as usize)
            {
                clear(buffers);
            }
        }
        None => clear(&mut model.constant_buffer),
    }
}
