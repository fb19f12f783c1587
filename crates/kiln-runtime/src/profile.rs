//! Optional per-step timing: [`Method::set_profiling`] turns it on, every executed step of the
//! compiled method then adds its wall time to its own counter, and [`Method::profile`] reads
//! the counters with the original instructions each step stands for. When profiling is off
//! the step loop pays one branch per step.

use std::time::{Duration, Instant};

use crate::method::{Method, Step};

/// Accumulated time of one step of the compiled method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstructionTime {
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

/// Per-instruction counters, indexed like the chains.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// `(count, total nanoseconds)` per instruction of each chain.
    per_step: Vec<Vec<(u64, u64)>>,
}

impl Counters {
    pub(crate) fn for_chains(chains: &[Vec<Step>]) -> Counters {
        Counters { per_step: chains.iter().map(|c| vec![(0, 0); c.len()]).collect() }
    }

    /// Adds the time since `start` to instruction `pc` of chain `c`.
    #[inline]
    pub(crate) fn record(&mut self, c: usize, pc: usize, start: Instant) {
        let nanos = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        if let Some(slot) = self.per_step.get_mut(c).and_then(|ch| ch.get_mut(pc)) {
            slot.0 += 1;
            slot.1 = slot.1.saturating_add(nanos);
        }
    }
}

impl Method {
    /// Turns per-instruction timing on (counters start at zero) or off (counters dropped).
    pub fn set_profiling(&mut self, on: bool) {
        self.state.profile = on.then(|| Box::new(Counters::for_chains(&self.fixed.chains)));
    }

    /// Whether per-instruction timing is on.
    pub fn is_profiling(&self) -> bool {
        self.state.profile.is_some()
    }

    /// The accumulated time of every instruction that ran since profiling was turned on, in
    /// chain and instruction order; empty when profiling is off.
    pub fn profile(&self) -> Vec<InstructionTime> {
        let Some(counters) = &self.state.profile else { return Vec::new() };
        let mut out = Vec::new();
        let mut compiled = self.fixed.compiled.iter();
        for (c, (chain, steps)) in counters.per_step.iter().zip(&self.fixed.chains).enumerate() {
            for (&(count, nanos), step) in chain.iter().zip(steps) {
                let node = compiled.next();
                if count > 0 {
                    let origins = node.map(|n| n.origins.clone()).unwrap_or_default();
                    out.push(InstructionTime {
                        chain: c,
                        instruction: origins.first().map_or(0, |&o| o as usize),
                        op: crate::method::step_kind(step),
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
