//! The worker threads a method's kernels split their work over: one persistent pool (shared
//! by the methods given the same [`Threads`]), or none.
//!
//! # How a call runs
//! [`Threads::for_each`] deals a call's tasks out as contiguous ranges, one per thread taking
//! part: the calling thread first, then the workers. Each thread runs its own range front to
//! back, so on an idle machine a layer split like the one before it finds its part of the
//! input in the cache of the core that wrote it. A thread whose range is done takes tasks
//! from the back of the others' ranges, one at a time (a claim is one compare-and-swap on the
//! range's word). The caller waits only for tasks another thread has claimed and not yet
//! finished: a worker the OS has not scheduled yet claims nothing, so its range is done by the
//! caller, and when it arrives after the call it finds nothing left and touches nothing of it.
//! A call thus costs at most the caller's own work plus the rest of one task a preempted
//! worker holds; kernels cut their work into a few tasks per thread ([`Threads::tasks_for`]).
//!
//! # Waiting
//! Idle workers spin for [`SPIN`] after a call, then sleep until the next (a new pool's
//! workers sleep until the first call): the layers of a network arrive tens of microseconds
//! apart, and waking a sleeping thread costs about as much (a shorter spin made
//! efficientnet_b0 14% slower on the 2-core development machine, `bench/RESULTS.md`). A caller
//! left waiting for a claimed task spins for [`WAIT_SPIN`], then yields its core until
//! [`WAIT_YIELD`] (a preempted worker sharing that core runs; with none, the caller goes on at
//! once), then parks. Parking sooner made efficientnet_b0 10% slower on that machine: most
//! such waits last a task's length, less than a park and a wake-up cost on a virtual machine.
//!
//! # Placement
//! A worker that finds itself on the core another thread of its call was last on (Linux
//! wakes a thread beside its waker, and may leave it there while another core idles) moves
//! off it at once, its allowed cores unchanged (`placement.rs`).
//!
//! # A busy machine
//! A worker is only worth its core when the core is free. Where other processes keep every
//! core busy, a spinning worker takes a share of a core from the caller (or from the process
//! beside it, which the OS then moves onto the caller's core), and a worker preempted in the
//! middle of a task holds the call up. So:
//! - the caller measures how long it waits for a core (Linux's run delay, per window of
//!   calls), and how long it waits for the tasks workers hold against how long running them
//!   itself would have taken; when the cores are taken, or the workers cost more than they
//!   save, its calls run on it alone for a while and the workers sleep;
//! - a worker that waits as long for its core stays out of calls for a while;
//!
//! each time, from `MIN_BACK_OFF`, twice as long while that is found again on return, up
//! to `MAX_BACK_OFF` (`contention.rs`). Meanwhile [`Threads::available`] is 1, so kernels
//! take their one-thread paths. On an idle machine neither happens.
//!
//! Running alone keeps the CPU share of one thread, where two threads beside busy processes
//! get two shares less what the caller loses waiting for a preempted worker, about a time
//! slice of the OS a wait: the second share pays when the calls are long against that. So a
//! method whose last run (each execute names its method to [`Threads::admit`]) found the
//! cores taken and took a millisecond or more a call runs its next with the workers in every
//! call, the caller waiting for them spinning (`choice.rs`); every other run is guarded as
//! above, and an idle machine runs as if there were no choice.
//!
//! # Concurrent callers
//! Methods run on several threads share a pool. Each execute is a run the pool lets in
//! ([`Threads::admit`]): up to as many runs at once as the pool has threads; a caller beyond
//! that waits for a run to end (rather than share the cores in time slices, each starting from
//! caches another run filled). While more than one run is in, each runs its calls on its
//! caller alone (workers would only take cores from the other runs), so callers up to the
//! thread count each get a core. A pool also serves one call at a time: a call that finds it
//! serving another (calls made outside runs) runs on its calling thread alone instead of
//! waiting.
//!
//! Kernels split only independent outputs (row blocks of a GEMM's output channels, pixel
//! ranges, channel planes of a depthwise convolution), never a sum, and every output element
//! is computed by the same code whatever the split: results are bit-identical for every
//! thread count, and whichever thread runs a task.

mod choice;
mod contention;
mod placement;
mod pool;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use pool::Pool;
pub use pool::{WorkerSpan, MAX_SPANS, SHARED_WAIT_SPIN, SPIN, WAIT_SPIN, WAIT_YIELD};

/// Most threads a [`Threads`] may have.
pub const MAX_THREADS: usize = 256;

/// Tasks per thread of a split whose tasks share nothing (runs of output rows, channels or
/// planes, each with its own share of the weights), for [`Threads::tasks_for`]: each thread
/// runs its own tasks in order, so more of them cost little on an idle machine (4 against 1
/// on mobilenet_v2, efficientnet_b0 and resnet50: within 3%, `bench/RESULTS.md`), and a
/// thread the OS preempts holds a call up by a quarter of its share at most.
pub const TASKS_PER_THREAD: usize = 4;

/// Elements of a pass of some dozen operations each (an activation, a softmax, a norm, a
/// channel scale) below which it runs on the calling thread: a split costs a few
/// microseconds, about what 16K such elements take.
pub const PARALLEL_ELEMENTS: usize = 1 << 14;

/// A pool of worker threads, or none (everything runs on the calling thread).
#[derive(Clone, Debug, Default)]
pub struct Threads {
    pool: Option<Arc<Pool>>,
}

/// Why the worker threads could not be started.
#[derive(Debug, thiserror::Error)]
#[error("starting {threads} worker threads: {reason}")]
pub struct ThreadsError {
    /// Threads asked for.
    pub threads: usize,
    /// What the system said.
    pub reason: String,
}

impl Threads {
    /// `n` threads in all (the caller and `n - 1` workers); 0 or 1 means no pool. An error
    /// when `n` exceeds [`MAX_THREADS`] or the system refuses the threads.
    pub fn new(n: usize) -> Result<Threads, ThreadsError> {
        if n <= 1 {
            return Ok(Threads::default());
        }
        if n > MAX_THREADS {
            return Err(ThreadsError { threads: n, reason: format!("at most {MAX_THREADS}") });
        }
        let pool =
            Pool::start(n).map_err(|e| ThreadsError { threads: n, reason: e.to_string() })?;
        Ok(Threads { pool: Some(Arc::new(pool)) })
    }

    /// Threads that work, the caller included: 1 without a pool.
    pub fn count(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.workers() + 1)
    }

    /// Threads a split can use now: [`Threads::count`], or 1 while the pool serves another
    /// caller's call or runs its calls on the caller alone because other work holds the
    /// cores (see the module documentation). Kernels size their splits by it, so that a call
    /// the caller will run alone takes the one-thread path (a split run on one thread costs
    /// more than no split).
    pub fn available(&self) -> usize {
        match &self.pool {
            Some(p) if p.open() => self.count(),
            _ => 1,
        }
    }

    /// Lets a run of calls (one execute of a method) in, waiting while as many runs as
    /// [`Threads::count`] are in; the run lasts until the guard goes. A thread already in a
    /// run is let in again at once. While more than one run is in, each runs its calls on its
    /// caller alone: callers up to the thread count each get a core, and callers beyond it
    /// wait for one instead of sharing the cores in time slices (each of which would start
    /// from caches the others filled). Without a pool every run is let in.
    ///
    /// `method` names the work of the run: runs given the same value should do about the
    /// same work (kiln's runtime passes its compiled method's address), for what one run
    /// found decides how the next uses the workers on a busy machine (see "A busy machine"
    /// above).
    pub fn admit(&self, method: usize) -> Admission<'_> {
        let pool = self.pool.as_deref().filter(|_| !IN_RUN.get());
        let run = pool.map(|pool| {
            let start = pool.admit(method);
            IN_RUN.set(true);
            (pool, start)
        });
        Admission(run)
    }

    /// How many tasks to cut a split into: `per_thread` for each thread
    /// [`available`](Threads::available) (at least one each), at most `units` (the
    /// indivisible pieces there are); 1 when one thread is available. Kernels pick
    /// `per_thread` from what a task costs them: more tasks bound the wait for a preempted
    /// thread, fewer keep each task's fixed cost (packing, halos) small.
    pub fn tasks_for(&self, per_thread: usize, units: usize) -> usize {
        match self.available() {
            1 => 1,
            n => n.saturating_mul(per_thread.max(1)).min(units).max(1),
        }
    }

    /// How many tasks a pass over `len` elements in `units` indivisible runs is cut into:
    /// [`TASKS_PER_THREAD`] per thread from [`PARALLEL_ELEMENTS`] on, else 1.
    pub fn tasks_for_elements(&self, len: usize, units: usize) -> usize {
        match len >= PARALLEL_ELEMENTS {
            true => self.tasks_for(TASKS_PER_THREAD, units),
            false => 1,
        }
    }

    /// Keeps every worker from claiming tasks until the guard goes, as if the OS never
    /// scheduled them.
    #[cfg(test)]
    pub(crate) fn hold_workers(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        self.pool.as_ref().map(|p| p.hold_workers())
    }

    /// Turns the recording of worker spans on or off; what was recorded stays until
    /// [`Threads::take_spans`] takes it. While on, each worker notes when it took part in a
    /// call ([`WorkerSpan`]); without a pool there is nothing to record.
    pub fn record_spans(&self, on: bool) {
        if let Some(pool) = &self.pool {
            pool.record_spans(on);
        }
    }

    /// The worker spans recorded so far (taken: the record starts again empty), and how many
    /// past [`MAX_SPANS`] were not kept.
    pub fn take_spans(&self) -> (Vec<WorkerSpan>, u64) {
        self.pool.as_ref().map_or((Vec::new(), 0), |p| p.take_spans())
    }

    /// Runs `f` on every task and returns when all are done. The calling thread starts with
    /// the first task and the first run of tasks; each worker starts with the next run; which
    /// thread runs a task varies with how fast each gets to it. A panic in `f` is raised again
    /// on the calling thread once every thread has stopped. `f` must not call `for_each` on
    /// the same pool (that call would run on its calling thread alone).
    pub fn for_each<I>(&self, tasks: I, f: impl Fn(I::Item) + Sync)
    where
        I: IntoIterator,
        I::Item: Send,
    {
        let mut none = Vec::<()>::new();
        self.for_each_with(tasks, &mut none, |(), t| f(t));
    }

    /// [`Threads::for_each`] with a scratch value per thread: `f` gets the scratch of the
    /// thread running it (`scratch` grows to [`Threads::count`] values, made by `Default`,
    /// and keeps them for the next call; a call run on the caller alone uses the first).
    pub fn for_each_with<I, S>(
        &self,
        tasks: I,
        scratch: &mut Vec<S>,
        f: impl Fn(&mut S, I::Item) + Sync,
    ) where
        I: IntoIterator,
        I::Item: Send,
        S: Default + Send,
    {
        if scratch.len() < self.count() {
            scratch.resize_with(self.count(), S::default);
        }
        match &self.pool {
            Some(pool) => pool.run(tasks.into_iter(), scratch, f),
            None => {
                let s = &mut scratch[0];
                tasks.into_iter().for_each(|t| f(s, t));
            }
        }
    }
}

thread_local! {
    /// Whether the thread is in a run [`Threads::admit`] let in.
    static IN_RUN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A run let in by [`Threads::admit`], until it is dropped.
#[must_use = "the run ends when the admission is dropped"]
#[derive(Debug)]
pub struct Admission<'a>(Option<(&'a Pool, pool::RunStart)>);

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        if let Some((pool, run)) = self.0.take() {
            IN_RUN.set(false);
            pool.leave(run);
        }
    }
}

/// The first of the errors a split's threads kept (`errors` in thread order, each taken from
/// its thread's scratch); every one is consumed, so none is left for the next split.
pub fn first_error<E>(errors: impl Iterator<Item = E>) -> Result<(), E> {
    errors.reduce(|first, _| first).map_or(Ok(()), Err)
}

/// The calling thread's element of a per-thread scratch (made when there is none yet): what
/// a layer run on the calling thread alone uses.
pub fn caller_scratch<S: Default>(scratch: &mut Vec<S>) -> &mut S {
    if scratch.is_empty() {
        scratch.push(S::default());
    }
    &mut scratch[0]
}

/// `len` items split into at most `parts` contiguous runs of whole `unit`s (the last run
/// takes the remainder), as even as the units allow; no empty runs.
pub fn split(
    len: usize,
    unit: usize,
    parts: usize,
) -> impl Iterator<Item = std::ops::Range<usize>> {
    let units = len.div_ceil(unit.max(1));
    let parts = parts.clamp(1, units.max(1));
    (0..parts).filter_map(move |p| {
        let (lo, hi) = (p * units / parts, (p + 1) * units / parts);
        let range = (lo * unit).min(len)..(hi * unit).min(len);
        (!range.is_empty()).then_some(range)
    })
}

/// Pairs each run of `runs` (consecutive from 0, as [`split`] gives them) with its piece of
/// `slice`: `unit` values per item of the run.
pub fn with_pieces<T>(
    runs: impl Iterator<Item = std::ops::Range<usize>>,
    slice: &mut [T],
    unit: usize,
) -> impl Iterator<Item = (std::ops::Range<usize>, &mut [T])> {
    runs.scan(slice, move |rest, r| {
        let (piece, tail) = std::mem::take(rest).split_at_mut(r.len() * unit);
        *rest = tail;
        Some((r, piece))
    })
}
