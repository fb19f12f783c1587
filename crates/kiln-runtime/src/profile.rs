//! Optional per-instruction timing: [`Method::set_profiling`] turns it on, every executed
//! instruction then adds its wall time to its own counter, and [`Method::profile`] reads the
//! counters. When profiling is off the step loop pays one branch per instruction.

use std::time::{Duration, Instant};

use crate::method::{Callee, Method, Step};

/// Accumulated time of one instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstructionTime {
    /// Chain index.
    pub chain: usize,
    /// Instruction index in the chain.
    pub instruction: usize,
    /// What the instruction runs: the operator `name.overload`, `delegate:<backend id>`, or
    /// the instruction kind (`MoveCall`, `JumpFalseCall`, `FreeCall`).
    pub op: String,
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

fn step_name(step: &Step) -> String {
    match step {
        Step::Call(call) => match call.callee {
            Callee::Kernel(_) => call.name.to_string(),
            Callee::Delegate(_) => format!("delegate:{}", call.name),
        },
        Step::Move { .. } => "MoveCall".into(),
        Step::JumpFalse { .. } => "JumpFalseCall".into(),
        Step::Free { .. } => "FreeCall".into(),
    }
}

impl Method {
    /// Turns per-instruction timing on (counters start at zero) or off (counters dropped).
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(|| Box::new(Counters::for_chains(&self.chains)));
    }

    /// Whether per-instruction timing is on.
    pub fn is_profiling(&self) -> bool {
        self.profile.is_some()
    }

    /// The accumulated time of every instruction that ran since profiling was turned on, in
    /// chain and instruction order; empty when profiling is off.
    pub fn profile(&self) -> Vec<InstructionTime> {
        let Some(counters) = &self.profile else { return Vec::new() };
        let mut out = Vec::new();
        for (c, (chain, steps)) in counters.per_step.iter().zip(&self.chains).enumerate() {
            for (pc, (&(count, nanos), step)) in chain.iter().zip(steps).enumerate() {
                if count > 0 {
                    out.push(InstructionTime {
                        chain: c,
                        instruction: pc,
                        op: step_name(step),
                        count,
                        total: Duration::from_nanos(nanos),
                    });
                }
            }
        }
        out
    }
}
