//! Row loops of the direct (depthwise) convolution: `acc += w * src` over a row, and splitting
//! a row into its even and odd columns (so a stride-2 tap reads contiguous memory), written as
//! plain slice code the compiler vectorizes; and [`with_widest_vectors`], which runs a closure
//! compiled for the widest vector unit the CPU has (AVX-512F or AVX2, detected once at run
//! time; else the baseline target). Callers put a whole loop nest in the closure, so the row
//! loops inline into it and get those vectors without a dispatch per row.
//!
//! The arithmetic is the same multiply then add in every version (Rust never fuses them), so
//! all versions give the same bits.
#![allow(unsafe_code)]

use std::sync::OnceLock;

/// The widest vector extension this CPU has, detected once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Avx512,
    Avx2,
    Baseline,
}

fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Level::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                return Level::Avx2;
            }
        }
        Level::Baseline
    })
}

/// `acc[i] += w * src[i]` for `i` below the shorter length.
#[inline(always)]
pub(crate) fn axpy(acc: &mut [f32], w: f32, src: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(src) {
        *a += w * v;
    }
}

/// Column `2k` of `src` into `even[k]`, column `2k + 1` into `odd[k]`, for the columns both
/// sides hold.
#[inline(always)]
pub(crate) fn split_even_odd(src: &[f32], even: &mut [f32], odd: &mut [f32]) {
    for ((pair, e), o) in src.chunks_exact(2).zip(even.iter_mut()).zip(odd.iter_mut()) {
        *e = pair[0];
        *o = pair[1];
    }
    if src.len() % 2 == 1 {
        if let (Some(e), Some(&last)) = (even.get_mut(src.len() / 2), src.last()) {
            *e = last;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    #[target_feature(enable = "avx512f")]
    pub(super) fn avx512<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn avx2<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// Runs `f` compiled with the widest vector extension this CPU has. `f` must be a closure
/// whose body the compiler can inline (loops over slices, `#[inline(always)]` helpers).
#[inline(always)]
pub(crate) fn with_widest_vectors<R>(f: impl FnOnce() -> R) -> R {
    match level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `level()` returned Avx512 only after `is_x86_feature_detected!("avx512f")`
        // said this CPU has AVX-512F, the only feature the wrapper is compiled with; `f` is
        // safe code.
        Level::Avx512 => unsafe { x86::avx512(f) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX2.
        Level::Avx2 => unsafe { x86::avx2(f) },
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectorized_loops_equal_the_definition_bit_for_bit() {
        let mut rng = fastrand::Rng::with_seed(7);
        for len in [0usize, 1, 2, 7, 15, 16, 17, 33, 100, 257] {
            let src: Vec<f32> = (0..len + 3).map(|_| rng.f32() * 8.0 - 4.0).collect();
            let init: Vec<f32> = (0..len).map(|_| rng.f32() - 0.5).collect();
            let w = rng.f32() * 3.0 - 1.5;
            let mut a = init.clone();
            with_widest_vectors(|| axpy(&mut a, w, &src[1..]));
            for i in 0..len {
                assert_eq!(a[i].to_bits(), (init[i] + w * src[i + 1]).to_bits());
            }
            let half = len.div_ceil(2);
            let (mut e, mut o) = (vec![f32::NAN; half], vec![f32::NAN; half]);
            with_widest_vectors(|| split_even_odd(&src[..len], &mut e, &mut o));
            for k in 0..half {
                assert_eq!(e[k].to_bits(), src[2 * k].to_bits());
                if 2 * k + 1 < len {
                    assert_eq!(o[k].to_bits(), src[2 * k + 1].to_bits());
                }
            }
        }
    }
}
