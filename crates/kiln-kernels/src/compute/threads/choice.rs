//! How a method's runs use the workers while the cores are taken, chosen from its last run.
//!
//! A run is [`Mode::Guarded`] by default: the workers take part in its calls, and the caller
//! runs its calls alone for a while when it finds the cores taken or the workers stalling it
//! (`contention.rs`). That bounds what a descheduled worker costs, but beside other CPU-bound
//! processes it leaves the method the CPU share of one thread, where two threads get two
//! shares. In [`Mode::Shared`] the workers stay in every call whatever the contention, and
//! the caller waits for a held task by spinning before it parks: the method gets both
//! shares, less the waits for a preempted worker's task, and each such wait lasts about a
//! time slice of the OS (4 ms ticks on the development machine), whatever the call.
//!
//! So the second share pays when a method's calls are long against that wait, and costs
//! when they are short: on the 2-core development machine beside two busy processes,
//! resnet50 (calls of about two milliseconds there) ran 1.20-1.38x faster shared than
//! guarded, while mobilenet_v2 and efficientnet_b0 (calls of a few hundred microseconds),
//! whose runs an earlier choice by timing both modes made mostly shared, ran 1.3-1.45x slower
//! (`bench/RESULTS.md`). A method's next run is shared when its last run, alone in the pool,
//! found the cores taken (its caller's run delay, `contention.rs`) and took at least
//! [`SHARED_CALL`] a call; any other
//! run is guarded, so an idle machine runs exactly as without this choice.

use std::time::Duration;

/// How the calls of one run use the workers (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// The workers take part, and the caller runs its calls alone while it finds the cores
    /// taken.
    Guarded,
    /// The workers take part in every call.
    Shared,
}

/// The time a call of a busy run takes on average (the run's time over its calls) from which
/// the method's runs keep their workers in every call: a wait for a preempted worker is then
/// a fraction of the calls it delays. Beside two busy processes on the development machine,
/// resnet50's runs take 1.6-2.6 ms a call, mobilenet_v2's 0.2-0.45 ms and efficientnet_b0's
/// 0.3-0.5 ms (on free cores 0.6, 0.07 and 0.2 ms).
pub(super) const SHARED_CALL: Duration = Duration::from_millis(1);

/// Methods whose last runs are kept; the one run longest ago makes room for a new one.
const METHODS: usize = 16;

/// What one run alone in the pool found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RunSeen {
    /// How long it took.
    pub time: Duration,
    /// The pool's calls it made (split or not).
    pub calls: u64,
    /// Whether it found the cores taken (its caller waited as long for a core as a window
    /// of `contention.rs` may).
    pub busy: bool,
}

impl RunSeen {
    /// The mode of the next run of the same work.
    fn next_mode(&self) -> Mode {
        let long = self.calls > 0 && self.time >= SHARED_CALL * self.calls as u32;
        match self.busy && long {
            true => Mode::Shared,
            false => Mode::Guarded,
        }
    }
}

/// The last runs of the methods a pool has run, most recent last.
#[derive(Debug, Default)]
pub(super) struct Choices {
    methods: Vec<(usize, RunSeen)>,
}

impl Choices {
    /// The mode of `method`'s next run.
    pub(super) fn mode(&self, method: usize) -> Mode {
        let last = self.methods.iter().find(|(m, _)| *m == method);
        last.map_or(Mode::Guarded, |(_, seen)| seen.next_mode())
    }

    /// Keeps what a run of `method` alone in the pool found.
    pub(super) fn record(&mut self, method: usize, seen: RunSeen) {
        self.methods.retain(|(m, _)| *m != method);
        if self.methods.len() == METHODS {
            self.methods.remove(0);
        }
        self.methods.push((method, seen));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn seen(time: Duration, calls: u64, busy: bool) -> RunSeen {
        RunSeen { time, calls, busy }
    }

    #[test]
    fn busy_runs_of_long_calls_are_shared_and_all_others_guarded() {
        let mut choices = Choices::default();
        assert_eq!(choices.mode(7), Mode::Guarded, "a method never run");
        // 100 calls in 100 ms, busy: shared.
        choices.record(7, seen(MS * 100, 100, true));
        assert_eq!(choices.mode(7), Mode::Shared);
        // The same calls on free cores: guarded.
        choices.record(7, seen(MS * 100, 100, false));
        assert_eq!(choices.mode(7), Mode::Guarded);
        // Busy, but calls of 0.1 ms: guarded.
        choices.record(7, seen(MS * 10, 100, true));
        assert_eq!(choices.mode(7), Mode::Guarded);
        // Just at the bound, and a run of no calls at all.
        choices.record(7, seen(SHARED_CALL * 4, 4, true));
        assert_eq!(choices.mode(7), Mode::Shared);
        choices.record(7, seen(MS, 0, true));
        assert_eq!(choices.mode(7), Mode::Guarded);
        // Each method has its own.
        choices.record(8, seen(MS * 100, 10, true));
        assert_eq!((choices.mode(7), choices.mode(8)), (Mode::Guarded, Mode::Shared));
    }

    #[test]
    fn last_runs_are_kept_for_a_bounded_number_of_methods() {
        let mut choices = Choices::default();
        for method in 0..METHODS * 3 {
            choices.record(method, seen(MS * 100, 10, true));
        }
        assert_eq!(choices.methods.len(), METHODS);
        assert_eq!(choices.mode(METHODS * 3 - 1), Mode::Shared);
        assert_eq!(choices.mode(0), Mode::Guarded, "forgotten");
    }
}
