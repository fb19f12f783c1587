//! Fast paths the general kernels try first: float32 tensors in a common dense layout, without
//! the general path's casts to temporary `f64` buffers and strided walks, computed as the
//! numerics policy below says. Each
//! returns `false` when its layout or dtype conditions do not hold; the caller then runs the
//! general path. This module holds batch norm's per-channel affine and the run copies of
//! movement ops and layer norm's rows; [`crate::ops::fast_pointwise`] the elementwise ops and
//! [`crate::ops::fast_reduce`] `mean` and softmax.
//!
//! # Numerics policy for float32
//! The general paths are the reference: most compute a float32 op in `f64` and round once.
//! A fast path keeps that result bit for bit where `f32` arithmetic gives it anyway, and
//! otherwise computes the way PyTorch's and ExecuTorch's float kernels do, in `f32`:
//! - bit-identical, `f32` arithmetic: `relu`, `hardtanh`, `clamp` (comparisons are exact),
//!   `neg`, `abs`, `sqrt`, `rsqrt` and `add`/`sub`/`mul`/`div` (a correctly rounded `f64`
//!   `+ - * / sqrt` of `f32` operands rounds to the `f32` result; `add`/`sub` already compute
//!   `x + alpha * y` in `f32` on the general path);
//! - bit-identical, `f64` kept: `mean` (one `f64` accumulator in index order, as the general
//!   path);
//! - `f64` kept, within one `f32` ulp of the general path: `native_layer_norm` (the general
//!   path's `f64` statistics and affine, its sums in eight lanes rather than index order);
//! - `f32`, within a few ulp of the general path: `exp` (platform `expf`), `tanh` and
//!   `sigmoid` (vectorized, [`crate::compute::activation`], as PyTorch's CPU kernels vectorize
//!   theirs), `gelu` (PyTorch's vectorized `erf` formula, absolute error below 6e-7,
//!   or `tanhf` for the tanh approximation), `leaky_relu` (slope rounded to `f32`, as PyTorch), softmax and
//!   log-softmax (`f32` max, `x - max`, vectorized `exp` and division as ExecuTorch's portable kernel,
//!   with the sum of exponentials in `f64` lanes, more accurate than PyTorch's `f32` lanes),
//!   batch norm's affine `(x - mean) * scale + shift` (the per-channel `f64` constants rounded
//!   to `f32` once, then `f32` arithmetic as ExecuTorch's portable kernel).
//!
//! The compile stage's prepared kernels ([`crate::compute::sgemm`], [`crate::compute::conv2d`]
//! with its depthwise sums) compute in `f32` with fused multiply-adds, as XNNPACK's and
//! PyTorch's CPU convolutions do; their property tests bound the error against `f64`
//! references. Their summation order does not depend on the thread count. One exception to
//! "the way PyTorch does": a channels-last 3x3 stride-1 convolution runs as Winograd
//! F(2x2, 3x3) on AVX-512 machines (`compute/conv2d/winograd.rs`), summing `16 * Cin`
//! products of transformed values instead of `9 * Cin` products; its test bounds the error by
//! `1e-5` of the sum of the products' magnitudes, and resnet18's outputs stay within `7.7e-6`
//! of ExecuTorch's (as the direct convolution's do).
use crate::compute::sum::{sum_f64, sum_sq_dev_f64};
use crate::compute::threads::{split, with_pieces, Threads};
use crate::compute::transpose::transpose;
use crate::dtype::DType;
use crate::tensor::{TensorMut, TensorRef};

/// Per-channel affine `out = (x - mean[c]) * scale[c] + shift[c]` over dim 1 (batch norm)
/// for float32 `x` and `out` that are both contiguous or both channels-last, in `f32` with the
/// `f64` per-channel constants rounded to `f32` (within a few ulp of the general path's `f64`
/// arithmetic). `out` must already have `x`'s sizes.
pub(crate) fn channel_affine_f32(
    x: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    mean: &[f64],
    scale: &[f64],
    shift: &[f64],
) -> bool {
    if x.dtype() != DType::Float || out.dtype() != DType::Float || x.rank() < 2 {
        return false;
    }
    let sizes = x.sizes();
    let c = sizes[1];
    if out.sizes() != sizes || mean.len() != c || scale.len() != c || shift.len() != c {
        return false;
    }
    let contiguous = x.shape().is_dense_row_major() && out.shape().is_dense_row_major();
    let channels_last = x.shape().dim_order() == out.shape().dim_order()
        && x.shape().is_channels_last()
        && x.rank() > 2;
    if !contiguous && !channels_last {
        return false;
    }
    let Ok(src) = x.as_slice::<f32>() else { return false };
    let Ok(dst) = out.as_mut_slice::<f32>() else { return false };
    if src.len() != dst.len() || c == 0 {
        return true;
    }
    let inner: usize = sizes[2..].iter().product();
    let to_f32 = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    let (mean, scale, shift) = (to_f32(mean), to_f32(scale), to_f32(shift));
    if contiguous {
        // [n][c][inner]
        if inner == 0 {
            return true;
        }
        for (k, (d, s)) in dst.chunks_exact_mut(inner).zip(src.chunks_exact(inner)).enumerate() {
            let ch = k % c;
            let (m, sc, sh) = (mean[ch], scale[ch], shift[ch]);
            for (o, &v) in d.iter_mut().zip(s) {
                *o = (v - m) * sc + sh;
            }
        }
    } else {
        // [n][inner][c]
        for (d, s) in dst.chunks_exact_mut(c).zip(src.chunks_exact(c)) {
            for ((((o, &v), &m), &sc), &sh) in
                d.iter_mut().zip(s).zip(&mean).zip(&scale).zip(&shift)
            {
                *o = (v - m) * sc + sh;
            }
        }
    }
    true
}

/// `native_layer_norm` over rows of `inner` contiguous elements of float32 `x` into float32
/// `out`, `mean_out` and `rstd_out` (all dense row-major, already resized), in the general
/// path's `f64` arithmetic: mean and two-pass variance, `rstd = 1 / sqrt(var + eps)`,
/// `y = (x - mean) * rstd * w + b`. The sums run in eight interleaved lanes (so they
/// vectorize) where the general path sums in index order, so the `f64` statistics may differ
/// in their last bits and an output by one `f32` ulp. Rows are split over `threads`; each is
/// computed by the same code whatever the split.
#[allow(clippy::too_many_arguments)]
pub(crate) fn layer_norm_rows_f32(
    x: &TensorRef<'_>,
    inner: usize,
    eps: f64,
    w: Option<&[f64]>,
    b: Option<&[f64]>,
    out: &mut TensorMut<'_>,
    mean_out: &mut TensorMut<'_>,
    rstd_out: &mut TensorMut<'_>,
    threads: &Threads,
) -> bool {
    let all_f32 =
        [out.dtype(), mean_out.dtype(), rstd_out.dtype()].iter().all(|&d| d == DType::Float);
    let dense = x.shape().is_dense_row_major()
        && out.shape().is_dense_row_major()
        && mean_out.shape().is_dense_row_major()
        && rstd_out.shape().is_dense_row_major();
    if x.dtype() != DType::Float || !all_f32 || !dense || inner == 0 {
        return false;
    }
    if w.is_some_and(|w| w.len() != inner) || b.is_some_and(|b| b.len() != inner) {
        return false;
    }
    let Ok(src) = x.as_slice::<f32>() else { return false };
    let Ok(dst) = out.as_mut_slice::<f32>() else { return false };
    let Ok(means) = mean_out.as_mut_slice::<f32>() else { return false };
    let Ok(rstds) = rstd_out.as_mut_slice::<f32>() else { return false };
    let rows = src.len() / inner;
    if dst.len() != src.len()
        || src.len() % inner != 0
        || means.len() != rows
        || rstds.len() != rows
    {
        return false;
    }
    let tasks = threads.tasks_for_elements(src.len(), rows);
    let pieces = with_pieces(split(rows, 1, tasks), dst, inner)
        .zip(with_pieces(split(rows, 1, tasks), means, 1))
        .zip(with_pieces(split(rows, 1, tasks), rstds, 1));
    threads.for_each(pieces, |(((r, d), (_, m)), (_, rs))| {
        let s = &src[r.start * inner..r.end * inner];
        let rows = d.chunks_exact_mut(inner).zip(s.chunks_exact(inner));
        for ((d, s), (m_out, r_out)) in rows.zip(m.iter_mut().zip(rs.iter_mut())) {
            let n = inner as f64;
            let mean = sum_f64(s) / n;
            let var = sum_sq_dev_f64(s, mean) / n;
            let rstd = 1.0 / (var + eps).sqrt();
            // The same arithmetic either way; the common affine case gets a loop of its own
            // because the compiler does not hoist the optional weight and bias out of the
            // general one (vit_b_16's 25 layer norms: 3.1 ms an execute this way, 5.3 without).
            match (w, b) {
                (Some(w), Some(b)) => {
                    for (((o, &v), &w), &b) in d.iter_mut().zip(s).zip(w).zip(b) {
                        *o = ((f64::from(v) - mean) * rstd * w + b) as f32;
                    }
                }
                _ => {
                    for (k, (o, &v)) in d.iter_mut().zip(s).enumerate() {
                        let mut y = (f64::from(v) - mean) * rstd;
                        if let Some(w) = w {
                            y *= w[k];
                        }
                        if let Some(b) = b {
                            y += b[k];
                        }
                        *o = y as f32;
                    }
                }
            }
            *m_out = mean as f32;
            *r_out = rstd as f32;
        }
    });
    true
}

/// Copies the strided view `(sizes, strides, base)` of `src` into `dst` (element strides `os`)
/// as contiguous runs: trailing dimensions that are dense in both operands are merged into one
/// run copied with `copy_from_slice`. Returns `None`, writing nothing, when the runs would be
/// shorter than 8 elements (the element-wise walk is as fast then), else whether every run lay
/// inside both operands.
pub(crate) fn copy_runs<P: Copy>(
    src: &[P],
    dst: &mut [P],
    sizes: &[usize],
    strides: &[usize],
    base: usize,
    os: &[usize],
) -> Option<bool> {
    let mut k = sizes.len();
    let mut run = 1usize;
    // Merge trailing dims whose strides are the run length in both operands (size-1 dims
    // merge whatever their strides).
    while k > 0 && (sizes[k - 1] == 1 || strides[k - 1] == run && os[k - 1] == run) {
        run *= sizes[k - 1];
        k -= 1;
    }
    if run < 8 {
        return None;
    }
    let mut ok = true;
    crate::compute::strided::walk(&sizes[..k], [&strides[..k], &os[..k]], |[i, o]| {
        let from = base + i;
        match (dst.get_mut(o..o + run), src.get(from..from + run)) {
            (Some(d), Some(s)) => d.copy_from_slice(s),
            _ => ok = false,
        }
    });
    Some(ok)
}

/// Copies the strided view `(sizes, strides, base)` of `src` into `dst` (element strides
/// `os`) when it transposes: some dim `d`, at least 8 long, is contiguous in the source and
/// the last dim is contiguous in the destination (an attention block's `k.transpose(-2, -1)`,
/// a channels-last image read channels-first, a 3-channel image made channels-last). Each pair of those dims
/// is a matrix moved in 8 x 8 blocks ([`crate::compute::transpose`]: through registers for
/// 32-bit values) rather than value by value along the view. Returns `None`, writing
/// nothing, when the view is not such a transpose, else whether it lay inside both operands.
pub(crate) fn copy_transposed<T: crate::compute::transpose::Moved>(
    src: &[T],
    dst: &mut [T],
    sizes: &[usize],
    strides: &[usize],
    base: usize,
    os: &[usize],
) -> Option<bool> {
    let r = sizes.len();
    let last = r.checked_sub(1)?;
    let d = (0..last).find(|&d| strides[d] == 1 && sizes[d] >= 8)?;
    if os[last] != 1 || strides[last] == 1 {
        return None;
    }
    let (cols, depth, ld_src, ld_dst) = (sizes[last], sizes[d], strides[last], os[d]);
    // The source extent of one matrix, and the destination's.
    let src_len = (cols - 1).checked_mul(ld_src)?.checked_add(depth)?;
    let dst_len = (depth - 1).checked_mul(ld_dst)?.checked_add(cols)?;
    let outer = |v: &[usize]| -> Vec<usize> {
        v.iter().enumerate().filter(|&(k, _)| k != d && k != last).map(|(_, &x)| x).collect()
    };
    let (outer_sizes, outer_strides, outer_os) = (outer(sizes), outer(strides), outer(os));
    let mut ok = true;
    crate::compute::strided::walk(&outer_sizes, [&outer_strides, &outer_os], |[i, o]| {
        let from = base + i;
        match (src.get(from..from + src_len), dst.get_mut(o..o + dst_len)) {
            (Some(s), Some(t)) => transpose(s, ld_src, cols, depth, t, ld_dst),
            _ => ok = false,
        }
    });
    Some(ok)
}

#[cfg(test)]
mod tests {
    use crate::compute::threads::Threads;
    use crate::testing;
    use crate::{find_kernel, Arg, Capacity, DType, Shape, TensorRef};

    fn f32_ref<'a>(sizes: &[usize], order: &[u8], data: &'a [f32]) -> TensorRef<'a> {
        TensorRef::new(DType::Float, Shape::new(sizes, order).unwrap(), bytemuck::cast_slice(data))
            .unwrap()
    }

    /// Runs batch norm with the fast paths on or off; returns the out's storage.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm(
        general: bool,
        sizes: &[usize],
        x_order: &[u8],
        out_order: &[u8],
        x: &[f32],
        params: &[Vec<f32>; 4],
        affine: bool,
    ) -> Vec<f32> {
        let def = find_kernel("aten::_native_batch_norm_legit_no_training.out").unwrap();
        let c = sizes[1];
        let mut out = vec![f32::NAN; x.len()];
        let (mut m, mut r) = ([0f32; 0], [0f32; 0]);
        let [w, b, rm, rv] = params;
        fn opt<'a>(affine: bool, c: usize, v: &'a [f32]) -> Arg<'a> {
            if affine {
                Arg::Tensor(f32_ref(&[c], &[0], v))
            } else {
                Arg::None
            }
        }
        let args = [
            Arg::Tensor(f32_ref(sizes, x_order, x)),
            opt(affine, c, w),
            opt(affine, c, b),
            Arg::Tensor(f32_ref(&[c], &[0], rm)),
            Arg::Tensor(f32_ref(&[c], &[0], rv)),
            Arg::Double(0.1),
            Arg::Double(1e-5),
            Arg::Output,
            Arg::Output,
            Arg::Output,
            Arg::Output,
        ];
        let mut outs = [
            testing::out(&mut out, sizes, out_order, Capacity::Static),
            testing::out(&mut m, &[0], &[0], Capacity::Bound(0)),
            testing::out(&mut r, &[0], &[0], Capacity::Bound(0)),
        ];
        testing::run_kernel(def.name, general, &Threads::default(), &args, &mut outs).unwrap();
        out
    }

    /// Property test: the float32 batch-norm fast path stays within a few f32 roundings of the
    /// f64 general path (relative to the magnitudes of `(x - mean) * scale` and `shift`) on
    /// random shapes (rank 2-5), contiguous, channels-last and mixed dim orders, with and
    /// without affine parameters, including NaN and infinite inputs.
    #[test]
    fn batch_norm_fast_path_is_close_to_general_path() {
        let mut rng = fastrand::Rng::with_seed(7);
        for case in 0..150 {
            let rank = rng.usize(2..6);
            let sizes: Vec<usize> = (0..rank).map(|_| rng.usize(1..5)).collect();
            let n: usize = sizes.iter().product();
            let c = sizes[1];
            let contiguous: Vec<u8> = (0..rank as u8).collect();
            let mut cl = vec![0u8];
            cl.extend(2..rank as u8);
            cl.push(1);
            let orders = [&contiguous, &cl];
            let x_order = orders[case % 2];
            let out_order = orders[(case / 2) % 2];
            let mut x: Vec<f32> = (0..n).map(|_| (rng.f32() - 0.5) * 8.0).collect();
            if case % 5 == 0 {
                x[0] = f32::NAN;
                x[n - 1] = f32::INFINITY;
            }
            let mut p = |lo: f32| (0..c).map(|_| lo + rng.f32()).collect::<Vec<f32>>();
            let params = [p(0.5), p(-0.5), p(-0.5), p(0.1)];
            let affine = case % 3 != 0;
            let fast = batch_norm(false, &sizes, x_order, out_order, &x, &params, affine);
            let general = batch_norm(true, &sizes, x_order, out_order, &x, &params, affine);
            // |x| <= 4, |mean|, |bias| <= 1.5, scale <= |w| / sqrt(var) <= 1.5 / sqrt(0.1):
            // terms below 50, so a few f32 roundings stay under 50 * 2^-21.
            let tol = 50.0 * 2f32.powi(-21);
            for (i, (&f, &g)) in fast.iter().zip(&general).enumerate() {
                assert!(
                    f.is_nan() && g.is_nan() || f == g || (f - g).abs() <= tol,
                    "case {case}: {sizes:?} {x_order:?} {out_order:?} [{i}]: {f:e} vs {g:e}"
                );
            }
        }
    }
}

#[cfg(test)]
mod layer_norm_tests {
    use crate::compute::threads::Threads;
    use crate::testing;
    use crate::{find_kernel, Arg, Capacity, TensorRef};

    /// Runs `native_layer_norm` with the fast paths on or off; returns out, mean and rstd.
    fn layer_norm(
        general: bool,
        threads: &Threads,
        sizes: &[usize],
        k: usize,
        x: &[f32],
        w: Option<&[f32]>,
        b: Option<&[f32]>,
    ) -> [Vec<f32>; 3] {
        let def = find_kernel("aten::native_layer_norm.out").unwrap();
        let r = sizes.len();
        let norm: Vec<i64> = sizes[r - k..].iter().map(|&s| s as i64).collect();
        let inner: usize = sizes[r - k..].iter().product();
        let mut stat_sizes = sizes[..r - k].to_vec();
        stat_sizes.extend(std::iter::repeat_n(1, k));
        fn feature(inner: usize, v: Option<&[f32]>) -> Arg<'_> {
            match v {
                Some(v) => Arg::Tensor(TensorRef::from_slice(&[inner], v).unwrap()),
                None => Arg::None,
            }
        }
        let args = [
            Arg::Tensor(TensorRef::from_slice(sizes, x).unwrap()),
            Arg::IntList(&norm),
            feature(inner, w),
            feature(inner, b),
            Arg::Double(1e-5),
            Arg::Output,
            Arg::Output,
            Arg::Output,
        ];
        let rows: usize = stat_sizes.iter().product();
        let mut bufs = [vec![f32::NAN; x.len()], vec![f32::NAN; rows], vec![f32::NAN; rows]];
        {
            let [o, m, s] = &mut bufs;
            let mk = |sz, d| testing::out(d, sz, &[], Capacity::Static);
            let mut outs = [mk(sizes, o), mk(&stat_sizes, m), mk(&stat_sizes, s)];
            testing::run_kernel(def.name, general, threads, &args, &mut outs).unwrap();
        }
        bufs
    }

    /// Property test: the float32 layer-norm fast path (out, mean and rstd) is within one
    /// `f32` ulp of the general path on random shapes, normalized over 1-3 trailing dims, with
    /// and without weight and bias, including NaN inputs; and bit-identical whether its rows
    /// run on one thread or on three.
    #[test]
    fn layer_norm_fast_path_is_close_to_general_path() {
        let mut rng = fastrand::Rng::with_seed(31);
        let (one, three) = (Threads::default(), Threads::new(3).unwrap());
        for case in 0..200 {
            let rank = rng.usize(1..5);
            let mut sizes: Vec<usize> = (0..rank).map(|_| rng.usize(1..7)).collect();
            if case % 10 == 0 {
                // Enough rows for the fast path to split them over threads.
                sizes = vec![rng.usize(30..60), 768];
            }
            let rank = sizes.len();
            let k = rng.usize(1..=rank.min(3));
            let n: usize = sizes.iter().product();
            let inner: usize = sizes[rank - k..].iter().product();
            let mut x: Vec<f32> = (0..n).map(|_| (rng.f32() - 0.3) * 20.0).collect();
            if case % 9 == 0 {
                x[n / 2] = f32::NAN;
            }
            let w: Vec<f32> = (0..inner).map(|_| rng.f32() + 0.5).collect();
            let b: Vec<f32> = (0..inner).map(|_| rng.f32() - 0.5).collect();
            let (w, b) = ((case % 2 == 0).then_some(&w[..]), (case % 3 != 0).then_some(&b[..]));
            let fast = layer_norm(false, &one, &sizes, k, &x, w, b);
            let split = layer_norm(false, &three, &sizes, k, &x, w, b);
            let general = layer_norm(true, &one, &sizes, k, &x, w, b);
            let bits = |v: &[f32]| {
                v.iter()
                    .map(|f| if f.is_nan() { u32::MAX } else { f.to_bits() })
                    .collect::<Vec<_>>()
            };
            for ((f, s), g) in fast.iter().zip(&split).zip(&general) {
                assert_eq!(bits(f), bits(s), "case {case}: {sizes:?} k={k}, 1 vs 3 threads");
                for (i, (&f, &g)) in f.iter().zip(g).enumerate() {
                    let ulp = f32::from_bits(g.abs().to_bits() + 1) - g.abs();
                    let ok = f.is_nan() && g.is_nan() || (f - g).abs() <= ulp.max(1e-12);
                    assert!(ok, "case {case}: {sizes:?} k={k} [{i}]: fast {f:e} general {g:e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod copy_tests {
    use super::{copy_runs, copy_transposed};

    /// The element strides of a dense row-major tensor of `sizes`.
    fn dense_strides(sizes: &[usize]) -> Vec<usize> {
        crate::Shape::contiguous(sizes).unwrap().strides()[..sizes.len()].to_vec()
    }

    /// Property test: run copies equal the element-wise strided walk on random views
    /// (slices, expands with zero strides, permuted outputs, size-1 dims).
    #[test]
    fn copy_runs_equals_elementwise_walk() {
        let mut rng = fastrand::Rng::with_seed(9);
        let mut taken = 0;
        for _ in 0..400 {
            let rank = rng.usize(1..5);
            let sizes: Vec<usize> = (0..rank).map(|_| rng.usize(1..10)).collect();
            // Source: a larger contiguous tensor; the view takes a sub-box, maybe broadcast.
            let full: Vec<usize> =
                sizes.iter().map(|&s| s + if rng.bool() { 0 } else { rng.usize(0..3) }).collect();
            let fs = dense_strides(&full);
            let strides: Vec<usize> =
                (0..rank).map(|d| if rng.u8(0..8) == 0 { 0 } else { fs[d] }).collect();
            let base = (0..rank).map(|d| rng.usize(0..=full[d] - sizes[d]) * fs[d]).sum::<usize>();
            let src: Vec<u32> = (0..full.iter().product::<usize>() as u32).collect();
            // Destination: contiguous or a permuted dense layout.
            let mut order: Vec<usize> = (0..rank).collect();
            if rng.u8(0..3) == 0 {
                rng.shuffle(&mut order);
            }
            let mut os = vec![0usize; rank];
            let mut acc = 1;
            for &d in order.iter().rev() {
                os[d] = acc;
                acc *= sizes[d];
            }
            let n: usize = sizes.iter().product();
            let mut want = vec![u32::MAX; n];
            crate::compute::strided::walk(&sizes, [&strides[..], &os[..]], |[i, o]| {
                want[o] = src[base + i]
            });
            let mut got = vec![u32::MAX; n];
            if let Some(ok) = copy_runs(&src, &mut got, &sizes, &strides, base, &os) {
                assert!(ok);
                assert_eq!(got, want, "{sizes:?} {strides:?} {os:?} base {base}");
                taken += 1;
            } else {
                assert!(got.iter().all(|&v| v == u32::MAX), "refused but wrote");
            }
        }
        assert!(taken > 40, "only {taken} cases took the run path");
    }

    /// Property test: transposing copies equal the element-wise strided walk on random
    /// permutations of a padded tensor (batched transposes of every size around the 8 x 8
    /// blocks, with NaN payloads moved bit for bit), and refuse views that do not transpose.
    #[test]
    fn copy_transposed_equals_elementwise_walk() {
        let mut rng = fastrand::Rng::with_seed(10);
        let mut taken = 0;
        for _ in 0..300 {
            let rank = rng.usize(2..5);
            let full: Vec<usize> = (0..rank).map(|_| rng.usize(1..21)).collect();
            let fs = dense_strides(&full);
            // The view: a sub-box of the source, its dims permuted.
            let sub: Vec<usize> = full.iter().map(|&f| f - rng.usize(0..=f.min(3) - 1)).collect();
            let base = (0..rank).map(|d| rng.usize(0..=full[d] - sub[d]) * fs[d]).sum::<usize>();
            let mut perm: Vec<usize> = (0..rank).collect();
            rng.shuffle(&mut perm);
            let sizes: Vec<usize> = perm.iter().map(|&p| sub[p]).collect();
            let strides: Vec<usize> = perm.iter().map(|&p| fs[p]).collect();
            let n: usize = sizes.iter().product();
            let os = dense_strides(&sizes);
            let len: usize = full.iter().product();
            let src: Vec<f32> = (0..len as u32).map(|i| f32::from_bits(0x7fc0_0000 | i)).collect();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            let mut want = vec![0f32; n];
            crate::compute::strided::walk(&sizes, [&strides[..], &os[..]], |[i, o]| {
                want[o] = src[base + i]
            });
            let mut got = vec![0f32; n];
            match copy_transposed(&src, &mut got, &sizes, &strides, base, &os) {
                Some(ok) => {
                    assert!(ok);
                    assert_eq!(bits(&got), bits(&want), "{sizes:?} {strides:?} base {base}");
                    taken += 1;
                }
                None => assert!(got.iter().all(|&v| v == 0.0), "refused but wrote"),
            }
        }
        assert!(taken > 40, "only {taken} cases took the transposing path");
    }
}
