//! The integer sums of a QS8 fully connected layer of few rows (a classifier's one row) over
//! its weights as the program stores them, `[n][k]` `i8`: nothing is packed, each weight is
//! read once, so the layer runs at the speed memory delivers the weights.
//!
//! On AVX-512 VNNI a `vpdpbusd` multiplies 64 inputs of a row (`x + 128`, unsigned) by 64
//! weights of a channel into 16 partial sums, which are added across the vector once at the
//! end; four channels go together, so each load of a row's inputs serves four channels, and a
//! second `vpdpbusd` by a vector of ones sums each channel's weights for the zero point's
//! share: `Σ (x - zp) w = Σ (x + 128) w - (zp + 128) Σ w`, exact in wrapping `i32` (see
//! [`super::xnn_qgemm`]'s exactness). Other ISAs keep [`super::xnn_qgemm::dot_rows`].
#![allow(unsafe_code)]

use super::threads::{split, with_pieces, Threads};
use super::xnn_qgemm::{parts, Isa, PARALLEL_MACS};

/// Channels one pass over a row's inputs serves.
const CHANNELS: usize = 4;
/// Rows one pass takes (the rest in further passes): 4 x 4 sums, 4 weight sums.
const ROWS: usize = 4;

/// Whether [`dot_rows_u8`] runs on `isa`.
pub(crate) fn runs_on(isa: Isa) -> bool {
    isa == Isa::Vnni
}

/// `acc[j * m + r] = Σ_i (a[r * k + i] - 128 - zp) * w[j * k + i]` (wrapping `i32`) for the
/// `m` rows of unsigned activations `a` (`x + 128`) and the `n` weight rows `w`, split over
/// `threads` by channels when the layer is large.
///
/// # Panics
/// If `isa` is not one [`runs_on`], or the lengths disagree with `m`, `k` and `n`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dot_rows_u8(
    isa: Isa,
    a: &[u8],
    m: usize,
    k: usize,
    zp: i32,
    w: &[i8],
    n: usize,
    acc: &mut [i32],
    threads: &Threads,
) {
    assert!(runs_on(isa) && a.len() == m * k && w.len() == n * k && acc.len() == n * m);
    if acc.is_empty() {
        return;
    }
    let units = n.div_ceil(CHANNELS);
    let runs = split(n, CHANNELS, parts(threads, m * n * k, PARALLEL_MACS, units));
    threads.for_each(with_pieces(runs, acc, m), |(cols, acc)| {
        let w = &w[cols.start * k..cols.end * k];
        // SAFETY: `Isa::Vnni` (asserted above) is only chosen (by `best_isa`, or in tests
        // among `isas`) when the CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `w` holds the
        // run's `cols.len()` weight rows of `k`, `a` the `m` rows and `acc` `cols.len() * m`
        // sums.
        unsafe { channels_vnni(a, m, k, zp, w, acc) }
    });
}

/// [`dot_rows_u8`] of a run of channels: `w` its weight rows, `acc` their `m` sums each.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `a.len() == m * k` and
/// `acc.len() * k == w.len() * m`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn channels_vnni(a: &[u8], m: usize, k: usize, zp: i32, w: &[i8], acc: &mut [i32]) {
    let n = w.len() / k;
    let mut j = 0;
    while j < n {
        let g = (n - j).min(CHANNELS);
        for r0 in (0..m).step_by(ROWS) {
            let rows = (m - r0).min(ROWS);
            let (a, w) = (&a[r0 * k..], &w[j * k..]);
            // `block::<C, R>` for the run's channel and row counts (at most four each).
            macro_rules! block_of {
                ($c:expr) => {
                    match rows {
                        1 => block::<{ $c }, 1>(a, k, w),
                        2 => block::<{ $c }, 2>(a, k, w),
                        3 => block::<{ $c }, 3>(a, k, w),
                        _ => block::<{ $c }, ROWS>(a, k, w),
                    }
                };
            }
            let (sums, wsums) = match g {
                1 => block_of!(1),
                2 => block_of!(2),
                3 => block_of!(3),
                _ => block_of!(CHANNELS),
            };
            for c in 0..g {
                let share = (zp + 128).wrapping_mul(wsums[c]);
                for r in 0..rows {
                    acc[(j + c) * m + r0 + r] = sums[r][c].wrapping_sub(share);
                }
            }
        }
        j += g;
    }
}

/// The sums `Σ_i a[r * k + i] * w[c * k + i]` of `R` rows by `C` channels and each channel's
/// `Σ_i w[c * k + i]`, 64 inputs at a time (the tail masked), as `[ROWS][CHANNELS]` and
/// `[CHANNELS]` arrays (the entries past `R` and `C` zero).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn block<const C: usize, const R: usize>(
    a: &[u8],
    k: usize,
    w: &[i8],
) -> ([[i32; CHANNELS]; ROWS], [i32; CHANNELS]) {
    use std::arch::x86_64::*;
    assert!(a.len() >= R * k && w.len() >= C * k);
    let ones = _mm512_set1_epi8(1);
    let mut acc = [[_mm512_setzero_si512(); C]; R];
    let mut wacc = [_mm512_setzero_si512(); C];
    let mut i = 0;
    while i < k {
        let mask: u64 = match k - i {
            left if left >= 64 => u64::MAX,
            left => (1u64 << left) - 1,
        };
        // SAFETY: the masked loads read bytes `i..min(i + 64, k)` of rows and weight rows
        // inside `a` and `w` (asserted above).
        unsafe {
            let wv: [__m512i; C] = std::array::from_fn(|c| {
                _mm512_maskz_loadu_epi8(mask, w.as_ptr().add(c * k + i).cast())
            });
            for c in 0..C {
                wacc[c] = _mm512_dpbusd_epi32(wacc[c], ones, wv[c]);
            }
            for r in 0..R {
                let x = _mm512_maskz_loadu_epi8(mask, a.as_ptr().add(r * k + i).cast());
                for c in 0..C {
                    acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], x, wv[c]);
                }
            }
        }
        i += 64;
    }
    let mut sums = [[0i32; CHANNELS]; ROWS];
    for (s, a) in sums.iter_mut().zip(&acc) {
        for (s, &v) in s.iter_mut().zip(a) {
            *s = _mm512_reduce_add_epi32(v);
        }
    }
    let mut wsums = [0i32; CHANNELS];
    for (s, &v) in wsums.iter_mut().zip(&wacc) {
        *s = _mm512_reduce_add_epi32(v);
    }
    (sums, wsums)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::xnn_qgemm::isas;

    /// The sums equal plain `i64` sums wrapped to `i32` over random row counts (1 to 7),
    /// depths (tails of every length), channel counts (groups of four and the rest), zero
    /// points and extreme values, on one thread and split over three.
    #[test]
    fn dot_rows_u8_equals_plain_sums() {
        if !isas().iter().any(|&i| runs_on(i)) {
            eprintln!("SKIPPED: no AVX-512 VNNI on this CPU");
            return;
        }
        let mut rng = fastrand::Rng::with_seed(71);
        let pool = Threads::new(3).unwrap();
        for case in 0..200 {
            let (m, k, n) = (rng.usize(1..8), rng.usize(1..300), rng.usize(1..40));
            let n = if case % 10 == 0 { n + 600 } else { n };
            let extreme = case % 4 == 0;
            let a: Vec<u8> = (0..m * k)
                .map(|_| if extreme { [0, 255][rng.usize(0..2)] } else { rng.u8(..) })
                .collect();
            let w: Vec<i8> = (0..n * k)
                .map(|_| if extreme { [-128, 127][rng.usize(0..2)] } else { rng.i8(..) })
                .collect();
            let zp = rng.i32(-128..128);
            let want: Vec<i32> = (0..n * m)
                .map(|i| {
                    let (j, r) = (i / m, i % m);
                    let s: i64 = (0..k)
                        .map(|t| {
                            (i64::from(a[r * k + t]) - 128 - i64::from(zp))
                                * i64::from(w[j * k + t])
                        })
                        .sum();
                    s as i32
                })
                .collect();
            for threads in [&Threads::default(), &pool] {
                let mut acc = vec![0i32; n * m];
                dot_rows_u8(Isa::Vnni, &a, m, k, zp, &w, n, &mut acc, threads);
                assert_eq!(acc, want, "case {case}: m {m} k {k} n {n}");
            }
        }
    }
}
