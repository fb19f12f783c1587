//! Unary math and activation ops: `exp`, `log*`, trigonometric, `sqrt`, `rsqrt`, `sigmoid`,
//! `tanh`, `erf`, rounding, `abs`, `neg`, `sign`, `relu`, `gelu`, `hardtanh`, `leaky_relu`,
//! `elu`, `clamp`, `isnan`, `isinf`, `logical_not`, `bitwise_not`.

use bytemuck::Pod;

use crate::compute::activation;
use crate::compute::special::erf;
use crate::compute::strided::broadcast_shape;
use crate::compute::threads::{split, with_pieces};
use crate::dtype::DType;
use crate::element::{Bool, Element};
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::fast_pointwise::{clamp_f32, unary_f32, unary_f32_slice};
use crate::ops::pointwise::{
    lane_of, map_lane, resize, result_type, store_via, with_out, Lane, Operand,
};
use crate::shape::Shape;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out, Scalar};

type KResult = Result<(), KernelError>;

/// A floating unary op: integer and bool inputs compute in `float32`; the out must be floating.
fn float_unary(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    f: impl Fn(f64) -> f64,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if !out.dtype().is_float() {
        return Err(ctx.dtype_err("out", "a floating dtype", out.dtype()));
    }
    let ct = if x.dtype().is_float() { x.dtype() } else { DType::Float };
    let x = input_lane::<f64>(ctx, ct, &x, out)?;
    store_wide(ctx, ct, out, &|dst| map_lane(dst, &x, &f))
}

/// A type the unary operators compute in, for every dtype: `f64` (floating results) or `i64`
/// (integer ones). Their loops run once per wide type; the loads and stores, once per dtype
/// and wide type, are shared by every operator.
trait Wide: Pod {
    /// `v` as this type.
    fn of<T: Element>(v: T) -> Self;
    /// This value as `T` holds it.
    fn to<T: Element>(self) -> T;
}

impl Wide for f64 {
    fn of<T: Element>(v: T) -> f64 {
        v.to_f64()
    }
    fn to<T: Element>(self) -> T {
        T::from_f64(self)
    }
}

impl Wide for i64 {
    fn of<T: Element>(v: T) -> i64 {
        v.to_i64()
    }
    fn to<T: Element>(self) -> T {
        T::from_i64(self)
    }
}

/// `t` cast to `ct` as `W` values, broadcast to `shape` in `out`'s storage order.
fn wide_lane<'a, W: Wide>(
    ctx: &KernelContext,
    ct: DType,
    t: &TensorRef<'a>,
    shape: &[usize],
    out: &Shape,
) -> Result<Lane<'a, W>, KernelError> {
    crate::dispatch_all!(ct, T => Ok(lane_of::<T, W>(t, shape, out, W::of::<T>)),
        _ => Err(ctx.dtype_err("self", "a computable dtype", ct)))
}

/// [`wide_lane`] of a unary operator's input, after `out` is resized to its shape.
fn input_lane<'a, W: Wide>(
    ctx: &KernelContext,
    ct: DType,
    x: &TensorRef<'a>,
    out: &mut TensorMut<'_>,
) -> Result<Lane<'a, W>, KernelError> {
    resize(ctx, out, "out", x.sizes())?;
    let out_shape = *out.shape();
    wide_lane(ctx, ct, x, x.sizes(), &out_shape)
}

/// Runs `f` on `out`'s elements as `W` and stores them as `ct` holds them.
fn store_wide<W: Wide>(
    ctx: &KernelContext,
    ct: DType,
    out: &mut TensorMut<'_>,
    f: &dyn Fn(&mut [W]),
) -> KResult {
    crate::dispatch_all!(ct, T => store_via::<T, W>(ctx, out, true, W::to::<T>, f),
        _ => Err(ctx.dtype_err("self", "a computable dtype", ct)))
}

/// Runs `f` through the float32 fast path ([`unary_f32`]) unless the context asks for the
/// general path; `false` when it did not apply (nothing was written).
fn fast_unary(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    f: impl Fn(f32) -> f32,
) -> bool {
    fast_unary_slice(ctx, args, outs, |src, dst| {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = f(s);
        }
    })
}

/// [`fast_unary`] with one of the vector loops of
/// [`activation`](crate::compute::activation) (`apply(values)` in place).
fn fast_unary_in_place(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    apply: fn(&mut [f32]),
) -> bool {
    fast_unary_slice(ctx, args, outs, |src, dst| {
        // Runs of whole vectors, so that every run but the last is all vector lanes and the
        // last one's tail is the unsplit slice's tail: the same bits for any split.
        const RUN: usize = 64;
        let parts = ctx.threads.tasks_for_elements(dst.len(), dst.len().div_ceil(RUN));
        let tasks = with_pieces(split(dst.len(), RUN, parts), dst, 1);
        ctx.threads.for_each(tasks, |(run, d)| {
            d.copy_from_slice(&src[run]);
            apply(d);
        });
    })
}

/// [`fast_unary`] with a function over the whole slice (`apply(src, dst)`).
fn fast_unary_slice(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    apply: impl FnOnce(&[f32], &mut [f32]),
) -> bool {
    if ctx.general_only {
        return false;
    }
    let Ok(x) = Args::new(ctx, args).tensor(0, "self") else { return false };
    let Ok(out) = out_tensor(ctx, outs, 0, "out") else { return false };
    unary_f32_slice(&x, out, apply)
}

/// A dtype-preserving unary op with separate integer and float definitions.
fn same_unary(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    allow_bool: bool,
    fi: impl Fn(i64) -> i64,
    ff: impl Fn(f64) -> f64,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if x.dtype() == DType::Bool && !allow_bool {
        return Err(ctx.dtype_err("self", "a non-bool dtype", x.dtype()));
    }
    let dt = x.dtype();
    if dt.is_float() {
        let x = input_lane::<f64>(ctx, dt, &x, out)?;
        store_wide(ctx, dt, out, &|dst| map_lane(dst, &x, &ff))
    } else {
        let x = input_lane::<i64>(ctx, dt, &x, out)?;
        store_wide(ctx, dt, out, &|dst| map_lane(dst, &x, &fi))
    }
}

/// A predicate producing a bool tensor.
fn predicate(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    f: impl Fn(f64) -> bool,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if x.dtype() == DType::Bool {
        // A mask (`logical_not` of one, mostly) as bytes 0 and 1, not as eight-byte doubles.
        resize(ctx, out, "out", x.sizes())?;
        let out_shape = *out.shape();
        let x = lane_of::<Bool, u8>(&x, x.sizes(), &out_shape, |b| b.is_true() as u8);
        return with_out::<Bool>(ctx, out, false, |dst| {
            map_lane(dst, &x, |v| Bool(f(f64::from(v)) as u8))
        });
    }
    let x = input_lane::<f64>(ctx, x.dtype(), &x, out)?;
    with_out::<Bool>(ctx, out, false, |dst| map_lane(dst, &x, |v| Bool(f(v) as u8)))
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn gelu(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let approx = a.string(1, "approximate")?;
    // float32 fast paths compute in f32 as PyTorch's vectorized GELU does: its erf formula
    // (absolute error below 6e-7), a vectorized tanh for the tanh approximation.
    match approx {
        "none" if fast_unary_in_place(ctx, args, outs, activation::gelu_in_place) => Ok(()),
        "tanh" if fast_unary_in_place(ctx, args, outs, activation::gelu_tanh_in_place) => Ok(()),
        "none" => float_unary(ctx, args, outs, |x| {
            0.5 * x * (1.0 + erf(x * std::f64::consts::FRAC_1_SQRT_2))
        }),
        "tanh" => float_unary(ctx, args, outs, |x| {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }),
        other => {
            Err(ctx.invalid("approximate", format!("expected \"none\" or \"tanh\", got {other:?}")))
        }
    }
}

fn nan_clamp(x: f64, lo: Option<f64>, hi: Option<f64>) -> f64 {
    if x.is_nan() {
        return x;
    }
    let mut v = x;
    if let Some(l) = lo {
        if l.is_nan() {
            return l;
        }
        v = v.max(l);
    }
    if let Some(h) = hi {
        if h.is_nan() {
            return h;
        }
        v = v.min(h);
    }
    v
}

/// `clamp` with optional scalar bounds, in the promoted dtype of self and the bounds.
fn clamp_scalars(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    lo: Option<Scalar>,
    hi: Option<Scalar>,
    out: &mut TensorMut<'_>,
) -> KResult {
    let mut ops = vec![Operand::Tensor(*x)];
    ops.extend(lo.map(Operand::Scalar));
    ops.extend(hi.map(Operand::Scalar));
    let ct = result_type(&ops)
        .ok_or_else(|| ctx.dtype_err("min", "a dtype promotable with self", x.dtype()))?;
    if ct == DType::Bool {
        return Err(ctx.dtype_err("self", "a non-bool dtype", ct));
    }
    if ct == DType::Float && !ctx.general_only {
        // The bounds round to float32 as in the general path; NaN bounds take that path.
        let l = lo.map_or(f32::NEG_INFINITY, |s| s.to_f64() as f32);
        let h = hi.map_or(f32::INFINITY, |s| s.to_f64() as f32);
        if !l.is_nan() && !h.is_nan() && unary_f32(x, out, |v| clamp_f32(v, l, h)) {
            return Ok(());
        }
    }
    if ct.is_float() {
        // The bounds as the calc type holds them: float32 for every floating dtype but double.
        let calc =
            |s: Scalar| if ct == DType::Double { s.to_f64() } else { s.to_f64() as f32 as f64 };
        let (l, h) = (lo.map(calc), hi.map(calc));
        let x = input_lane::<f64>(ctx, ct, x, out)?;
        store_wide(ctx, ct, out, &|dst| map_lane(dst, &x, |v| nan_clamp(v, l, h)))
    } else {
        let (l, h) = (lo.map(Scalar::to_i64), hi.map(Scalar::to_i64));
        let x = input_lane::<i64>(ctx, ct, x, out)?;
        store_wide(ctx, ct, out, &|dst: &mut [i64]| {
            map_lane(dst, &x, |v| {
                let mut r = v;
                if let Some(l) = l {
                    r = r.max(l);
                }
                if let Some(h) = h {
                    r = r.min(h);
                }
                r
            })
        })
    }
}

fn clamp_tensor<'a>(ctx: &KernelContext, args: &[Arg<'a>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let lo = a.opt_tensor(1, "min")?;
    let hi = a.opt_tensor(2, "max")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let mut ops = vec![Operand::Tensor(x)];
    ops.extend(lo.map(Operand::Tensor));
    ops.extend(hi.map(Operand::Tensor));
    let ct = result_type(&ops)
        .ok_or_else(|| ctx.dtype_err("min", "a dtype promotable with self", x.dtype()))?;
    if lo.is_none() && hi.is_none() {
        return Err(ctx.invalid("min", "at least one of min and max must be given"));
    }
    let mut shape = x.sizes().to_vec();
    for (name, bound) in [("min", &lo), ("max", &hi)] {
        if let Some(b) = bound {
            shape = broadcast_shape(&shape, b.sizes()).ok_or_else(|| {
                ctx.shape_err(name, format!("broadcastable with {shape:?}"), b.sizes())
            })?;
        }
    }
    resize(ctx, out, "out", &shape)?;
    let out_shape = *out.shape();
    let lane = |t: &TensorRef<'a>| wide_lane::<f64>(ctx, ct, t, &shape, &out_shape);
    let x = lane(&x)?;
    let lo = lo.as_ref().map(lane).transpose()?;
    let hi = hi.as_ref().map(lane).transpose()?;
    store_wide(ctx, ct, out, &|dst: &mut [f64]| {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = nan_clamp(x.at(i), lo.as_ref().map(|l| l.at(i)), hi.as_ref().map(|h| h.at(i)));
        }
    })
}

macro_rules! float_defs {
    ($v:ident; $($name:literal => $f:expr;)*) => {
        $( $v.push(out1($name, 1, |c, a, o| float_unary(c, a, o, $f))); )*
    };
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    let mut v = Vec::new();
    float_defs!(v;
        "aten::expm1.out" => f64::exp_m1;
        "aten::log.out" => f64::ln;
        "aten::log2.out" => f64::log2;
        "aten::log10.out" => f64::log10;
        "aten::log1p.out" => f64::ln_1p;
        "aten::reciprocal.out" => |x| 1.0 / x;
        "aten::sin.out" => f64::sin;
        "aten::cos.out" => f64::cos;
        "aten::tan.out" => f64::tan;
        "aten::asin.out" => f64::asin;
        "aten::acos.out" => f64::acos;
        "aten::atan.out" => f64::atan;
        "aten::sinh.out" => f64::sinh;
        "aten::cosh.out" => f64::cosh;
        "aten::asinh.out" => f64::asinh;
        "aten::acosh.out" => f64::acosh;
        "aten::atanh.out" => f64::atanh;
        "aten::erf.out" => erf;
    );
    // Float32 fast paths: `sqrt` is bit-identical to the f64 general path (a correctly rounded
    // f64 square root of an f32 rounds to the f32 square root); `exp`, `tanh` and `sigmoid`
    // compute in f32 with the platform's `expf`/`tanhf`, as PyTorch's and ExecuTorch's float
    // kernels do, within a few ulp of the f64 general path.
    v.push(out1("aten::exp.out", 1, |c, a, o| {
        if fast_unary(c, a, o, f32::exp) {
            return Ok(());
        }
        float_unary(c, a, o, f64::exp)
    }));
    v.push(out1("aten::sqrt.out", 1, |c, a, o| {
        if fast_unary(c, a, o, f32::sqrt) {
            return Ok(());
        }
        float_unary(c, a, o, f64::sqrt)
    }));
    v.push(out1("aten::tanh.out", 1, |c, a, o| {
        if fast_unary_in_place(c, a, o, activation::tanh_in_place) {
            return Ok(());
        }
        float_unary(c, a, o, f64::tanh)
    }));
    v.push(out1("aten::sigmoid.out", 1, |c, a, o| {
        if fast_unary_in_place(c, a, o, activation::sigmoid_in_place) {
            return Ok(());
        }
        float_unary(c, a, o, sigmoid)
    }));
    v.push(out1("aten::abs.out", 1, |c, a, o| {
        if fast_unary(c, a, o, f32::abs) {
            return Ok(());
        }
        same_unary(c, a, o, false, i64::wrapping_abs, f64::abs)
    }));
    v.push(out1("aten::neg.out", 1, |c, a, o| {
        if fast_unary(c, a, o, |x| -x) {
            return Ok(());
        }
        same_unary(c, a, o, false, i64::wrapping_neg, |x| -x)
    }));
    v.push(out1("aten::rsqrt.out", 1, |c, a, o| {
        if Args::new(c, a).tensor(0, "self")?.dtype() == DType::Double {
            return float_unary(c, a, o, |x| 1.0 / x.sqrt());
        }
        if fast_unary(c, a, o, |x| 1.0 / x.sqrt()) {
            return Ok(());
        }
        // float32 arithmetic, as PyTorch and ExecuTorch compute it: the square root rounded to
        // float32 before the division (rsqrt(1e-7) is 3162.2778, not 3162.2776).
        float_unary(c, a, o, |x| 1.0 / f64::from(x.sqrt() as f32))
    }));
    // sign(NaN) is NaN, as in ExecuTorch (and NumPy); PyTorch eager gives 0.
    v.push(out1("aten::sign.out", 1, |c, a, o| {
        same_unary(c, a, o, true, i64::signum, |x| {
            if x.is_nan() {
                x
            } else {
                ((0.0 < x) as i8 - (x < 0.0) as i8) as f64
            }
        })
    }));
    v.push(out1("aten::floor.out", 1, |c, a, o| same_unary(c, a, o, false, |x| x, f64::floor)));
    v.push(out1("aten::ceil.out", 1, |c, a, o| same_unary(c, a, o, false, |x| x, f64::ceil)));
    v.push(out1("aten::trunc.out", 1, |c, a, o| same_unary(c, a, o, false, |x| x, f64::trunc)));
    v.push(out1("aten::round.out", 1, |c, a, o| {
        same_unary(c, a, o, false, |x| x, f64::round_ties_even)
    }));
    v.push(out1("aten::relu.out", 1, |c, a, o| {
        // NaN < 0 is false, so NaN passes through as in the general path.
        if fast_unary(c, a, o, |x| if x < 0.0 { 0.0 } else { x }) {
            return Ok(());
        }
        same_unary(c, a, o, false, |x| x.max(0), |x| if x.is_nan() { x } else { x.max(0.0) })
    }));
    v.push(out1("aten::bitwise_not.out", 1, |c, a, o| {
        let x = Args::new(c, a).tensor(0, "self")?;
        if x.dtype().is_float() {
            return Err(c.dtype_err("self", "an integer or bool dtype", x.dtype()));
        }
        if x.dtype() == DType::Bool {
            return predicate(c, a, o, |v| v == 0.0);
        }
        same_unary(c, a, o, false, |x| !x, |x| x)
    }));
    v.push(out1("aten::logical_not.out", 1, |c, a, o| predicate(c, a, o, |v| v == 0.0)));
    v.push(out1("aten::isnan.out", 1, |c, a, o| predicate(c, a, o, f64::is_nan)));
    v.push(out1("aten::isinf.out", 1, |c, a, o| predicate(c, a, o, f64::is_infinite)));
    v.push(out1("aten::gelu.out", 2, |c, a, o| gelu(c, a, o)));
    // x * min(max(x + 3, 0), 6) / 6, PyTorch's formula; NaN stays NaN.
    v.push(out1("aten::hardswish.out", 1, |c, a, o| {
        if fast_unary_in_place(c, a, o, activation::hardswish_in_place) {
            return Ok(());
        }
        float_unary(c, a, o, |x| if x.is_nan() { x } else { x * (x + 3.0).clamp(0.0, 6.0) / 6.0 })
    }));
    v.push(out1("aten::hardtanh.out", 3, |c, a, o| {
        let r = Args::new(c, a);
        let x = r.tensor(0, "self")?;
        let lo = r.scalar(1, "min_val")?;
        let hi = r.scalar(2, "max_val")?;
        let out = out_tensor(c, o, 0, "out")?;
        clamp_scalars(c, &x, Some(lo), Some(hi), out)
    }));
    v.push(out1("aten::clamp.out", 3, |c, a, o| {
        let r = Args::new(c, a);
        let x = r.tensor(0, "self")?;
        let lo = r.opt_scalar(1, "min")?;
        let hi = r.opt_scalar(2, "max")?;
        if lo.is_none() && hi.is_none() {
            return Err(c.invalid("min", "at least one of min and max must be given"));
        }
        let out = out_tensor(c, o, 0, "out")?;
        clamp_scalars(c, &x, lo, hi, out)
    }));
    v.push(out1("aten::clamp.Tensor_out", 3, |c, a, o| clamp_tensor(c, a, o)));
    v.push(out1("aten::leaky_relu.out", 2, |c, a, o| {
        let s = Args::new(c, a).scalar(1, "negative_slope")?.to_f64();
        // float32: the slope rounded to f32 and `x * slope` in f32, as PyTorch computes it.
        let s32 = s as f32;
        if fast_unary(c, a, o, |x| if x > 0.0 { x } else { x * s32 }) {
            return Ok(());
        }
        float_unary(c, a, o, move |x| if x > 0.0 { x } else { x * s })
    }));
    v.push(out1("aten::elu.out", 4, |c, a, o| {
        let r = Args::new(c, a);
        let alpha = r.scalar(1, "alpha")?.to_f64();
        let scale = r.scalar(2, "scale")?.to_f64();
        let input_scale = r.scalar(3, "input_scale")?.to_f64();
        float_unary(c, a, o, move |x| {
            if x > 0.0 {
                x * scale
            } else {
                (x * input_scale).exp_m1() * alpha * scale
            }
        })
    }));
    v
}
