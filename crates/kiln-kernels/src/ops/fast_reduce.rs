//! Float32 fast paths for reductions over dense row-major tensors: `mean` over trailing dims
//! (global average pooling) and `_softmax` / `_log_softmax` over any dim. Each returns
//! `false`, having written nothing, when its conditions do not hold; the caller then runs the
//! general path (which computes in `f64` throughout).
//!
//! # Numerics
//! - `mean` sums the `f32` inputs into one `f64` accumulator in index order and divides in
//!   `f64`, like the general path, so the result is bit-identical; it only skips the general
//!   path's `f64` copy of the input and its offset tables.
//! - softmax is [`crate::compute::softmax`]'s (ExecuTorch's portable float kernel with the sum
//!   of the exponentials in `f64`), within a few `f32` ulp of the `f64` general path (relative
//!   error about `|x - max| * 2^-24` from rounding `x - max`).

use crate::compute::softmax::{self, Softmax};
use crate::compute::threads::Threads;
use crate::dtype::DType;
use crate::tensor::{TensorMut, TensorRef};

/// `mean` of float32 `x` over the dims marked in `reduced` into float32 `out` (already
/// resized), when the reduced dims are the trailing ones and both tensors are dense row-major.
pub(crate) fn mean_trailing_f32(
    x: &TensorRef<'_>,
    reduced: impl Fn(usize) -> bool,
    out: &mut TensorMut<'_>,
) -> bool {
    if x.dtype() != DType::Float || out.dtype() != DType::Float || x.numel() == 0 {
        return false;
    }
    let r = x.rank();
    let k = (0..r).rev().find(|&d| !reduced(d)).map_or(0, |d| d + 1);
    if (0..k).any(&reduced) || !x.shape().is_dense_row_major() || !out.shape().is_dense_row_major()
    {
        return false;
    }
    let inner: usize = x.sizes()[k..].iter().product();
    let Ok(src) = x.as_slice::<f32>() else { return false };
    let Ok(dst) = out.as_mut_slice::<f32>() else { return false };
    if inner == 0 || src.len() != dst.len() * inner {
        return false;
    }
    for (d, run) in dst.iter_mut().zip(src.chunks_exact(inner)) {
        let sum: f64 = run.iter().map(|&v| f64::from(v)).sum();
        *d = (sum / inner as f64) as f32;
    }
    true
}

/// Softmax (or log-softmax) of float32 `x` over dim `d` into float32 `out` (already resized
/// to `x`'s sizes), both dense row-major: [`softmax::rows`] over contiguous rows (`d` the last
/// dim, split over `threads`), else row by row through a gathered copy.
pub(crate) fn softmax_f32(
    x: &TensorRef<'_>,
    d: usize,
    out: &mut TensorMut<'_>,
    log: bool,
    threads: &Threads,
) -> bool {
    if x.dtype() != DType::Float
        || out.dtype() != DType::Float
        || x.sizes() != out.sizes()
        || !x.shape().is_dense_row_major()
        || !out.shape().is_dense_row_major()
    {
        return false;
    }
    let sizes = x.sizes();
    let (len, inner) = if sizes.is_empty() {
        (1, 1)
    } else if d < sizes.len() {
        (sizes[d], sizes[d + 1..].iter().product::<usize>())
    } else {
        return false;
    };
    let Ok(src) = x.as_slice::<f32>() else { return false };
    let Ok(dst) = out.as_mut_slice::<f32>() else { return false };
    if src.len() != dst.len() {
        return false;
    }
    let block = len * inner;
    if block == 0 {
        return true;
    }
    if inner == 1 {
        softmax::rows(src, len, dst, Softmax { log, zero_masked_rows: false }, threads);
    } else {
        // Gather each strided row into a contiguous buffer, then scatter the result back.
        let mut row = vec![0f32; len];
        let mut res = vec![0f32; len];
        for (o, s) in dst.chunks_exact_mut(block).zip(src.chunks_exact(block)) {
            for j in 0..inner {
                for (k, v) in row.iter_mut().enumerate() {
                    *v = s[k * inner + j];
                }
                softmax::row(&row, &mut res, Softmax { log, zero_masked_rows: false });
                for (k, &v) in res.iter().enumerate() {
                    o[k * inner + j] = v;
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use crate::compute::threads::Threads;
    use crate::testing::{out, out_sizes, run_kernel};
    use crate::{Arg, Capacity, TensorRef};

    /// Runs kernel `name` on `args` with the fast paths on or off into a bound float32 out of
    /// rank `out_rank` (the kernel resizes it); returns the out's elements and sizes.
    fn run(name: &str, general: bool, args: &[Arg<'_>], out_rank: usize) -> (Vec<f32>, Vec<usize>) {
        run_on(&Threads::default(), name, general, args, out_rank)
    }

    /// [`run`] on `threads`, into an out of up to 64K elements.
    fn run_on(
        threads: &Threads,
        name: &str,
        general: bool,
        args: &[Arg<'_>],
        out_rank: usize,
    ) -> (Vec<f32>, Vec<usize>) {
        let cap = 1 << 16;
        let mut data = vec![f32::NAN; cap];
        let mut outs = [out(&mut data, &vec![1; out_rank], &[], Capacity::Bound(cap))];
        run_kernel(name, general, threads, args, &mut outs)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let sizes = out_sizes(&outs, 0);
        let n: usize = sizes.iter().product();
        (data[..n].to_vec(), sizes)
    }

    fn tensor<'a>(sizes: &[usize], data: &'a [f32]) -> Arg<'a> {
        Arg::Tensor(TensorRef::from_slice(sizes, data).unwrap())
    }

    /// Property test: float32 `mean` over trailing dims (with and without keepdim, and over
    /// dim lists the fast path refuses) is bit-identical to the general path.
    #[test]
    fn mean_fast_path_is_bit_identical() {
        let mut rng = fastrand::Rng::with_seed(21);
        for case in 0..300 {
            let rank = rng.usize(1..5);
            let sizes: Vec<usize> = (0..rank).map(|_| rng.usize(1..7)).collect();
            let n: usize = sizes.iter().product();
            let x: Vec<f32> = (0..n).map(|_| (rng.f32() - 0.5) * 100.0).collect();
            // Trailing dims (negative or positive indices), or a random subset.
            let dims: Vec<i64> = if case % 3 == 0 {
                (0..rank as i64).filter(|_| rng.bool()).collect()
            } else {
                let k = rng.usize(1..=rank);
                (rank - k..rank)
                    .map(|d| if rng.bool() { d as i64 } else { d as i64 - rank as i64 })
                    .collect()
            };
            let keep = rng.bool();
            let out_rank = match (keep, dims.is_empty()) {
                (true, _) => rank,
                // An empty dim list reduces every dim.
                (false, true) => 0,
                (false, false) => rank - dims.len(),
            };
            let args =
                [tensor(&sizes, &x), Arg::IntList(&dims), Arg::Bool(keep), Arg::None, Arg::Output];
            let fast = run("aten::mean.out", false, &args, out_rank);
            let general = run("aten::mean.out", true, &args, out_rank);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(fast.1, general.1, "case {case}");
            assert_eq!(bits(&fast.0), bits(&general.0), "case {case} {sizes:?} {dims:?} {keep}");
        }
    }

    /// Property test: float32 softmax and log-softmax over any dim stay within a few f32 ulp
    /// (relative 4e-6, absolute 1e-30 near zero) of the f64 general path, on random shapes
    /// with large ranges, infinities and NaN; and give the same bits on three threads as on
    /// one.
    #[test]
    fn softmax_fast_path_is_close_to_general_path() {
        let mut rng = fastrand::Rng::with_seed(22);
        let three = Threads::new(3).unwrap();
        for case in 0..300 {
            let mut rank = rng.usize(0..4);
            let mut sizes: Vec<usize> = (0..rank).map(|_| rng.usize(1..9)).collect();
            if case % 10 == 0 {
                // Enough rows of attention scores for the fast path to split them.
                (rank, sizes) = (3, vec![2, rng.usize(50..80), 197]);
            }
            let n: usize = sizes.iter().product();
            let scale = [1.0, 10.0, 60.0][case % 3];
            let mut x: Vec<f32> = (0..n).map(|_| (rng.f32() - 0.5) * scale).collect();
            if case % 11 == 0 && n > 1 {
                x[0] = f32::NEG_INFINITY;
            }
            if case % 13 == 0 {
                x[n - 1] = f32::NAN;
            }
            let dim = if rank == 0 { 0 } else { rng.i64(-(rank as i64)..rank as i64) };
            let log = case % 2 == 1;
            let name = if log { "aten::_log_softmax.out" } else { "aten::_softmax.out" };
            let args = [tensor(&sizes, &x), Arg::Int(dim), Arg::Bool(false), Arg::Output];
            let (fast, _) = run(name, false, &args, rank);
            let (general, _) = run(name, true, &args, rank);
            let (split, _) = run_on(&three, name, false, &args, rank);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&split), "{name} case {case}: 1 vs 3 threads");
            for (i, (&f, &g)) in fast.iter().zip(&general).enumerate() {
                let ok = f.is_nan() && g.is_nan()
                    || f == g
                    || (f - g).abs() <= 4e-6 * g.abs().max(if log { 1.0 } else { 0.0 }) + 1e-30;
                assert!(
                    ok,
                    "{name} case {case} {sizes:?} dim {dim} [{i}]: fast {f:e} general {g:e}"
                );
            }
        }
    }
}
