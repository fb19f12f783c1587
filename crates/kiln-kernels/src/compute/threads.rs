//! The worker threads a method's kernels split their work over: one persistent pool (shared
//! by the methods given the same [`Threads`]), or none.
//!
//! [`Threads::for_each`] hands a call's tasks to the calling thread and the workers alike; the
//! call returns when every task is done. Workers spin for [`SPIN`] after a call before they
//! sleep (a new pool's workers sleep until the first call): the layers of a network arrive tens of microseconds apart, and waking a sleeping
//! thread costs about as much here (20-30 us measured with rayon's pool on the 2-core
//! development machine, which made splitting a 300 us layer slower, not faster).
//!
//! Kernels split only independent outputs (row blocks of a GEMM's output channels, pixel
//! ranges, channel planes of a depthwise convolution), never a sum, and every output element
//! is computed by the same code whatever the split: results are bit-identical for every
//! thread count.
#![allow(unsafe_code)]

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most threads a [`Threads`] may have.
pub const MAX_THREADS: usize = 256;

/// How long an idle worker spins before it sleeps.
pub const SPIN: Duration = Duration::from_millis(2);

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

/// Most worker spans kept while recording; later ones are counted, not kept.
pub const MAX_SPANS: usize = 1 << 20;

/// A stretch of time a worker spent on tasks of one call (see [`Threads::record_spans`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerSpan {
    /// The worker, `0..count() - 1` (the calling thread is not a worker).
    pub worker: usize,
    /// When it started the call's job.
    pub start: Instant,
    /// When it found no task left.
    pub end: Instant,
}

/// Worker spans recorded since recording was turned on.
#[derive(Debug, Default)]
struct Spans {
    kept: Vec<WorkerSpan>,
    dropped: u64,
}

/// A call's work, its lifetime erased: every thread runs it until the call's tasks run out,
/// and it says whether it ran any.
#[derive(Clone, Copy)]
struct JobRef(*const (dyn Fn() -> bool + Sync + 'static));

// SAFETY: the pointee is `Sync` (shared calls from several threads are fine), and
// `Threads::for_each` keeps it alive until every worker is done with it.
unsafe impl Send for JobRef {}

/// What the caller and the workers share.
#[derive(Default)]
struct Shared {
    /// Bumped for each call (and at shutdown); a worker runs the job once per new epoch.
    epoch: AtomicUsize,
    job: Mutex<Option<JobRef>>,
    /// Workers still running the current call's job.
    pending: AtomicUsize,
    /// A worker's run of the job panicked.
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Workers asleep (or about to be), and where they sleep.
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    /// Whether workers record their spans, and where.
    recording: AtomicBool,
    spans: Mutex<Spans>,
}

struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// One call at a time (methods on different threads may share a pool).
    call: Mutex<()>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("workers", &self.workers.len()).finish()
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        drop(self.shared.sleep.lock());
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(shared: &Shared, index: usize) {
    // The epoch a pool starts at: a call published before this thread got to run is still
    // ahead of it.
    let mut seen = 0;
    // Spinning pays between the calls of a run, not before the first: a new worker sleeps.
    let mut spin = Duration::ZERO;
    loop {
        let idle = Instant::now();
        let mut spins = 0u32;
        loop {
            if shared.epoch.load(Ordering::SeqCst) != seen {
                break;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(256) || idle.elapsed() < spin {
                std::hint::spin_loop();
                continue;
            }
            // Sleep. The caller bumps the epoch, then reads `sleepers` (both SeqCst): either
            // it sees this sleeper and notifies under the lock, or this check sees its epoch.
            shared.sleepers.fetch_add(1, Ordering::SeqCst);
            let mut guard = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            while shared.epoch.load(Ordering::SeqCst) == seen {
                guard = shared.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            drop(guard);
            shared.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        seen = shared.epoch.load(Ordering::SeqCst);
        spin = SPIN;
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let job = *shared.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(JobRef(job)) = job {
            // SAFETY: `for_each` published this job and does not return (nor let the closure
            // behind it go) before `pending` is back to zero, which happens below, after the
            // last use.
            let job = unsafe { &*job };
            // The clock is read only while spans are recorded (a profile), not on every call.
            let start = shared.recording.load(Ordering::Relaxed).then(Instant::now);
            match (catch_unwind(AssertUnwindSafe(job)), start) {
                (Ok(true), Some(start)) => {
                    let span = WorkerSpan { worker: index, start, end: Instant::now() };
                    let mut spans = shared.spans.lock().unwrap_or_else(|e| e.into_inner());
                    if spans.kept.len() < MAX_SPANS {
                        spans.kept.push(span);
                    } else {
                        spans.dropped += 1;
                    }
                }
                (Ok(_), _) => {}
                (Err(_), _) => shared.panicked.store(true, Ordering::SeqCst),
            }
        }
        shared.pending.fetch_sub(1, Ordering::Release);
    }
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
        let shared = Arc::new(Shared::default());
        let mut pool = Pool { shared: shared.clone(), workers: Vec::new(), call: Mutex::new(()) };
        for i in 0..n - 1 {
            let shared = shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("kiln-worker-{i}"))
                .spawn(move || worker(&shared, i))
                .map_err(|e| ThreadsError { threads: n, reason: e.to_string() })?;
            pool.workers.push(handle);
        }
        Ok(Threads { pool: Some(Arc::new(pool)) })
    }

    /// Threads that work, the caller included: 1 without a pool.
    pub fn count(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.workers.len() + 1)
    }

    /// Turns the recording of worker spans on or off; what was recorded stays until
    /// [`Threads::take_spans`] takes it. While on,
    /// each worker notes when it took part in a call ([`WorkerSpan`]); without a pool there is
    /// nothing to record.
    pub fn record_spans(&self, on: bool) {
        if let Some(pool) = &self.pool {
            pool.shared.recording.store(on, Ordering::SeqCst);
        }
    }

    /// The worker spans recorded so far (taken: the record starts again empty), and how many
    /// past [`MAX_SPANS`] were not kept.
    pub fn take_spans(&self) -> (Vec<WorkerSpan>, u64) {
        let Some(pool) = &self.pool else { return (Vec::new(), 0) };
        let spans =
            std::mem::take(&mut *pool.shared.spans.lock().unwrap_or_else(|e| e.into_inner()));
        (spans.kept, spans.dropped)
    }

    /// Runs `f` on every task and returns when all are done. The calling thread runs the
    /// first task; it and the workers take the others in turn, so which thread runs which
    /// of those varies. A panic in `f` is raised again on the calling thread once every
    /// thread has stopped. Calls on one pool run one at a time, so `f` must not call
    /// `for_each` on the same pool (it would wait for itself); kernels split one level only.
    pub fn for_each<I>(&self, tasks: I, f: impl Fn(I::Item) + Sync)
    where
        I: IntoIterator,
        I::IntoIter: Send,
        I::Item: Send,
    {
        let Some(pool) = &self.pool else {
            return tasks.into_iter().for_each(f);
        };
        let _call = pool.call.lock().unwrap_or_else(|e| e.into_inner());
        let mut tasks = tasks.into_iter();
        // The calling thread takes the first task before the workers may start. With two
        // threads (the default) and two tasks, each task then runs on the same thread from
        // one call to the next while the worker is awake: a layer split like the one before
        // it finds its part of the input in the cache of the core that wrote it.
        let first = tasks.next();
        let tasks = Mutex::new(tasks);
        let work = || {
            let mut ran = false;
            loop {
                let task = tasks.lock().unwrap_or_else(|e| e.into_inner()).next();
                match task {
                    Some(t) => f(t),
                    None => break ran,
                }
                ran = true;
            }
        };
        let job: &(dyn Fn() -> bool + Sync + '_) = &work;
        // SAFETY: only the lifetime changes. The pointer is read by workers between the epoch
        // bump below and their `pending` decrement; this function waits for `pending` to reach
        // zero (also when `work` panics here) and clears the slot before `work` goes.
        let job: &'static (dyn Fn() -> bool + Sync + 'static) = unsafe { std::mem::transmute(job) };
        let shared = &pool.shared;
        *shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(JobRef(job));
        shared.pending.store(pool.workers.len(), Ordering::SeqCst);
        shared.epoch.fetch_add(1, Ordering::SeqCst);
        if shared.sleepers.load(Ordering::SeqCst) > 0 {
            drop(shared.sleep.lock());
            shared.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| {
            if let Some(task) = first {
                f(task);
            }
            work()
        }));
        while shared.pending.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
        *shared.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Err(panic) = mine {
            resume_unwind(panic);
        }
        if shared.panicked.swap(false, Ordering::SeqCst) {
            panic!("a kiln worker thread panicked");
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_run_once_each_on_any_pool() {
        for n in [0, 1, 2, 3] {
            let threads = Threads::new(n).unwrap();
            assert_eq!(threads.count(), n.max(1));
            for round in 0..50u32 {
                let mut out = vec![0u32; 7];
                threads.for_each(out.iter_mut().enumerate(), |(i, o)| *o += i as u32 + round);
                assert_eq!(out, (0..7).map(|i| i + round).collect::<Vec<_>>());
                if round == 25 {
                    // Long enough for the workers to fall asleep: they must wake.
                    std::thread::sleep(SPIN * 2);
                }
            }
        }
        assert!(Threads::new(MAX_THREADS + 1).is_err());
    }

    #[test]
    fn the_calling_thread_runs_the_first_task() {
        let threads = Threads::new(2).unwrap();
        let caller = std::thread::current().id();
        for _ in 0..100 {
            let first = Mutex::new(None);
            threads.for_each(0..4, |i| {
                if i == 0 {
                    *first.lock().unwrap() = Some(std::thread::current().id());
                }
                std::thread::sleep(Duration::from_micros(20));
            });
            assert_eq!(first.into_inner().unwrap(), Some(caller));
        }
    }

    #[test]
    fn recorded_spans_lie_within_the_calls_workers_took_part_in() {
        let threads = Threads::new(2).unwrap();
        let task = |_| std::thread::sleep(Duration::from_micros(200));
        threads.for_each(0..4, task);
        assert_eq!(threads.take_spans(), (Vec::new(), 0), "nothing recorded while off");
        threads.record_spans(true);
        let mut calls = Vec::new();
        for _ in 0..20 {
            let start = Instant::now();
            threads.for_each(0..8, task);
            calls.push((start, Instant::now()));
        }
        threads.record_spans(false);
        threads.for_each(0..8, task);
        let (spans, dropped) = threads.take_spans();
        assert_eq!(dropped, 0);
        assert!(!spans.is_empty(), "the worker took part in some of 20 calls of 8 tasks");
        for s in &spans {
            assert_eq!(s.worker, 0);
            assert!(s.start <= s.end);
            // The worker starts after the call is published and ends before it returns.
            assert!(calls.iter().any(|&(a, b)| a <= s.start && s.end <= b), "{s:?}");
        }
        assert_eq!(threads.take_spans().0, Vec::new(), "taken spans are gone");
        assert_eq!(Threads::default().take_spans(), (Vec::new(), 0));
    }

    #[test]
    fn workers_take_part_and_a_panic_reaches_the_caller() {
        let threads = Threads::new(2).unwrap();
        let names = Mutex::new(std::collections::BTreeSet::new());
        for _ in 0..200 {
            threads.for_each(0..8, |_| {
                std::thread::sleep(Duration::from_micros(50));
                let name = std::thread::current().name().unwrap_or("").to_string();
                names.lock().unwrap().insert(name.starts_with("kiln-worker"));
            });
            if names.lock().unwrap().len() == 2 {
                break;
            }
        }
        assert_eq!(names.into_inner().unwrap().len(), 2, "one side never ran a task");
        let caught = catch_unwind(AssertUnwindSafe(|| {
            threads.for_each(0..4, |i| assert!(i != 2, "task 2 fails"));
        }));
        assert!(caught.is_err());
        // The pool still works after a panic.
        let mut out = [0u8; 4];
        threads.for_each(out.iter_mut(), |o| *o = 1);
        assert_eq!(out, [1; 4]);
    }

    #[test]
    fn split_covers_every_item_once_in_whole_units() {
        for len in [0, 1, 5, 14, 15, 28, 29, 100, 1000] {
            for unit in [1, 3, 14] {
                for parts in [0, 1, 2, 3, 8] {
                    let runs: Vec<_> = split(len, unit, parts).collect();
                    assert!(runs.len() <= parts.max(1));
                    let mut next = 0;
                    for r in &runs {
                        assert_eq!(r.start, next, "{len} {unit} {parts}: {runs:?}");
                        assert!(r.start.is_multiple_of(unit) && !r.is_empty());
                        next = r.end;
                    }
                    assert_eq!(next, len, "{len} {unit} {parts}: {runs:?}");
                }
            }
        }
    }
}
