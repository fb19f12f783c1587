//! Float32 fast paths for elementwise ops: unary maps (`relu`, `hardtanh`, `clamp`,
//! `leaky_relu`, `neg`, `abs`, `sqrt`, `rsqrt`, `exp`, `tanh`, `sigmoid`, `gelu`; the closures
//! live with their kernels in `unary.rs`), comparisons with a scalar, the binary arithmetic
//! `add`/`sub`/`mul`/`div` and `where`, over tensors whose storage orders line up. Each returns
//! `false`, having written nothing but possibly `out`'s (valid) new sizes, when its dtype or
//! layout conditions do not hold; the caller then runs the general path.
//!
//! # Numerics
//! The loops here are plain `f32` loops the compiler auto-vectorizes (except where a closure
//! calls `expf`/`tanhf`). Which ops are bit-identical to the general path and which are
//! within a few ulp is listed in the policy of [`crate::ops::fast`]; the binary arithmetic is
//! bit-identical: the general path computes `x + alpha * y` and `x * y` in `f32` (the float
//! opmath type) and `x / y` in `f64` rounded to `f32`, which equals the `f32` quotient.

use crate::dtype::DType;
use crate::element::{Bool, Element};
use crate::tensor::{TensorMut, TensorRef};

/// `out[i] = f(x[i])` for float32 `x` and `out` with the same sizes and storage order (same
/// dim order, or both dense row-major). Resizes `out` to `x`'s sizes first; a failed resize
/// returns `false` so the general path reports it.
pub(crate) fn unary_f32(
    x: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    f: impl Fn(f32) -> f32,
) -> bool {
    unary_f32_slice(x, out, |src, dst| {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = f(s);
        }
    })
}

/// [`unary_f32`] with a function over the whole slice (`apply(src, dst)`, equal lengths), for
/// maps with their own vector loops ([`crate::compute::activation`]), into an `out` of element
/// type `O` (float32 for the maps, bool for comparisons).
pub(crate) fn unary_f32_slice<O: Element>(
    x: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    apply: impl FnOnce(&[f32], &mut [O]),
) -> bool {
    if x.dtype() != DType::Float || out.dtype() != O::DTYPE || out.resize(x.sizes()).is_err() {
        return false;
    }
    if !same_order(x, out) {
        return false;
    }
    let Ok(src) = x.as_slice::<f32>() else { return false };
    let Ok(dst) = out.as_mut_slice::<O>() else { return false };
    if src.len() != dst.len() {
        return false;
    }
    apply(src, dst);
    true
}

/// `where(cond, x, y)` into `out` of `x`'s and `y`'s dtype `T`, all dense row-major: `x` and
/// `y` each of the broadcast `shape` or one element, `cond` (bool) in a block-broadcast
/// pattern ([`block_pattern`]), such as the `[.., L, 1]` row mask of attention scores
/// `[.., L, L]`. A condition constant over runs of elements copies whole runs. `out` is resized
/// to `shape`; `false` (nothing written but the sizes) when the layout does not fit.
pub(crate) fn select<T: Element>(
    cond: &TensorRef<'_>,
    x: &TensorRef<'_>,
    y: &TensorRef<'_>,
    shape: &[usize],
    out: &mut TensorMut<'_>,
) -> bool {
    if cond.dtype() != DType::Bool
        || x.dtype() != T::DTYPE
        || y.dtype() != T::DTYPE
        || out.dtype() != T::DTYPE
        || out.resize(shape).is_err()
    {
        return false;
    }
    let dense = |t: &TensorRef<'_>| t.shape().is_dense_row_major() || t.numel() <= 1;
    if !dense(cond) || !dense(x) || !dense(y) || !out.shape().is_dense_row_major() {
        return false;
    }
    let (Ok(c), Ok(xs), Ok(ys)) = (cond.as_slice::<Bool>(), x.as_slice::<T>(), y.as_slice::<T>())
    else {
        return false;
    };
    let Ok(dst) = out.as_mut_slice::<T>() else { return false };
    let n = dst.len();
    // An operand is read as `full[i]` or as its one element.
    let operand = |t: &TensorRef<'_>, v: &[T]| match v.len() {
        len if len == n && t.sizes() == shape => Some(Operand::Full),
        1 => Some(Operand::One(v[0])),
        _ => None,
    };
    let (Some(ox), Some(oy)) = (operand(x, xs), operand(y, ys)) else { return false };
    let Some((inner, period)) = block_pattern(cond.sizes(), shape) else { return false };
    if n == 0 {
        return true;
    }
    if inner == 0 || period != c.len() || n % inner != 0 || (n / inner) % period != 0 {
        return false;
    }
    let pick = |o: Operand<T>, full: &[T], i: usize| match o {
        Operand::Full => full[i],
        Operand::One(v) => v,
    };
    if inner == 1 {
        for (k, d) in dst.iter_mut().enumerate() {
            let i = k % period;
            *d = if c[i].is_true() { pick(ox, xs, k) } else { pick(oy, ys, k) };
        }
    } else {
        for (k, run) in dst.chunks_exact_mut(inner).enumerate() {
            let (o, full) = if c[k % period].is_true() { (ox, xs) } else { (oy, ys) };
            match o {
                Operand::Full => run.copy_from_slice(&full[k * inner..(k + 1) * inner]),
                Operand::One(v) => run.fill(v),
            }
        }
    }
    true
}

/// How [`select`] reads one of its value operands.
#[derive(Clone, Copy)]
enum Operand<T> {
    /// Element for element, of the result's shape.
    Full,
    /// One element for all.
    One(T),
}

/// Whether `x` and `out` (of equal sizes) store their elements in the same order.
fn same_order(x: &TensorRef<'_>, out: &TensorMut<'_>) -> bool {
    x.sizes() == out.sizes()
        && (x.shape().dim_order() == out.shape().dim_order()
            || x.shape().is_dense_row_major() && out.shape().is_dense_row_major())
}

/// `clamp(x, lo, hi)` in `f32` with the general path's NaN rule (a NaN input stays NaN); the
/// caller has rejected NaN bounds. `lo` is applied before `hi`, so `lo > hi` gives `hi`.
#[inline(always)]
pub(crate) fn clamp_f32(x: f32, lo: f32, hi: f32) -> f32 {
    let v = if x < lo { lo } else { x };
    if v > hi {
        hi
    } else {
        v
    }
}

/// The position of operand `t` in the block-broadcast pattern over `shape`: its sizes (left
/// padded with 1s to `shape`'s rank) are 1 outside one run of dims `[p, q)` and equal to
/// `shape` inside it. Returns `(inner, period)`: element `i` of the row-major broadcast result
/// reads `t[(i / inner) % period]`. A same-shape operand is `(1, numel)`, a one-element operand
/// `(numel, 1)` (any `inner` works), a `[C,1,1]` bias against `[N,C,H,W]` is `(H*W, C)`, a
/// `[D]` bias against `[..., D]` is `(1, D)`.
fn block_pattern(sizes: &[usize], shape: &[usize]) -> Option<(usize, usize)> {
    let r = shape.len();
    if sizes.len() > r {
        return None;
    }
    let pad = r - sizes.len();
    let size = |d: usize| if d < pad { 1 } else { sizes[d - pad] };
    let numel: usize = shape.iter().product();
    // Dims equal to shape with size > 1 must form one run; size-1 dims of shape match anything.
    let mut p = None;
    let mut q = 0;
    for d in 0..r {
        let s = size(d);
        if s == shape[d] && s != 1 {
            if p.is_none() {
                p = Some(d);
            } else if q != d {
                // A gap of broadcast (size-1 operand, larger result) dims since the run.
                let gap_broadcast = (q..d).any(|g| size(g) == 1 && shape[g] != 1);
                if gap_broadcast {
                    return None;
                }
            }
            q = d + 1;
        } else if s != 1 {
            return None;
        }
    }
    let Some(p) = p else { return Some((numel.max(1), 1)) };
    let period: usize = shape[p..q].iter().product();
    let inner: usize = shape[q..].iter().product();
    Some((inner, period))
}

/// Binary `out = f(a, b)` over the broadcast of float32 `a` and `b` into float32 `out`: both
/// operands and `out` in the same storage order with equal sizes, or all dense row-major with
/// each operand in a block-broadcast pattern (see [`block_pattern`]: same shape, one element,
/// per-channel, trailing-dims bias). `shape` is the broadcast shape the caller computed;
/// `out` is resized to it.
pub(crate) fn binary_f32(
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    shape: &[usize],
    out: &mut TensorMut<'_>,
    f: impl Fn(f32, f32) -> f32,
) -> bool {
    if a.dtype() != DType::Float
        || b.dtype() != DType::Float
        || out.dtype() != DType::Float
        || out.resize(shape).is_err()
    {
        return false;
    }
    let (Ok(xa), Ok(xb)) = (a.as_slice::<f32>(), b.as_slice::<f32>()) else { return false };
    let o = *out.shape();
    let Ok(dst) = out.as_mut_slice::<f32>() else { return false };
    let n = dst.len();
    if a.sizes() == shape && b.sizes() == shape {
        let order = |t: &TensorRef<'_>| {
            t.shape().dim_order() == o.dim_order()
                || t.shape().is_dense_row_major() && o.is_dense_row_major()
        };
        if order(a) && order(b) && xa.len() == n && xb.len() == n {
            for ((d, &x), &y) in dst.iter_mut().zip(xa).zip(xb) {
                *d = f(x, y);
            }
            return true;
        }
    }
    let dense = |t: &TensorRef<'_>| t.shape().is_dense_row_major() || t.numel() <= 1;
    if !dense(a) || !dense(b) || !o.is_dense_row_major() {
        return false;
    }
    let (Some(pa), Some(pb)) = (block_pattern(a.sizes(), shape), block_pattern(b.sizes(), shape))
    else {
        return false;
    };
    if n == 0 {
        return true;
    }
    let fits = |(inner, period): (usize, usize), len: usize| {
        inner > 0 && period == len && (n / inner) % period == 0 && n % inner == 0
    };
    match (pa, pb) {
        ((1, la), _) if la == n && xa.len() == n && fits(pb, xb.len()) => {
            broadcast_rows(dst, xa, xb, pb, &f)
        }
        (_, (1, lb)) if lb == n && xb.len() == n && fits(pa, xa.len()) => {
            broadcast_rows(dst, xb, xa, pa, |y, x| f(x, y))
        }
        _ => return false,
    }
    true
}

/// `dst[i] = f(full[i], part[(i / inner) % period])` with the inner loop over contiguous runs:
/// a zip when `inner == 1`, a constant operand per run otherwise.
fn broadcast_rows(
    dst: &mut [f32],
    full: &[f32],
    part: &[f32],
    (inner, period): (usize, usize),
    f: impl Fn(f32, f32) -> f32,
) {
    if inner == 1 {
        for (d, s) in dst.chunks_exact_mut(period).zip(full.chunks_exact(period)) {
            for ((o, &x), &y) in d.iter_mut().zip(s).zip(part) {
                *o = f(x, y);
            }
        }
    } else {
        for (k, (d, s)) in dst.chunks_exact_mut(inner).zip(full.chunks_exact(inner)).enumerate() {
            let y = part[k % period];
            for (o, &x) in d.iter_mut().zip(s) {
                *o = f(x, y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::block_pattern;
    use crate::compute::threads::Threads;
    use crate::element::Bool;
    use crate::testing::{out, run_kernel};
    use crate::{Arg, Capacity, DType, Shape, TensorRef};

    /// A float32 tensor argument of the given sizes and dim order.
    fn t<'a>(sizes: &[usize], order: &[u8], data: &'a [f32]) -> Arg<'a> {
        let shape = Shape::new(sizes, order).unwrap();
        Arg::Tensor(TensorRef::new(DType::Float, shape, bytemuck::cast_slice(data)).unwrap())
    }

    /// Runs kernel `name` with the fast paths on or off into a static float32 out of the
    /// given sizes and dim order; returns the out's storage.
    fn run(name: &str, general: bool, args: &[Arg<'_>], sizes: &[usize], order: &[u8]) -> Vec<f32> {
        let mut data = vec![f32::NAN; sizes.iter().product()];
        let mut outs = [out(&mut data, sizes, order, Capacity::Static)];
        run_kernel(name, general, &Threads::default(), args, &mut outs)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        data
    }

    /// Distance in units in the last place (0 for two NaNs, or equal values).
    fn ulps(a: f32, b: f32) -> u32 {
        if a.is_nan() && b.is_nan() || a == b {
            return 0;
        }
        let key = |v: f32| {
            let i = v.to_bits() as i32;
            if i < 0 {
                i32::MIN.wrapping_sub(i) as i64
            } else {
                i as i64
            }
        };
        (key(a) - key(b)).unsigned_abs().min(u32::MAX as u64) as u32
    }

    fn random_dims(rng: &mut fastrand::Rng, rank: usize) -> (Vec<usize>, Vec<u8>) {
        let sizes: Vec<usize> = (0..rank).map(|_| rng.usize(1..6)).collect();
        let mut order: Vec<u8> = (0..rank as u8).collect();
        if rank == 4 && rng.bool() {
            order = vec![0, 2, 3, 1];
        } else if rng.u8(0..4) == 0 {
            rng.shuffle(&mut order);
        }
        (sizes, order)
    }

    fn random_data(rng: &mut fastrand::Rng, n: usize, special: bool) -> Vec<f32> {
        let mut x: Vec<f32> = (0..n).map(|_| (rng.f32() - 0.5) * 16.0).collect();
        if special && n >= 3 {
            x[0] = f32::NAN;
            x[1] = f32::INFINITY;
            x[2] = f32::NEG_INFINITY;
        }
        x
    }

    /// Property test: every float32 unary fast path equals its general path on random shapes
    /// (rank 0-4), dim orders (same, channels-last, permuted, and out orders that differ from
    /// the input's, which fall back) and inputs with NaN and infinities: bit-identical where
    /// the arithmetic is the same, within a few ulp where the fast path computes in f32.
    #[test]
    fn unary_fast_paths_equal_general_paths() {
        let mut rng = fastrand::Rng::with_seed(11);
        // (kernel, extra scalar args, max ulp difference)
        let cases: &[(&str, &[Arg<'static>], u32)] = &[
            ("aten::relu.out", &[], 0),
            ("aten::hardtanh.out", &[Arg::Double(0.0), Arg::Double(6.0)], 0),
            ("aten::hardtanh.out", &[Arg::Int(-1), Arg::Int(1)], 0),
            ("aten::clamp.out", &[Arg::Double(-0.3), Arg::None], 0),
            ("aten::clamp.out", &[Arg::None, Arg::Double(2.7)], 0),
            ("aten::clamp.out", &[Arg::Double(1.1), Arg::Double(-1.0)], 0),
            ("aten::neg.out", &[], 0),
            ("aten::abs.out", &[], 0),
            ("aten::sqrt.out", &[], 0),
            ("aten::rsqrt.out", &[], 0),
            ("aten::leaky_relu.out", &[Arg::Double(0.1)], 1),
            ("aten::exp.out", &[], 1),
            ("aten::tanh.out", &[], 2),
            ("aten::sigmoid.out", &[], 3),
        ];
        for (name, extra, tol) in cases {
            for case in 0..40 {
                let rank = rng.usize(0..5);
                let (sizes, order) = random_dims(&mut rng, rank);
                let out_order = if rng.u8(0..5) == 0 {
                    let mut o = order.clone();
                    rng.shuffle(&mut o);
                    o
                } else {
                    order.clone()
                };
                let n: usize = sizes.iter().product();
                let x = random_data(&mut rng, n, case % 3 == 0);
                let mut args = vec![t(&sizes, &order, &x)];
                args.extend(extra.iter().copied());
                args.push(Arg::Output);
                let fast = run(name, false, &args, &sizes, &out_order);
                let general = run(name, true, &args, &sizes, &out_order);
                for (i, (&f, &g)) in fast.iter().zip(&general).enumerate() {
                    assert!(
                        ulps(f, g) <= *tol,
                        "{name} case {case} {sizes:?} {order:?}->{out_order:?} [{i}] x={}: \
                         fast {f:e} general {g:e}",
                        x[i.min(n - 1)]
                    );
                }
            }
        }
    }

    /// Property test: float32 `add`/`sub`/`mul`/`div` (tensor and scalar overloads, with
    /// alpha) are bit-identical on the fast and general paths for same-shape operands in any
    /// common dim order, one-element and 0-dim operands, per-channel `[C,1,1]` / `[1,C,1,1]`
    /// and trailing `[D]` / `[H,W]` broadcasts on either side, and patterns the fast path
    /// refuses (outer products, mixed orders).
    #[test]
    fn binary_fast_paths_are_bit_identical() {
        let mut rng = fastrand::Rng::with_seed(12);
        let ops = ["aten::add", "aten::sub", "aten::mul", "aten::div"];
        for case in 0..600 {
            let op = ops[case % 4];
            let (n, c, h, w) = (rng.usize(1..4), rng.usize(1..6), rng.usize(1..5), rng.usize(1..7));
            let full = vec![n, c, h, w];
            let (fo, other): (Vec<u8>, Vec<usize>) = match case / 4 % 9 {
                0 => (vec![0, 1, 2, 3], full.clone()),
                1 => (vec![0, 2, 3, 1], full.clone()),
                2 => (vec![0, 1, 2, 3], vec![c, 1, 1]),
                3 => (vec![0, 1, 2, 3], vec![1, c, 1, 1]),
                4 => (vec![0, 1, 2, 3], vec![w]),
                5 => (vec![0, 1, 2, 3], vec![h, w]),
                6 => (vec![0, 1, 2, 3], vec![]),
                7 => (vec![0, 1, 2, 3], vec![1, 1]),
                _ => (vec![0, 1, 2, 3], vec![n, 1, h, 1]),
            };
            let oo: Vec<u8> = (0..other.len() as u8).collect();
            let oo = if other.len() == 4 { fo.clone() } else { oo };
            let xa = random_data(&mut rng, full.iter().product(), case % 7 == 0);
            let xb = random_data(&mut rng, other.iter().product(), false);
            let swap = rng.bool();
            let (ta, tb) = (t(&full, &fo, &xa), t(&other, &oo, &xb));
            let (first, second) = if swap { (tb, ta) } else { (ta, tb) };
            let out_order = if rng.u8(0..6) == 0 { vec![0, 2, 3, 1] } else { fo.clone() };
            let alpha = if rng.bool() { Arg::Int(1) } else { Arg::Double(-2.5) };
            let mut args = vec![first, second];
            if matches!(op, "aten::add" | "aten::sub") {
                args.push(alpha);
            }
            args.push(Arg::Output);
            let name = format!("{op}.out");
            let fast = run(&name, false, &args, &full, &out_order);
            let general = run(&name, true, &args, &full, &out_order);
            // NaN's sign and payload depend on operand order in vector code: compare NaN as one.
            let bits = |v: &[f32]| {
                v.iter()
                    .map(|f| if f.is_nan() { u32::MAX } else { f.to_bits() })
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(&fast), bits(&general), "{name} case {case} {full:?} {other:?} {swap}");
            // The scalar overload against the same tensor.
            let s = Arg::Double(f64::from(xb[0]) * 3.3);
            let mut args = vec![t(&full, &fo, &xa), s];
            if matches!(op, "aten::add" | "aten::sub") {
                args.push(Arg::Double(0.7));
            }
            args.push(Arg::Output);
            let name = format!("{op}.Scalar_out");
            let fast = run(&name, false, &args, &full, &fo);
            let general = run(&name, true, &args, &full, &fo);
            assert_eq!(bits(&fast), bits(&general), "{name} case {case} {full:?}");
        }
    }

    /// Property test: float32 `gelu` (`none` and `tanh`) on the fast path stays within
    /// `1e-6 * (1 + |x|)` of the f64 general path, on random shapes and dim orders with NaN
    /// and infinities.
    #[test]
    fn gelu_fast_path_is_close_to_general_path() {
        let mut rng = fastrand::Rng::with_seed(13);
        for case in 0..200 {
            let rank = rng.usize(0..5);
            let (sizes, order) = random_dims(&mut rng, rank);
            let n: usize = sizes.iter().product();
            let x = random_data(&mut rng, n, case % 4 == 0);
            let approx = if case % 2 == 0 { "none" } else { "tanh" };
            let args = [t(&sizes, &order, &x), Arg::String(approx), Arg::Output];
            let fast = run("aten::gelu.out", false, &args, &sizes, &order);
            let general = run("aten::gelu.out", true, &args, &sizes, &order);
            for (i, ((&f, &g), &v)) in fast.iter().zip(&general).zip(&x).enumerate() {
                assert!(
                    f.is_nan() && g.is_nan() || f == g || (f - g).abs() <= 1e-6 * (1.0 + v.abs()),
                    "gelu {approx} case {case} [{i}] x={v:e}: fast {f:e} general {g:e}"
                );
            }
        }
    }

    #[test]
    fn block_patterns_of_common_broadcasts() {
        let s = [2, 3, 4, 5];
        assert_eq!(block_pattern(&[2, 3, 4, 5], &s), Some((1, 120)));
        assert_eq!(block_pattern(&[3, 1, 1], &s), Some((20, 3)));
        assert_eq!(block_pattern(&[1, 3, 1, 1], &s), Some((20, 3)));
        assert_eq!(block_pattern(&[5], &s), Some((1, 5)));
        assert_eq!(block_pattern(&[4, 5], &s), Some((1, 20)));
        assert_eq!(block_pattern(&[], &s), Some((120, 1)));
        assert_eq!(block_pattern(&[1, 1, 1, 1], &s), Some((120, 1)));
        // Two separate runs or a mismatch are not a block pattern.
        assert_eq!(block_pattern(&[3, 1, 5], &s), None);
        assert_eq!(block_pattern(&[2, 1, 1, 5], &s), None);
        assert_eq!(block_pattern(&[6], &s), None);
        // Size-1 dims of the result inside the run are fine.
        assert_eq!(block_pattern(&[3, 1, 5], &[3, 1, 5]), Some((1, 15)));
    }

    /// Runs kernel `name` with the fast paths on or off into a static out of element type `T`
    /// and the given sizes (dense row-major); returns the out's storage.
    fn run_as<T: crate::element::Element>(
        name: &str,
        general: bool,
        args: &[Arg<'_>],
        sizes: &[usize],
    ) -> Vec<T> {
        let mut data = vec![T::default(); sizes.iter().product()];
        let mut outs = [out(&mut data, sizes, &[], Capacity::Static)];
        run_kernel(name, general, &Threads::default(), args, &mut outs)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        data
    }

    /// Property test: float32 comparisons with a scalar (on either side, every operator,
    /// NaN and infinite scalars) equal their general paths on random shapes and dim orders
    /// holding NaN and infinities.
    #[test]
    fn compare_fast_paths_equal_general_paths() {
        let mut rng = fastrand::Rng::with_seed(12);
        let ops = ["eq", "ne", "lt", "le", "gt", "ge"];
        for case in 0..240 {
            let rank = rng.usize(0..5);
            let (sizes, order) = random_dims(&mut rng, rank);
            let n: usize = sizes.iter().product();
            let mut x = random_data(&mut rng, n, case % 2 == 0);
            let c = [0.5, f64::NEG_INFINITY, f64::NAN, 3.0][case % 4];
            if n > 3 {
                x[3] = c as f32;
            }
            let op = ops[case % ops.len()];
            let name = format!("aten::{op}.Scalar_out");
            let args = [t(&sizes, &order, &x), Arg::Double(c), Arg::Output];
            let fast: Vec<Bool> = run_as(&name, false, &args, &sizes);
            let general: Vec<Bool> = run_as(&name, true, &args, &sizes);
            assert_eq!(fast, general, "{name} case {case} {sizes:?} {order:?} {c}");
        }
    }

    /// The dim order of a dense row-major tensor of rank `r`.
    fn identity(r: usize) -> Vec<u8> {
        (0..r as u8).collect()
    }

    /// Property test: float32 `where` equals its general path for conditions of every
    /// block-broadcast pattern (elementwise, per row, per block, one element), values of the
    /// full shape or one element, and layouts the fast path refuses.
    #[test]
    fn where_fast_path_equals_general_path() {
        let mut rng = fastrand::Rng::with_seed(13);
        for case in 0..300 {
            let rank = rng.usize(1..5);
            let (sizes, _) = random_dims(&mut rng, rank);
            let n: usize = sizes.iter().product();
            // The condition: some dims kept, the others broadcast (size 1).
            let csizes: Vec<usize> =
                sizes.iter().map(|&s| if rng.u8(0..3) == 0 { 1 } else { s }).collect();
            let cn: usize = csizes.iter().product();
            let cond: Vec<Bool> = (0..cn).map(|_| Bool(rng.bool() as u8)).collect();
            let x = random_data(&mut rng, n, true);
            let y = random_data(&mut rng, n, false);
            let one = [f32::NEG_INFINITY];
            let (xs, xd): (&[usize], &[f32]) =
                if case % 3 == 0 { (&[], &one) } else { (&sizes, &x) };
            let xo = identity(xs.len());
            // One value of one element at most, so the result has `sizes`.
            let y_one = case % 5 == 0 && case % 3 != 0;
            let ys: Vec<usize> = if y_one { vec![1; rank] } else { sizes.clone() };
            let yd: &[f32] = if y_one { &y[..1] } else { &y };
            let c = Arg::Tensor(
                TensorRef::new(
                    DType::Bool,
                    Shape::new(&csizes, &identity(rank)).unwrap(),
                    bytemuck::cast_slice(&cond),
                )
                .unwrap(),
            );
            let args = [c, t(xs, &xo, xd), t(&ys, &identity(rank), yd), Arg::Output];
            let fast: Vec<f32> = run_as("aten::where.self_out", false, &args, &sizes);
            let general: Vec<f32> = run_as("aten::where.self_out", true, &args, &sizes);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fast), bits(&general), "case {case} {sizes:?} cond {csizes:?}");
        }
    }
}
