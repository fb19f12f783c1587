//! Softmax over contiguous rows of float32 values, as ExecuTorch's portable float kernel
//! computes it: the row maximum and `x - max` in `f32`, `exp` in `f32` (the vectorized one of
//! [`activation`], about 1 ulp, zero below `e^-87.3` where `expf` gives subnormals), then
//! `e / sum` (`x - max - ln(sum)` for the log variant) in `f32`. The sum of the exponentials
//! is kept in `f64` ([`sum_f64`]), more accurate than the `f32` lane sums of PyTorch's and
//! ExecuTorch's vectorized kernels.
//!
//! The compile stage's fused attention softmax also zeroes the rows whose every score is
//! `-inf` ([`Softmax::zero_masked_rows`]): PyTorch's `_safe_softmax`, which exports as the
//! softmax followed by `eq(x, -inf)`, `logical_not`, `any`, `logical_not`, `full_like(0)` and
//! `where` (the plain softmax gives such a row NaN).
#![allow(unsafe_code)]

use crate::compute::activation;
use crate::compute::sum::sum_f64;
use crate::compute::threads::{split, with_pieces, Threads};

/// Which softmax a row gets.
#[derive(Clone, Copy, Debug)]
pub struct Softmax {
    /// Log-softmax (`x - max - ln(sum)`) instead of softmax.
    pub log: bool,
    /// A row whose every value is `-inf` (fully masked scores) gives zeros, not NaN.
    pub zero_masked_rows: bool,
}

/// `kind` softmax of every row of `len` values of `x` into `out` (same length, a whole number
/// of rows; `len` at least 1). Rows are split over `threads` in runs of whole rows; each row is
/// computed by the same code whatever the split.
pub fn rows(x: &[f32], len: usize, out: &mut [f32], kind: Softmax, threads: &Threads) {
    let rows = x.len() / len.max(1);
    let tasks = threads.tasks_for_elements(x.len(), rows);
    threads.for_each(with_pieces(split(rows, 1, tasks), out, len), |(r, o)| {
        rows_here(&x[r.start * len..r.end * len], len, o, kind);
    });
}

/// `kind` softmax of one contiguous row into `out` (same length, at least 1).
pub(crate) fn row(x: &[f32], out: &mut [f32], kind: Softmax) {
    rows_here(x, x.len(), out, kind);
}

/// [`rows`] on the calling thread, in the widest vectors the CPU has (every loop is the same
/// arithmetic in each: the same bits).
fn rows_here(x: &[f32], len: usize, out: &mut [f32], kind: Softmax) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::compute::cpu::{has_avx2, has_avx512};
        if has_avx512() {
            // SAFETY: the CPU has AVX-512F, the only feature the function is built for.
            return unsafe { rows_avx512(x, len, out, kind) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA, the features the function is built for.
            return unsafe { rows_avx2(x, len, out, kind) };
        }
    }
    rows_body(x, len, out, kind);
}

/// [`rows_body`] built for AVX-512.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn rows_avx512(x: &[f32], len: usize, out: &mut [f32], kind: Softmax) {
    rows_body(x, len, out, kind);
}

/// [`rows_body`] built for AVX2.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(x: &[f32], len: usize, out: &mut [f32], kind: Softmax) {
    rows_body(x, len, out, kind);
}

/// The rows of `len` values of `x`, one after another.
#[inline(always)]
fn rows_body(x: &[f32], len: usize, out: &mut [f32], kind: Softmax) {
    for (o, x) in out.chunks_exact_mut(len).zip(x.chunks_exact(len)) {
        row_body(x, o, kind);
    }
}

/// `kind` softmax of one contiguous row into `out` (same length, at least 1).
#[inline(always)]
fn row_body(x: &[f32], out: &mut [f32], kind: Softmax) {
    // The maximum of the numbers; a NaN anywhere still makes every output NaN, as in the
    // general path: its `e^(NaN - max)` is NaN, and so is the sum every output takes.
    let max = max_lanes(x);
    if kind.zero_masked_rows && max == f32::NEG_INFINITY && x.iter().all(|&v| v == max) {
        out.fill(0.0);
        return;
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = activation::exp(v - max);
    }
    let sum = sum_f64(out);
    if kind.log {
        let l = sum.ln() as f32;
        for (o, &v) in out.iter_mut().zip(x) {
            *o = v - max - l;
        }
    } else {
        let s = sum as f32;
        for o in out.iter_mut() {
            *o /= s;
        }
    }
}

/// The largest number of `v` (NaN lanes are passed over; `-inf` when there is none), in 16
/// lanes so that the loop vectorizes.
#[inline(always)]
fn max_lanes(v: &[f32]) -> f32 {
    let keep = |m: f32, x: f32| if x > m { x } else { m };
    let mut lanes = [f32::NEG_INFINITY; 16];
    let chunks = v.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l = keep(*l, x);
        }
    }
    tail.iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &x| keep(m, x))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAIN: Softmax = Softmax { log: false, zero_masked_rows: false };
    const SAFE: Softmax = Softmax { log: false, zero_masked_rows: true };

    /// `_safe_softmax`'s definition: a row of only `-inf` gives zeros; any other row (one
    /// `-inf` short of fully masked, or with a NaN among `-inf`s) gives the plain softmax's
    /// values, bit for bit, on one thread and on three.
    #[test]
    fn masked_rows_give_zeros_and_the_others_the_plain_softmax() {
        let ninf = f32::NEG_INFINITY;
        let len = 37;
        let mut x = Vec::new();
        let mut masked = Vec::new();
        for r in 0..600 {
            let row: Vec<f32> = match r % 4 {
                0 => vec![ninf; len],
                1 => (0..len).map(|i| if i == r % len { 0.5 } else { ninf }).collect(),
                2 => (0..len).map(|i| if i == 3 { f32::NAN } else { ninf }).collect(),
                _ => (0..len).map(|i| ((i * r) % 11) as f32 - 5.0).collect(),
            };
            masked.push(r % 4 == 0);
            x.extend(row);
        }
        let three = Threads::new(3).unwrap();
        for threads in [&Threads::default(), &three] {
            let mut safe = vec![f32::NAN; x.len()];
            let mut plain = vec![f32::NAN; x.len()];
            rows(&x, len, &mut safe, SAFE, threads);
            rows(&x, len, &mut plain, PLAIN, threads);
            let rows = safe.chunks(len).zip(plain.chunks(len)).zip(&masked).enumerate();
            for (r, ((s, p), &m)) in rows {
                if m {
                    assert!(s.iter().all(|&v| v == 0.0), "row {r}: {s:?}");
                    assert!(p.iter().all(|v| v.is_nan()), "row {r}: {p:?}");
                } else {
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(s), bits(p), "row {r}");
                }
            }
        }
    }

    /// The portable loops and the AVX-512 and AVX2 builds give the same bits (softmax and
    /// log-softmax, rows of every length around the vector widths, large ranges, `-inf`).
    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        let mut rng = fastrand::Rng::with_seed(0x50f);
        for case in 0..60 {
            let len = rng.usize(1..80);
            let x: Vec<f32> = (0..len * 3)
                .map(|i| if i % 17 == 5 { f32::NEG_INFINITY } else { (rng.f32() - 0.5) * 90.0 })
                .collect();
            let kind = Softmax { log: case % 2 == 1, zero_masked_rows: case % 3 == 0 };
            let mut want = vec![0f32; x.len()];
            rows_body(&x, len, &mut want, kind);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            #[cfg(target_arch = "x86_64")]
            {
                use crate::compute::cpu::{has_avx2, has_avx512};
                if has_avx512() {
                    let mut got = vec![0f32; x.len()];
                    // SAFETY: the CPU has AVX-512F.
                    unsafe { rows_avx512(&x, len, &mut got, kind) };
                    assert_eq!(bits(&got), bits(&want), "avx512, case {case}");
                }
                if has_avx2() {
                    let mut got = vec![0f32; x.len()];
                    // SAFETY: the CPU has AVX2 and FMA.
                    unsafe { rows_avx2(&x, len, &mut got, kind) };
                    assert_eq!(bits(&got), bits(&want), "avx2, case {case}");
                }
            }
        }
    }
}
