//! What the CPU kiln runs on can do, detected once per process: every kernel that picks an
//! instruction set asks here (the `std::arch` paths are compiled for every x86_64 target and
//! chosen at run time; other targets run the portable loops).

use std::sync::OnceLock;

/// The instruction-set extensions and the vendor kiln's kernels choose by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// SSSE3 (`pshufb`: byte shuffles).
    pub ssse3: bool,
    /// AVX2.
    pub avx2: bool,
    /// FMA (with AVX2: the 256-bit float kernels).
    pub fma: bool,
    /// AVX-512F (the 512-bit float kernels).
    pub avx512f: bool,
    /// AVX-512BW with AVX-512VL (byte and word lanes, in vectors of every width: the 512-bit
    /// integer kernels).
    pub avx512bw: bool,
    /// AVX-512 VNNI (`vpdpwssd`, `vpdpbusd`).
    pub avx512vnni: bool,
    /// AVX-512 VBMI (`vpermi2b`: byte tables of 128 entries).
    pub avx512vbmi: bool,
    /// An AMD CPU: its AVX-512 cores (Zen 4) run a 512-bit operation as two 256-bit halves.
    pub amd: bool,
}

/// This CPU's features (detected on the first call).
pub fn features() -> &'static Features {
    static F: OnceLock<Features> = OnceLock::new();
    F.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Features {
    // CPUID leaf 0 is on every x86_64 CPU: the vendor string in EBX, EDX, ECX.
    let v = std::arch::x86_64::__cpuid(0);
    let word = |s: &[u8; 4]| u32::from_le_bytes(*s);
    Features {
        ssse3: is_x86_feature_detected!("ssse3"),
        avx2: is_x86_feature_detected!("avx2"),
        fma: is_x86_feature_detected!("fma"),
        avx512f: is_x86_feature_detected!("avx512f"),
        avx512bw: is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vl"),
        avx512vnni: is_x86_feature_detected!("avx512vnni"),
        avx512vbmi: is_x86_feature_detected!("avx512vbmi"),
        amd: (v.ebx, v.edx, v.ecx) == (word(b"Auth"), word(b"enti"), word(b"cAMD")),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Features {
    Features::default()
}

/// Whether the CPU has AVX-512F.
pub fn has_avx512() -> bool {
    features().avx512f
}

/// Whether the CPU has AVX2 and FMA.
pub fn has_avx2() -> bool {
    let f = features();
    f.avx2 && f.fma
}

/// Whether the CPU is AMD's.
pub fn is_amd() -> bool {
    features().amd
}
