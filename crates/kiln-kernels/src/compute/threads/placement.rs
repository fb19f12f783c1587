//! Which core a pool's thread is on, and moving a worker off the cores the other threads of
//! its call are on.
//!
//! Linux wakes a sleeping thread on the core it last ran on or on its waker's core, and a new
//! thread starts beside the thread that made it. A worker woken by its caller can thus land
//! on the caller's core while another core stands idle, and the load balancer may leave the
//! two there for tens of milliseconds (a traced start of efficientnet_b0 on the 2-core
//! development machine, a virtual machine: the worker queued behind its caller on one core
//! for 35 ms, the other idle), where the caller, waiting for its core, also takes the cores
//! to be busy and runs its calls alone (`contention.rs`). A worker that finds itself on a
//! core another participant of its call is on moves off it: its allowed cores are narrowed
//! to the others for one system call (the kernel moves it before the call returns) and
//! restored at once, so the kernel stays free to place it later, as it must on a busy
//! machine. Elsewhere than Linux nothing is known and nothing moves.
#![allow(unsafe_code)]

/// No core known (published before a thread first reads its core).
pub(super) const UNKNOWN: usize = usize::MAX;

/// The core the calling thread runs on now, if the OS says.
#[cfg(target_os = "linux")]
pub(super) fn current() -> Option<usize> {
    // SAFETY: `sched_getcpu` takes no arguments and only reports the calling thread's core.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// Moves the calling thread to one of its allowed cores not in `taken`, keeping the cores it
/// is allowed on; says whether it moved (not when every allowed core is taken, or the OS
/// refuses).
#[cfg(target_os = "linux")]
pub(super) fn move_off(taken: &[usize]) -> bool {
    use std::mem::size_of;
    const SETSIZE: usize = libc::CPU_SETSIZE as usize;
    let size = size_of::<libc::cpu_set_t>();
    // SAFETY: `cpu_set_t` is an array of plain integers; all zeros is the empty set.
    let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `allowed` is a writable `cpu_set_t` of `size` bytes for the duration of the
    // call; pid 0 is the calling thread.
    if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
        return false;
    }
    let mut elsewhere = allowed;
    let mut any_left = false;
    for cpu in 0..SETSIZE {
        // SAFETY: `cpu` is below `CPU_SETSIZE`, the number of cores a `cpu_set_t` holds.
        if !unsafe { libc::CPU_ISSET(cpu, &allowed) } {
            continue;
        }
        if taken.contains(&cpu) {
            // SAFETY: as above, `cpu` is below `CPU_SETSIZE`.
            unsafe { libc::CPU_CLR(cpu, &mut elsewhere) };
        } else {
            any_left = true;
        }
    }
    if !any_left {
        return false;
    }
    // SAFETY: `elsewhere` is a valid `cpu_set_t` of `size` bytes, only read by the call.
    if unsafe { libc::sched_setaffinity(0, size, &elsewhere) } != 0 {
        return false;
    }
    // SAFETY: as above, for `allowed` (the set the thread had, which includes its new core).
    unsafe { libc::sched_setaffinity(0, size, &allowed) };
    true
}

#[cfg(not(target_os = "linux"))]
pub(super) fn current() -> Option<usize> {
    None
}

#[cfg(not(target_os = "linux"))]
pub(super) fn move_off(_taken: &[usize]) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The calling thread's allowed cores.
    fn allowed() -> Vec<usize> {
        // SAFETY: as in `move_off`.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // SAFETY: as in `move_off`.
        assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut set) }, 0);
        // SAFETY: every index is below `CPU_SETSIZE`.
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
    }

    #[test]
    fn a_thread_moves_off_the_taken_cores_and_keeps_its_allowed_ones() {
        let before = allowed();
        if before.len() < 2 {
            eprintln!("SKIPPED: this process may run on one core only");
            return;
        }
        std::thread::spawn(move || {
            // The OS may move the thread back once its cores are restored (on a busy
            // machine): a few tries.
            let left = (0..5).any(|_| {
                let here = current().expect("Linux says which core a thread is on");
                assert!(move_off(&[here]));
                assert_eq!(allowed(), before, "the allowed cores were not restored");
                current() != Some(here)
            });
            assert!(left, "still on the core it was to leave, five times");
            // Every allowed core taken: nowhere to go.
            assert!(!move_off(&before));
        })
        .join()
        .unwrap();
    }
}
