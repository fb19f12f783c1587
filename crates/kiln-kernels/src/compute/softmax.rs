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

use crate::compute::activation;
use crate::compute::sum::sum_f64;
use crate::compute::threads::{split, with_pieces, Threads, TASKS_PER_THREAD};

/// Which softmax a row gets.
#[derive(Clone, Copy, Debug)]
pub struct Softmax {
    /// Log-softmax (`x - max - ln(sum)`) instead of softmax.
    pub log: bool,
    /// A row whose every value is `-inf` (fully masked scores) gives zeros, not NaN.
    pub zero_masked_rows: bool,
}

/// Elements below which the rows run on the calling thread: a split costs a few
/// microseconds, about what 16K elements take.
const PARALLEL_MIN: usize = 1 << 14;

/// `kind` softmax of every row of `len` values of `x` into `out` (same length, a whole number
/// of rows; `len` at least 1). Rows are split over `threads` in runs of whole rows; each row is
/// computed by the same code whatever the split.
pub fn rows(x: &[f32], len: usize, out: &mut [f32], kind: Softmax, threads: &Threads) {
    let rows = x.len() / len.max(1);
    let tasks = if x.len() >= PARALLEL_MIN { threads.tasks_for(TASKS_PER_THREAD, rows) } else { 1 };
    threads.for_each(with_pieces(split(rows, 1, tasks), out, len), |(r, o)| {
        let x = &x[r.start * len..r.end * len];
        for (o, x) in o.chunks_exact_mut(len).zip(x.chunks_exact(len)) {
            row(x, o, kind);
        }
    });
}

/// `kind` softmax of one contiguous row into `out` (same length, at least 1).
pub(crate) fn row(x: &[f32], out: &mut [f32], kind: Softmax) {
    // The maximum of the numbers; a NaN anywhere still makes every output NaN, as in the
    // general path: its `e^(NaN - max)` is NaN, and so is the sum every output takes.
    let max = max_lanes(x);
    if kind.zero_masked_rows && max == f32::NEG_INFINITY && x.iter().all(|&v| v == max) {
        out.fill(0.0);
        return;
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v - max;
    }
    activation::exp_in_place(out);
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
}
