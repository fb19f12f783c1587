//! Optional per-step timing: [`Method::set_profiling`] turns it on, every executed step of the
//! compiled method then adds its wall time to its own counter, and [`Method::profile`] reads
//! the counters with the original instructions each step stands for. When profiling is off
//! the step loop pays one branch per step.
//!
//! [`Method::start_timeline`] also keeps every executed step as an event with its start and
//! duration, and the spans the worker threads spent on the steps' tasks
//! ([`Method::timeline`]): what trace viewers and ETDump files show.
//!
//! [`Method::set_profiling`]: crate::Method::set_profiling
//! [`Method::profile`]: crate::Method::profile
//! [`Method::start_timeline`]: crate::Method::start_timeline
//! [`Method::timeline`]: crate::Method::timeline

use std::time::{Duration, Instant};

use kiln_kernels::compute::threads::{Threads, WorkerSpan};

use crate::compile::CompiledNode;
use crate::step::{step_kind, Step};

/// Accumulated time of one step of the compiled method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstructionTime {
    /// The step: its index in [`Method::compiled`](crate::Method::compiled).
    pub step: usize,
    /// Chain index.
    pub chain: usize,
    /// The first original instruction the step stands for (its index in the chain).
    pub instruction: usize,
    /// What the step runs: the operator `name.overload`, a compiled kernel
    /// (`conv2d[convolution.out+hardtanh.out]`), `delegate:<backend id>`, or the instruction
    /// kind (`MoveCall`, `JumpFalseCall`, `FreeCall`).
    pub op: String,
    /// The original instructions the step stands for, ascending.
    pub origins: Vec<u32>,
    /// Their operators, in the same order.
    pub operators: Vec<String>,
    /// How many times it ran.
    pub count: u64,
    /// Total wall time over those runs.
    pub total: Duration,
}

/// One executed step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepEvent {
    /// The step: its index in [`Method::compiled`](crate::Method::compiled) (chains one
    /// after the other).
    pub step: usize,
    /// When it started, since [`Timeline::epoch`].
    pub start: Duration,
    /// How long it ran, on the calling thread.
    pub duration: Duration,
}

/// Every step executed since [`Method::start_timeline`](crate::Method::start_timeline), in
/// order, and what the worker threads did meanwhile.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// When the timeline started.
    pub epoch: Instant,
    /// The executed steps, at most the number asked for.
    pub events: Vec<StepEvent>,
    /// Steps executed past that number (not kept).
    pub dropped: u64,
    /// The worker threads' spans on the steps' tasks (see [`WorkerSpan`]), by start.
    pub workers: Vec<WorkerSpan>,
    /// Worker spans past [`kiln_kernels::compute::threads::MAX_SPANS`] (not kept).
    pub workers_dropped: u64,
}

/// The events being kept.
#[derive(Debug)]
struct Recording {
    epoch: Instant,
    events: Vec<StepEvent>,
    capacity: usize,
    dropped: u64,
}

/// Per-instruction counters, indexed like the chains, and the timeline when kept.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// `(count, total nanoseconds)` per instruction of each chain.
    per_step: Vec<Vec<(u64, u64)>>,
    /// Where each chain's steps start in [`Method::compiled`](crate::Method::compiled).
    first_step: Vec<usize>,
    recording: Option<Recording>,
}

impl Counters {
    pub(crate) fn for_chains(chains: &[Vec<Step>]) -> Counters {
        let first_step = chains
            .iter()
            .scan(0, |next, c| {
                let first = *next;
                *next += c.len();
                Some(first)
            })
            .collect();
        Counters {
            per_step: chains.iter().map(|c| vec![(0, 0); c.len()]).collect(),
            first_step,
            recording: None,
        }
    }

    /// Adds the time since `start` to instruction `pc` of chain `c`, and keeps the event when
    /// a timeline is on.
    #[inline]
    pub(crate) fn record(&mut self, c: usize, pc: usize, start: Instant) {
        let duration = start.elapsed();
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        if let Some(slot) = self.per_step.get_mut(c).and_then(|ch| ch.get_mut(pc)) {
            slot.0 += 1;
            slot.1 = slot.1.saturating_add(nanos);
        }
        if let Some(r) = &mut self.recording {
            if r.events.len() < r.capacity {
                let step = self.first_step.get(c).map_or(pc, |f| f + pc);
                let start = start.saturating_duration_since(r.epoch);
                r.events.push(StepEvent { step, start, duration });
            } else {
                r.dropped += 1;
            }
        }
    }

    /// Counters at zero that also keep a timeline of at most `max_events` executed steps
    /// (the memory it takes: 40 bytes an event, reserved as they come).
    pub(crate) fn with_timeline(chains: &[Vec<Step>], max_events: usize) -> Counters {
        let mut counters = Counters::for_chains(chains);
        counters.recording = Some(Recording {
            epoch: Instant::now(),
            events: Vec::new(),
            capacity: max_events,
            dropped: 0,
        });
        counters
    }

    /// Whether they keep a timeline.
    pub(crate) fn keeps_timeline(&self) -> bool {
        self.recording.is_some()
    }

    /// The timeline kept, with the worker spans `threads` recorded (taken: a second call has
    /// only those recorded since); `None` without one.
    pub(crate) fn timeline(&self, threads: &Threads) -> Option<Timeline> {
        let r = self.recording.as_ref()?;
        let (mut workers, workers_dropped) = threads.take_spans();
        workers.sort_by_key(|w| w.start);
        Some(Timeline {
            epoch: r.epoch,
            events: r.events.clone(),
            dropped: r.dropped,
            workers,
            workers_dropped,
        })
    }

    /// The accumulated time of every step of `chains` (described by `compiled`, in the same
    /// order) that ran, in chain and step order.
    pub(crate) fn times(
        &self,
        chains: &[Vec<Step>],
        compiled: &[CompiledNode],
    ) -> Vec<InstructionTime> {
        let mut out = Vec::new();
        let mut compiled = compiled.iter();
        let mut index = 0;
        for (c, (chain, steps)) in self.per_step.iter().zip(chains).enumerate() {
            for (&(count, nanos), step) in chain.iter().zip(steps) {
                let node = compiled.next();
                index += 1;
                if count > 0 {
                    let origins = node.map(|n| n.origins.clone()).unwrap_or_default();
                    out.push(InstructionTime {
                        step: index - 1,
                        chain: c,
                        instruction: origins.first().map_or(0, |&o| o as usize),
                        op: step_kind(step),
                        origins,
                        operators: node.map(|n| n.operators.clone()).unwrap_or_default(),
                        count,
                        total: Duration::from_nanos(nanos),
                    });
                }
            }
        }
        out
    }
}
