//! The pool's contract: every task once, results whatever the threads do, callers never
//! waiting for a worker that is not there.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::choice::RunSeen;
use super::pool::MAX_CLAIMS;
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
    for failing in 0..4 {
        let caught = catch_unwind(AssertUnwindSafe(|| {
            threads.for_each(0..4, |i| {
                std::thread::sleep(Duration::from_micros(100));
                assert!(i != failing, "task {i} fails");
            });
        }));
        // The task's own panic, wherever it ran.
        let payload = caught.expect_err("the panic reaches the caller");
        let message = payload.downcast_ref::<String>().map(String::as_str);
        assert_eq!(message, Some(format!("task {failing} fails").as_str()));
    }
    // The pool still works after a panic.
    let mut out = [0u8; 4];
    threads.for_each(out.iter_mut(), |o| *o = 1);
    assert_eq!(out, [1; 4]);
}

/// Whether the current thread is one of a pool's workers.
fn on_worker() -> bool {
    std::thread::current().name().is_some_and(|n| n.starts_with("kiln-worker"))
}

#[test]
fn a_call_completes_when_a_worker_is_never_scheduled() {
    let threads = Threads::new(3).unwrap();
    let gate = threads.hold_workers();
    let ran_on_worker = AtomicBool::new(false);
    for round in 0..20usize {
        let mut out = vec![0usize; 9];
        let mut scratch: Vec<usize> = Vec::new();
        threads.for_each_with(out.iter_mut().enumerate(), &mut scratch, |s, (i, o)| {
            *s += 1;
            *o = i * round;
            ran_on_worker.fetch_or(on_worker(), Ordering::Relaxed);
            std::thread::sleep(Duration::from_micros(20));
        });
        assert_eq!(out, (0..9).map(|i| i * round).collect::<Vec<_>>());
        // Only the caller's scratch was used: the held workers claimed nothing.
        assert_eq!(scratch, [9, 0, 0]);
    }
    assert!(!ran_on_worker.load(Ordering::Relaxed));
    // Let go, the workers find the finished calls and touch nothing of them; the next
    // calls they take part in.
    drop(gate);
    let names = Mutex::new(std::collections::BTreeSet::new());
    for _ in 0..200 {
        let mut out = [0u8; 8];
        threads.for_each(out.iter_mut(), |o| {
            std::thread::sleep(Duration::from_micros(50));
            names.lock().unwrap().insert(on_worker());
            *o = 1;
        });
        assert_eq!(out, [1; 8]);
        if names.lock().unwrap().len() == 2 {
            break;
        }
    }
    assert_eq!(names.into_inner().unwrap().len(), 2, "the workers never came back");
}

#[test]
fn a_shared_run_keeps_its_workers_in_and_completes_without_them() {
    let threads = Threads::new(3).unwrap();
    let pool = threads.pool.as_deref().unwrap();
    // A run of long calls that found the cores taken: the method's next run is shared.
    pool.remember(5, RunSeen { time: Duration::from_secs(1), calls: 10, busy: true });
    {
        let _run = threads.admit(5);
        assert!(pool.runs_shared());
        // Its calls are dealt out even while the caller would run alone.
        pool.run_alone_for_a_while();
        assert_eq!(threads.available(), 3);
        let gate = threads.hold_workers();
        for round in 0..20usize {
            let mut out = vec![0usize; 9];
            let mut scratch: Vec<usize> = Vec::new();
            threads.for_each_with(out.iter_mut().enumerate(), &mut scratch, |s, (i, o)| {
                *s += 1;
                *o = i * round;
                std::thread::sleep(Duration::from_micros(20));
            });
            assert_eq!(out, (0..9).map(|i| i * round).collect::<Vec<_>>());
            // The held workers claimed nothing: the caller ran every task.
            assert_eq!(scratch, [9, 0, 0]);
        }
        drop(gate);
        let mut out = [0u8; 8];
        threads.for_each(out.iter_mut(), |o| *o = 1);
        assert_eq!(out, [1; 8]);
    }
    assert!(!pool.runs_shared(), "the mode outlived its run");
    // Another method's run, and a run of few-microsecond calls, are guarded.
    {
        let _run = threads.admit(6);
        assert!(!pool.runs_shared());
    }
    pool.remember(5, RunSeen { time: Duration::from_millis(1), calls: 10, busy: true });
    let _run = threads.admit(5);
    assert!(!pool.runs_shared());
}

#[test]
fn a_caller_that_waits_for_a_slow_worker_runs_its_calls_alone() {
    // Each call's worker task takes 2 ms (a worker preempted while it holds a task) while
    // the caller's own takes nothing: the caller loses far more waiting than the worker saves
    // it, and within a few windows its calls run on it alone. (Its waits for a core are left
    // out: they too would make it run alone, where the test runs beside other work.)
    let threads = Threads::new(2).unwrap();
    let pool = threads.pool.as_deref().unwrap();
    pool.ignore_run_delay();
    let mut alone = false;
    for _ in 0..200 {
        let claimed = AtomicBool::new(false);
        let mut out = [0u8; 2];
        threads.for_each(out.iter_mut().enumerate(), |(i, o)| {
            if on_worker() {
                claimed.store(true, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            } else if i == 0 {
                // The caller's first task waits (a little) for the worker to claim the
                // other, so that the caller does not take it too.
                let since = Instant::now();
                while !claimed.load(Ordering::Relaxed)
                    && since.elapsed() < Duration::from_millis(20)
                {
                    std::thread::yield_now();
                }
            }
            *o = i as u8 + 1;
        });
        assert_eq!(out, [1, 2]);
        if pool.runs_solo() {
            alone = true;
            break;
        }
    }
    assert!(alone, "the caller never ran alone");
}

#[test]
fn the_pool_opens_again_when_the_time_alone_is_over_without_a_call() {
    // Kernels size their splits by `available`: one that never splits while the pool is
    // closed must still see it open again.
    let threads = Threads::new(2).unwrap();
    let pool = threads.pool.as_deref().unwrap();
    pool.run_alone_for_a_while();
    assert_eq!(threads.available(), 1);
    std::thread::sleep(contention::MIN_BACK_OFF * 2);
    assert_eq!(threads.available(), 2, "closed after its time alone");
}

#[test]
fn a_caller_takes_the_tasks_of_a_worker_held_in_the_middle_of_its_run() {
    let threads = Threads::new(2).unwrap();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (held, is_held) = std::sync::mpsc::channel();
    let mut out = vec![0u32; 64];
    let done = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let threads = &threads;
        scope.spawn(move || {
            let _gate = threads.hold_workers();
            held.send(()).unwrap();
            // Held until the caller drops `release`.
            let _ = released.recv();
        });
        is_held.recv().unwrap();
        // The caller lets the worker go once it has run a third of the tasks; the worker
        // then claims from its own range while the caller steals from its end.
        let release = Mutex::new(Some(release));
        threads.for_each(out.iter_mut().enumerate(), |(i, o)| {
            if done.fetch_add(1, Ordering::Relaxed) == 20 {
                release.lock().unwrap().take();
            }
            std::thread::sleep(Duration::from_micros(30));
            *o = i as u32 + 1;
        });
    });
    assert_eq!(out, (1..=64).collect::<Vec<_>>());
    assert_eq!(done.into_inner(), 64);
}

#[test]
fn per_thread_scratch_is_one_threads_at_a_time() {
    let threads = Threads::new(4).unwrap();
    let mut scratch: Vec<Vec<usize>> = Vec::new();
    for _ in 0..30 {
        let mut out = vec![0usize; 40];
        threads.for_each_with(out.iter_mut().enumerate(), &mut scratch, |s, (i, o)| {
            // A scratch shared by two threads at once would see another's push here.
            let len = s.len();
            s.push(i);
            std::thread::yield_now();
            assert_eq!(s.len(), len + 1);
            assert_eq!(s.last(), Some(&i));
            *o = i;
        });
        assert_eq!(out, (0..40).collect::<Vec<_>>());
    }
    assert_eq!(scratch.len(), 4);
    let mut all: Vec<usize> = scratch.concat();
    all.sort_unstable();
    assert_eq!(all, (0..40).flat_map(|i| [i; 30]).collect::<Vec<_>>());
}

#[test]
fn concurrent_callers_on_one_pool_each_get_their_results() {
    let threads = Threads::new(2).unwrap();
    std::thread::scope(|s| {
        for caller in 0..4u64 {
            let threads = &threads;
            s.spawn(move || {
                for round in 0..300u64 {
                    let mut out = vec![0u64; 5];
                    threads.for_each(out.iter_mut().enumerate(), |(i, o)| {
                        *o = caller * 1000 + round + i as u64;
                    });
                    let want: Vec<u64> = (0..5).map(|i| caller * 1000 + round + i).collect();
                    assert_eq!(out, want);
                }
            });
        }
    });
}

#[test]
fn runs_beyond_the_thread_count_wait_and_a_thread_in_a_run_is_let_in_again() {
    let threads = Threads::new(3).unwrap();
    let (inside, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
    std::thread::scope(|s| {
        for caller in 0..6u64 {
            let (threads, inside, most) = (&threads, &inside, &most);
            s.spawn(move || {
                for round in 0..50u64 {
                    let _run = threads.admit(0);
                    let _again = threads.admit(0);
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let mut out = [0u64; 9];
                    threads.for_each(out.iter_mut().enumerate(), |(i, o)| {
                        *o = caller * 1000 + round + i as u64;
                    });
                    assert!(out
                        .iter()
                        .enumerate()
                        .all(|(i, &o)| o == caller * 1000 + round + i as u64));
                    std::thread::yield_now();
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            });
        }
    });
    let most = most.load(Ordering::SeqCst);
    assert!((1..=3).contains(&most), "{most} runs at once on 3 threads");
}

#[test]
fn two_runs_at_once_each_run_alone() {
    let threads = Threads::new(2).unwrap();
    let (both_in, checked) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    let run = threads.admit(0);
    assert_eq!(threads.available(), 2);
    std::thread::scope(|s| {
        s.spawn(|| {
            let _run = threads.admit(0);
            both_in.wait();
            checked.wait();
        });
        both_in.wait();
        assert_eq!(threads.available(), 1);
        checked.wait();
    });
    assert_eq!(threads.available(), 2);
    drop(run);
    assert_eq!(threads.available(), 2);
}

#[test]
fn more_tasks_than_claims_run_once_each() {
    let threads = Threads::new(2).unwrap();
    let n = MAX_CLAIMS * 2 + 7;
    let mut out = vec![0u8; n];
    threads.for_each(out.iter_mut(), |o| *o += 1);
    assert!(out.iter().all(|&o| o == 1));
}

#[test]
fn tasks_for_a_split() {
    assert_eq!(Threads::default().tasks_for(4, 100), 1);
    let t = Threads::new(2).unwrap();
    assert_eq!(t.tasks_for(4, 100), 8);
    assert_eq!(t.tasks_for(4, 5), 5);
    assert_eq!(t.tasks_for(0, 100), 2);
    assert_eq!(t.tasks_for(3, 0), 1);
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
