//! [`Method`]: a loaded method with its memory plan, value table and resolved steps.

use std::ops::Range;
use std::sync::Arc;

use kiln_kernels::{Capacity, KernelContext, KernelDef, OutKind};

use crate::arena::Arena;
use crate::compile::{
    self, lower_node, CompiledNode, Graph, Layout, NodeOp, PreparedKernel, StepScratch,
};
use crate::data::ProgramData;
use crate::delegate::{BackendError, DelegateHandle, DelegateInit};
use crate::error::{Error, MemoryReason, Result};
use crate::exec::Scratch;
use crate::io::ValueMeta;
use crate::plan::{DataDef, InstrDef, MethodPlan, TensorDef, ValueDef};
use crate::program::{meta, Program};
use crate::value::{Storage, TensorSlot, Val};

/// Bytes of a [`Line`].
pub(crate) const LINE: usize = 64;

/// One cache line of a method's memory: buffers are vectors of these, so a tensor the memory
/// plan places at a multiple of 64 bytes starts on a cache line and a kernel's 64-byte vector
/// loads do not straddle two lines (with 16-byte alignment, three tensors in four were split:
/// a channels-last depthwise layer ran 25% slower).
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(crate) struct Line([u8; LINE]);

/// How a call uses one of its argument positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Read.
    In,
    /// Written, of this kind.
    Out(OutKind),
    /// The trailing return value (or an out of a list the kernel writes through another slot).
    Ret,
}

/// What a call step invokes.
pub(crate) enum Callee {
    Kernel(&'static KernelDef),
    Delegate(usize),
    /// A prepared kernel of the compile stage, by index in [`Method::prepared`].
    Prepared(usize),
}

/// A kernel or delegate call, resolved at load.
pub(crate) struct Call {
    pub callee: Callee,
    /// Operator name or backend id, for errors.
    pub name: Arc<str>,
    /// The original instruction (the first of those a fused step stands for), for errors.
    pub instruction: u32,
    /// Value index per argument position.
    pub args: Box<[u32]>,
    /// Role per argument position.
    pub roles: Box<[Role]>,
    /// Written positions in the order the callee receives them.
    pub outs: Box<[(u32, OutKind)]>,
    /// Where the tensors of a prepared call live, when loading could resolve them
    /// ([`crate::bound`]).
    pub bound: Option<Box<crate::bound::Binding>>,
}

/// One instruction, resolved.
pub(crate) enum Step {
    Call(Call),
    Move { from: u32, to: u32 },
    JumpFalse { cond: u32, destination: usize },
    Free { value: u32 },
}

/// A loaded method, ready to [`execute`](Method::execute): one execution state of a compiled
/// method. Owns its memory (planned arenas, input and runtime buffers) and delegate handles;
/// shares the compiled steps, the prepared (packed) weights and the constants made at load with
/// every other state of the same method ([`Method::another`], [`Program::method`] while one
/// lives), and the program's mapped file. `Send`: threads each run their own state, at the
/// same time.
///
/// Two halves: `Compiled` is what loading decided and never changes afterwards, shared;
/// `State` is what a run reads and writes.
pub struct Method {
    pub(crate) fixed: Arc<Compiled>,
    pub(crate) state: State,
}

/// What loading decided: the compiled steps, what they stand for, the prepared kernels and
/// constants they read, and how every execution state starts.
pub(crate) struct Compiled {
    pub program: Program,
    pub plan: Arc<MethodPlan>,
    /// One list of steps per chain.
    pub chains: Vec<Vec<Step>>,
    /// What each step of `chains` stands for, in the same order.
    pub compiled: Vec<CompiledNode>,
    /// The compile stage's prepared kernels (their packed weights).
    pub prepared: Vec<Box<dyn PreparedKernel>>,
    /// Constants made at load ([`Storage::Const`]): aligned copies, delegates' converted
    /// weights.
    pub constants: Vec<Arena>,
    /// Bytes of `constants` and of the prepared kernels' weights: every state counts them
    /// against the memory limit with its own buffers.
    pub shared_bytes: u64,
    /// Cache lines of each buffer of a state (0 for a released one), in buffer order.
    pub buffer_lines: Vec<usize>,
    /// What a new state's buffers start with (planned tensors' initial contents).
    pub inits: Vec<Init>,
    /// The value table every run starts from.
    pub initial: Vec<Val>,
    /// The values a run may change (inputs and everything a step writes), reset from
    /// `initial` before each run; the others never change.
    pub resets: Box<[u32]>,
    pub instruction_limit: u64,
    pub memory_limit: u64,
}

impl Compiled {
    /// Where its steps' constants are: the program file, `constants` and the external data.
    pub fn constants(&self) -> crate::bound::Constants<'_> {
        crate::bound::Constants {
            file: self.program.inner.file.bytes(),
            made: &self.constants,
            sources: &self.program.inner.sources,
        }
    }
}

/// Bytes a new execution state's buffer starts with.
pub(crate) struct Init {
    buf: u32,
    offset: usize,
    from: InitFrom,
}

/// Where an [`Init`]'s bytes come from.
enum InitFrom {
    /// The program file.
    File(Range<usize>),
    /// External data source `source`.
    Ext { source: usize, range: Range<usize> },
}

/// What a run reads and writes.
pub(crate) struct State {
    /// Planned arenas (memory_id 1.. at 0..), owned buffers, then the compiled memory plan's
    /// buffer; cache lines.
    pub buffers: Vec<Arena>,
    pub values: Vec<Val>,
    /// Per delegate, its handle (`None` for one inlined at decode, which no call names).
    pub delegates: Vec<Option<Box<dyn DelegateHandle>>>,
    /// Per prepared kernel, the buffers it reuses from run to run.
    pub scratches: Vec<StepScratch>,
    pub ctx: KernelContext,
    pub scratch: Scratch,
    /// Per-step timing, when on.
    pub profile: Option<Box<crate::profile::Counters>>,
    /// Per-step timing while paused ([`Method::pause_profiling`]).
    pub paused_profile: Option<Box<crate::profile::Counters>>,
}

impl std::fmt::Debug for Method {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Method")
            .field("name", &self.fixed.plan.name)
            .field("values", &self.state.values.len())
            .field("buffers", &self.state.buffers.len())
            .finish()
    }
}

struct Loader<'p> {
    plan: &'p MethodPlan,
    program: &'p Program,
    /// The state's buffers.
    buffers: Vec<Arena>,
    /// The method's constants made at load.
    constants: Vec<Arena>,
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

    /// A new zeroed buffer of `bytes` for the state, counted against the memory limit. Its
    /// pages are committed when first touched (see [`Arena`]).
    fn alloc(&mut self, bytes: u64, what: impl FnOnce() -> String) -> Result<u32> {
        let arena = self.zeroed(bytes, what)?;
        self.buffers.push(arena);
        Ok(self.buffers.len() as u32 - 1)
    }

    /// A new zeroed buffer of `bytes` among the method's constants, counted against the
    /// memory limit.
    fn alloc_const(&mut self, bytes: u64, what: impl FnOnce() -> String) -> Result<u32> {
        let arena = self.zeroed(bytes, what)?;
        self.constants.push(arena);
        Ok(self.constants.len() as u32 - 1)
    }

    fn zeroed(&mut self, bytes: u64, what: impl FnOnce() -> String) -> Result<Arena> {
        let what = what();
        self.count(bytes, || what.clone())?;
        let lines = usize::try_from(bytes.div_ceil(LINE as u64))
            .map_err(|_| self.over(what.clone(), bytes, MemoryReason::OverLimit))?;
        Arena::zeroed(lines).map_err(|e| {
            self.used -= bytes;
            self.over(what, bytes, MemoryReason::Refused(e.to_string()))
        })
    }

    /// Releases buffer `buf` (its pages go back to the OS) and its bytes from the count.
    fn release(&mut self, buf: usize, bytes: u64) {
        if let Some(b) = self.buffers.get_mut(buf) {
            *b = Arena::empty();
            self.used = self.used.saturating_sub(bytes);
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

    /// Copies `data` to `storage` (a state's buffer or a constant).
    fn copy_into(&mut self, storage: Storage, data: &[u8]) {
        let (arena, offset) = match storage {
            Storage::Buf { buf, offset } => (self.buffers.get_mut(buf as usize), offset),
            Storage::Const { buf, offset } => (self.constants.get_mut(buf as usize), offset),
            _ => return,
        };
        let bytes: &mut [u8] = match arena {
            Some(a) => bytemuck::cast_slice_mut(a.as_mut_slice()),
            None => return,
        };
        if let Some(dst) = bytes.get_mut(offset..offset + data.len()) {
            dst.copy_from_slice(data);
        }
    }

    /// Copies `from` (at most `nbytes` of it) into planned storage `storage`, and records it
    /// for the states made later.
    fn init(&mut self, storage: Storage, from: InitFrom, nbytes: usize) {
        let Storage::Buf { buf, offset } = storage else { return };
        let program = self.program.clone();
        let from = match from {
            InitFrom::File(r) => InitFrom::File(r.start..r.end.min(r.start + nbytes)),
            InitFrom::Ext { source, range: r } => {
                InitFrom::Ext { source, range: r.start..r.end.min(r.start + nbytes) }
            }
        };
        let init = Init { buf, offset, from };
        self.copy_into(storage, init.bytes(&program));
        self.inits.push(init);
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
        let sources = &self.program.inner.sources;
        if sources.is_empty() {
            return Err(err(
                "the program names external data but none was given (a .ptd file)".into()
            ));
        }
        for (s, source) in sources.iter().enumerate() {
            let Some(entry) = source.entry(fqn) else { continue };
            if let Some(layout) = &entry.layout {
                let same = i64::from(layout.scalar_type.to_i8()) == i64::from(t.dtype.code())
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
                        t.dtype.name(),
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

    fn tensor(&mut self, i: usize, t: &TensorDef) -> Result<TensorSlot> {
        let nbytes = t.nbytes();
        let file = self.program.inner.file.bytes();
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
                let program = self.program.clone();
                let (s, _) = self.borrowed(
                    i,
                    program.inner.file.bytes(),
                    range.start,
                    t,
                    Storage::File { offset: range.start },
                )?;
                (s, false)
            }
            DataDef::External(fqn) => {
                let (src, offset) = self.external(i, fqn, t)?;
                let program = self.program.clone();
                let bytes = program.inner.sources[src as usize].bytes();
                let (s, _) =
                    self.borrowed(i, bytes, offset, t, Storage::Ext { source: src, offset })?;
                (s, false)
            }
            DataDef::Owned(bytes) => {
                let what = || format!("values[{i}] (a delegate's constant)");
                let buf = self.alloc_const(nbytes as u64, what)?;
                let s = Storage::Const { buf, offset: 0 };
                self.copy_into(s, bytes.get(..nbytes).unwrap_or(bytes));
                (s, false)
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

impl Method {
    pub(crate) fn load(program: Program, plan: Arc<MethodPlan>) -> Result<Method> {
        let options = &program.inner.options;
        let mut loader = Loader {
            plan: &plan,
            program: &program,
            buffers: Vec::new(),
            constants: Vec::new(),
            inits: Vec::new(),
            used: 0,
            limit: options.memory_limit,
        };
        // Resolve every operator and delegate first, so the error lists all that are missing.
        let mut defs: Vec<Option<&'static KernelDef>> = Vec::with_capacity(plan.operators.len());
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
        // Memory plan: the whole plan is checked against the limit before any of it is mapped.
        let planned = plan.arena_sizes.iter().try_fold(0u64, |t, &s| t.checked_add(s));
        if planned.is_none_or(|p| p > loader.limit) {
            let sizes: Vec<String> = plan.arena_sizes.iter().map(|s| s.to_string()).collect();
            return Err(loader.over(
                format!("its memory plan (arenas of {} bytes)", sizes.join(" + ")),
                planned.unwrap_or(u64::MAX),
                MemoryReason::OverLimit,
            ));
        }
        for (a, &size) in plan.arena_sizes.iter().enumerate() {
            loader.alloc(size, || format!("planned arena {}", a + 1))?;
        }
        let mut values = Vec::with_capacity(plan.values.len());
        for (i, v) in plan.values.iter().enumerate() {
            values.push(match v {
                ValueDef::None => Val::None,
                ValueDef::Int(x) => Val::Int(*x),
                ValueDef::Double(x) => Val::Double(*x),
                ValueDef::Bool(x) => Val::Bool(*x),
                ValueDef::String(s) => Val::String(s.clone()),
                ValueDef::Tensor(t) => Val::Tensor(loader.tensor(i, t)?),
                ValueDef::IntList(l) => Val::IntList(l.clone()),
                ValueDef::DoubleList(l) => Val::DoubleList(l.clone()),
                ValueDef::BoolList(l) => Val::BoolList(l.clone()),
                ValueDef::TensorList(l) => {
                    if let Some(bad) =
                        l.iter().find(|&&x| !matches!(values.get(x as usize), Some(Val::Tensor(_))))
                    {
                        return Err(loader.invalid(
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
                        return Err(loader.invalid(
                            format!("values[{i}].optional_tensor_list"),
                            format!("item values[{bad}] is not an earlier Tensor or None value"),
                        ));
                    }
                    Val::OptionalTensorList(l.clone())
                }
            });
        }
        let delegates = init_delegates(&program, &plan)?;
        // Compile: one graph per chain, optimized, lowered to steps.
        let mut chains = Vec::with_capacity(plan.chains.len());
        let mut compiled = Vec::new();
        let mut prepared: Vec<Box<dyn PreparedKernel>> = Vec::new();
        let mut prepared_bytes = 0u64;
        let file = program.inner.file.bytes();
        let sources = &program.inner.sources;
        let constants = &loader.constants;
        let const_bytes = |t: &TensorSlot| -> Option<&[u8]> {
            match t.storage {
                Storage::File { offset } => file.get(offset..),
                Storage::Const { buf, offset } => {
                    let b: &[u8] = bytemuck::cast_slice(constants.get(buf as usize)?.as_slice());
                    b.get(offset..)
                }
                Storage::Ext { source, offset } => {
                    sources.get(source as usize)?.bytes().get(offset..)
                }
                _ => None,
            }
        };
        let mut aliases =
            if options.compile { compile::aliases(&plan, &values, &defs) } else { None };
        for c in 0..plan.chains.len() {
            let mut g = Graph::of_chain(&plan, &values, &defs, aliases.take(), c);
            if options.compile {
                compile::optimize(&mut g);
            }
            let mut steps = Vec::with_capacity(g.nodes.len());
            for n in 0..g.nodes.len() {
                let mut algorithm = None;
                let step = match g.nodes[n].op {
                    NodeOp::Removed => continue,
                    NodeOp::Instr(k) => resolve(&plan, &values, &defs, &delegates, k, &g.chain[k])?,
                    _ => {
                        let (call, kernel) = lower_node(&g, n, prepared.len(), &const_bytes)?;
                        prepared_bytes += kernel.heap_bytes() as u64;
                        algorithm = kernel.algorithm();
                        prepared.push(kernel);
                        Step::Call(call)
                    }
                };
                compiled.push(describe_step(&g, n, c, &step, algorithm));
                steps.push(step);
            }
            chains.push(steps);
            aliases = g.aliases.take();
        }
        loader.count(prepared_bytes, || "the compiled steps' prepared weights".to_string())?;
        if let Some(aliases) = &aliases {
            let new_buf = loader.buffers.len() as u32;
            if let Some(size) = compile::replan(&plan, &mut values, aliases, &chains[0], new_buf) {
                // Planned arenas no value lives in any more are released first, so the
                // compiled plan is counted in their place.
                let mut used = vec![false; plan.arena_sizes.len()];
                for v in &values {
                    if let Val::Tensor(TensorSlot { storage: Storage::Buf { buf, .. }, .. }) = v {
                        if let Some(u) = used.get_mut(*buf as usize) {
                            *u = true;
                        }
                    }
                }
                for (a, u) in used.iter().enumerate() {
                    if !u {
                        loader.release(a, plan.arena_sizes[a]);
                    }
                }
                let id = loader.alloc(size as u64, || "the compiled memory plan".to_string())?;
                debug_assert_eq!(id, new_buf);
            }
        }
        let Loader { buffers, constants, inits, .. } = loader;
        for step in chains.iter_mut().flatten() {
            if let Step::Call(call @ Call { callee: Callee::Prepared(_), .. }) = step {
                call.bound = crate::bound::bind(call, &values, &buffers, &constants, file, sources);
            }
        }
        let const_bytes: u64 = constants.iter().map(|c| (c.len() * LINE) as u64).sum();
        let fixed = Arc::new(Compiled {
            program: program.clone(),
            plan: plan.clone(),
            resets: written_values(&plan, &chains, &values),
            chains,
            compiled,
            prepared,
            constants,
            shared_bytes: const_bytes + prepared_bytes,
            buffer_lines: buffers.iter().map(Arena::len).collect(),
            inits,
            initial: values.clone(),
            instruction_limit: options.instruction_limit,
            memory_limit: options.memory_limit,
        });
        let state = State::with(&fixed, buffers, values, delegates);
        Ok(Method { fixed, state })
    }

    /// Another execution state of this method, to run beside this one (on another thread):
    /// its own planned memory, value table and delegate handles, sharing the compiled steps,
    /// the prepared (packed) weights and the constants made at load. Its memory is counted
    /// against the limit the program was loaded with, the shared part included; an error when
    /// it does not fit or a delegate's backend refuses a second handle.
    pub fn another(&self) -> Result<Method> {
        Method::with_state(self.fixed.clone())
    }

    /// A new execution state of `fixed`.
    pub(crate) fn with_state(fixed: Arc<Compiled>) -> Result<Method> {
        let method = || fixed.plan.name.clone();
        let own: u64 = fixed.buffer_lines.iter().map(|&l| (l * LINE) as u64).sum();
        let total = own.saturating_add(fixed.shared_bytes);
        let over = |bytes: u64, reason: MemoryReason| Error::Memory {
            method: method(),
            what: "a new execution state (its buffers, and the shared constants and prepared \
                   weights)"
                .into(),
            bytes,
            counted: 0,
            limit: fixed.memory_limit,
            reason,
        };
        if total > fixed.memory_limit {
            return Err(over(total, MemoryReason::OverLimit));
        }
        let mut buffers = Vec::with_capacity(fixed.buffer_lines.len());
        for &lines in &fixed.buffer_lines {
            buffers.push(
                Arena::zeroed(lines)
                    .map_err(|e| over(total, MemoryReason::Refused(e.to_string())))?,
            );
        }
        for init in &fixed.inits {
            let data = init.bytes(&fixed.program);
            let arena = buffers.get_mut(init.buf as usize);
            let bytes: Option<&mut [u8]> =
                arena.map(|a| bytemuck::cast_slice_mut(a.as_mut_slice()));
            if let Some(dst) = bytes.and_then(|b| b.get_mut(init.offset..init.offset + data.len()))
            {
                dst.copy_from_slice(data);
            }
        }
        let delegates = init_delegates(&fixed.program, &fixed.plan)?;
        let state = State::with(&fixed, buffers, fixed.initial.clone(), delegates);
        Ok(Method { fixed, state })
    }

    /// The method name.
    pub fn name(&self) -> &str {
        &self.fixed.plan.name
    }

    /// The declared inputs.
    pub fn inputs(&self) -> Vec<ValueMeta> {
        self.fixed.plan.inputs.iter().map(|&i| meta(&self.fixed.plan, i)).collect()
    }

    /// The declared outputs.
    pub fn outputs(&self) -> Vec<ValueMeta> {
        self.fixed.plan.outputs.iter().map(|&i| meta(&self.fixed.plan, i)).collect()
    }

    /// Bytes of memory this execution state owns (planned arenas and runtime buffers), not
    /// counting what it shares with the method's other states.
    pub fn memory_bytes(&self) -> usize {
        self.state.buffers.iter().map(|b| b.len() * LINE).sum()
    }

    /// Number of instructions over all chains.
    pub fn num_instructions(&self) -> usize {
        self.fixed.plan.chains.iter().map(Vec::len).sum()
    }

    /// The compiled steps, in execution order per chain: what each runs and which original
    /// instructions it stands for.
    pub fn compiled(&self) -> &[CompiledNode] {
        &self.fixed.compiled
    }
}

impl State {
    /// A state of `fixed` over `buffers` (as `fixed.buffer_lines` sizes them), starting from
    /// `values`.
    fn with(
        fixed: &Compiled,
        buffers: Vec<Arena>,
        values: Vec<Val>,
        delegates: Vec<Option<Box<dyn DelegateHandle>>>,
    ) -> State {
        let threads = fixed.program.inner.options.threads.clone();
        State {
            scratch: Scratch::for_steps(&fixed.chains, &values),
            buffers,
            values,
            delegates,
            scratches: fixed.prepared.iter().map(|_| StepScratch::default()).collect(),
            ctx: KernelContext::new("").with_threads(threads),
            profile: None,
            paused_profile: None,
        }
    }
}

impl Init {
    /// The bytes it copies (none when its source no longer holds them).
    fn bytes<'p>(&self, program: &'p Program) -> &'p [u8] {
        match &self.from {
            InitFrom::File(r) => program.inner.file.bytes().get(r.clone()),
            InitFrom::Ext { source, range } => {
                program.inner.sources.get(*source).and_then(|s| s.bytes().get(range.clone()))
            }
        }
        .unwrap_or(&[])
    }
}

/// The handles of the method's delegates that are not inlined (`None` for those that are),
/// each initialized by its backend.
fn init_delegates(
    program: &Program,
    plan: &MethodPlan,
) -> Result<Vec<Option<Box<dyn DelegateHandle>>>> {
    let options = &program.inner.options;
    let mut delegates: Vec<Option<Box<dyn DelegateHandle>>> =
        Vec::with_capacity(plan.delegates.len());
    for (index, d) in plan.delegates.iter().enumerate() {
        if d.inlined {
            delegates.push(None);
            continue;
        }
        let derr = |source: BackendError| Error::Delegate {
            method: plan.name.clone(),
            instruction: None,
            delegate: index,
            backend: d.id.clone(),
            source,
        };
        // Checked when the method was first loaded: every delegate not inlined has one.
        let Some(backend) = options.backends.get(&d.id) else {
            return Err(Error::Missing {
                method: plan.name.clone(),
                operators: Vec::new(),
                delegates: vec![d.id.clone()],
            });
        };
        let processed = program.inner.file.bytes().get(d.processed.clone()).unwrap_or(&[]);
        let named_data = ProgramData {
            file: program.inner.file.bytes(),
            named: &program.inner.named,
            sources: &program.inner.sources,
        };
        let init = DelegateInit {
            method: &plan.name,
            index,
            processed,
            compile_specs: &d.compile_specs,
            named_data: &named_data,
        };
        delegates.push(Some(backend.init(&init).map_err(derr)?));
    }
    Ok(delegates)
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

/// The name a step is shown by: the operator, `delegate:<id>`, the compiled kernel, or the
/// instruction kind.
pub(crate) fn step_kind(step: &Step) -> String {
    match step {
        Step::Call(call) => match call.callee {
            Callee::Kernel(_) | Callee::Prepared(_) => call.name.to_string(),
            Callee::Delegate(_) => format!("delegate:{}", call.name),
        },
        Step::Move { .. } => "MoveCall".into(),
        Step::JumpFalse { .. } => "JumpFalseCall".into(),
        Step::Free { .. } => "FreeCall".into(),
    }
}

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
                bound: None,
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
                bound: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// ExecuTorch's xor training program: its weights live in the `.ptd` and are planned in
    /// method memory, which every training step updates.
    fn xor() -> Program {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/pte-compat");
        Program::load_with_data(dir.join("xor.pte"), dir.join("xor.ptd")).unwrap()
    }

    /// The bytes of `state`'s buffer `init.buf` where `init` copies its bytes.
    fn at<'s>(state: &'s State, init: &Init, len: usize) -> &'s [u8] {
        let bytes: &[u8] = bytemuck::cast_slice(state.buffers[init.buf as usize].as_slice());
        &bytes[init.offset..init.offset + len]
    }

    #[test]
    fn states_share_the_compiled_method_and_start_from_its_initial_contents() {
        let program = xor();
        let a = program.method("forward").unwrap();
        let b = program.method("forward").unwrap();
        let c = b.another().unwrap();
        assert!(Arc::ptr_eq(&a.fixed, &b.fixed) && Arc::ptr_eq(&a.fixed, &c.fixed));
        assert!(!a.fixed.inits.is_empty());
        for init in &a.fixed.inits {
            let want = init.bytes(&program);
            for state in [&a.state, &b.state, &c.state] {
                assert_eq!(at(state, init, want.len()), want);
            }
        }
        // The states' buffers are their own.
        let (x, y) = (a.state.buffers[0].as_slice(), c.state.buffers[0].as_slice());
        assert_ne!(x.as_ptr(), y.as_ptr());
        // Once every state has gone, loading compiles the method again.
        let weak = Arc::downgrade(&a.fixed);
        drop((a, b, c));
        assert!(weak.upgrade().is_none());
        let d = program.method("forward").unwrap();
        assert_eq!(Arc::strong_count(&d.fixed), 1);
    }
}
