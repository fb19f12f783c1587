//! [`LoadOptions`]: what a program is loaded with (kernels, backends, limits, threads), and
//! their defaults.

use std::sync::OnceLock;

use kiln_kernels::compute::threads::Threads;

use crate::cores::default_thread_count;
use crate::delegate::BackendRegistry;
use crate::error::Result;
use crate::registry::KernelRegistry;

/// The most [`default_memory_limit`] allows: 8 GiB.
pub const MAX_DEFAULT_MEMORY_LIMIT: u64 = 8 << 30;

/// The memory one loaded method may take unless told otherwise (planned arenas, the constants
/// it owns, the compiled steps' prepared weights and the compiled memory plan, counted
/// together): the smaller of
/// [`MAX_DEFAULT_MEMORY_LIMIT`] and half the machine's memory (`MemTotal` of `/proc/meminfo`;
/// the cap alone where that cannot be read).
pub fn default_memory_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| mem_total(&m));
        total.map_or(MAX_DEFAULT_MEMORY_LIMIT, |t| (t / 2).min(MAX_DEFAULT_MEMORY_LIMIT))
    })
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let kib = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}

/// ExecuTorch's `ET_MAX_INSTRUCTIONS`: instructions one `execute` may run.
pub const DEFAULT_INSTRUCTION_LIMIT: u64 = 10_000_000;

/// Options for loading methods.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Kernels to resolve operators against.
    pub kernels: KernelRegistry,
    /// Backends for delegates.
    pub backends: BackendRegistry,
    /// Most bytes a loaded method may take (default: [`default_memory_limit`]): its
    /// memory plan's arenas and the constants it makes are checked against it before they
    /// are mapped, and its predicted peak ([`crate::Footprint::total`], the figure `kiln
    /// inspect --memory` shows for the method) once its weights are packed, before any
    /// execution state runs.
    pub memory_limit: u64,
    /// Most instructions one `execute` may run.
    pub instruction_limit: u64,
    /// Whether methods go through the compile stage's rewrites (fusion, folding, prepared
    /// kernels); off runs every instruction as the interpreter does, for bisecting.
    pub compile: bool,
    /// The threads loaded methods split large kernels over. The default is one pool shared
    /// by the process, of [`default_thread_count`] threads (one per big core this process
    /// may run on).
    pub threads: Threads,
}

/// The process-wide pool of [`LoadOptions::default`], started on first use (no pool if the
/// system refuses the threads).
fn default_threads() -> Threads {
    static POOL: OnceLock<Threads> = OnceLock::new();
    POOL.get_or_init(|| Threads::new(default_thread_count().threads).unwrap_or_default()).clone()
}

impl LoadOptions {
    /// With the compile stage's rewrites on or off ([`LoadOptions::compile`]).
    pub fn with_compile(self, compile: bool) -> LoadOptions {
        LoadOptions { compile, ..self }
    }

    /// With a pool of `threads` threads, the caller included (`None` keeps the pool these
    /// options have); an error when the system refuses the threads.
    pub fn with_threads(self, threads: Option<usize>) -> Result<LoadOptions> {
        Ok(match threads {
            Some(n) => LoadOptions { threads: Threads::new(n)?, ..self },
            None => self,
        })
    }

    /// With a memory limit of `bytes` (`None` keeps the limit these options have).
    pub fn with_memory_limit(self, bytes: Option<u64>) -> LoadOptions {
        LoadOptions { memory_limit: bytes.unwrap_or(self.memory_limit), ..self }
    }
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            kernels: KernelRegistry::builtin().clone(),
            backends: BackendRegistry::new(),
            memory_limit: default_memory_limit(),
            instruction_limit: DEFAULT_INSTRUCTION_LIMIT,
            compile: true,
            threads: default_threads(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_reads_meminfo() {
        let m = "MemTotal:       24575992 kB\nMemFree:        20000000 kB\n";
        assert_eq!(mem_total(m), Some(24575992 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert!(default_memory_limit() <= MAX_DEFAULT_MEMORY_LIMIT);
        assert!(default_memory_limit() > 0);
    }
}
