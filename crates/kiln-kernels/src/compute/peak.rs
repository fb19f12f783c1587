//! Floating-point peak probe: how many f32 FMA flops one core sustains right now. Machines
//! shared with other jobs vary by 2x within minutes, so benchmarks report their throughput
//! against a probe run next to them.
#![allow(unsafe_code)]

use std::hint::black_box;
use std::time::{Duration, Instant};

/// A measured peak.
#[derive(Clone, Copy, Debug)]
pub struct Peak {
    /// f32 GFLOP/s (an FMA counts 2 flops per lane).
    pub gflops: f64,
    /// The instructions used: `"avx512 zmm"`, `"avx2 ymm"` or `"scalar"`.
    pub isa: &'static str,
}

/// Independent accumulator chains: enough to cover FMA latency times two FMA ports.
const CHAINS: usize = 16;

/// The chains of the ymm probe: AVX2 has 16 vector registers, and 16 chains beside the two
/// operands were kept on the stack (a Zen 3 core reported 49 GFLOP/s where its GEMM ran at
/// 78); 12 still cover two ports of 5-cycle FMAs.
const YMM_CHAINS: usize = 12;
/// A probe loop: iterations, multiplier and addend, start value of each chain.
type Probe = fn(u64, [f32; 2], [f32; CHAINS]) -> f32;

/// Iterations per timed batch.
const BATCH: u64 = 1 << 16;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `iters` rounds of one FMA on each of 16 zmm chains starting at `start[i]`; returns a
    /// value that depends on every chain.
    ///
    /// # Safety
    /// AVX-512F available.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn zmm(iters: u64, [m, c]: [f32; 2], start: [f32; super::CHAINS]) -> f32 {
        let (m, c) = (_mm512_set1_ps(m), _mm512_set1_ps(c));
        let mut acc = start.map(|v| _mm512_set1_ps(v));
        for _ in 0..iters {
            for a in &mut acc {
                *a = _mm512_fmadd_ps(*a, m, c);
            }
        }
        let mut s = _mm512_setzero_ps();
        for a in acc {
            s = _mm512_add_ps(s, a);
        }
        _mm512_reduce_add_ps(s)
    }

    /// As [`zmm`] on the first [`YMM_CHAINS`](super::YMM_CHAINS) chains, in ymm registers.
    ///
    /// # Safety
    /// AVX2 and FMA available.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn ymm(iters: u64, [m, c]: [f32; 2], start: [f32; super::CHAINS]) -> f32 {
        let (m, c) = (_mm256_set1_ps(m), _mm256_set1_ps(c));
        let mut acc = [_mm256_setzero_ps(); super::YMM_CHAINS];
        for (a, &v) in acc.iter_mut().zip(&start) {
            *a = _mm256_set1_ps(v);
        }
        for _ in 0..iters {
            for a in &mut acc {
                *a = _mm256_fmadd_ps(*a, m, c);
            }
        }
        let mut s = _mm256_setzero_ps();
        for a in acc {
            s = _mm256_add_ps(s, a);
        }
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds 8 f32, the width of the unaligned store.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
        lanes.iter().sum()
    }
}

/// Scalar chains (no SIMD, no FMA): the probe of the portable kernel.
fn scalar(iters: u64, [m, c]: [f32; 2], start: [f32; CHAINS]) -> f32 {
    let mut acc = start;
    for _ in 0..iters {
        for a in &mut acc {
            *a = *a * m + c;
        }
    }
    acc.iter().sum()
}

/// Runs the widest FMA loop this CPU has for about `duration` (at least one batch) and
/// returns the sustained rate.
pub fn fma_gflops(duration: Duration) -> Peak {
    #[cfg(target_arch = "x86_64")]
    let (run, lanes, chains, isa): (Probe, u64, usize, &'static str) =
        if crate::compute::cpu::has_avx512() {
            // SAFETY: AVX-512F was detected just above.
            (|n, mc, s| unsafe { x86::zmm(n, mc, s) }, 16, CHAINS, "avx512 zmm")
        } else if crate::compute::cpu::has_avx2() {
            // SAFETY: AVX2 and FMA were detected just above.
            (|n, mc, s| unsafe { x86::ymm(n, mc, s) }, 8, YMM_CHAINS, "avx2 ymm")
        } else {
            (scalar, 1, CHAINS, "scalar")
        };
    #[cfg(not(target_arch = "x86_64"))]
    let (run, lanes, chains, isa): (Probe, u64, usize, &'static str) =
        (scalar, 1, CHAINS, "scalar");
    // Distinct, opaque operands so the compiler can neither merge the chains nor fold them;
    // x -> x * m + c stays bounded.
    let call = || {
        let start: [f32; CHAINS] = std::array::from_fn(|i| 1.0 + i as f32 / 64.0);
        black_box(run(black_box(BATCH), black_box([0.999_999_9, 1e-7]), black_box(start)))
    };
    // Warm up (clock ramp, AVX-512 license), then time whole batches.
    call();
    let start = Instant::now();
    let mut batches = 0u64;
    while batches == 0 || start.elapsed() < duration {
        call();
        batches += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let flops = (batches * BATCH * chains as u64 * lanes * 2) as f64;
    Peak { gflops: flops / secs / 1e9, isa }
}

#[cfg(test)]
mod tests {
    #[test]
    fn probe_reports_a_positive_rate() {
        let p = super::fma_gflops(std::time::Duration::from_millis(20));
        // Above 0.1 and below what any core does today (8 GHz x 2 ports x 16 lanes x 2 flops
        // = 512 GFLOP/s): a probe the compiler folded away would report far more.
        assert!(p.gflops.is_finite() && p.gflops > 0.1 && p.gflops < 600.0, "{p:?}");
    }
}
