//! The pool itself: the workers' loop, how a call's tasks are dealt out and claimed, and
//! how the caller waits for the claimed ones (see the parent module for the why).
#![allow(unsafe_code)]

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use super::choice::{Choices, Mode, RunSeen};
use super::contention::{longer, run_delay, waited_for_a_core, Contention, Window};
use super::placement::{self, UNKNOWN};

/// How long an idle worker spins after a call before it sleeps.
pub const SPIN: Duration = Duration::from_millis(2);

/// How long a caller with nothing left to claim spins on the tasks other threads hold before
/// it parks.
pub const WAIT_SPIN: Duration = Duration::from_micros(50);

/// How long a caller waiting for the tasks other threads hold keeps yielding its core (to a
/// preempted worker that shares it) before it parks.
pub const WAIT_YIELD: Duration = Duration::from_millis(1);

/// How long a caller of a run whose workers stay in every call ([`Mode::Shared`]) spins on
/// the tasks other threads hold before it parks: giving its core away (a yield, a park) on a
/// busy machine hands its share to the processes beside it, and a parked caller waits for
/// a time slice to be woken (resnet50 beside two busy processes on the 2-core development
/// machine: 100 ms an execute yielding then parking, 80 spinning 1 ms then parking).
pub const SHARED_WAIT_SPIN: Duration = Duration::from_millis(1);

/// How often a worker may move off its call's other cores at most ([`placement`]): a move
/// is two system calls and a migration, tens of microseconds.
const MOVE_EVERY: Duration = Duration::from_millis(5);

/// Most worker spans kept while recording; later ones are counted, not kept.
pub const MAX_SPANS: usize = 1 << 20;

/// A stretch of time a worker spent on tasks of one call (see [`Threads::record_spans`](super::Threads::record_spans)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerSpan {
    /// The worker, `0..count() - 1` (the calling thread is not a worker).
    pub worker: usize,
    /// When it claimed its first task of the call.
    pub start: Instant,
    /// When it finished its last.
    pub end: Instant,
}

/// Most claims one call deals out (a range's ends are 16-bit); a call of more tasks runs
/// several consecutive tasks per claim.
pub(super) const MAX_CLAIMS: usize = u16::MAX as usize;

/// A running pool: its workers and what they share with the callers.
pub(super) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Set while a call is served (methods on different threads may share a pool).
    serving: AtomicBool,
    /// Whether the callers' cores are taken by other work; used by the caller being served.
    contention: Mutex<Contention>,
    /// Runs let in ([`Pool::admit`]); changed under `admission`, read anywhere.
    running: AtomicUsize,
    /// Runs let in so far; changed under `admission`.
    admitted: AtomicU64,
    admission: Mutex<()>,
    /// How each method's runs use the workers on a busy machine.
    choices: Mutex<Choices>,
    /// Calls made so far ([`Pool::run`], split or not).
    calls: AtomicU64,
    /// Notified when a run leaves.
    room: Condvar,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("workers", &self.workers.len()).finish()
    }
}

/// Worker spans recorded since recording was turned on.
#[derive(Debug, Default)]
struct Spans {
    kept: Vec<WorkerSpan>,
    dropped: u64,
}

/// One thread's range of the current call's claims, packed in one word so that a claim is
/// one compare-and-swap: the call's tag (high 32 bits), then the first and the end claim
/// (16 bits each). Alone on its cache lines, so threads claiming from their own ranges do not
/// contend.
#[repr(align(128))]
#[derive(Default)]
struct ClaimRange(AtomicU64);

fn pack_range(tag: u32, start: usize, end: usize) -> u64 {
    (u64::from(tag) << 32) | ((start as u64 & 0xffff) << 16) | (end as u64 & 0xffff)
}

fn unpack_range(word: u64) -> (u32, usize, usize) {
    ((word >> 32) as u32, ((word >> 16) & 0xffff) as usize, (word & 0xffff) as usize)
}

/// The call being served, as the caller publishes it: its tag (high 32 bits, new for every
/// call) and how many threads take part (low bits).
fn pack_call(tag: u32, participants: usize) -> u64 {
    (u64::from(tag) << 32) | participants as u64
}

fn unpack_call(word: u64) -> (u32, usize) {
    ((word >> 32) as u32, (word & 0xffff_ffff) as usize)
}

/// What the threads of a call run, on the caller's stack for the call's duration.
struct Frame<'a> {
    /// Runs claim `c` as thread `p` (0 the caller, `1..` the workers).
    run: &'a (dyn Fn(usize, usize) + Sync),
}

/// What the caller and the workers share.
struct Shared {
    /// The call being served ([`pack_call`]); a new tag wakes the workers.
    call: AtomicU64,
    /// Per thread (0 the caller, `1..` the workers), its range of the call's claims.
    ranges: Box<[ClaimRange]>,
    /// Per thread, the core it was on when it last took part in a call ([`UNKNOWN`] before).
    cores: Box<[AtomicUsize]>,
    /// The current call's [`Frame`]: valid while one of the call's claims is held.
    frame: AtomicPtr<Frame<'static>>,
    /// Claims of the current call not finished yet.
    remaining: AtomicUsize,
    /// Set while the caller sleeps until the claims other threads hold are finished; the
    /// one who finishes the last wakes `caller`.
    parked: AtomicBool,
    caller: Mutex<Option<Thread>>,
    /// The first panic of a task of the current call, for the caller to raise again.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Workers asleep (or about to be), and where they sleep.
    sleepers: AtomicUsize,
    /// Workers staying out of calls after they waited for a core ([`Shared::back_off`]).
    backing_off: AtomicUsize,
    /// Calls run on the caller alone for now ([`Contention`]): spinning workers sleep.
    solo: AtomicBool,
    /// Set while a run whose workers stay in every call ([`Mode::Shared`]) is in: no thread
    /// backs off, the caller never runs alone, and it waits for held tasks by spinning.
    keep: AtomicBool,
    sleep: Mutex<()>,
    wake: Condvar,
    /// Whether workers record their spans, and where.
    recording: AtomicBool,
    spans: Mutex<Spans>,
    /// Held by a test to keep the workers from claiming: a worker the OS does not schedule.
    #[cfg(test)]
    gate: Mutex<()>,
}

impl Pool {
    /// A pool of `n` threads: the caller and `n - 1` workers, asleep until the first call.
    pub(super) fn start(n: usize) -> std::io::Result<Pool> {
        let shared = Arc::new(Shared {
            call: AtomicU64::new(0),
            ranges: (0..n).map(|_| ClaimRange::default()).collect(),
            cores: (0..n).map(|_| AtomicUsize::new(UNKNOWN)).collect(),
            frame: AtomicPtr::new(std::ptr::null_mut()),
            remaining: AtomicUsize::new(0),
            parked: AtomicBool::new(false),
            caller: Mutex::new(None),
            panic: Mutex::new(None),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            backing_off: AtomicUsize::new(0),
            solo: AtomicBool::new(false),
            keep: AtomicBool::new(false),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            recording: AtomicBool::new(false),
            spans: Mutex::new(Spans::default()),
            #[cfg(test)]
            gate: Mutex::new(()),
        });
        let mut pool = Pool {
            shared: shared.clone(),
            workers: Vec::new(),
            serving: AtomicBool::new(false),
            contention: Mutex::new(Contention::default()),
            running: AtomicUsize::new(0),
            admitted: AtomicU64::new(0),
            admission: Mutex::new(()),
            choices: Mutex::new(Choices::default()),
            calls: AtomicU64::new(0),
            room: Condvar::new(),
        };
        for i in 0..n - 1 {
            let shared = shared.clone();
            // On an error the workers started so far stop when `pool` drops.
            let handle = std::thread::Builder::new()
                .name(format!("kiln-worker-{i}"))
                .spawn(move || worker(&shared, i))?;
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// Its worker threads.
    pub(super) fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Whether a call now would be dealt out to the workers: no other call is being served,
    /// the caller does not run its calls alone, and some worker is not staying out.
    pub(super) fn open(&self) -> bool {
        !self.serving.load(Ordering::Relaxed)
            && !self.crowded()
            && (self.keeps_workers() || (!self.alone_now() && !self.all_out()))
    }

    /// Whether a run whose workers stay in every call is in ([`Mode::Shared`]).
    fn keeps_workers(&self) -> bool {
        self.shared.keep.load(Ordering::Relaxed)
    }

    /// Whether the caller's calls run on it alone now ([`Pool::solo`]). Once its time alone
    /// is over, the next call asks [`Contention`] again; until one is dealt out, the pool is
    /// open. (Reading only the flag [`Pool::solo`] sets, kernels that do not split while the
    /// pool is closed never made a call that would clear it: a vit_b_16 process stayed on one
    /// thread for good after 10 ms alone, 365 ms an execute against 218.)
    fn alone_now(&self) -> bool {
        self.shared.solo.load(Ordering::Relaxed)
            && self.contention.lock().is_ok_and(|c| c.alone_now())
    }

    /// Whether more than one run is let in: each then runs on its caller alone, which the OS
    /// gives a core of its own, where dealing calls out to the workers would only take cores
    /// from the other runs.
    fn crowded(&self) -> bool {
        self.running.load(Ordering::Relaxed) > 1
    }

    /// Waits until fewer runs than the pool's threads are let in, then lets the caller's run
    /// of `method` in until [`Pool::leave`]. A run alone in the pool takes the mode
    /// [`Choices`] gives its method.
    pub(super) fn admit(&self, method: usize) -> RunStart {
        let limit = self.workers.len() + 1;
        let mut guard = self.admission.lock().unwrap_or_else(|e| e.into_inner());
        while self.running.load(Ordering::Relaxed) >= limit {
            guard = self.room.wait(guard).unwrap_or_else(|e| e.into_inner());
        }
        let alone = self.running.fetch_add(1, Ordering::Relaxed) == 0;
        let ticket = self.admitted.fetch_add(1, Ordering::Relaxed) + 1;
        drop(guard);
        let mode = match alone {
            true => self.choices.lock().map_or(Mode::Guarded, |c| c.mode(method)),
            false => Mode::Guarded,
        };
        if mode == Mode::Shared {
            let shared = &self.shared;
            shared.keep.store(true, Ordering::SeqCst);
            shared.solo.store(false, Ordering::Relaxed);
            // Workers staying out of calls come back now.
            drop(shared.sleep.lock());
            shared.wake.notify_all();
        }
        let calls = self.calls.load(Ordering::Relaxed);
        // Only a run alone in the pool is timed: the others need not read the file.
        let delay = alone.then(run_delay).flatten();
        RunStart { method, mode, alone, ticket, calls, at: Instant::now(), delay }
    }

    /// Ends a run [`Pool::admit`] let in; a run that was alone in the pool from start to end
    /// is timed for its method's choice.
    pub(super) fn leave(&self, run: RunStart) {
        let time = run.at.elapsed();
        // Read where it was read at the start (a run alone in the pool when let in).
        let delay = run.delay.and_then(|then| Some((then, run_delay()?)));
        if run.mode == Mode::Shared {
            self.shared.keep.store(false, Ordering::SeqCst);
        }
        let calls = self.calls.load(Ordering::Relaxed).wrapping_sub(run.calls);
        let guard = self.admission.lock().unwrap_or_else(|e| e.into_inner());
        self.running.fetch_sub(1, Ordering::Relaxed);
        let alone = run.alone && self.admitted.load(Ordering::Relaxed) == run.ticket;
        drop(guard);
        self.room.notify_one();
        if let (true, Some((then, now))) = (alone, delay) {
            let busy = waited_for_a_core(now.saturating_sub(then), time);
            if let Ok(mut choices) = self.choices.lock() {
                choices.record(run.method, RunSeen { time, calls, busy });
            }
        }
    }

    /// Takes `seen` as what the last run of `method` found.
    #[cfg(test)]
    pub(super) fn remember(&self, method: usize, seen: RunSeen) {
        self.choices.lock().unwrap_or_else(|e| e.into_inner()).record(method, seen);
    }

    /// Whether the run in now keeps its workers in every call ([`Mode::Shared`]).
    #[cfg(test)]
    pub(super) fn runs_shared(&self) -> bool {
        self.keeps_workers()
    }

    /// Whether every worker stays out of calls for now ([`Shared::back_off`]).
    fn all_out(&self) -> bool {
        self.shared.backing_off.load(Ordering::Relaxed) >= self.workers.len()
    }

    /// Whether its calls run on the calling thread alone for now ([`Contention`]); the
    /// workers are told to sleep meanwhile.
    fn solo(&self) -> bool {
        let solo = self.contention.lock().map(|mut c| c.solo()).unwrap_or(false);
        // Written only when it changes: the workers spin on this cache line.
        if self.shared.solo.load(Ordering::Relaxed) != solo {
            self.shared.solo.store(solo, Ordering::Relaxed);
        }
        solo
    }

    /// The pool's turn, if no other call is being served.
    fn turn(&self) -> Option<Serving<'_>> {
        self.serving
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Serving(&self.serving))
    }

    #[cfg(test)]
    pub(super) fn hold_workers(&self) -> std::sync::MutexGuard<'_, ()> {
        self.shared.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes the caller blind to its waits for a core, so that only its waits for the
    /// workers' tasks can make it run alone.
    #[cfg(test)]
    pub(super) fn ignore_run_delay(&self) {
        self.contention.lock().unwrap_or_else(|e| e.into_inner()).ignore_run_delay = true;
    }

    /// Runs the caller's calls alone for a while, as when its cores are found taken.
    #[cfg(test)]
    pub(super) fn run_alone_for_a_while(&self) {
        self.contention.lock().unwrap_or_else(|e| e.into_inner()).go_solo_now();
        self.shared.solo.store(true, Ordering::Relaxed);
    }

    /// Whether the calls run on the caller alone because of its waits ([`Contention`]).
    #[cfg(test)]
    pub(super) fn runs_solo(&self) -> bool {
        self.shared.solo.load(Ordering::Relaxed)
    }

    pub(super) fn record_spans(&self, on: bool) {
        self.shared.recording.store(on, Ordering::SeqCst);
    }

    pub(super) fn take_spans(&self) -> (Vec<WorkerSpan>, u64) {
        let spans =
            std::mem::take(&mut *self.shared.spans.lock().unwrap_or_else(|e| e.into_inner()));
        (spans.kept, spans.dropped)
    }

    /// Runs `f` on every task, `scratch` (at least one value per thread) giving each thread
    /// its own; see [`super::Threads::for_each_with`].
    pub(super) fn run<I, S>(
        &self,
        mut tasks: I,
        scratch: &mut [S],
        f: impl Fn(&mut S, I::Item) + Sync,
    ) where
        I: Iterator,
        I::Item: Send,
        S: Send,
    {
        // Served alone: the pool busy with another caller's call, or every core busy with
        // other work.
        let alone = |tasks: I, scratch: &mut [S]| {
            if let Some(s) = scratch.first_mut() {
                tasks.for_each(|t| f(s, t));
            }
        };
        self.calls.fetch_add(1, Ordering::Relaxed);
        let keep = self.keeps_workers();
        if !keep && self.all_out() {
            return alone(tasks, scratch);
        }
        let Some(serving) = self.turn() else { return alone(tasks, scratch) };
        if self.crowded() || (!keep && self.solo()) {
            drop(serving);
            return alone(tasks, scratch);
        }
        let first = tasks.next();
        let Some(second) = tasks.next() else {
            // One task: no thread to wake.
            drop(serving);
            if let (Some(t), Some(s)) = (first, scratch.first_mut()) {
                f(s, t);
            }
            return;
        };
        let all = [first, Some(second)].into_iter().chain(tasks.map(Some));
        let all = Tasks(all.map(UnsafeCell::new).collect());
        let n = all.0.len();
        let claims = n.min(MAX_CLAIMS);
        let participants = (self.workers.len() + 1).min(claims).min(scratch.len());
        let per_thread = PerThread(scratch.as_mut_ptr(), scratch.len());
        let run = |p: usize, c: usize| {
            // SAFETY: thread `p` of the call is the only one using element `p` (below the
            // scratch's length: `participants` is at most it), and it runs its claims one
            // after the other.
            let s = unsafe { per_thread.get(p) };
            for i in c * n / claims..(c + 1) * n / claims {
                // SAFETY: claim `c` is held by this thread alone, and the claims cover
                // disjoint runs of tasks.
                if let Some(t) = unsafe { all.take(i) } {
                    f(s, t);
                }
            }
        };
        let frame = Frame { run: &run };
        self.serve(&frame, claims, participants, keep);
        drop(serving);
    }

    /// Serves one call of `claims` claims over `participants` threads (the caller, thread 0,
    /// and workers `0..participants - 1`), returning when every claim is finished; raises a
    /// claim's panic again. With `keep` (a [`Mode::Shared`] run) the caller waits for held
    /// claims spinning, and the call does not count towards running alone.
    fn serve(&self, frame: &Frame<'_>, claims: usize, participants: usize, keep: bool) {
        let shared = &self.shared;
        let (last, _) = unpack_call(shared.call.load(Ordering::Relaxed));
        let tag = last.wrapping_add(1);
        shared.remaining.store(claims, Ordering::Relaxed);
        let erased: *const Frame<'_> = frame;
        shared.frame.store(erased as *mut Frame<'static>, Ordering::Relaxed);
        for (q, range) in shared.ranges.iter().enumerate().take(participants) {
            let (start, end) = (q * claims / participants, (q + 1) * claims / participants);
            range.0.store(pack_range(tag, start, end), Ordering::Release);
        }
        shared.cores[0].store(placement::current().unwrap_or(UNKNOWN), Ordering::Relaxed);
        shared.call.store(pack_call(tag, participants), Ordering::SeqCst);
        if shared.sleepers.load(Ordering::SeqCst) > 0 {
            drop(shared.sleep.lock());
            shared.wake.notify_all();
        }
        let started = Instant::now();
        let mine = shared.participate(0, tag, participants);
        let worked = started.elapsed();
        let waited = shared.wait_for_claims(keep);
        if !keep {
            if let Ok(mut contention) = self.contention.lock() {
                contention.served(claims, mine, worked, waited);
            }
        }
        shared.frame.store(std::ptr::null_mut(), Ordering::Relaxed);
        if shared.panicked.swap(false, Ordering::Relaxed) {
            let payload = shared.panic.lock().unwrap_or_else(|e| e.into_inner()).take();
            resume_unwind(payload.unwrap_or_else(|| Box::new("a kiln worker thread panicked")));
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        let (tag, _) = unpack_call(self.shared.call.load(Ordering::SeqCst));
        self.shared.call.store(pack_call(tag.wrapping_add(1), 0), Ordering::SeqCst);
        drop(self.shared.sleep.lock());
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A run [`Pool::admit`] let in: what [`Pool::leave`] needs to time it.
#[derive(Debug)]
pub(super) struct RunStart {
    method: usize,
    mode: Mode,
    /// Whether no other run was in when it was let in.
    alone: bool,
    /// [`Pool::admitted`] once it was let in: unchanged at its end when no run came after.
    ticket: u64,
    /// [`Pool::calls`] when it was let in.
    calls: u64,
    at: Instant,
    /// The caller's run delay then, for a run alone in the pool.
    delay: Option<u64>,
}

/// Releases the pool's turn when the call ends (also when it unwinds).
struct Serving<'a>(&'a AtomicBool);

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// What [`Shared::next_call`] found.
enum Next {
    /// A new call, and whether a window of the worker's time ended uncontended while it
    /// waited for it.
    Call(u64, bool),
    /// Over its last window, the worker waited for a core as long as the caller would
    /// before running alone ([`Window::contended`]).
    Contended,
}

impl Shared {
    /// Claims one of call `tag`'s claims for thread `p` of `participants`: the first of its
    /// own range, else the last of another's.
    fn claim(&self, p: usize, tag: u32, participants: usize) -> Option<usize> {
        if let Some(c) = self.take(p, tag, true) {
            return Some(c);
        }
        (1..participants).find_map(|k| self.take((p + k) % participants, tag, false))
    }

    /// Takes the first (`front`) or the last claim of range `q`, if it is call `tag`'s and
    /// not empty.
    fn take(&self, q: usize, tag: u32, front: bool) -> Option<usize> {
        let range = &self.ranges.get(q)?.0;
        let mut word = range.load(Ordering::Acquire);
        loop {
            let (t, start, end) = unpack_range(word);
            if t != tag || start >= end {
                return None;
            }
            let (next, claim) = match front {
                true => (pack_range(t, start + 1, end), start),
                false => (pack_range(t, start, end - 1), end - 1),
            };
            match range.compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(claim),
                Err(now) => word = now,
            }
        }
    }

    /// Runs the claims thread `p` of `participants` gets of call `tag`, and says how many
    /// it ran. Each claim is
    /// finished (counted off `remaining`) only after the next is taken, so the call and its
    /// frame outlive the last use of them here. A worker records its span here while spans
    /// are recorded, before its last claim finishes.
    fn participate(&self, p: usize, tag: u32, participants: usize) -> usize {
        let Some(mut claim) = self.claim(p, tag, participants) else { return 0 };
        let mut ran = 1;
        // The clock is read only while spans are recorded (a profile), not on every call.
        let start = (p != 0 && self.recording.load(Ordering::Relaxed)).then(Instant::now);
        // SAFETY: a claim of call `tag` is held and not finished, so its caller has not
        // returned (it waits for `remaining` to reach zero) and `frame` is that call's frame,
        // alive.
        let frame = unsafe { &*self.frame.load(Ordering::Acquire) };
        loop {
            if !self.panicked.load(Ordering::Relaxed) {
                if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (frame.run)(p, claim))) {
                    self.panicked.store(true, Ordering::Relaxed);
                    self.panic.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(payload);
                }
            }
            if let Some(next) = self.claim(p, tag, participants) {
                self.remaining.fetch_sub(1, Ordering::AcqRel);
                claim = next;
                ran += 1;
                continue;
            }
            if let Some(start) = start {
                self.record(WorkerSpan { worker: p - 1, start, end: Instant::now() });
            }
            if self.remaining.fetch_sub(1, Ordering::SeqCst) == 1
                && self.parked.load(Ordering::SeqCst)
            {
                if let Some(caller) = &*self.caller.lock().unwrap_or_else(|e| e.into_inner()) {
                    caller.unpark();
                }
            }
            return ran;
        }
    }

    /// The caller's wait for the claims other threads hold: spinning for [`WAIT_SPIN`],
    /// yielding its core until [`WAIT_YIELD`], then parked until the thread that finishes the
    /// last one unparks it (with `keep`, spinning for [`SHARED_WAIT_SPIN`], then parked); says
    /// how long it waited. Either the caller sees them all finished after it sets `parked`, or
    /// the finisher sees `parked` (both sequentially consistent); a wake-up left over from an
    /// earlier call costs a look.
    fn wait_for_claims(&self, keep: bool) -> Duration {
        if self.remaining.load(Ordering::Acquire) == 0 {
            return Duration::ZERO;
        }
        let waiting = Instant::now();
        let mut spins = 0u32;
        while self.remaining.load(Ordering::Acquire) != 0 {
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            match (keep, waiting.elapsed()) {
                (false, w) if w < WAIT_SPIN => std::hint::spin_loop(),
                (false, w) if w < WAIT_YIELD => std::thread::yield_now(),
                (true, w) if w < SHARED_WAIT_SPIN => std::hint::spin_loop(),
                _ => self.park_caller(),
            }
        }
        waiting.elapsed()
    }

    /// Parks the caller until the thread that finishes the last claim unparks it (or a
    /// wake-up left over from an earlier call does).
    fn park_caller(&self) {
        // Callers take turns: this call's caller is the one to wake.
        *self.caller.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
        self.parked.store(true, Ordering::SeqCst);
        if self.remaining.load(Ordering::SeqCst) != 0 {
            std::thread::park();
        }
        self.parked.store(false, Ordering::SeqCst);
    }

    /// Waits (spinning for `spin`, then asleep) until the call's tag differs from `seen` or
    /// the pool shuts down. `window` measures the worker's waits for a core while it is
    /// awake (its tasks and its spins); it starts again after a sleep.
    fn next_call(&self, seen: u32, spin: Duration, window: &mut Option<Window>) -> Next {
        let idle = Instant::now();
        let mut calm = false;
        let mut spins = 0u32;
        loop {
            let word = self.call.load(Ordering::Acquire);
            if unpack_call(word).0 != seen || self.shutdown.load(Ordering::Relaxed) {
                return Next::Call(word, calm);
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            match window.as_mut().and_then(|w| w.contended(now)) {
                // A run that keeps its workers in has them stay whatever their waits.
                Some(true) if self.keep.load(Ordering::Relaxed) => {}
                Some(true) => return Next::Contended,
                Some(false) => calm = true,
                None => {}
            }
            if now - idle < spin && !self.solo.load(Ordering::Relaxed) {
                std::hint::spin_loop();
                continue;
            }
            // Sleep. The caller publishes the call, then reads `sleepers` (both SeqCst):
            // either it sees this sleeper and notifies under the lock, or this check sees its
            // call.
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            let mut guard = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
            while unpack_call(self.call.load(Ordering::SeqCst)).0 == seen
                && !self.shutdown.load(Ordering::SeqCst)
            {
                guard = self.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            drop(guard);
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
            *window = Some(Window::start(Instant::now()));
        }
    }

    /// Moves worker thread `p` of a call of `participants` off the cores the call's other
    /// threads were last on, when it finds itself on one of them (at most once per
    /// [`MOVE_EVERY`], `moved` saying when it last did), and publishes its core; says
    /// whether it moved.
    fn keep_apart(&self, p: usize, participants: usize, moved: &mut Option<Instant>) -> bool {
        let Some(mut here) = placement::current() else { return false };
        let others = || {
            let cores = self.cores.iter().take(participants).enumerate();
            cores.filter(move |&(q, _)| q != p).map(|(_, c)| c.load(Ordering::Relaxed))
        };
        if others().any(|c| c == here) && moved.is_none_or(|t| t.elapsed() >= MOVE_EVERY) {
            let taken: Vec<usize> = others().filter(|&c| c != UNKNOWN).collect();
            let went = placement::move_off(&taken);
            if went {
                here = placement::current().unwrap_or(UNKNOWN);
            }
            *moved = Some(Instant::now());
            self.publish_core(p, here);
            return went;
        }
        self.publish_core(p, here);
        false
    }

    /// Publishes the core thread `p` is on.
    fn publish_core(&self, p: usize, core: usize) {
        if let Some(mine) = self.cores.get(p) {
            mine.store(core, Ordering::Relaxed);
        }
    }

    /// Sleeps for `pause` (or until the pool shuts down, or a run keeps its workers in),
    /// taking no part in calls.
    fn back_off(&self, pause: Duration) {
        self.backing_off.fetch_add(1, Ordering::SeqCst);
        let until = Instant::now() + pause;
        let mut guard = self.sleep.lock().unwrap_or_else(|e| e.into_inner());
        while !self.shutdown.load(Ordering::SeqCst) && !self.keep.load(Ordering::SeqCst) {
            let Some(left) = until.checked_duration_since(Instant::now()) else { break };
            guard = self.wake.wait_timeout(guard, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        drop(guard);
        self.backing_off.fetch_sub(1, Ordering::SeqCst);
    }

    fn record(&self, span: WorkerSpan) {
        let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        if spans.kept.len() < MAX_SPANS {
            spans.kept.push(span);
        } else {
            spans.dropped += 1;
        }
    }
}

/// Worker `index` (thread `index + 1` of a call).
fn worker(shared: &Shared, index: usize) {
    // The tag a pool starts at: a call published before this thread got to run is ahead.
    let mut seen = 0;
    // Spinning pays between the calls of a run, not before the first: a new worker sleeps.
    let mut spin = Duration::ZERO;
    // How long it stayed out last time its core was found taken.
    let mut pause = Duration::ZERO;
    let mut window = None;
    // When it last moved off another participant's core.
    let mut moved = None;
    loop {
        let next = shared.next_call(seen, spin, &mut window);
        spin = SPIN;
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let (word, calm) = match next {
            Next::Call(word, calm) => (word, calm),
            Next::Contended => {
                // Other threads have this worker's core: stay out for a while (the caller
                // takes this worker's tasks), longer each time that is found again.
                pause = longer(pause);
                shared.back_off(pause);
                window = Some(Window::start(Instant::now()));
                seen = unpack_call(shared.call.load(Ordering::Acquire)).0;
                continue;
            }
        };
        if calm {
            // A whole window went by uncontended: the core is free again. (Not a sleep: a
            // worker sleeps while its caller runs alone, however busy the cores are.)
            pause = Duration::ZERO;
        }
        let (tag, participants) = unpack_call(word);
        seen = tag;
        if index + 1 < participants {
            if shared.keep_apart(index + 1, participants, &mut moved) {
                // The move (and waking the core it moved to) is no sign of contention.
                window = Some(Window::start(Instant::now()));
            }
            #[cfg(test)]
            let _gate = shared.gate.lock().unwrap_or_else(|e| e.into_inner());
            shared.participate(index + 1, tag, participants);
        }
    }
}

/// A call's tasks, each taken once by the thread that claims it.
struct Tasks<T>(Vec<UnsafeCell<Option<T>>>);

// SAFETY: each task is taken (moved out) by exactly one thread, the one whose claim covers
// it (claims are handed out once each by compare-and-swap), so sharing the vector only ever
// moves a `T` to one other thread: `T: Send` suffices.
unsafe impl<T: Send> Sync for Tasks<T> {}

impl<T> Tasks<T> {
    /// Takes task `i`.
    ///
    /// # Safety
    /// No other thread may take task `i` at the same time.
    unsafe fn take(&self, i: usize) -> Option<T> {
        // SAFETY: the caller guarantees exclusive access to slot `i`.
        self.0.get(i).and_then(|slot| unsafe { (*slot.get()).take() })
    }
}

/// Each thread's scratch of a call, by thread.
struct PerThread<S>(*mut S, usize);

// SAFETY: thread `p` of a call only ever touches element `p`, and a call's threads have
// distinct indices, so the elements move between threads one at a time: `S: Send` suffices.
unsafe impl<S: Send> Sync for PerThread<S> {}

impl<S> PerThread<S> {
    /// Thread `p`'s scratch.
    ///
    /// # Safety
    /// `p` is below the length, and no other reference to element `p` is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn get(&self, p: usize) -> &mut S {
        debug_assert!(p < self.1);
        // SAFETY: the caller guarantees `p` is in bounds and element `p` is not borrowed.
        unsafe { &mut *self.0.add(p) }
    }
}
