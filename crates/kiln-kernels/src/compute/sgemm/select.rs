//! Which microkernel a process multiplies with: the fastest its CPU runs, chosen once.

use std::sync::OnceLock;

use super::kernel::{Kernel, PORTABLE};

/// Every kernel this CPU can run, fastest first (the first is [`selected`]).
pub fn available() -> Vec<&'static Kernel> {
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if crate::compute::cpu::has_avx512() {
            v.push(&super::x86::AVX512);
        }
        if crate::compute::cpu::has_avx2() {
            v.push(&super::x86::AVX2);
        }
    }
    v.push(&PORTABLE);
    v
}

/// The kernel of this process: chosen once from the CPU features, the same for every call so
/// that results do not depend on which call site ran first.
pub fn selected() -> &'static Kernel {
    static CHOICE: OnceLock<&'static Kernel> = OnceLock::new();
    CHOICE.get_or_init(|| available()[0])
}
