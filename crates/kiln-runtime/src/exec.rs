//! Execution: setting inputs, the step loop, kernel/delegate calls over disjoint borrows of
//! the method's memory, and reading outputs.
//!
//! A call borrows its tensors from the buffers with [`kiln_kernels::arena::split_regions`]:
//! read tensors as shared slices, written tensors as exclusive slices, so a kernel can never
//! see an output aliasing one of its inputs. The scratch vectors that hold the borrowed views
//! keep their capacity from call to call (their element lifetimes are re-tied per call by
//! [`relife`]), so steady-state execution does not allocate.

use kiln_kernels::arena::{split_regions, Access, Borrowed, Region};
use kiln_kernels::{
    Arg, Capacity, KernelContext, OutKind, Scalar, Shape, TensorMut, TensorRef, ViewOut,
};

use crate::arena::{Arena, Line, LINE};
use crate::compile::bound::{self, BoundError, Constants};
use crate::compile::StepScratch;
use crate::compiled::Compiled;
use crate::delegate::DelegateHandle;
use crate::error::{describe_tensor, Error, MemoryReason, Result};
use crate::io::{Input, Output, OutputTensor};
use crate::profile::Counters;
use crate::step::{Call, Callee, Role, Step};
use crate::value::{Storage, TensorSlot, Val};

/// Moves a vector's allocation to a vector of another element type of the same layout (the
/// same type with another lifetime): the vector is emptied and collected in place. The
/// standard library reuses the allocation when source and target elements have the same size
/// and alignment (its in-place collect); that is an optimization, not a documented guarantee,
/// so the test `relife_keeps_the_allocation` checks it for every element type used here: if a
/// future std stopped doing it, execution would allocate again and that test would fail.
fn relife<A, B>(mut v: Vec<A>) -> Vec<B> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

/// One tensor a call touches.
#[derive(Clone, Copy, Debug)]
struct Use {
    value: u32,
    access: Access,
    /// Index of its region in the sorted region list, if it lives in method memory.
    region: Option<u32>,
}

/// What a call writes back into the value table afterwards.
#[derive(Clone, Copy, Debug)]
enum Post {
    Shape(u32, Shape),
    Scalar(u32, Scalar),
    View { value: u32, shape: Shape, of: u32 },
}

/// Reusable per-call vectors.
#[derive(Default)]
pub(crate) struct Scratch {
    uses: Vec<Use>,
    /// (buffer, start, end, access, use index), sorted by buffer then start.
    entries: Vec<(u32, usize, usize, Access, u32)>,
    regions: Vec<Region>,
    identity: Vec<usize>,
    /// Per argument position: range in `uses`/`ints`.
    pos: Vec<(u32, u32)>,
    ints: Vec<i64>,
    post: Vec<Post>,
    borrowed: Vec<Option<Borrowed<'static>>>,
    refs: Vec<TensorRef<'static>>,
    opt_refs: Vec<Option<TensorRef<'static>>>,
    singles: Vec<Option<TensorMut<'static>>>,
    lists: Vec<TensorMut<'static>>,
    args: Vec<Arg<'static>>,
    outs: Vec<kiln_kernels::Out<'static, 'static>>,
}

impl Scratch {
    /// Scratch sized for the largest call of `chains`.
    pub(crate) fn for_steps(chains: &[Vec<Step>], values: &[Val]) -> Scratch {
        let mut max_args = 0;
        let mut max_uses = 0;
        let mut max_ints = 0;
        for step in chains.iter().flatten() {
            let Step::Call(c) = step else { continue };
            max_args = max_args.max(c.args.len());
            let mut uses = 0;
            let mut ints = 0;
            for &a in c.args.iter() {
                match values.get(a as usize) {
                    Some(Val::Tensor(_)) => uses += 1,
                    Some(Val::TensorList(l)) => uses += l.len(),
                    Some(Val::OptionalTensorList(l)) => uses += l.len(),
                    Some(Val::IntList(l)) => ints += l.len(),
                    _ => {}
                }
            }
            max_uses = max_uses.max(uses);
            max_ints = max_ints.max(ints);
        }
        Scratch {
            uses: Vec::with_capacity(max_uses),
            entries: Vec::with_capacity(max_uses),
            regions: Vec::with_capacity(max_uses),
            identity: Vec::with_capacity(max_uses),
            pos: Vec::with_capacity(max_args),
            ints: Vec::with_capacity(max_ints),
            post: Vec::with_capacity(max_uses + max_args),
            borrowed: Vec::with_capacity(max_uses),
            refs: Vec::with_capacity(max_uses),
            opt_refs: Vec::with_capacity(max_uses),
            singles: Vec::with_capacity(max_uses),
            lists: Vec::with_capacity(max_uses),
            args: Vec::with_capacity(max_args),
            outs: Vec::with_capacity(max_args),
        }
    }
}

fn bytes_of(buf: &[Line]) -> &[u8] {
    bytemuck::cast_slice(buf)
}

/// What a run reads and writes.
pub(crate) struct State {
    /// Planned arenas (memory_id 1.. at 0..), owned buffers, then the compiled memory plan's
    /// buffer; cache lines.
    pub buffers: Vec<Arena>,
    pub values: Vec<Val>,
    /// Per delegate, its handle (`None` for one inlined at decode, which no call names).
    pub delegates: Vec<Option<Box<dyn DelegateHandle>>>,
    /// The buffers the prepared kernels reuse: one set for the state, since its steps run
    /// one at a time, grown to what the largest step needs.
    pub kernel_scratch: StepScratch,
    pub ctx: KernelContext,
    pub scratch: Scratch,
    /// Per-step timing, when on.
    pub profile: Option<Box<Counters>>,
    /// Per-step timing while paused ([`crate::Method::pause_profiling`]).
    pub paused_profile: Option<Box<Counters>>,
    /// Per method input read in place ([`Storage::Input`]), the aligned copy a run makes of
    /// bytes given unaligned for the dtype (empty until one is needed).
    pub input_copies: Vec<Arena>,
    /// Per method input, whether the last run read it where it was given.
    pub read_in_place: Vec<bool>,
}

/// Where a run finds a method input.
#[derive(Clone, Copy)]
enum Placed {
    /// Copied into method memory (or not a tensor).
    Memory,
    /// Read where it was given.
    Given,
    /// Read from the state's aligned copy: this many bytes of it.
    Copied(usize),
}

impl State {
    /// A state of `fixed` over `buffers` (as `fixed.buffer_lines` sizes them), starting from
    /// `values`.
    pub fn new(
        fixed: &Compiled,
        buffers: Vec<Arena>,
        values: Vec<Val>,
        delegates: Vec<Option<Box<dyn DelegateHandle>>>,
    ) -> State {
        let threads = fixed.decoded.options.threads.clone();
        State {
            scratch: Scratch::for_steps(&fixed.chains, &values),
            buffers,
            values,
            delegates,
            kernel_scratch: StepScratch::default(),
            ctx: KernelContext::new("").with_threads(threads),
            profile: None,
            paused_profile: None,
            input_copies: (0..fixed.plan.inputs.len()).map(|_| Arena::empty()).collect(),
            read_in_place: vec![false; fixed.plan.inputs.len()],
        }
    }

    /// The bytes of tensor `t` at its current shape, if it has data.
    fn tensor_bytes<'a>(&'a self, fixed: &'a Compiled, t: &TensorSlot) -> Option<&'a [u8]> {
        let n = t.nbytes();
        match t.storage {
            Storage::Buf { buf, offset } => bytes_of(self.buffers.get(buf as usize)?.as_slice())
                .get(offset..offset.checked_add(n)?),
            storage => fixed.constants().bytes(storage, n),
        }
    }

    /// Output `i` of the last run, copied (tensors in contiguous order).
    pub fn output(&self, fixed: &Compiled, i: usize) -> Result<Output> {
        let method = fixed.plan.name.clone();
        let v = *fixed.plan.outputs.get(i).ok_or_else(|| Error::InvalidProgram {
            method: method.clone(),
            location: format!("outputs[{i}]"),
            reason: format!("the method has {} outputs", fixed.plan.outputs.len()),
        })? as usize;
        Ok(match self.values.get(v) {
            Some(Val::Tensor(t)) => {
                let bytes = self.tensor_bytes(fixed, t).ok_or_else(|| Error::InvalidProgram {
                    method,
                    location: format!("outputs[{i}] (values[{v}])"),
                    reason: "the output tensor has no data".into(),
                })?;
                let data = if t.shape.is_dense_row_major() {
                    bytes.to_vec()
                } else {
                    let mut out = vec![0u8; bytes.len()];
                    crate::layout::strided_to_contiguous(bytes, &mut out, &t.shape, t.dtype.size());
                    out
                };
                Output::Tensor(OutputTensor {
                    dtype: t.dtype,
                    sizes: t.shape.sizes().to_vec(),
                    data,
                })
            }
            Some(Val::Int(x)) => Output::Int(*x),
            Some(Val::Double(x)) => Output::Double(*x),
            Some(Val::Bool(x)) => Output::Bool(*x),
            Some(Val::String(s)) => Output::String(s.to_string()),
            _ => Output::None,
        })
    }
}

/// One run of a method: its compiled steps over one execution state.
pub(crate) struct Run<'a> {
    pub fixed: &'a Compiled,
    pub state: &'a mut State,
}

impl Run<'_> {
    fn exec_err(&self, instruction: usize, op: &str, reason: impl Into<String>) -> Error {
        Error::Execution {
            method: self.fixed.plan.name.clone(),
            instruction,
            op: op.to_string(),
            reason: reason.into(),
        }
    }

    /// Runs the method on `inputs`; the results stay in the state ([`State::output`]).
    pub fn run(&mut self, inputs: &[Input<'_>]) -> Result<()> {
        // One run of the pool's calls: waits while as many runs as the pool has threads go
        // on (other states of this or another method, on other threads). The compiled
        // method, shared by its states, names the run's work.
        let threads = self.state.ctx.threads.clone();
        let _run = threads.admit(std::ptr::from_ref(self.fixed) as usize);
        // Every run starts from the loaded value table (shapes, moved handles, sym ints): only
        // the values a run can change are reset.
        for &v in self.fixed.resets.iter() {
            self.state.values[v as usize].clone_from(&self.fixed.initial[v as usize]);
        }
        let mut copies = std::mem::take(&mut self.state.input_copies);
        let ran = self.set_inputs(inputs, &mut copies).and_then(|placed| {
            let given: Vec<&[u8]> = placed
                .iter()
                .zip(inputs)
                .zip(&copies)
                .map(|((placed, input), copy)| match (placed, input) {
                    (Placed::Given, Input::Tensor(t)) => t.data,
                    (&Placed::Copied(n), _) => &bytes_of(copy.as_slice())[..n],
                    _ => &[],
                })
                .collect();
            self.steps(&given)
        });
        self.state.input_copies = copies;
        ran
    }

    /// Runs every chain's steps, the inputs read in place at `given`.
    fn steps(&mut self, given: &[&[u8]]) -> Result<()> {
        let mut executed: u64 = 0;
        for c in 0..self.fixed.chains.len() {
            let mut pc = 0usize;
            while pc < self.fixed.chains[c].len() {
                executed += 1;
                if executed > self.fixed.instruction_limit {
                    return Err(Error::InstructionLimit {
                        method: self.fixed.plan.name.clone(),
                        limit: self.fixed.instruction_limit,
                    });
                }
                pc = match self.state.profile.is_some() {
                    false => self.step(c, pc, given)?,
                    true => {
                        let start = std::time::Instant::now();
                        let next = self.step(c, pc, given)?;
                        if let Some(p) = &mut self.state.profile {
                            p.record(c, pc, start);
                        }
                        next
                    }
                };
            }
        }
        Ok(())
    }

    /// Runs instruction `pc` of chain `c`; returns the next instruction index.
    fn step(&mut self, c: usize, pc: usize, given: &[&[u8]]) -> Result<usize> {
        match &self.fixed.chains[c][pc] {
            Step::Call(_) => {
                self.call(c, pc, given)?;
                Ok(pc + 1)
            }
            &Step::Move { from, to } => {
                let v = self.state.values.get(from as usize).cloned().unwrap_or(Val::None);
                if let Some(slot) = self.state.values.get_mut(to as usize) {
                    *slot = v;
                }
                Ok(pc + 1)
            }
            &Step::JumpFalse { cond, destination } => {
                let truth = match self.state.values.get(cond as usize) {
                    Some(Val::Bool(b)) => *b,
                    Some(Val::Tensor(t)) => {
                        if t.dtype != kiln_kernels::DType::Bool {
                            return Err(self.exec_err(
                                pc,
                                "JumpFalseCall",
                                format!(
                                    "condition tensor values[{cond}] has dtype {}, not bool",
                                    t.dtype.name()
                                ),
                            ));
                        }
                        let bytes = self.state.tensor_bytes(self.fixed, t).ok_or_else(|| {
                            self.exec_err(
                                pc,
                                "JumpFalseCall",
                                format!("condition values[{cond}] has no data"),
                            )
                        })?;
                        bytes.iter().all(|&b| b != 0)
                    }
                    other => {
                        let tag = other.map_or("missing", Val::tag);
                        return Err(self.exec_err(
                            pc,
                            "JumpFalseCall",
                            format!("condition values[{cond}] is {tag}"),
                        ));
                    }
                };
                Ok(if truth { pc + 1 } else { destination })
            }
            &Step::Free { value } => {
                if let Some(Val::Tensor(t)) = self.state.values.get_mut(value as usize) {
                    t.storage = Storage::Empty;
                }
                Ok(pc + 1)
            }
        }
    }

    /// Checks `inputs` against the declarations and puts each where the steps read it: into
    /// method memory, or (an input read in place) nowhere when it is aligned for its dtype,
    /// else into its aligned copy among `copies`.
    fn set_inputs(&mut self, inputs: &[Input<'_>], copies: &mut [Arena]) -> Result<Vec<Placed>> {
        let method = self.fixed.plan.name.clone();
        if inputs.len() != self.fixed.plan.inputs.len() {
            return Err(Error::InputCount {
                method,
                expected: self.fixed.plan.inputs.len(),
                actual: inputs.len(),
            });
        }
        let mut placed = vec![Placed::Memory; inputs.len()];
        self.state.read_in_place.iter_mut().for_each(|r| *r = false);
        for (index, input) in inputs.iter().enumerate() {
            let v = self.fixed.plan.inputs[index] as usize;
            let mismatch = |expected: String, actual: String| Error::Input {
                method: method.clone(),
                index,
                expected,
                actual,
            };
            let given = |i: &Input<'_>| match i {
                Input::Tensor(t) => describe_tensor(t.dtype, t.sizes),
                Input::Int(x) => format!("Int {x}"),
                Input::Double(x) => format!("Double {x}"),
                Input::Bool(x) => format!("Bool {x}"),
                Input::None => "None".into(),
            };
            match (self.state.values.get(v).cloned(), input) {
                (Some(Val::Tensor(slot)), Input::Tensor(t)) => {
                    let expected = || {
                        let bound =
                            if slot.capacity == Capacity::Static { "" } else { " (upper bounds)" };
                        format!("{}{bound}", describe_tensor(slot.dtype, slot.shape.sizes()))
                    };
                    if t.dtype != slot.dtype {
                        return Err(mismatch(expected(), given(input)));
                    }
                    let shape = slot.shape.with_sizes(t.sizes).map_err(|_| {
                        mismatch(
                            format!("{} (rank {})", expected(), slot.shape.rank()),
                            given(input),
                        )
                    })?;
                    match slot.capacity {
                        Capacity::Static if shape.sizes() != slot.shape.sizes() => {
                            return Err(mismatch(expected(), given(input)))
                        }
                        Capacity::Bound(n) if shape.numel() > n => {
                            return Err(mismatch(
                                format!("{} with at most {n} elements", expected()),
                                given(input),
                            ))
                        }
                        _ => {}
                    }
                    let nbytes = shape.numel() * slot.dtype.size();
                    if t.data.len() != nbytes {
                        return Err(mismatch(
                            format!(
                                "{nbytes} data bytes for {}",
                                describe_tensor(t.dtype, t.sizes)
                            ),
                            format!("{} bytes", t.data.len()),
                        ));
                    }
                    if let Storage::Input { .. } = slot.storage {
                        let align = slot.dtype.size().max(1);
                        placed[index] = if (t.data.as_ptr() as usize).is_multiple_of(align) {
                            self.state.read_in_place[index] = true;
                            Placed::Given
                        } else {
                            let copy = copies.get_mut(index).ok_or_else(|| {
                                mismatch("an input of the method".into(), "no copy".into())
                            })?;
                            if copy.len() * LINE < nbytes {
                                *copy = Arena::zeroed(nbytes.div_ceil(LINE)).map_err(|e| {
                                    Error::Memory {
                                        method: method.clone(),
                                        what: format!("an aligned copy of input {index}"),
                                        bytes: nbytes as u64,
                                        counted: 0,
                                        limit: self.fixed.memory_limit,
                                        reason: MemoryReason::Refused(e.to_string()),
                                    }
                                })?;
                            }
                            let dst: &mut [u8] = bytemuck::cast_slice_mut(copy.as_mut_slice());
                            dst[..nbytes].copy_from_slice(t.data);
                            Placed::Copied(nbytes)
                        };
                        if let Some(Val::Tensor(s)) = self.state.values.get_mut(v) {
                            s.shape = shape;
                        }
                        continue;
                    }
                    let Storage::Buf { buf, offset } = slot.storage else {
                        return Err(mismatch(
                            "a tensor kiln can write".into(),
                            "a constant input".into(),
                        ));
                    };
                    let dst = self
                        .state
                        .buffers
                        .get_mut(buf as usize)
                        .map(|b| bytemuck::cast_slice_mut::<Line, u8>(b.as_mut_slice()))
                        .and_then(|b| b.get_mut(offset..offset + nbytes))
                        .ok_or_else(|| {
                            mismatch("planned input memory".into(), "out of range".into())
                        })?;
                    if shape.is_dense_row_major() {
                        dst.copy_from_slice(t.data);
                    } else {
                        crate::layout::contiguous_to_strided(
                            t.data,
                            dst,
                            &shape,
                            slot.dtype.size(),
                        );
                    }
                    if let Some(Val::Tensor(s)) = self.state.values.get_mut(v) {
                        s.shape = shape;
                    }
                }
                (Some(Val::Int(a)), Input::Int(b)) if a == *b => {}
                (Some(Val::Bool(a)), Input::Bool(b)) if a == *b => {}
                (Some(Val::Double(a)), Input::Double(b)) if doubles_match(a, *b) => {}
                (Some(Val::None), Input::None) => {}
                (Some(Val::Int(a)), _) => {
                    return Err(mismatch(format!("Int {a} (the traced value)"), given(input)))
                }
                (Some(Val::Bool(a)), _) => {
                    return Err(mismatch(format!("Bool {a} (the traced value)"), given(input)))
                }
                (Some(Val::Double(a)), _) => {
                    return Err(mismatch(format!("Double {a} (the traced value)"), given(input)))
                }
                (Some(Val::Tensor(s)), _) => {
                    return Err(mismatch(describe_tensor(s.dtype, s.shape.sizes()), given(input)))
                }
                (other, _) => {
                    return Err(mismatch(
                        other.map_or("a value", |v| v.tag()).to_string(),
                        given(input),
                    ))
                }
            }
        }
        Ok(placed)
    }

    /// Runs the call at instruction `pc` of chain `c`.
    fn call(&mut self, c: usize, pc: usize, given: &[&[u8]]) -> Result<()> {
        let Run { fixed, state } = self;
        let Compiled { plan, chains, prepared, .. } = &**fixed;
        let State { buffers, values, delegates, kernel_scratch, ctx, scratch, .. } = state;
        let Some(Step::Call(call)) = chains.get(c).and_then(|ch| ch.get(pc)) else { return Ok(()) };
        let instruction = call.instruction as usize;
        let fail = |reason: String| Error::Execution {
            method: plan.name.clone(),
            instruction,
            op: call.name.to_string(),
            reason,
        };
        let constants = fixed.constants();
        let constants = constants.with_inputs(given);
        let binding = match call.callee {
            Callee::Prepared(p) => fixed.bindings.get(p).and_then(Option::as_ref).map(|b| (p, b)),
            _ => None,
        };
        if let Some((p, b)) = binding {
            let Some(kernel) = prepared.get(p) else {
                return Err(fail(format!("prepared kernel {p} does not exist")));
            };
            return bound::run(b, kernel.as_ref(), kernel_scratch, ctx, buffers, &constants)
                .map_err(|e| match e {
                    BoundError::Kernel(source) => Error::Kernel {
                        method: plan.name.clone(),
                        instruction,
                        op: call.name.to_string(),
                        source: Box::new(source),
                    },
                    BoundError::Memory(reason) => fail(reason),
                });
        }
        collect_uses(call, values, scratch).map_err(&fail)?;
        let kernels = Kernels { delegates, prepared, scratch: kernel_scratch };
        let result = invoke(call, values, buffers, &constants, scratch, ctx, kernels);
        match result {
            Ok(()) => {}
            Err(CallError::Kernel(source)) => {
                return Err(Error::Kernel {
                    method: plan.name.clone(),
                    instruction,
                    op: call.name.to_string(),
                    source,
                })
            }
            Err(CallError::Delegate(d, source)) => {
                return Err(Error::Delegate {
                    method: plan.name.clone(),
                    instruction: Some(instruction),
                    delegate: d,
                    backend: call.name.to_string(),
                    source,
                })
            }
            Err(CallError::Other(reason)) => return Err(fail(reason)),
        }
        apply_post(values, scratch).map_err(fail)
    }
}

fn doubles_match(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= 1e-4 + 1e-5 * b.abs()
}

enum CallError {
    Kernel(Box<kiln_kernels::KernelError>),
    Delegate(usize, crate::error::BackendError),
    Other(String),
}

fn slot_of(values: &[Val], v: u32) -> std::result::Result<&TensorSlot, String> {
    match values.get(v as usize) {
        Some(Val::Tensor(t)) => Ok(t),
        Some(other) => Err(format!("values[{v}] is {}, expected a Tensor", other.tag())),
        None => Err(format!("values[{v}] does not exist")),
    }
}

/// Lists the tensors the call reads and writes (reads in position order, then writes in the
/// callee's out order) and their memory regions, sorted by buffer and start.
fn collect_uses(call: &Call, values: &[Val], s: &mut Scratch) -> std::result::Result<(), String> {
    s.uses.clear();
    s.entries.clear();
    s.pos.clear();
    s.ints.clear();
    let push = |s: &mut Scratch, v: u32, access: Access| -> std::result::Result<(), String> {
        let t = slot_of(values, v)?;
        let u = s.uses.len() as u32;
        let region = match (t.storage, access) {
            (Storage::Buf { buf, offset }, _) => {
                let len = if access == Access::Write { t.cap_bytes } else { t.nbytes() };
                let end = offset.checked_add(len).ok_or("tensor region overflows")?;
                s.entries.push((buf, offset, end, access, u));
                Some(0)
            }
            (Storage::Empty, _) => return Err(format!("tensor values[{v}] has no data (freed)")),
            (_, Access::Write) => {
                return Err(format!("tensor values[{v}] is a constant and cannot be written"))
            }
            (_, Access::Read) => None,
        };
        s.uses.push(Use { value: v, access, region });
        Ok(())
    };
    for (p, (&v, role)) in call.args.iter().zip(call.roles.iter()).enumerate() {
        let start = s.uses.len() as u32;
        let istart = s.ints.len() as u32;
        if *role == Role::In {
            match values.get(v as usize) {
                Some(Val::Tensor(_)) => push(s, v, Access::Read)?,
                Some(Val::TensorList(items)) => {
                    for &i in items.iter() {
                        push(s, i, Access::Read)?;
                    }
                }
                Some(Val::OptionalTensorList(items)) => {
                    for &i in items.iter().flatten() {
                        if let Some(Val::Tensor(_)) = values.get(i as usize) {
                            push(s, i, Access::Read)?;
                        }
                    }
                }
                Some(Val::IntList(items)) => {
                    for &i in items.iter() {
                        match values.get(i as usize) {
                            Some(Val::Int(x)) => s.ints.push(*x),
                            other => {
                                return Err(format!(
                                    "argument {p}: int list item values[{i}] is {}, not Int",
                                    other.map_or("missing", Val::tag)
                                ))
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        let (a, b) = if matches!(values.get(v as usize), Some(Val::IntList(_))) {
            (istart, s.ints.len() as u32)
        } else {
            (start, s.uses.len() as u32)
        };
        s.pos.push((a, b));
    }
    for &(p, kind) in call.outs.iter() {
        let v = call.args.get(p as usize).copied().ok_or("out position outside the call")?;
        match kind {
            OutKind::Tensor => push(s, v, Access::Write)?,
            OutKind::TensorList => match values.get(v as usize) {
                Some(Val::TensorList(items)) => {
                    for &i in items.iter() {
                        push(s, i, Access::Write)?;
                    }
                }
                _ => return Err(format!("argument {p}: expected an output TensorList")),
            },
            OutKind::Scalar | OutKind::View(_) => {}
        }
    }
    s.entries.sort_unstable_by_key(|e| (e.0, e.1));
    for (k, e) in s.entries.iter().enumerate() {
        if let Some(u) = s.uses.get_mut(e.4 as usize) {
            u.region = Some(k as u32);
        }
    }
    s.regions.clear();
    s.regions.extend(s.entries.iter().map(|e| Region { range: e.1..e.2, access: e.3 }));
    s.identity.clear();
    s.identity.extend(0..s.entries.len());
    Ok(())
}

/// What a call may invoke besides a registered kernel: the state's delegate handles, and the
/// method's prepared kernels with the state's scratch they share.
struct Kernels<'a> {
    delegates: &'a mut [Option<Box<dyn crate::delegate::DelegateHandle>>],
    prepared: &'a [Box<dyn crate::compile::PreparedKernel>],
    scratch: &'a mut crate::compile::StepScratch,
}

/// Borrows the call's tensors, builds the argument and out lists, calls the kernel or
/// delegate, and records shapes and scalars to write back.
fn invoke(
    call: &Call,
    values: &[Val],
    buffers: &mut [Arena],
    constants: &Constants<'_>,
    s: &mut Scratch,
    ctx: &mut kiln_kernels::KernelContext,
    kernels: Kernels<'_>,
) -> std::result::Result<(), CallError> {
    let other = CallError::Other;
    // Split each touched buffer into the call's regions.
    let mut borrowed: Vec<Option<Borrowed<'_>>> = relife(std::mem::take(&mut s.borrowed));
    borrowed.resize_with(s.regions.len(), || None);
    {
        let mut k = 0;
        let mut rest: &mut [Arena] = buffers;
        let mut rest_base = 0u32;
        while k < s.entries.len() {
            let buf = s.entries[k].0;
            let mut end = k;
            while end < s.entries.len() && s.entries[end].0 == buf {
                end += 1;
            }
            let skip = (buf - rest_base) as usize;
            let taken = std::mem::take(&mut rest);
            if skip >= taken.len() {
                return Err(other(format!("buffer {buf} does not exist")));
            }
            let (_, tail) = taken.split_at_mut(skip);
            let (one, tail) = tail.split_at_mut(1);
            rest = tail;
            rest_base = buf + 1;
            let arena: &mut [u8] = bytemuck::cast_slice_mut(one[0].as_mut_slice());
            split_regions(arena, &s.regions[k..end], &s.identity[..end - k], &mut borrowed[k..end])
                .map_err(|e| other(format!("memory plan: {e}")))?;
            k = end;
        }
    }
    // Views of every use, in use order: reads into `refs`, writes into `singles`/`lists`.
    let mut refs: Vec<TensorRef<'_>> = relife(std::mem::take(&mut s.refs));
    let mut singles: Vec<Option<TensorMut<'_>>> = relife(std::mem::take(&mut s.singles));
    let mut lists: Vec<TensorMut<'_>> = relife(std::mem::take(&mut s.lists));
    // Position of each read use inside `refs` equals its use index (reads come first).
    for u in s.uses.iter() {
        let t = slot_of(values, u.value).map_err(other)?;
        match u.access {
            Access::Read => {
                let data: &[u8] = match (u.region, t.storage) {
                    (Some(r), _) => match borrowed.get(r as usize) {
                        Some(Some(Borrowed::Read(d))) => d,
                        _ => return Err(other(format!("values[{}] was not borrowed", u.value))),
                    },
                    (None, storage @ (Storage::File { .. } | Storage::Const { .. })) => {
                        constants.bytes(storage, t.nbytes()).ok_or_else(|| {
                            let within = match storage {
                                Storage::File { .. } => "the file",
                                _ => "its data",
                            };
                            other(format!("constant values[{}] is outside {within}", u.value))
                        })?
                    }
                    (None, storage @ Storage::Ext { .. }) => {
                        constants.bytes(storage, t.nbytes()).ok_or_else(|| {
                            other(format!("external values[{}] is outside its data", u.value))
                        })?
                    }
                    (None, storage @ Storage::Input { index, .. }) => {
                        constants.bytes(storage, t.nbytes()).ok_or_else(|| {
                            other(format!("values[{}] is outside input {index}", u.value))
                        })?
                    }
                    _ => return Err(other(format!("values[{}] has no data", u.value))),
                };
                let r = TensorRef::new(t.dtype, t.shape, data)
                    .map_err(|e| other(format!("values[{}]: {e}", u.value)))?;
                refs.push(r);
            }
            Access::Write => {
                let Some(r) = u.region else {
                    return Err(other(format!("values[{}] is not writable", u.value)));
                };
                let data = match borrowed.get_mut(r as usize).and_then(Option::take) {
                    Some(Borrowed::Write(w)) => w,
                    _ => {
                        return Err(other(format!(
                            "values[{}] was not borrowed for writing",
                            u.value
                        )))
                    }
                };
                let data_len = t.cap_bytes.min(data.len());
                let m = TensorMut::new(t.dtype, t.shape, t.capacity, &mut data[..data_len])
                    .map_err(|e| other(format!("values[{}]: {e}", u.value)))?;
                singles.push(Some(m));
            }
        }
    }
    // Optional lists need `Option` items.
    let mut opt_refs: Vec<Option<TensorRef<'_>>> = relife(std::mem::take(&mut s.opt_refs));
    // Build args.
    let mut args: Vec<Arg<'_>> = relife(std::mem::take(&mut s.args));
    // First pass: fill `opt_refs` so later slices into it stay valid.
    for (p, (&v, role)) in call.args.iter().zip(call.roles.iter()).enumerate() {
        if *role != Role::In {
            continue;
        }
        if let Some(Val::OptionalTensorList(items)) = values.get(v as usize) {
            let (mut k, _) = s.pos[p];
            for item in items.iter() {
                match item.and_then(|i| values.get(i as usize)) {
                    Some(Val::Tensor(_)) => {
                        opt_refs.push(refs.get(k as usize).copied());
                        k += 1;
                    }
                    _ => opt_refs.push(None),
                }
            }
        }
    }
    let mut opt_cursor = 0usize;
    for (p, (&v, role)) in call.args.iter().zip(call.roles.iter()).enumerate() {
        if *role != Role::In {
            args.push(Arg::Output);
            continue;
        }
        let (a, b) = s.pos[p];
        let (a, b) = (a as usize, b as usize);
        args.push(match values.get(v as usize) {
            Some(Val::None) | None => Arg::None,
            Some(Val::Int(x)) => Arg::Int(*x),
            Some(Val::Double(x)) => Arg::Double(*x),
            Some(Val::Bool(x)) => Arg::Bool(*x),
            Some(Val::String(st)) => Arg::String(st),
            Some(Val::Tensor(_)) => {
                Arg::Tensor(*refs.get(a).ok_or_else(|| other("tensor argument missing".into()))?)
            }
            Some(Val::TensorList(_)) => Arg::TensorList(refs.get(a..b).unwrap_or(&[])),
            Some(Val::OptionalTensorList(items)) => {
                let n = items.len();
                let sl = opt_refs.get(opt_cursor..opt_cursor + n).unwrap_or(&[]);
                opt_cursor += n;
                Arg::OptionalTensorList(sl)
            }
            Some(Val::IntList(_)) => Arg::IntList(s.ints.get(a..b).unwrap_or(&[])),
            Some(Val::DoubleList(l)) => Arg::DoubleList(l),
            Some(Val::BoolList(l)) => Arg::BoolList(l),
        });
    }
    // Build outs in the callee's order. Writes were pushed in the same order: singles for
    // Tensor outs, and list outs' items (moved to `lists`).
    let mut outs: Vec<kiln_kernels::Out<'_, '_>> = relife(std::mem::take(&mut s.outs));
    {
        // Move list items out of `singles` into `lists`, in order.
        let mut cursor = 0usize;
        for &(p, kind) in call.outs.iter() {
            match kind {
                OutKind::Tensor => cursor += 1,
                OutKind::TensorList => {
                    let n = match values.get(call.args[p as usize] as usize) {
                        Some(Val::TensorList(items)) => items.len(),
                        _ => 0,
                    };
                    for k in cursor..cursor + n {
                        if let Some(m) = singles.get_mut(k).and_then(Option::take) {
                            lists.push(m);
                        }
                    }
                    cursor += n;
                }
                _ => {}
            }
        }
        let mut cursor = 0usize;
        let mut rest: &mut [TensorMut<'_>] = &mut lists;
        for &(p, kind) in call.outs.iter() {
            let v = call.args[p as usize];
            match kind {
                OutKind::Tensor => {
                    let m = singles
                        .get_mut(cursor)
                        .and_then(Option::take)
                        .ok_or_else(|| other("output tensor missing".into()))?;
                    cursor += 1;
                    outs.push(kiln_kernels::Out::Tensor(m));
                }
                OutKind::TensorList => {
                    let n = match values.get(v as usize) {
                        Some(Val::TensorList(items)) => items.len(),
                        _ => 0,
                    };
                    cursor += n;
                    let taken = std::mem::take(&mut rest);
                    if n > taken.len() {
                        return Err(other("output tensor list missing".into()));
                    }
                    let (head, tail) = taken.split_at_mut(n);
                    rest = tail;
                    outs.push(kiln_kernels::Out::TensorList(head));
                }
                OutKind::Scalar => {
                    outs.push(kiln_kernels::Out::Scalar(match values.get(v as usize) {
                        Some(Val::Double(x)) => Scalar::Double(*x),
                        Some(Val::Bool(x)) => Scalar::Bool(*x),
                        Some(Val::Int(x)) => Scalar::Int(*x),
                        _ => Scalar::Int(0),
                    }))
                }
                OutKind::View(_) => {
                    let t = slot_of(values, v).map_err(other)?;
                    outs.push(kiln_kernels::Out::View(ViewOut {
                        dtype: t.dtype,
                        shape: t.shape,
                        capacity: t.capacity,
                    }));
                }
            }
        }
    }
    // Call.
    let result = match call.callee {
        Callee::Kernel(def) => {
            ctx.op = def.name;
            (def.run)(ctx, &args, &mut outs).map_err(|e| CallError::Kernel(Box::new(e)))
        }
        Callee::Prepared(p) => match kernels.prepared.get(p) {
            Some(k) => k
                .run(kernels.scratch, ctx, &args, &mut outs)
                .map_err(|e| CallError::Kernel(Box::new(e))),
            None => Err(other(format!("prepared kernel {p} does not exist"))),
        },
        Callee::Delegate(d) => match kernels.delegates.get_mut(d).and_then(Option::as_mut) {
            Some(h) => h.execute(ctx, &args, &mut outs).map_err(|e| CallError::Delegate(d, e)),
            None => Err(other(format!("delegate {d} does not exist"))),
        },
    };
    // Record what to write back.
    s.post.clear();
    if result.is_ok() {
        for (o, &(p, kind)) in outs.iter().zip(call.outs.iter()) {
            let v = call.args[p as usize];
            match (o, kind) {
                (kiln_kernels::Out::Tensor(m), _) => s.post.push(Post::Shape(v, *m.shape())),
                (kiln_kernels::Out::TensorList(l), _) => {
                    if let Some(Val::TensorList(items)) = values.get(v as usize) {
                        for (m, &i) in l.iter().zip(items.iter()) {
                            s.post.push(Post::Shape(i, *m.shape()));
                        }
                    }
                }
                (kiln_kernels::Out::Scalar(x), _) => s.post.push(Post::Scalar(v, *x)),
                (kiln_kernels::Out::View(view), OutKind::View(q)) => {
                    if let Some(&of) = call.args.get(q as usize) {
                        s.post.push(Post::View { value: v, shape: view.shape, of });
                    }
                }
                _ => {}
            }
        }
    }
    s.outs = relife(outs);
    s.args = relife(args);
    s.lists = relife(lists);
    s.singles = relife(singles);
    s.borrowed = relife(borrowed);
    s.refs = relife(refs);
    s.opt_refs = relife(opt_refs);
    result
}

fn apply_post(values: &mut [Val], s: &Scratch) -> std::result::Result<(), String> {
    for p in &s.post {
        match *p {
            Post::Shape(v, shape) => {
                if let Some(Val::Tensor(t)) = values.get_mut(v as usize) {
                    t.shape = shape;
                }
            }
            Post::Scalar(v, x) => {
                if let Some(slot) = values.get_mut(v as usize) {
                    *slot = match x {
                        Scalar::Int(i) => Val::Int(i),
                        Scalar::Double(d) => Val::Double(d),
                        Scalar::Bool(b) => Val::Bool(b),
                    };
                }
            }
            Post::View { value, shape, of } => {
                let src = *slot_of(values, of)?;
                let need = shape.numel() * src.dtype.size();
                if need > src.cap_bytes {
                    return Err(format!(
                        "view values[{value}] of {need} bytes is larger than its source values[{of}] ({} bytes)",
                        src.cap_bytes
                    ));
                }
                if let Some(Val::Tensor(t)) = values.get_mut(value as usize) {
                    t.shape = shape;
                    t.storage = src.storage;
                    t.cap_bytes = src.cap_bytes;
                    t.writable = src.writable;
                    t.dtype = src.dtype;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keeps<A, B>(make: impl Fn() -> A) {
        let mut v: Vec<A> = Vec::with_capacity(8);
        v.push(make());
        let (ptr, cap) = (v.as_ptr() as usize, v.capacity());
        let w: Vec<B> = relife(v);
        assert_eq!(
            (w.as_ptr() as usize, w.capacity()),
            (ptr, cap),
            "{}",
            std::any::type_name::<B>()
        );
        assert!(w.is_empty());
    }

    #[test]
    fn relife_keeps_the_allocation() {
        let data = [0u8; 16];
        let t = || {
            TensorRef::new(kiln_kernels::DType::Byte, Shape::contiguous(&[4]).unwrap(), &data)
                .unwrap()
        };
        keeps::<TensorRef<'_>, TensorRef<'_>>(t);
        keeps::<Option<TensorRef<'_>>, Option<TensorRef<'_>>>(|| Some(t()));
        keeps::<Arg<'_>, Arg<'_>>(|| Arg::Int(1));
        keeps::<Option<Borrowed<'_>>, Option<Borrowed<'_>>>(|| None);
        keeps::<Option<TensorMut<'_>>, Option<TensorMut<'_>>>(|| None);
        keeps::<kiln_kernels::Out<'_, '_>, kiln_kernels::Out<'_, '_>>(|| {
            kiln_kernels::Out::Scalar(Scalar::Int(0))
        });
    }
}
