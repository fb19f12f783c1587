//! [`Method`]: one execution state of a loaded method, and everything a caller does with it:
//! make another state, run, read outputs, profile. Loading is [`crate::load`]; the steps a run
//! executes, [`crate::exec`]; the timing, [`crate::profile`].

use std::sync::Arc;

use crate::arena::{Arena, LINE};
use crate::compile::CompiledNode;
use crate::compiled::Compiled;
use crate::data::ProgramData;
use crate::decoded::Decoded;
use crate::delegate::{BackendError, DelegateHandle, DelegateInit};
use crate::error::{Error, MemoryReason, Result};
use crate::exec::{Run, State};
use crate::footprint::Footprint;
use crate::io::{Input, Output, ValueMeta};
use crate::load_times::LoadTimes;
use crate::plan::MethodPlan;
use crate::profile::{Counters, InstructionTime, Timeline};

/// A loaded method, ready to [`execute`](Method::execute): one execution state of a compiled
/// method. Owns its memory (planned arenas, input and runtime buffers) and delegate handles;
/// shares the compiled steps, the prepared (packed) weights and the constants made at load with
/// every other state of the same method ([`Method::another`],
/// [`Program::method`](crate::Program::method) while one lives), and the program's mapped
/// file. `Send`: threads each run their own state, at the same time.
///
/// Two halves: `Compiled` is what loading decided and never changes afterwards, shared;
/// `State` is what a run reads and writes.
pub struct Method {
    pub(crate) fixed: Arc<Compiled>,
    pub(crate) state: State,
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

impl Method {
    /// Another execution state of this method, to run beside this one (on another thread):
    /// its own planned memory, value table and delegate handles, sharing the compiled steps,
    /// the prepared (packed) weights and the constants made at load. The method's predicted
    /// peak (one state's activations and the shared part, [`Method::footprint`]) is what the
    /// limit the program was loaded with bounds; an error when the system refuses the
    /// state's buffers or a delegate's backend refuses a second handle.
    pub fn another(&self) -> Result<Method> {
        Method::with_state(self.fixed.clone())
    }

    /// A new execution state of `fixed`.
    pub(crate) fn with_state(fixed: Arc<Compiled>) -> Result<Method> {
        let delegates = init_delegates(&fixed.decoded, &fixed.plan)?;
        Method::with_state_and_delegates(fixed, delegates)
    }

    /// A new execution state of `fixed` with `delegates`' handles, its predicted peak
    /// checked against the memory limit before its buffers are mapped.
    pub(crate) fn with_state_and_delegates(
        fixed: Arc<Compiled>,
        delegates: Vec<Option<Box<dyn DelegateHandle>>>,
    ) -> Result<Method> {
        fixed.check_predicted()?;
        let refused = |e: std::io::Error| Error::Memory {
            method: fixed.plan.name.clone(),
            what: "a new execution state's buffers".into(),
            bytes: fixed.buffer_lines.iter().map(|&l| (l * LINE) as u64).sum(),
            counted: 0,
            limit: fixed.memory_limit,
            reason: MemoryReason::Refused(e.to_string()),
        };
        let mut buffers = Vec::with_capacity(fixed.buffer_lines.len());
        for &lines in &fixed.buffer_lines {
            buffers.push(Arena::zeroed(lines).map_err(refused)?);
        }
        for init in &fixed.inits {
            let data = init.bytes(&fixed.decoded);
            let arena = buffers.get_mut(init.buf as usize);
            let bytes: Option<&mut [u8]> =
                arena.map(|a| bytemuck::cast_slice_mut(a.as_mut_slice()));
            if let Some(dst) = bytes.and_then(|b| b.get_mut(init.offset..init.offset + data.len()))
            {
                dst.copy_from_slice(data);
            }
        }
        let state = State::new(&fixed, buffers, fixed.initial.clone(), delegates);
        Ok(Method { fixed, state })
    }

    /// The method name.
    pub fn name(&self) -> &str {
        &self.fixed.plan.name
    }

    /// The declared inputs.
    pub fn inputs(&self) -> Vec<ValueMeta> {
        self.fixed.plan.inputs.iter().map(|&i| self.fixed.plan.meta(i)).collect()
    }

    /// The declared outputs.
    pub fn outputs(&self) -> Vec<ValueMeta> {
        self.fixed.plan.outputs.iter().map(|&i| self.fixed.plan.meta(i)).collect()
    }

    /// Bytes of memory this execution state owns (planned arenas and runtime buffers), not
    /// counting what it shares with the method's other states.
    pub fn memory_bytes(&self) -> usize {
        self.state.buffers.iter().map(|b| b.len() * LINE).sum()
    }

    /// What the method holds in memory once loaded, by kind ([`Footprint`]): the packed
    /// weights, constants and mapped pages its states share and one state's activations.
    pub fn footprint(&self) -> Footprint {
        self.fixed.footprint
    }

    /// Bytes the scratch buffers of this execution state hold: what its compiled steps'
    /// kernels (one set, shared by them) allocated at its runs so far (none before the
    /// first), beside the method's [`Method::footprint`].
    pub fn scratch_bytes(&self) -> u64 {
        self.state.kernel_scratch.heap_bytes() as u64
    }

    /// How long loading the method took, by stage (the program's stages included).
    pub fn load_times(&self) -> LoadTimes {
        LoadTimes {
            compile: self.fixed.compile_time,
            pack: self.fixed.pack_time,
            ..self.fixed.decoded.times
        }
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

    /// Runs the method on `inputs` and returns copies of its outputs.
    pub fn execute(&mut self, inputs: &[Input<'_>]) -> Result<Vec<Output>> {
        self.run(inputs)?;
        (0..self.fixed.plan.outputs.len()).map(|i| self.output(i)).collect()
    }

    /// Runs the method on `inputs`; read the results with [`Method::output`].
    pub fn run(&mut self, inputs: &[Input<'_>]) -> Result<()> {
        Run { fixed: &self.fixed, state: &mut self.state }.run(inputs)
    }

    /// Whether the last run read input `index` where it was given, without copying it: an
    /// input no step writes (nor returns) read in place when its bytes are aligned for its
    /// dtype. Inputs of methods the compile stage does not rewrite (control flow, delegates
    /// it does not inline) are always copied into method memory, as ExecuTorch copies them.
    pub fn reads_input_in_place(&self, index: usize) -> bool {
        self.state.read_in_place.get(index).copied().unwrap_or(false)
    }

    /// Output `i` of the last run, copied (tensors in contiguous order).
    pub fn output(&self, i: usize) -> Result<Output> {
        self.state.output(&self.fixed, i)
    }

    /// Turns per-instruction timing on (counters start at zero) or off (counters dropped, and
    /// the timeline with them).
    pub fn set_profiling(&mut self, on: bool) {
        self.state.profile = on.then(|| Box::new(Counters::for_chains(&self.fixed.chains)));
        self.state.paused_profile = None;
        self.state.ctx.threads.record_spans(false);
        self.state.ctx.threads.take_spans();
    }

    /// Turns profiling on (counters at zero) with a timeline of at most `max_events` executed
    /// steps (the memory it takes: 40 bytes an event, reserved as they come), and starts
    /// recording the worker threads' spans.
    pub fn start_timeline(&mut self, max_events: usize) {
        let counters = Counters::with_timeline(&self.fixed.chains, max_events);
        self.state.profile = Some(Box::new(counters));
        self.state.paused_profile = None;
        self.state.ctx.threads.take_spans();
        self.state.ctx.threads.record_spans(true);
    }

    /// The timeline since [`Method::start_timeline`] (the worker spans are taken: a second
    /// call has only those recorded since); `None` without one.
    pub fn timeline(&self) -> Option<Timeline> {
        self.state.profile.as_ref()?.timeline(&self.state.ctx.threads)
    }

    /// Pauses profiling (executes then run as without it, and add nothing) or resumes it with
    /// the counters and timeline as they were; nothing happens when profiling is off.
    pub fn pause_profiling(&mut self, paused: bool) {
        let state = &mut self.state;
        if paused && state.profile.is_some() {
            state.paused_profile = state.profile.take();
        } else if !paused && state.paused_profile.is_some() {
            state.profile = state.paused_profile.take();
        } else {
            return;
        }
        let recording = state.profile.as_ref().is_some_and(|p| p.keeps_timeline());
        state.ctx.threads.record_spans(recording);
    }

    /// Whether per-instruction timing is on.
    pub fn is_profiling(&self) -> bool {
        self.state.profile.is_some()
    }

    /// The accumulated time of every instruction that ran since profiling was turned on, in
    /// chain and instruction order; empty when profiling is off.
    pub fn profile(&self) -> Vec<InstructionTime> {
        let Some(counters) = &self.state.profile else { return Vec::new() };
        counters.times(&self.fixed.chains, &self.fixed.compiled)
    }
}

/// The handles of the method's delegates that are not inlined (`None` for those that are),
/// each initialized by its backend.
pub(crate) fn init_delegates(
    decoded: &Decoded,
    plan: &MethodPlan,
) -> Result<Vec<Option<Box<dyn DelegateHandle>>>> {
    let options = &decoded.options;
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
        let processed = decoded.file.bytes().get(d.processed.clone()).unwrap_or(&[]);
        let named_data = ProgramData {
            file: decoded.file.bytes(),
            named: &decoded.named,
            sources: &decoded.sources,
            // A backend's handle reads what it needs when it runs.
            release: &|_| {},
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compiled::Init;

    /// ExecuTorch's xor training program: its weights live in the `.ptd` and are planned in
    /// method memory, which every training step updates.
    fn xor() -> crate::Program {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/pte-compat");
        crate::Program::load_with_data(dir.join("xor.pte"), dir.join("xor.ptd")).unwrap()
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
            let want = init.bytes(&program.decoded);
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
