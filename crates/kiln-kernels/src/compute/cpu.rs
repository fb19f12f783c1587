//! What the CPU kiln runs on can do, detected once per process: every kernel that picks an
//! instruction set asks here (the `std::arch` paths are compiled for every x86_64 target and
//! chosen at run time; other targets run the portable loops).
//!
//! `KILN_MAX_ISA` caps what kiln uses, to reproduce a smaller CPU's loops (and its numbers) on
//! a larger one: `portable` (no SIMD extension), `avx2` (AVX2 and FMA: Haswell to Comet Lake,
//! Zen 1-3), `avxvnni` (AVX2 with AVX-VNNI: Alder Lake and later client cores) or `avx512`
//! (everything); [`isa_cap`] says whether the variable was understood.

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
    /// AVX-VNNI (`vpdpbusd` on 256-bit vectors, VEX-encoded: the client cores without
    /// AVX-512).
    pub avxvnni: bool,
    /// An AMD CPU: its AVX-512 cores (Zen 4) run a 512-bit operation as two 256-bit halves.
    pub amd: bool,
}

/// This CPU's features (detected on the first call), capped by `KILN_MAX_ISA`.
pub fn features() -> &'static Features {
    static F: OnceLock<Features> = OnceLock::new();
    F.get_or_init(|| match isa_cap() {
        Ok(cap) => cap.apply(detect()),
        Err(_) => detect(),
    })
}

/// The widest instruction sets `KILN_MAX_ISA` lets kiln use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum IsaCap {
    /// No SIMD extension past the build's baseline (SSE2 on x86_64).
    Portable,
    /// AVX2, FMA and SSSE3.
    Avx2,
    /// As [`IsaCap::Avx2`] plus AVX-VNNI.
    AvxVnni,
    /// No cap.
    Avx512,
}

impl IsaCap {
    /// The values `KILN_MAX_ISA` takes, in the order of the variants.
    pub const NAMES: [&'static str; 4] = ["portable", "avx2", "avxvnni", "avx512"];

    /// `f` without what this cap leaves out.
    pub fn apply(self, f: Features) -> Features {
        let avx512 = self >= IsaCap::Avx512;
        let simd = self >= IsaCap::Avx2;
        Features {
            ssse3: f.ssse3 && simd,
            avx2: f.avx2 && simd,
            fma: f.fma && simd,
            avxvnni: f.avxvnni && self >= IsaCap::AvxVnni,
            avx512f: f.avx512f && avx512,
            avx512bw: f.avx512bw && avx512,
            avx512vnni: f.avx512vnni && avx512,
            avx512vbmi: f.avx512vbmi && avx512,
            amd: f.amd,
        }
    }
}

/// The cap `KILN_MAX_ISA` sets ([`IsaCap::Avx512`], none, when it is unset or empty), or a
/// message naming the value it does not know (then nothing is capped; the `kiln` command
/// refuses to start).
pub fn isa_cap() -> Result<IsaCap, String> {
    let value = std::env::var("KILN_MAX_ISA").unwrap_or_default();
    parse_isa_cap(&value)
}

/// [`isa_cap`] of the variable's value.
fn parse_isa_cap(value: &str) -> Result<IsaCap, String> {
    const CAPS: [IsaCap; 4] = [IsaCap::Portable, IsaCap::Avx2, IsaCap::AvxVnni, IsaCap::Avx512];
    let v = value.trim().to_ascii_lowercase();
    if v.is_empty() {
        return Ok(IsaCap::Avx512);
    }
    match IsaCap::NAMES.iter().position(|&n| n == v) {
        Some(i) => Ok(CAPS[i]),
        None => Err(format!("KILN_MAX_ISA={value:?} is not one of {}", IsaCap::NAMES.join(", "))),
    }
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
        avxvnni: is_x86_feature_detected!("avxvnni"),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every name parses to its cap (any case, spaces around), empty means no cap, and an
    /// unknown name is refused with the names it could have been.
    #[test]
    fn isa_cap_names() {
        assert_eq!(parse_isa_cap(""), Ok(IsaCap::Avx512));
        assert_eq!(parse_isa_cap(" AVX2 "), Ok(IsaCap::Avx2));
        assert_eq!(parse_isa_cap("avxvnni"), Ok(IsaCap::AvxVnni));
        assert_eq!(parse_isa_cap("portable"), Ok(IsaCap::Portable));
        let err = parse_isa_cap("avx-512").unwrap_err();
        assert!(err.contains("\"avx-512\"") && err.contains("portable, avx2, avxvnni, avx512"));
    }

    /// A cap clears exactly the extensions above it.
    #[test]
    fn caps_clear_wider_sets() {
        let all = Features {
            ssse3: true,
            avx2: true,
            fma: true,
            avx512f: true,
            avx512bw: true,
            avx512vnni: true,
            avx512vbmi: true,
            avxvnni: true,
            amd: true,
        };
        assert_eq!(IsaCap::Avx512.apply(all), all);
        let vnni = IsaCap::AvxVnni.apply(all);
        assert!(vnni.avx2 && vnni.fma && vnni.avxvnni && !vnni.avx512f && !vnni.avx512vnni);
        let avx2 = IsaCap::Avx2.apply(all);
        assert!(avx2.avx2 && avx2.ssse3 && !avx2.avxvnni && !avx2.avx512bw);
        assert_eq!(IsaCap::Portable.apply(all), Features { amd: true, ..Features::default() });
    }
}
