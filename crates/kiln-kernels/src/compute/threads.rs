//! The worker threads a method's kernels split their work over: one persistent pool per
//! loaded method (rayon's, started once at load), or none.
//!
//! [`Threads::for_each`] runs one task on the calling thread and hands the others to the
//! pool, so `n` threads means the caller plus `n - 1` workers. Kernels split only
//! independent outputs (row blocks of a GEMM's output channels, channel planes of a depthwise
//! convolution), never a sum, and every output element is computed by the same code whatever
//! the split: results are bit-identical for every thread count.

use std::sync::Arc;

/// A pool of worker threads, or none (everything runs on the calling thread).
#[derive(Clone, Debug, Default)]
pub struct Threads {
    pool: Option<Arc<rayon::ThreadPool>>,
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

/// Most threads a method may ask for.
pub const MAX_THREADS: usize = 256;

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
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n - 1)
            .thread_name(|i| format!("kiln-worker-{i}"))
            .build()
            .map_err(|e| ThreadsError { threads: n, reason: e.to_string() })?;
        Ok(Threads { pool: Some(Arc::new(pool)) })
    }

    /// Threads that work, the caller included: 1 without a pool.
    pub fn count(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads() + 1)
    }

    /// Runs `f` on every task and returns when all are done: the last task on the calling
    /// thread, the others on the pool (all on the caller without one).
    pub fn for_each<I>(&self, tasks: I, f: impl Fn(I::Item) + Sync)
    where
        I: IntoIterator,
        I::Item: Send,
    {
        let f = &f;
        match &self.pool {
            None => tasks.into_iter().for_each(f),
            Some(pool) => pool.in_place_scope(|s| {
                let mut tasks = tasks.into_iter().peekable();
                while let Some(task) = tasks.next() {
                    if tasks.peek().is_some() {
                        s.spawn(move |_| f(task));
                    } else {
                        f(task);
                    }
                }
            }),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn tasks_run_once_each_on_any_pool() {
        for n in [0, 1, 2, 3] {
            let threads = Threads::new(n).unwrap();
            assert_eq!(threads.count(), n.max(1));
            let mut out = vec![0u32; 7];
            let names = Mutex::new(Vec::new());
            threads.for_each(out.iter_mut().enumerate(), |(i, o)| {
                *o += i as u32 + 1;
                names.lock().unwrap().push(std::thread::current().name().map(str::to_owned));
            });
            assert_eq!(out, vec![1, 2, 3, 4, 5, 6, 7]);
            // The last task ran on the calling thread (the test's), never on a worker.
            let names = names.into_inner().unwrap();
            assert_eq!(names.len(), 7);
            assert!(names.iter().any(|n| !n.as_deref().unwrap_or("").starts_with("kiln-worker")));
        }
        assert!(Threads::new(MAX_THREADS + 1).is_err());
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
