//! Loading a method: its kernels and delegates resolved, its memory planned and counted
//! against the limit, its values placed, its chains compiled into steps, the prepared steps
//! bound to where their tensors live; the result is the first execution state of a new
//! [`Compiled`].

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_kernels::{Capacity, KernelDef, OutKind};

use crate::arena::{Arena, ConstBuf, LINE};
use crate::compile::bound::{bind, Binding, Constants};
use crate::compile::{
    self, lower_node, Aliases, CompiledNode, Graph, Layout, NodeOp, PreparedKernel,
};
use crate::compiled::{Compiled, Init, InitFrom};
use crate::decoded::Decoded;
use crate::delegate::DelegateHandle;
use crate::error::{Error, MemoryReason, Result};
use crate::footprint::{Footprint, LoadedParts};
use crate::method::{init_delegates, Method};
use crate::options::LoadOptions;
use crate::plan::{DataDef, InstrDef, MethodPlan, TensorDef, ValueDef};
use crate::step::{step_kind, Call, Callee, Role, Step};
use crate::value::{Storage, TensorSlot, Val};

/// Loads method `plan` of `decoded`: a new compiled method and its first execution state.
pub(crate) fn load(decoded: Arc<Decoded>, plan: Arc<MethodPlan>) -> Result<Method> {
    let started = Instant::now();
    let options = &decoded.options;
    let defs = kernels(options, &plan)?;
    let mut loader = Loader {
        plan: &plan,
        decoded: &decoded,
        buffers: Vec::new(),
        constants: Vec::new(),
        inits: Vec::new(),
        used: 0,
        limit: options.memory_limit,
    };
    loader.planned_arenas()?;
    let mut values = loader.values()?;
    let delegates = init_delegates(&decoded, &plan)?;
    let chains = compile_chains(&loader, &values, &defs, &delegates)?;
    if let Some(aliases) = &chains.aliases {
        compile::inputs_in_place(&plan, &mut values, aliases, &chains.steps[0]);
        loader.replan(&mut values, aliases, &chains.steps)?;
    }
    let Loader { buffers: buffer_lines, constants, inits, .. } = loader;
    let Chains { steps, compiled, prepared, pack_time, .. } = chains;
    let bindings = {
        let constants = decoded.constants(&constants);
        bindings(&steps, prepared.len(), &values, &buffer_lines, &constants)
    };
    let mut fixed = Compiled {
        decoded: decoded.clone(),
        plan: plan.clone(),
        resets: written_values(&plan, &steps, &values),
        bindings,
        chains: steps,
        compiled,
        prepared,
        constants,
        buffer_lines,
        inits,
        initial: values,
        instruction_limit: options.instruction_limit,
        memory_limit: options.memory_limit,
        compile_time: started.elapsed().saturating_sub(pack_time),
        pack_time,
        footprint: Footprint::default(),
    };
    fixed.footprint = Footprint::of(&LoadedParts {
        plan: &fixed.plan,
        chains: &fixed.chains,
        initial: &fixed.initial,
        packed_weights: fixed.prepared.iter().map(|k| k.heap_bytes() as u64).sum(),
        constants_made: fixed.constants.iter().map(|c| c.bytes().len() as u64).sum(),
    });
    // The state's buffers are mapped only now, the prediction checked: the planned arenas
    // the compiled memory plan replaced never are.
    Method::with_state_and_delegates(Arc::new(fixed), delegates)
}

/// The kernel of each of the method's operators; an error listing every operator without a
/// kernel and every delegate (not inlined) without a backend.
fn kernels(options: &LoadOptions, plan: &MethodPlan) -> Result<Vec<Option<&'static KernelDef>>> {
    let mut defs = Vec::with_capacity(plan.operators.len());
    let mut missing_ops: Vec<String> = Vec::new();
    for op in &plan.operators {
        let def = options.kernels.get(op);
        if def.is_none() && !missing_ops.contains(op) {
            missing_ops.push(op.clone());
        }
        defs.push(def);
    }
    let mut missing_delegates: Vec<String> = Vec::new();
    for d in plan.delegates.iter().filter(|d| !d.inlined) {
        if options.backends.get(&d.id).is_none() && !missing_delegates.contains(&d.id) {
            missing_delegates.push(d.id.clone());
        }
    }
    if !missing_ops.is_empty() || !missing_delegates.is_empty() {
        return Err(Error::Missing {
            method: plan.name.clone(),
            operators: missing_ops,
            delegates: missing_delegates,
        });
    }
    Ok(defs)
}

/// A method's chains compiled.
struct Chains {
    /// One list of steps per chain.
    steps: Vec<Vec<Step>>,
    /// What each step stands for, in the same order.
    compiled: Vec<CompiledNode>,
    prepared: Vec<Box<dyn PreparedKernel>>,
    /// Time spent preparing them (packing, laying out weights).
    pack_time: Duration,
    /// The values the compile stage placed as aliases of others, for the memory plan.
    aliases: Option<Aliases>,
}

/// Compiles each chain: one graph per chain, optimized (unless the options say not to), each
/// live node lowered to a step; fused nodes get a prepared kernel.
fn compile_chains(
    loader: &Loader<'_>,
    values: &[Val],
    defs: &[Option<&'static KernelDef>],
    delegates: &[Option<Box<dyn DelegateHandle>>],
) -> Result<Chains> {
    let (plan, decoded) = (loader.plan, loader.decoded);
    let optimize = decoded.options.compile;
    let constants = decoded.constants(&loader.constants);
    // The constants a lowering reads (to pack or fold them), given back to the OS right
    // after it: the resident peak is then the packed weights and one constant, not the
    // packed weights and every page of the file they came from.
    let read: RefCell<Vec<(Storage, usize)>> = RefCell::default();
    let const_bytes = |t: &TensorSlot| {
        read.borrow_mut().push((t.storage, t.nbytes()));
        constants.bytes(t.storage, t.nbytes())
    };
    let mut out = Chains {
        steps: Vec::with_capacity(plan.chains.len()),
        compiled: Vec::new(),
        prepared: Vec::new(),
        pack_time: Duration::ZERO,
        aliases: if optimize { compile::aliases(plan, values, defs) } else { None },
    };
    for c in 0..plan.chains.len() {
        let mut g = Graph::of_chain(plan, values, defs, out.aliases.take(), c);
        if optimize {
            compile::optimize(&mut g);
        }
        let mut steps = Vec::with_capacity(g.nodes.len());
        for n in 0..g.nodes.len() {
            let mut algorithm = None;
            let step = match g.nodes[n].op {
                NodeOp::Removed => continue,
                NodeOp::Instr(k) => resolve(plan, values, defs, delegates, k, &g.chain[k])?,
                _ => {
                    let packing = Instant::now();
                    let (call, kernel) = lower_node(&g, n, out.prepared.len(), &const_bytes)?;
                    out.pack_time += packing.elapsed();
                    for (storage, len) in read.take() {
                        decoded.release_constant(storage, len);
                    }
                    algorithm = kernel.algorithm();
                    out.prepared.push(kernel);
                    Step::Call(call)
                }
            };
            out.compiled.push(describe_step(&g, n, c, &step, algorithm));
            steps.push(step);
        }
        out.steps.push(steps);
        out.aliases = g.aliases.take();
    }
    Ok(out)
}

/// Per prepared kernel (`prepared` of them, called by steps of `chains`), where its call's
/// tensors live in a state's `buffers` (as every state's are sized) and among `constants`,
/// when loading can resolve them.
fn bindings(
    chains: &[Vec<Step>],
    prepared: usize,
    values: &[Val],
    buffers: &[usize],
    constants: &Constants<'_>,
) -> Vec<Option<Binding>> {
    let mut out: Vec<Option<Binding>> = (0..prepared).map(|_| None).collect();
    for step in chains.iter().flatten() {
        if let Step::Call(call @ Call { callee: Callee::Prepared(p), .. }) = step {
            if let Some(slot) = out.get_mut(*p) {
                *slot = bind(call, values, buffers, constants);
            }
        }
    }
    out
}

/// A method's memory while it loads: the sizes of a state's buffers (mapped once the method
/// is compiled and its predicted peak checked, each committed only where a value is written)
/// and the constants made so far, their bytes counted against the memory limit as they are
/// made.
struct Loader<'p> {
    plan: &'p MethodPlan,
    decoded: &'p Arc<Decoded>,
    /// Cache lines of each of a state's buffers (0 for one released).
    buffers: Vec<usize>,
    /// The method's constants made at load.
    constants: Vec<ConstBuf>,
    inits: Vec<Init>,
    used: u64,
    limit: u64,
}

impl Loader<'_> {
    fn method(&self) -> String {
        self.plan.name.clone()
    }

    fn invalid(&self, location: String, reason: impl Into<String>) -> Error {
        Error::InvalidProgram { method: self.method(), location, reason: reason.into() }
    }

    /// The error for `bytes` more of `what` not fitting the budget (or the OS refusing them).
    fn over(&self, what: String, bytes: u64, reason: MemoryReason) -> Error {
        Error::Memory {
            method: self.method(),
            what,
            bytes,
            counted: self.used,
            limit: self.limit,
            reason,
        }
    }

    /// Counts `bytes` of `what` against the memory limit.
    fn count(&mut self, bytes: u64, what: impl FnOnce() -> String) -> Result<()> {
        match self.used.checked_add(bytes).filter(|t| *t <= self.limit) {
            Some(total) => {
                self.used = total;
                Ok(())
            }
            None => Err(self.over(what(), bytes, MemoryReason::OverLimit)),
        }
    }

    /// A new buffer of `bytes` for a state, mapped with the state. Its pages are committed
    /// when first touched (see [`Arena`]), so it is not counted here: the pages its values
    /// span are, in the prediction [`Compiled::check_predicted`] bounds.
    fn alloc(&mut self, bytes: u64, what: impl FnOnce() -> String) -> Result<u32> {
        let lines = self.lines(bytes, what)?;
        self.buffers.push(lines);
        Ok(self.buffers.len() as u32 - 1)
    }

    /// A new zeroed buffer of `bytes` among the method's constants, counted against the
    /// memory limit (every byte of it is written).
    fn alloc_const(&mut self, bytes: u64, what: impl FnOnce() -> String) -> Result<u32> {
        let what = what();
        self.count(bytes, || what.clone())?;
        let lines = self.lines(bytes, || what.clone())?;
        let arena = Arena::zeroed(lines)
            .map_err(|e| self.over(what, bytes, MemoryReason::Refused(e.to_string())))?;
        self.constants.push(ConstBuf::Made(arena));
        Ok(self.constants.len() as u32 - 1)
    }

    /// The cache lines `bytes` of `what` take; an error when they do not fit the address
    /// space.
    fn lines(&self, bytes: u64, what: impl FnOnce() -> String) -> Result<usize> {
        usize::try_from(bytes.div_ceil(LINE as u64))
            .ok()
            .filter(|lines| lines.checked_mul(LINE).is_some())
            .ok_or_else(|| {
                self.over(
                    what(),
                    bytes,
                    MemoryReason::Refused("larger than the address space".into()),
                )
            })
    }

    /// Releases buffer `buf`: a state maps none for it.
    fn release(&mut self, buf: usize) {
        if let Some(b) = self.buffers.get_mut(buf) {
            *b = 0;
        }
    }

    /// Storage in arena `memory_id` at `offset` for `nbytes`, checked.
    fn planned(&self, i: usize, memory_id: u32, offset: u64, nbytes: usize) -> Result<Storage> {
        let loc = || format!("values[{i}].tensor.allocation_info");
        let arena =
            (memory_id as usize).checked_sub(1).filter(|a| *a < self.plan.arena_sizes.len());
        let Some(arena) = arena else {
            return Err(self.invalid(
                loc(),
                format!(
                    "memory_id {memory_id} is not one of the {} planned arenas (ids are 1-based)",
                    self.plan.arena_sizes.len()
                ),
            ));
        };
        let size = self.plan.arena_sizes[arena];
        let fits = offset.checked_add(nbytes as u64).is_some_and(|end| end <= size);
        if !fits {
            return Err(self.invalid(
                loc(),
                format!(
                    "offset {offset} + {nbytes} bytes is outside arena {memory_id} of {size} bytes"
                ),
            ));
        }
        Ok(Storage::Buf { buf: arena as u32, offset: offset as usize })
    }

    /// Copies `data` to constant `storage` (one made at load).
    fn copy_into(&mut self, storage: Storage, data: &[u8]) {
        let Storage::Const { buf, offset } = storage else { return };
        let bytes: &mut [u8] = match self.constants.get_mut(buf as usize) {
            Some(ConstBuf::Made(a)) => bytemuck::cast_slice_mut(a.as_mut_slice()),
            _ => return,
        };
        if let Some(dst) = bytes.get_mut(offset..offset + data.len()) {
            dst.copy_from_slice(data);
        }
    }

    /// Records `from` (at most `nbytes` of it) as what planned storage `storage` starts
    /// with in every state (copied as a state's buffers are mapped).
    fn init(&mut self, storage: Storage, from: InitFrom, nbytes: usize) {
        let Storage::Buf { buf, offset } = storage else { return };
        let from = match from {
            InitFrom::File(r) => InitFrom::File(r.start..r.end.min(r.start + nbytes)),
            InitFrom::Ext { source, range: r } => {
                InitFrom::Ext { source, range: r.start..r.end.min(r.start + nbytes) }
            }
        };
        self.inits.push(Init { buf, offset, from });
    }

    /// Storage for zero-copy bytes at `offset` of `base`, or an aligned copy among the
    /// constants when the bytes are not aligned to the element size.
    fn borrowed(
        &mut self,
        i: usize,
        base: &[u8],
        offset: usize,
        t: &TensorDef,
        zero_copy: Storage,
    ) -> Result<(Storage, bool)> {
        let addr = (base.as_ptr() as usize).wrapping_add(offset);
        if addr.is_multiple_of(t.dtype.size()) {
            return Ok((zero_copy, false));
        }
        let n = t.nbytes();
        let buf =
            self.alloc_const(n as u64, || format!("values[{i}] (aligned copy of a constant)"))?;
        let storage = Storage::Const { buf, offset: 0 };
        let data = base.get(offset..offset + n).unwrap_or(&[]).to_vec();
        self.copy_into(storage, &data);
        Ok((storage, true))
    }

    fn external(&self, i: usize, fqn: &str, t: &TensorDef) -> Result<(u32, usize)> {
        let err = |reason: String| Error::ExternalData {
            method: self.method(),
            value: i,
            fqn: fqn.to_string(),
            reason,
        };
        let sources = &self.decoded.sources;
        if sources.is_empty() {
            return Err(err(
                "the program names external data but none was given (a .ptd file)".into()
            ));
        }
        for (s, source) in sources.iter().enumerate() {
            let Some(entry) = source.entry(fqn) else { continue };
            if let Some(layout) = &entry.layout {
                let same = layout.scalar_type == t.dtype
                    && layout.sizes.len() == t.shape.rank()
                    && layout
                        .sizes
                        .iter()
                        .zip(t.shape.sizes())
                        .all(|(a, b)| usize::try_from(*a) == Ok(*b))
                    && layout.dim_order == t.shape.dim_order();
                if !same {
                    return Err(err(format!(
                        "{} has {} {:?} dim_order {:?}, the program expects {} {:?} dim_order {:?}",
                        source.describe(),
                        layout.scalar_type,
                        layout.sizes,
                        layout.dim_order,
                        t.dtype,
                        t.shape.sizes(),
                        t.shape.dim_order()
                    )));
                }
            }
            if entry.range.len() < t.nbytes() {
                return Err(err(format!(
                    "{} holds {} bytes, the tensor needs {}",
                    source.describe(),
                    entry.range.len(),
                    t.nbytes()
                )));
            }
            return Ok((s as u32, entry.range.start));
        }
        let names: Vec<String> = sources.iter().map(|s| s.describe()).collect();
        Err(err(format!("not found in {}", names.join(", "))))
    }

    /// The planned arenas, by size: a state maps them once the method is compiled (those
    /// the compiled memory plan replaced, never), and its values' pages count in the
    /// prediction; an error when one does not fit the address space.
    fn planned_arenas(&mut self) -> Result<()> {
        for (a, &size) in self.plan.arena_sizes.iter().enumerate() {
            self.alloc(size, || format!("planned arena {}", a + 1))?;
        }
        Ok(())
    }

    /// The value table: every value of the plan, tensors placed.
    fn values(&mut self) -> Result<Vec<Val>> {
        let mut values = Vec::with_capacity(self.plan.values.len());
        for (i, v) in self.plan.values.iter().enumerate() {
            values.push(match v {
                ValueDef::None => Val::None,
                ValueDef::Int(x) => Val::Int(*x),
                ValueDef::Double(x) => Val::Double(*x),
                ValueDef::Bool(x) => Val::Bool(*x),
                ValueDef::String(s) => Val::String(s.clone()),
                ValueDef::Tensor(t) => Val::Tensor(self.tensor(i, t)?),
                ValueDef::IntList(l) => Val::IntList(l.clone()),
                ValueDef::DoubleList(l) => Val::DoubleList(l.clone()),
                ValueDef::BoolList(l) => Val::BoolList(l.clone()),
                ValueDef::TensorList(l) => {
                    if let Some(bad) =
                        l.iter().find(|&&x| !matches!(values.get(x as usize), Some(Val::Tensor(_))))
                    {
                        return Err(self.invalid(
                            format!("values[{i}].tensor_list"),
                            format!("item values[{bad}] is not an earlier Tensor value"),
                        ));
                    }
                    Val::TensorList(l.clone())
                }
                ValueDef::OptionalTensorList(l) => {
                    let bad = l.iter().flatten().find(|&&x| {
                        !matches!(values.get(x as usize), Some(Val::Tensor(_) | Val::None))
                    });
                    if let Some(bad) = bad {
                        return Err(self.invalid(
                            format!("values[{i}].optional_tensor_list"),
                            format!("item values[{bad}] is not an earlier Tensor or None value"),
                        ));
                    }
                    Val::OptionalTensorList(l.clone())
                }
            });
        }
        Ok(values)
    }

    /// Places the values by the compiled memory plan of chain 0 (`aliases` share storage),
    /// in a new buffer counted in place of the planned arenas no value lives in any more.
    fn replan(
        &mut self,
        values: &mut [Val],
        aliases: &Aliases,
        chains: &[Vec<Step>],
    ) -> Result<()> {
        let new_buf = self.buffers.len() as u32;
        if let Some(size) = compile::replan(self.plan, values, aliases, &chains[0], new_buf) {
            // Planned arenas no value lives in any more are released.
            let mut used = vec![false; self.plan.arena_sizes.len()];
            for v in values.iter() {
                if let Val::Tensor(TensorSlot { storage: Storage::Buf { buf, .. }, .. }) = v {
                    if let Some(u) = used.get_mut(*buf as usize) {
                        *u = true;
                    }
                }
            }
            for (a, u) in used.iter().enumerate() {
                if !u {
                    self.release(a);
                }
            }
            let id = self.alloc(size as u64, || "the compiled memory plan".to_string())?;
            debug_assert_eq!(id, new_buf);
        }
        Ok(())
    }

    fn tensor(&mut self, i: usize, t: &TensorDef) -> Result<TensorSlot> {
        let nbytes = t.nbytes();
        let file = self.decoded.file.bytes();
        let (storage, writable) = match &t.data {
            DataDef::Runtime => {
                let buf = self.alloc(nbytes as u64, || format!("values[{i}] (runtime tensor)"))?;
                (Storage::Buf { buf, offset: 0 }, true)
            }
            DataDef::Planned { memory_id, offset } => {
                (self.planned(i, *memory_id, *offset, nbytes)?, true)
            }
            DataDef::PlannedInit { memory_id, offset, init } => {
                let s = self.planned(i, *memory_id, *offset, nbytes)?;
                self.init(s, InitFrom::File(init.clone()), nbytes);
                (s, true)
            }
            DataDef::Constant(range) => {
                if range.len() < nbytes || file.get(range.clone()).is_none() {
                    return Err(
                        self.invalid(format!("values[{i}].tensor"), "constant data is too short")
                    );
                }
                let decoded = self.decoded.clone();
                let (s, _) = self.borrowed(
                    i,
                    decoded.file.bytes(),
                    range.start,
                    t,
                    Storage::File { offset: range.start },
                )?;
                (s, false)
            }
            DataDef::External(fqn) => {
                let (src, offset) = self.external(i, fqn, t)?;
                let decoded = self.decoded.clone();
                let bytes = decoded.sources[src as usize].bytes();
                let (s, _) =
                    self.borrowed(i, bytes, offset, t, Storage::Ext { source: src, offset })?;
                (s, false)
            }
            DataDef::SourceBytes { source, range } => {
                let decoded = self.decoded.clone();
                let bytes = decoded.sources.get(*source as usize).map(|s| s.bytes());
                if bytes.and_then(|b| b.get(range.clone())).is_none_or(|b| b.len() < nbytes) {
                    return Err(self.invalid(
                        format!("values[{i}].tensor"),
                        "a delegate's constant is outside its external data",
                    ));
                }
                let (offset, bytes) = (range.start, bytes.unwrap_or(&[]));
                let storage = Storage::Ext { source: *source, offset };
                let (s, _) = self.borrowed(i, bytes, offset, t, storage)?;
                (s, false)
            }
            DataDef::Owned(bytes) => {
                let what = || format!("values[{i}] (a delegate's constant)");
                let aligned = (bytes.as_ptr() as usize).is_multiple_of(t.dtype.size());
                if aligned && bytes.len() >= nbytes {
                    // Shared with the plan, which keeps it for the next load anyway.
                    self.count(nbytes as u64, what)?;
                    self.constants.push(ConstBuf::Shared(bytes.clone()));
                    let buf = self.constants.len() as u32 - 1;
                    (Storage::Const { buf, offset: 0 }, false)
                } else {
                    let buf = self.alloc_const(nbytes as u64, what)?;
                    let s = Storage::Const { buf, offset: 0 };
                    self.copy_into(s, bytes.get(..nbytes).unwrap_or(bytes));
                    (s, false)
                }
            }
            DataDef::ExternalPlanned { fqn, memory_id, offset } => {
                let s = self.planned(i, *memory_id, *offset, nbytes)?;
                let (src, off) = self.external(i, fqn, t)?;
                let range = off..off.saturating_add(nbytes);
                self.init(s, InitFrom::Ext { source: src as usize, range }, nbytes);
                (s, true)
            }
        };
        let capacity = if t.dynamic { Capacity::Bound(t.shape.numel()) } else { Capacity::Static };
        Ok(TensorSlot {
            dtype: t.dtype,
            shape: t.shape,
            capacity,
            cap_bytes: nbytes,
            storage,
            writable,
        })
    }
}

/// The values a run may change: the method's inputs, every value a call writes (list items
/// included), and the targets of moves and frees; sorted, without repeats.
fn written_values(plan: &MethodPlan, chains: &[Vec<Step>], values: &[Val]) -> Box<[u32]> {
    let mut out: Vec<u32> = plan.inputs.clone();
    for step in chains.iter().flatten() {
        match step {
            Step::Call(call) => {
                for &(p, _) in call.outs.iter() {
                    let Some(&v) = call.args.get(p as usize) else { continue };
                    out.push(v);
                    if let Some(Val::TensorList(items)) = values.get(v as usize) {
                        out.extend(items.iter().copied());
                    }
                }
                if let Some(&ret) = call.args.last() {
                    out.push(ret);
                }
            }
            Step::Move { to, .. } => out.push(*to),
            Step::Free { value } => out.push(*value),
            Step::JumpFalse { .. } => {}
        }
    }
    out.sort_unstable();
    out.dedup();
    out.retain(|&v| (v as usize) < values.len());
    out.into_boxed_slice()
}

/// What step `step` (node `n` of chain `c`'s graph, computed by `algorithm`) stands for.
fn describe_step(
    g: &Graph<'_>,
    n: usize,
    c: usize,
    step: &Step,
    algorithm: Option<&str>,
) -> CompiledNode {
    let origins = g.origin_ids(n);
    // The original instructions' names, one per origin id (the kernel calls an inlined
    // delegate became all stand for its one call).
    let mut sources: Vec<_> = g.origins.get(&n).map(|o| o.sources().collect()).unwrap_or_default();
    sources.sort_by_key(|s| s.id);
    sources.dedup_by_key(|s| s.id);
    let operators = sources.iter().map(|s| s.name.clone()).collect();
    let name = |l: Layout| match l {
        Layout::Nchw => "nchw",
        Layout::Nhwc => "nhwc",
    };
    let between = |input: Layout, output: Layout| format!("{}>{}", name(input), name(output));
    let layout = match &g.nodes[n].op {
        NodeOp::Conv(conv) => Some(between(conv.layouts.input, conv.layouts.output)),
        NodeOp::PointwiseDepthwise(pair) => {
            Some(between(pair.pointwise.layouts.input, pair.depthwise.layouts.output))
        }
        NodeOp::Mean(mean) => Some(name(mean.layout).to_string()),
        NodeOp::MaxPool(pool) => Some(name(pool.layout).to_string()),
        NodeOp::ChannelScale(scale) => Some(name(scale.layout).to_string()),
        _ => None,
    };
    let algorithm = algorithm.map(str::to_string);
    let mut xnodes: Vec<_> = g.handles.get(&n).map(|o| o.sources().collect()).unwrap_or_default();
    xnodes.sort_by_key(|s| s.id);
    xnodes.dedup_by_key(|s| s.id);
    CompiledNode {
        chain: c,
        kind: step_kind(step),
        operators,
        origins,
        debug_handles: xnodes.iter().map(|s| s.id).collect(),
        delegate_ops: xnodes.iter().map(|s| s.name.clone()).collect(),
        layout,
        algorithm,
    }
}

/// Instruction `k` (`ins`) resolved into a step: its kernel or delegate found, its argument
/// values checked against what the callee reads and writes.
fn resolve(
    plan: &MethodPlan,
    values: &[Val],
    defs: &[Option<&'static KernelDef>],
    delegates: &[Option<Box<dyn DelegateHandle>>],
    k: usize,
    ins: &InstrDef,
) -> Result<Step> {
    let bad = |name: &str, reason: String| Error::InvalidProgram {
        method: plan.name.clone(),
        location: format!("instruction {k} ({name})"),
        reason,
    };
    let val = |i: u32| values.get(i as usize).unwrap_or(&Val::None);
    Ok(match ins {
        InstrDef::Kernel { op, args } => {
            let name = plan.operators.get(*op).map_or("?", String::as_str);
            let def = defs
                .get(*op)
                .copied()
                .flatten()
                .ok_or_else(|| bad(name, "operator has no kernel".into()))?;
            if args.len() != def.arity as usize {
                return Err(bad(
                    name,
                    format!(
                        "the kernel takes {} argument values, the instruction has {}",
                        def.arity,
                        args.len()
                    ),
                ));
            }
            // Kernels compute with the integer, bool and float dtypes only: a tensor of any
            // other dtype (uint16/32/64, complex, quantized, bits) is refused here, at load,
            // rather than reaching a kernel that could not read it.
            for (p, &v) in args.iter().enumerate() {
                let tensors: Vec<u32> = match val(v) {
                    Val::Tensor(_) => vec![v],
                    Val::TensorList(l) => l.to_vec(),
                    Val::OptionalTensorList(l) => l.iter().flatten().copied().collect(),
                    _ => Vec::new(),
                };
                for t in tensors {
                    if let Val::Tensor(slot) = val(t) {
                        if !slot.dtype.is_computable() {
                            return Err(Error::NotSupported {
                                method: plan.name.clone(),
                                location: format!("instruction {k} ({name}) argument {p}"),
                                reason: format!(
                                    "values[{t}] has dtype {}; kiln's kernels compute with \
                                     bool, integer and float dtypes only",
                                    slot.dtype.name()
                                ),
                            });
                        }
                    }
                }
            }
            let mut roles = vec![Role::In; args.len()];
            if let Some(last) = roles.last_mut() {
                *last = Role::Ret;
            }
            for o in def.outs {
                let p = o.position as usize;
                let Some(&v) = args.get(p) else {
                    return Err(bad(
                        name,
                        format!("kernel writes argument {p}, the instruction has {}", args.len()),
                    ));
                };
                check_out(val(v), o.kind, args, values)
                    .map_err(|r| bad(name, format!("argument {p}: {r}")))?;
                roles[p] = Role::Out(o.kind);
            }
            Step::Call(Call {
                callee: Callee::Kernel(def),
                name: Arc::from(name),
                instruction: k as u32,
                args: args.clone().into_boxed_slice(),
                roles: roles.into_boxed_slice(),
                outs: def.outs.iter().map(|o| (u32::from(o.position), o.kind)).collect(),
            })
        }
        InstrDef::Delegate { delegate, args } => {
            let id = plan.delegates.get(*delegate).map_or("?", |d| d.id.as_str());
            let handle = delegates
                .get(*delegate)
                .and_then(Option::as_ref)
                .ok_or_else(|| bad(id, "delegate index out of range".into()))?;
            let n_out = handle.num_outputs();
            let first_out = args.len().checked_sub(n_out).ok_or_else(|| {
                bad(
                    id,
                    format!(
                        "the backend reports {n_out} outputs, the call has {} values",
                        args.len()
                    ),
                )
            })?;
            let mut roles = vec![Role::In; args.len()];
            let mut outs = Vec::with_capacity(n_out);
            for (p, &v) in args.iter().enumerate().skip(first_out) {
                let kind = match val(v) {
                    Val::Tensor(t) if t.writable => OutKind::Tensor,
                    Val::Int(_) | Val::Double(_) | Val::Bool(_) => OutKind::Scalar,
                    other => {
                        return Err(bad(
                            id,
                            format!("output argument {p} is a {} value", other.tag()),
                        ))
                    }
                };
                roles[p] = Role::Out(kind);
                outs.push((p as u32, kind));
            }
            Step::Call(Call {
                callee: Callee::Delegate(*delegate),
                name: Arc::from(id),
                instruction: k as u32,
                args: args.clone().into_boxed_slice(),
                roles: roles.into_boxed_slice(),
                outs: outs.into_boxed_slice(),
            })
        }
        InstrDef::Move { from, to } => Step::Move { from: *from, to: *to },
        InstrDef::JumpFalse { cond, destination } => {
            if !matches!(val(*cond), Val::Bool(_) | Val::Tensor(_)) {
                return Err(bad(
                    "JumpFalseCall",
                    format!("condition values[{cond}] is a {} value, not Bool", val(*cond).tag()),
                ));
            }
            Step::JumpFalse { cond: *cond, destination: *destination }
        }
        InstrDef::Free { value } => {
            if !matches!(val(*value), Val::Tensor(_)) {
                return Err(bad(
                    "FreeCall",
                    format!("values[{value}] is a {} value, not a Tensor", val(*value).tag()),
                ));
            }
            Step::Free { value: *value }
        }
    })
}

/// Why value `v`, which a kernel writes as `kind`, cannot be written so (`args` and `values`
/// for the items of lists and the argument of views).
fn check_out(
    v: &Val,
    kind: OutKind,
    args: &[u32],
    values: &[Val],
) -> std::result::Result<(), String> {
    let tensor_ok = |v: &Val| match v {
        Val::Tensor(t) if t.writable => Ok(()),
        Val::Tensor(_) => Err("the kernel would write a constant tensor".to_string()),
        other => Err(format!("expected an output Tensor, got {}", other.tag())),
    };
    match kind {
        OutKind::Tensor => tensor_ok(v),
        OutKind::TensorList => match v {
            Val::TensorList(items) => items
                .iter()
                .try_for_each(|&i| tensor_ok(values.get(i as usize).unwrap_or(&Val::None))),
            other => Err(format!("expected an output TensorList, got {}", other.tag())),
        },
        OutKind::Scalar => match v {
            Val::Int(_) | Val::Double(_) | Val::Bool(_) => Ok(()),
            other => Err(format!("expected an Int, Double or Bool result, got {}", other.tag())),
        },
        OutKind::View(p) => match (v, args.get(p as usize).and_then(|&i| values.get(i as usize))) {
            (Val::Tensor(_), Some(Val::Tensor(_))) => Ok(()),
            _ => Err(format!("a view needs Tensor values for the output and argument {p}")),
        },
    }
}
