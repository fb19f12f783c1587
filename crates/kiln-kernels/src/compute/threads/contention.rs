//! Whether the cores a pool runs on are taken by other work: how long a thread waited for a
//! core over a window of its time (Linux's run delay, `/proc/thread-self/schedstat`).
//!
//! When other processes keep every core busy, a worker only takes a share of a core from the
//! caller, or from the process beside it, which the OS then moves onto the caller's core;
//! and a worker that shares its core with another process is preempted in the middle of its
//! tasks, holding the caller up. The caller alone, its core to itself, is faster. So:
//! - the caller measures its own waits ([`Contention`]): when it waited [`CONTENDED`] of a
//!   window or more, its calls run on it alone for a while; when that time is over and it
//!   still waited meanwhile (the cores are taken even without the workers), or when the
//!   workers' return is found contended again, for twice as long, up to [`MAX_BACK_OFF`];
//! - a worker measures its own while it runs and spins ([`Window`]), and stays out of calls
//!   for a while when it waited as long.

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

/// A window of a thread's time: when it started and the thread's run delay then.
#[derive(Debug)]
pub(super) struct Window {
    start: Instant,
    delay: u64,
}

impl Window {
    /// A window of the calling thread's time from `now`; `None` where the OS does not say.
    pub(super) fn start(now: Instant) -> Option<Window> {
        run_delay().map(|delay| Window { start: now, delay })
    }

    /// Whether the calling thread (the one that started the window) waited for a core
    /// [`CONTENDED`] of the window that ends `now`, starting the next; `None` while the
    /// window is shorter than [`WINDOW`].
    pub(super) fn contended(&mut self, now: Instant) -> Option<bool> {
        let span = now - self.start;
        if span < WINDOW {
            return None;
        }
        let delay = run_delay()?;
        let waited = delay.saturating_sub(self.delay) as f64 / span.as_nanos() as f64;
        *self = Window { start: now, delay };
        Some(waited >= CONTENDED)
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
                return window.contended(now);
            }
        }
        self.window = Window::start(now).map(|w| (std::thread::current().id(), w));
        None
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
fn run_delay() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().nth(1)?.parse().ok()
}
