//! Whether the cores a pool runs on are taken by other work: how long a thread waited for a
//! core over a window of its time (Linux's run delay, `/proc/thread-self/schedstat`), and
//! whether the caller lost more waiting for the workers' tasks than they saved it.
//!
//! When other processes keep every core busy, a worker only takes a share of a core from the
//! caller, or from the process beside it, which the OS then moves onto the caller's core;
//! and a worker that shares its core with another process is preempted in the middle of its
//! tasks, holding the caller up. The caller alone, its core to itself, is faster. So:
//! - the caller measures its own waits ([`Contention`]): when, over a window, it waited
//!   [`CONTENDED`] of the window for a core, or longer for the tasks workers held than
//!   running those tasks itself would have taken ([`Stalls`]), its calls run on it alone for
//!   a while; when that time is over and it still waited for a core meanwhile (the cores are
//!   taken even without the workers), or when the workers' return is found contended again,
//!   for twice as long, up to [`MAX_BACK_OFF`];
//! - a worker measures its own while it runs and spins ([`Window`]), and stays out of calls
//!   for a while when it waited as long.
//!
//! The two measures of the caller see different things. The run delay sees a caller that
//! shares its core; the stalls see a worker that shares its core with another process and
//! is preempted holding a task, while the caller has a core of its own (beside one busy
//! process on the 2-core development machine, windows where the caller waited 58% of the
//! time for such a task while its run delay stayed under [`CONTENDED`]; idle, the waits
//! stayed under 8% of a window, about a tenth of what the workers saved).

use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// How long calls run without a worker the first time it is found not to have a core of
/// its own.
pub(super) const MIN_BACK_OFF: Duration = Duration::from_millis(10);

/// The longest calls run without a worker at once: how soon kiln uses a core that has
/// become free again.
pub(super) const MAX_BACK_OFF: Duration = Duration::from_millis(320);

/// The share of a window a thread may wait for a core before kiln takes its cores to be
/// busy. On the idle 2-core development machine, 2 windows in 1,108 reached it (other
/// threads of the system ran a few hundred microseconds); beside a CPU-bound process, the
/// windows of a caller sharing the cores with a worker waited 26-98%.
const CONTENDED: f64 = 0.25;

/// How long a window lasts at least (each measure reads a file: a few microseconds).
const WINDOW: Duration = Duration::from_millis(5);

/// A window of a thread's time: when it started and the thread's run delay then (`None`
/// where the OS does not say).
#[derive(Debug)]
pub(super) struct Window {
    start: Instant,
    delay: Option<u64>,
}

impl Window {
    /// A window of the calling thread's time from `now`.
    pub(super) fn start(now: Instant) -> Window {
        Window { start: now, delay: run_delay() }
    }

    /// Whether the calling thread (the one that started the window) waited for a core
    /// [`CONTENDED`] of the window that ends `now` (false where the OS does not say),
    /// starting the next; `None` while the window is shorter than [`WINDOW`].
    pub(super) fn contended(&mut self, now: Instant) -> Option<bool> {
        let span = now - self.start;
        if span < WINDOW {
            return None;
        }
        let delay = run_delay();
        let waited = match (self.delay, delay) {
            (Some(then), Some(now)) => waited_for_a_core(now.saturating_sub(then), span),
            _ => false,
        };
        *self = Window { start: now, delay };
        Some(waited)
    }
}

/// Whether a thread that waited `delay_ns` nanoseconds for a core (its run delay) over `span`
/// found the cores taken: waited [`CONTENDED`] of it or more.
pub(super) fn waited_for_a_core(delay_ns: u64, span: Duration) -> bool {
    delay_ns as f64 / span.as_nanos().max(1) as f64 >= CONTENDED
}

/// What the workers cost and saved the caller over a window of calls dealt out to them.
#[derive(Debug, Default)]
pub(super) struct Stalls {
    /// How long the caller waited for tasks workers had claimed.
    waited: Duration,
    /// How long the caller would have taken to run the workers' tasks itself, estimated from
    /// its own time per task in the same calls.
    saved: Duration,
}

impl Stalls {
    /// Counts one call: the caller ran `mine` of its `claims` in `worked`, then waited
    /// `waited` for the rest. A call the workers ran entirely counts as no saving (nothing
    /// says what the caller would have taken).
    pub(super) fn call(&mut self, claims: usize, mine: usize, worked: Duration, waited: Duration) {
        self.waited += waited;
        if mine > 0 {
            let theirs = claims.saturating_sub(mine) as u32;
            self.saved += worked / mine as u32 * theirs;
        }
    }

    /// Whether the workers cost the caller more than they saved it.
    pub(super) fn lost(&self) -> bool {
        self.waited > self.saved
    }
}

/// What a pool knows of the competition for its caller's core.
#[derive(Debug, Default)]
pub(super) struct Contention {
    /// The thread measured, and its window.
    window: Option<(ThreadId, Window)>,
    /// Calls run on the caller alone until then.
    solo_until: Option<Instant>,
    /// How long calls ran alone last time.
    pause: Duration,
    /// The workers' cost and saving in the current window.
    stalls: Stalls,
    /// Set by a test that needs the run delay out of the way.
    #[cfg(test)]
    pub(super) ignore_run_delay: bool,
}

impl Contention {
    /// Whether the call about to be served runs on the calling thread alone.
    pub(super) fn solo(&mut self) -> bool {
        let now = Instant::now();
        match self.solo_until {
            Some(until) if now < until => true,
            Some(_) => {
                // The time alone is over. If the caller still waited for a core meanwhile,
                // the cores are taken even without the workers: stay alone, longer. Else try
                // the workers again (keeping the pause, to double it if that is contended).
                self.solo_until = None;
                self.measure(now) == Some(true) && self.go_solo(now)
            }
            None => match self.measure(now) {
                Some(true) => self.go_solo(now),
                Some(false) => {
                    self.pause = Duration::ZERO;
                    false
                }
                None => false,
            },
        }
    }

    /// Whether the calls run on the caller alone now: a time alone that is not over.
    pub(super) fn alone_now(&self) -> bool {
        self.solo_until.is_some_and(|until| Instant::now() < until)
    }

    /// Runs the calls alone from now, as when the cores were found taken.
    #[cfg(test)]
    pub(super) fn go_solo_now(&mut self) {
        self.go_solo(Instant::now());
    }

    /// Runs the calls alone from `now`, twice as long as last time.
    fn go_solo(&mut self, now: Instant) -> bool {
        self.pause = longer(self.pause);
        self.solo_until = Some(now + self.pause);
        true
    }

    /// [`Window::contended`] of the calling thread's window; a new window when there is none
    /// or, at its end, it was another thread's.
    fn measure(&mut self, now: Instant) -> Option<bool> {
        if let Some((thread, window)) = &mut self.window {
            // The thread is only looked up when the window is due (once per window).
            if now - window.start < WINDOW {
                return None;
            }
            if *thread == std::thread::current().id() {
                let lost = std::mem::take(&mut self.stalls).lost();
                let waited = window.contended(now);
                #[cfg(test)]
                let waited = waited.map(|w| w && !self.ignore_run_delay);
                return waited.map(|waited| waited || lost);
            }
        }
        self.window = Some((std::thread::current().id(), Window::start(now)));
        self.stalls = Stalls::default();
        None
    }

    /// Counts a call dealt out to the workers ([`Stalls::call`]).
    pub(super) fn served(
        &mut self,
        claims: usize,
        mine: usize,
        worked: Duration,
        waited: Duration,
    ) {
        self.stalls.call(claims, mine, worked, waited);
    }
}

/// How long to stay out (the caller's calls alone, or a worker out of calls) when the cores
/// are found taken after staying out for `last` (zero the first time): [`MIN_BACK_OFF`], then
/// twice as long each time, up to [`MAX_BACK_OFF`].
pub(super) fn longer(last: Duration) -> Duration {
    (last * 2).clamp(MIN_BACK_OFF, MAX_BACK_OFF)
}

/// Nanoseconds the calling thread has waited on a run queue for a core (the second field of
/// Linux's `/proc/thread-self/schedstat`); `None` where the OS does not say.
pub(super) fn run_delay() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_thread_found_the_cores_taken_from_a_quarter_of_its_time_waiting() {
        assert!(waited_for_a_core(250_000, MS));
        assert!(!waited_for_a_core(249_000, MS));
        assert!(!waited_for_a_core(0, Duration::ZERO));
    }

    #[test]
    fn workers_lose_when_the_caller_waits_longer_than_their_tasks_would_take_it() {
        // The caller ran 2 of 4 claims in 1 ms: the workers' 2 would have taken it 1 ms.
        let mut stalls = Stalls::default();
        stalls.call(4, 2, MS, MS / 2);
        assert!(!stalls.lost());
        stalls.call(4, 2, MS, MS * 2);
        // 2.5 ms waited against 2 ms saved over the two calls.
        assert!(stalls.lost());
        // A call the caller ran alone (all 4 claims) saves nothing and costs nothing.
        let mut alone = Stalls::default();
        alone.call(4, 4, MS, Duration::ZERO);
        assert!(!alone.lost());
        // A call the workers ran entirely: any wait is lost.
        let mut none = Stalls::default();
        none.call(4, 0, Duration::ZERO, MS / 10);
        assert!(none.lost());
    }
}
