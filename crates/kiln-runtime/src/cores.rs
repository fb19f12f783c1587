//! How many threads kiln uses unless told otherwise: one per core this process may run on,
//! the big cores only where the machine has cores of different sizes.
//!
//! - **Allowed**: the CPUs of the process's affinity (`Cpus_allowed_list` of
//!   `/proc/self/status`), at most [`std::thread::available_parallelism`], which also counts a
//!   cgroup's CPU quota.
//! - **Big cores**: where the kernel lists cores of different capacities
//!   (`/sys/devices/system/cpu/cpuN/cpu_capacity`, the relative performance its scheduler
//!   uses on big.LITTLE and hybrid CPUs), or else different top frequencies
//!   (`cpufreq/cpuinfo_max_freq`), a CPU below half of the largest is a little core and is
//!   left out, as ExecuTorch's default leaves out the little Cortex-A cores. A split layer
//!   waits for its slowest task, so a thread on a little core slows the layer it shares.
//!   Where no allowed CPU is big (an affinity to little cores only), all allowed ones count.
//! - **Cores, not hardware threads**: CPUs that share a core
//!   (`topology/core_cpus_list`, simultaneous multithreading) count once; two threads on one
//!   core share its vector units, which the kernels keep busy.
//!
//! There is no cap: kernels cut a layer into at most as many tasks as it has independent
//! pieces ([`kiln_kernels::compute::threads::Threads::tasks_for`]), so a thread a small layer
//! has no task for takes none, and a call never waits for a thread that has not claimed a
//! task. Where nothing can be read (no sysfs), the count is
//! [`std::thread::available_parallelism`].

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::OnceLock;

/// A default thread count and why it is what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadCount {
    /// Threads in all, the calling thread included.
    pub threads: usize,
    /// Why: which cores were counted, in words (for `kiln bench` and `kiln run --json`).
    pub reason: String,
}

/// The default for this process (read once): see the module documentation.
pub fn default_thread_count() -> &'static ThreadCount {
    static COUNT: OnceLock<ThreadCount> = OnceLock::new();
    COUNT.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"));
        let allowed = allowed.and_then(|l| cpu_list(l.trim()));
        let available = std::thread::available_parallelism().map_or(1, |n| n.get());
        choose(Path::new("/sys/devices/system/cpu"), allowed, available)
    })
}

/// The CPUs of a kernel CPU list (`0-3,8,10-11`), or `None` when it is not one (or names
/// more CPUs than a machine has).
fn cpu_list(list: &str) -> Option<BTreeSet<usize>> {
    /// More CPUs than any list kiln reads names.
    const MAX_CPUS: usize = 1 << 16;
    let mut cpus = BTreeSet::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
            None => {
                let c = part.parse::<usize>().ok()?;
                (c, c)
            }
        };
        if lo > hi || hi >= MAX_CPUS {
            return None;
        }
        cpus.extend(lo..=hi);
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// One number from a sysfs file.
fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The CPUs of `allowed` (all of `root/online` when unknown) whose `per_cpu` file has the
/// largest number or at least half of it, and how many CPUs it read; `None` unless every CPU
/// has the file and the numbers differ.
fn big_cpus(
    root: &Path,
    allowed: &BTreeSet<usize>,
    per_cpu: &str,
) -> Option<(BTreeSet<usize>, u64, u64)> {
    let sizes: Vec<(usize, u64)> = allowed
        .iter()
        .map(|&c| Some((c, read_number(&root.join(format!("cpu{c}/{per_cpu}")))?)))
        .collect::<Option<_>>()?;
    let max = sizes.iter().map(|&(_, s)| s).max()?;
    let min = sizes.iter().map(|&(_, s)| s).min()?;
    if min == max {
        return None;
    }
    let big: BTreeSet<usize> =
        sizes.iter().filter(|&&(_, s)| s.saturating_mul(2) >= max).map(|&(c, _)| c).collect();
    Some((big, min, max))
}

/// The default for a machine whose CPU directory is `root` (`/sys/devices/system/cpu`), for a
/// process allowed on `allowed` (`None`: not known) with `available` threads of parallelism.
fn choose(root: &Path, allowed: Option<BTreeSet<usize>>, available: usize) -> ThreadCount {
    let available = available.max(1);
    let online = std::fs::read_to_string(root.join("online")).ok();
    let allowed = allowed.or_else(|| cpu_list(online?.trim()));
    let Some(allowed) = allowed else {
        return ThreadCount {
            threads: available,
            reason: format!("{available} available to this process (the CPU list is not readable)"),
        };
    };
    let mut notes = Vec::new();
    let mut chosen = allowed.clone();
    let sizes =
        big_cpus(root, &allowed, "cpu_capacity").map(|b| (b, "cpu_capacity")).or_else(|| {
            big_cpus(root, &allowed, "cpufreq/cpuinfo_max_freq").map(|b| (b, "top frequency"))
        });
    if let Some(((big, min, max), what)) = sizes {
        if !big.is_empty() && big.len() < allowed.len() {
            notes.push(format!(
                "the big ones of {} CPUs by {what} ({min} to {max}; little: under half of {max})",
                allowed.len()
            ));
            chosen = big;
        }
    }
    // One thread per core: CPUs listing the same core siblings count once.
    let mut cores: BTreeSet<Vec<usize>> = BTreeSet::new();
    for &c in &chosen {
        let siblings =
            std::fs::read_to_string(root.join(format!("cpu{c}/topology/core_cpus_list")))
                .ok()
                .and_then(|l| cpu_list(l.trim()))
                .map_or_else(|| vec![c], |s| s.into_iter().collect());
        cores.insert(siblings);
    }
    if cores.len() < chosen.len() {
        notes.push(format!("one thread per core of {} hardware threads", chosen.len()));
    }
    let mut threads = cores.len().max(1);
    if available < threads {
        notes.push(format!("the process may use {available} at a time (affinity or CPU quota)"));
        threads = available;
    }
    let cores_word = if threads == 1 { "core" } else { "cores" };
    let reason = match notes.is_empty() {
        true => format!("{threads} {cores_word} this process may run on"),
        false => format!("{threads} {cores_word}: {}", notes.join("; ")),
    };
    ThreadCount { threads, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A fake `/sys/devices/system/cpu` tree, removed when dropped.
    struct FakeSysfs(PathBuf);

    impl FakeSysfs {
        /// CPUs `0..capacities.len()` with those capacities (none where `None`), in cores
        /// of `threads_per_core` consecutive CPUs.
        fn new(name: &str, capacities: &[Option<u64>], threads_per_core: usize) -> FakeSysfs {
            let root =
                std::env::temp_dir().join(format!("kiln-cores-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            let n = capacities.len();
            for (c, cap) in capacities.iter().enumerate() {
                let dir = root.join(format!("cpu{c}"));
                std::fs::create_dir_all(dir.join("topology")).unwrap();
                if let Some(cap) = cap {
                    std::fs::write(dir.join("cpu_capacity"), format!("{cap}\n")).unwrap();
                }
                let first = c / threads_per_core * threads_per_core;
                let last = (first + threads_per_core - 1).min(n - 1);
                std::fs::write(dir.join("topology/core_cpus_list"), format!("{first}-{last}\n"))
                    .unwrap();
            }
            std::fs::write(root.join("online"), format!("0-{}\n", n - 1)).unwrap();
            FakeSysfs(root)
        }

        fn max_freq(&self, cpu: usize, khz: u64) {
            let dir = self.0.join(format!("cpu{cpu}/cpufreq"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("cpuinfo_max_freq"), format!("{khz}\n")).unwrap();
        }
    }

    impl Drop for FakeSysfs {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn all(n: usize) -> Option<BTreeSet<usize>> {
        Some((0..n).collect())
    }

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(cpu_list("0-3,8,10-11"), Some([0, 1, 2, 3, 8, 10, 11].into()));
        assert_eq!(cpu_list("5"), Some([5].into()));
        assert_eq!(cpu_list(""), None);
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("0-99999999"), None);
        assert_eq!(cpu_list("a"), None);
    }

    #[test]
    fn equal_cores_all_count() {
        let fs = FakeSysfs::new("equal", &[Some(1024); 4], 1);
        let t = choose(&fs.0, all(4), 4);
        assert_eq!(t.threads, 4);
        assert_eq!(t.reason, "4 cores this process may run on");
    }

    #[test]
    fn little_cores_are_left_out() {
        // A phone: 1 prime, 3 big, 4 little cores.
        let caps = [1024, 870, 870, 870, 325, 325, 325, 325].map(Some);
        let fs = FakeSysfs::new("biglittle", &caps, 1);
        let t = choose(&fs.0, all(8), 8);
        assert_eq!(t.threads, 4, "{}", t.reason);
        assert!(t.reason.contains("big ones of 8 CPUs by cpu_capacity"), "{}", t.reason);
        // Allowed on the little cores alone: they all count.
        let t = choose(&fs.0, Some([4, 5, 6, 7].into()), 4);
        assert_eq!(t.threads, 4);
        // Allowed on one big and two little cores: the big one.
        let t = choose(&fs.0, Some([1, 4, 5].into()), 3);
        assert_eq!(t.threads, 1);
        assert!(t.reason.starts_with("1 core: "), "{}", t.reason);
    }

    #[test]
    fn frequency_tiers_stand_in_for_missing_capacities() {
        let fs = FakeSysfs::new("freq", &[None; 6], 1);
        for (c, khz) in [3_200_000, 3_200_000, 2_800_000, 2_800_000, 1_400_000, 1_400_000]
            .into_iter()
            .enumerate()
        {
            fs.max_freq(c, khz);
        }
        let t = choose(&fs.0, all(6), 6);
        assert_eq!(t.threads, 4, "{}", t.reason);
        assert!(t.reason.contains("top frequency"), "{}", t.reason);
    }

    #[test]
    fn hardware_threads_of_one_core_count_once() {
        let fs = FakeSysfs::new("smt", &[Some(1024); 8], 2);
        let t = choose(&fs.0, all(8), 8);
        assert_eq!(t.threads, 4);
        assert!(t.reason.contains("one thread per core of 8 hardware threads"), "{}", t.reason);
    }

    #[test]
    fn a_quota_caps_the_count() {
        let fs = FakeSysfs::new("quota", &[Some(1024); 8], 1);
        let t = choose(&fs.0, all(8), 3);
        assert_eq!(t.threads, 3);
        assert!(t.reason.contains("may use 3 at a time"), "{}", t.reason);
    }

    #[test]
    fn no_sysfs_means_the_available_parallelism() {
        let missing = std::env::temp_dir().join("kiln-cores-no-such-dir");
        let t = choose(&missing, None, 6);
        assert_eq!(t.threads, 6);
        // Known CPUs without topology files: each is a core.
        let t = choose(&missing, all(2), 2);
        assert_eq!(t.threads, 2);
        assert!(default_thread_count().threads >= 1);
    }
}
