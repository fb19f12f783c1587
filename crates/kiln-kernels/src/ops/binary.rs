//! Binary arithmetic, comparison, logical and bitwise ops with PyTorch broadcasting and type
//! promotion (`add`, `sub`, `rsub`, `mul`, `div` with rounding modes, `floor_divide`,
//! `remainder`, `fmod`, `pow`, `maximum`, `minimum`, `atan2`, `eq`..`ge`, `logical_*`,
//! `bitwise_*`).

use crate::compute::strided::broadcast_shape;
use crate::dtype::DType;
use crate::element::{Bool, Calc, Element};
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::fast_pointwise::{binary_f32, unary_f32, unary_f32_slice};
use crate::ops::pointwise::{map1, map2, result_type, Operand};
use crate::tensor::TensorMut;
use crate::value::{Arg, Out, Scalar};

/// Arithmetic operators.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    DivTrunc,
    DivFloor,
    Remainder,
    Fmod,
    Pow,
    Maximum,
    Minimum,
    Atan2,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

/// Comparison operators.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Cmp {
    /// The comparison with its operands swapped: `a op b` is `b op.swapped() a`.
    fn swapped(self) -> Cmp {
        match self {
            Cmp::Lt => Cmp::Gt,
            Cmp::Le => Cmp::Ge,
            Cmp::Gt => Cmp::Lt,
            Cmp::Ge => Cmp::Le,
            same => same,
        }
    }
}

/// Logical operators.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Logic {
    And,
    Or,
    Xor,
}

fn scalar_calc<C: Calc>(s: Scalar) -> C {
    match s {
        Scalar::Int(v) => C::of_i64(v),
        Scalar::Double(v) => C::of_f64(v),
        Scalar::Bool(v) => C::of_i64(v as i64),
    }
}

/// Applies `f` on the calc values of two operands cast to `T`, writing `O`.
fn apply2<T: Element, O: Element>(
    ctx: &KernelContext,
    a: Operand<'_>,
    b: Operand<'_>,
    out: &mut TensorMut<'_>,
    check_cast: bool,
    f: impl Fn(T::Calc, T::Calc) -> O,
) -> Result<(), KernelError> {
    match (a, b) {
        (Operand::Tensor(x), Operand::Tensor(y)) => {
            map2::<T, O>(ctx, &x, &y, out, check_cast, |p, q| f(p.to_calc(), q.to_calc()))
        }
        (Operand::Tensor(x), Operand::Scalar(s)) => {
            let c = scalar_calc::<T::Calc>(s);
            map1::<T, O>(ctx, &x, out, check_cast, |p| f(p.to_calc(), c))
        }
        (Operand::Scalar(s), Operand::Tensor(y)) => {
            let c = scalar_calc::<T::Calc>(s);
            map1::<T, O>(ctx, &y, out, check_cast, |q| f(c, q.to_calc()))
        }
        (Operand::Scalar(_), Operand::Scalar(_)) => Err(ctx.invalid("self", "two scalar operands")),
    }
}

/// Floor division for floats, as `c10::div_floor_floating`.
fn div_floor_f(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != 0.0 && (b < 0.0) != (m < 0.0) {
        div -= 1.0;
    }
    if div != 0.0 {
        let mut fl = div.floor();
        if div - fl > 0.5 {
            fl += 1.0;
        }
        fl
    } else {
        0.0f64.copysign(a / b)
    }
}

fn div_floor_i(a: i64, b: i64) -> i64 {
    if (a < 0) != (b < 0) {
        let q = a.wrapping_div(b);
        let r = a.wrapping_rem(b);
        if r != 0 {
            q - 1
        } else {
            q
        }
    } else {
        a.wrapping_div(b)
    }
}

fn pow_i(base: i64, exp: i64) -> i64 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    let (mut result, mut b, mut e) = (1i64, base, exp);
    while e > 0 {
        if e & 1 == 1 {
            result = result.wrapping_mul(b);
        }
        b = b.wrapping_mul(b);
        e >>= 1;
    }
    result
}

/// NaN-propagating max/min for floats.
fn max_nan(a: f64, b: f64, max: bool) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if max {
        a.max(b)
    } else {
        a.min(b)
    }
}

/// Whether the arithmetic operator always produces a floating result.
fn float_only(op: Arith) -> bool {
    matches!(op, Arith::Div | Arith::Atan2)
}

fn arith_typed<T: Element>(
    ctx: &KernelContext,
    op: Arith,
    a: Operand<'_>,
    b: Operand<'_>,
    alpha: Scalar,
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let is_float = T::DTYPE.is_float();
    let bits = (T::DTYPE.size() * 8) as i64;
    let fl = |f: fn(f64, f64) -> f64| {
        move |x: T::Calc, y: T::Calc| T::from_calc(T::Calc::of_f64(f(x.as_f64(), y.as_f64())))
    };
    // Integer division by zero is an error, as in PyTorch.
    let zero_div = |b: &Operand<'_>| -> bool {
        !is_float
            && match b {
                Operand::Scalar(s) => s.to_i64() == 0,
                Operand::Tensor(t) => crate::ops::pointwise::cast_to::<i64>(t).contains(&0),
            }
    };
    if matches!(op, Arith::DivTrunc | Arith::DivFloor | Arith::Remainder | Arith::Fmod)
        && zero_div(&b)
    {
        return Err(ctx.invalid("other", "integer division by zero"));
    }
    match op {
        Arith::Add | Arith::Sub => {
            let al = scalar_calc::<T::Calc>(alpha);
            let sub = op == Arith::Sub;
            apply2::<T, T>(ctx, a, b, out, true, move |x, y| {
                let y = y.mul(al);
                T::from_calc(if sub { x.sub(y) } else { x.add(y) })
            })
        }
        Arith::Mul => apply2::<T, T>(ctx, a, b, out, true, |x, y| T::from_calc(x.mul(y))),
        Arith::Div => apply2::<T, T>(ctx, a, b, out, true, fl(|x, y| x / y)),
        Arith::DivTrunc if is_float => {
            apply2::<T, T>(ctx, a, b, out, true, fl(|x, y| (x / y).trunc()))
        }
        Arith::DivTrunc => apply2::<T, T>(ctx, a, b, out, true, |x, y| {
            T::from_i64(T::from_calc(x).to_i64().wrapping_div(T::from_calc(y).to_i64()))
        }),
        Arith::DivFloor if is_float => apply2::<T, T>(ctx, a, b, out, true, fl(div_floor_f)),
        Arith::DivFloor => apply2::<T, T>(ctx, a, b, out, true, |x, y| {
            T::from_i64(div_floor_i(T::from_calc(x).to_i64(), T::from_calc(y).to_i64()))
        }),
        Arith::Remainder if is_float => apply2::<T, T>(
            ctx,
            a,
            b,
            out,
            true,
            fl(|x, y| {
                let m = x % y;
                if m != 0.0 && (y < 0.0) != (m < 0.0) {
                    m + y
                } else {
                    m
                }
            }),
        ),
        Arith::Remainder => apply2::<T, T>(ctx, a, b, out, true, |x, y| {
            let (x, y) = (T::from_calc(x).to_i64(), T::from_calc(y).to_i64());
            let r = x.wrapping_rem(y);
            T::from_i64(if r != 0 && (r < 0) != (y < 0) { r + y } else { r })
        }),
        Arith::Fmod if is_float => apply2::<T, T>(ctx, a, b, out, true, fl(|x, y| x % y)),
        Arith::Fmod => apply2::<T, T>(ctx, a, b, out, true, |x, y| {
            T::from_i64(T::from_calc(x).to_i64().wrapping_rem(T::from_calc(y).to_i64()))
        }),
        Arith::Pow if is_float => apply2::<T, T>(ctx, a, b, out, true, fl(f64::powf)),
        Arith::Pow => {
            if let Operand::Scalar(s) = b {
                if s.to_i64() < 0 {
                    return Err(ctx.invalid(
                        "exponent",
                        "integers to negative integer powers are not allowed",
                    ));
                }
            }
            apply2::<T, T>(ctx, a, b, out, true, |x, y| {
                T::from_i64(pow_i(T::from_calc(x).to_i64(), T::from_calc(y).to_i64()))
            })
        }
        Arith::Maximum | Arith::Minimum => {
            let max = op == Arith::Maximum;
            if is_float {
                apply2::<T, T>(ctx, a, b, out, true, move |x, y| {
                    T::from_f64(max_nan(x.as_f64(), y.as_f64(), max))
                })
            } else {
                apply2::<T, T>(ctx, a, b, out, true, move |x, y| {
                    T::from_calc(if (x > y) == max { x } else { y })
                })
            }
        }
        Arith::Atan2 => apply2::<T, T>(ctx, a, b, out, true, fl(f64::atan2)),
        Arith::BitAnd | Arith::BitOr | Arith::BitXor | Arith::Shl | Arith::Shr => {
            if is_float {
                return Err(ctx.dtype_err("self", "an integer or bool dtype", T::DTYPE));
            }
            apply2::<T, T>(ctx, a, b, out, true, move |x, y| {
                let (x, y) = (T::from_calc(x).to_i64(), T::from_calc(y).to_i64());
                T::from_i64(match op {
                    Arith::BitAnd => x & y,
                    Arith::BitOr => x | y,
                    Arith::BitXor => x ^ y,
                    Arith::Shl => {
                        if (0..bits).contains(&y) {
                            x.wrapping_shl(y as u32)
                        } else {
                            0
                        }
                    }
                    _ => {
                        if (0..bits).contains(&y) {
                            x >> y
                        } else if x < 0 {
                            -1
                        } else {
                            0
                        }
                    }
                })
            })
        }
    }
}

/// The float32 fast path of `add`/`sub`/`mul`/`div` ([`binary_f32`]): the general path's
/// arithmetic (`x + y * alpha` and `x * y` in f32, `x / y` in f64 rounded, which equals the
/// f32 quotient). `false` when it does not apply.
fn arith_f32(
    op: Arith,
    a: Operand<'_>,
    b: Operand<'_>,
    alpha: Scalar,
    out: &mut TensorMut<'_>,
) -> bool {
    let al = scalar_calc::<f32>(alpha);
    let f = move |x: f32, y: f32| match op {
        Arith::Add => x + y * al,
        Arith::Sub => x - y * al,
        Arith::Mul => x * y,
        _ => x / y,
    };
    if !matches!(op, Arith::Add | Arith::Sub | Arith::Mul | Arith::Div) {
        return false;
    }
    match (a, b) {
        (Operand::Tensor(x), Operand::Tensor(y)) => {
            let Some(shape) = broadcast_shape(x.sizes(), y.sizes()) else { return false };
            binary_f32(&x, &y, &shape, out, f)
        }
        (Operand::Tensor(x), Operand::Scalar(s)) => {
            let c = scalar_calc::<f32>(s);
            unary_f32(&x, out, |v| f(v, c))
        }
        (Operand::Scalar(s), Operand::Tensor(y)) => {
            let c = scalar_calc::<f32>(s);
            unary_f32(&y, out, |v| f(c, v))
        }
        (Operand::Scalar(_), Operand::Scalar(_)) => false,
    }
}

/// Shared body of the arithmetic kernels.
pub(crate) fn arith(
    ctx: &KernelContext,
    op: Arith,
    a: Operand<'_>,
    b: Operand<'_>,
    alpha: Scalar,
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let mut ct = result_type(&[a, b]).ok_or_else(|| {
        ctx.dtype_err("other", "a dtype that promotes with self", operand_dtype(&b))
    })?;
    if float_only(op) && !ct.is_float() {
        ct = DType::Float;
    }
    if op == Arith::Sub && ct == DType::Bool {
        return Err(ctx.dtype_err(
            "self",
            "a non-bool dtype (subtraction of bools is not supported)",
            ct,
        ));
    }
    if !ct.is_float() && alpha.is_float() {
        return Err(ctx.invalid("alpha", "a floating alpha needs a floating result dtype"));
    }
    if ct == DType::Float && !ctx.general_only && arith_f32(op, a, b, alpha, out) {
        return Ok(());
    }
    crate::dispatch_all!(ct, T => arith_typed::<T>(ctx, op, a, b, alpha, out),
        _ => Err(ctx.dtype_err("self", "a computable dtype", ct)))
}

fn operand_dtype(o: &Operand<'_>) -> DType {
    match o {
        Operand::Tensor(t) => t.dtype(),
        Operand::Scalar(Scalar::Int(_)) => DType::Long,
        Operand::Scalar(Scalar::Double(_)) => DType::Double,
        Operand::Scalar(Scalar::Bool(_)) => DType::Bool,
    }
}

/// Shared body of the comparison kernels.
pub(crate) fn compare(
    ctx: &KernelContext,
    op: Cmp,
    a: Operand<'_>,
    b: Operand<'_>,
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let ct = result_type(&[a, b]).ok_or_else(|| {
        ctx.dtype_err("other", "a dtype that promotes with self", operand_dtype(&b))
    })?;
    if !ctx.general_only && ct == DType::Float && compare_f32(op, a, b, out) {
        return Ok(());
    }
    crate::dispatch_all!(ct, T => apply2::<T, Bool>(ctx, a, b, out, false, move |x: <T as Element>::Calc, y| {
        Bool(match op {
            Cmp::Eq => x == y,
            Cmp::Ne => x != y,
            Cmp::Lt => x < y,
            Cmp::Le => x <= y,
            Cmp::Gt => x > y,
            Cmp::Ge => x >= y,
        } as u8)
    }), _ => Err(ctx.dtype_err("self", "a computable dtype", ct)))
}

/// The float32 fast path of a comparison of a float32 tensor with a scalar (either side)
/// into a bool `out` in the same storage order: the general path's `f32` comparison, one
/// loop per operator so that each vectorizes. `false` when it does not apply.
fn compare_f32(op: Cmp, a: Operand<'_>, b: Operand<'_>, out: &mut TensorMut<'_>) -> bool {
    let (x, c, op) = match (a, b) {
        (Operand::Tensor(x), Operand::Scalar(s)) => (x, s, op),
        // `c op x` is `x op' c` with the comparison turned around.
        (Operand::Scalar(s), Operand::Tensor(x)) => (x, s, op.swapped()),
        _ => return false,
    };
    let c = scalar_calc::<f32>(c);
    unary_f32_slice(&x, out, |src, dst: &mut [Bool]| {
        fn fill(src: &[f32], dst: &mut [Bool], f: impl Fn(f32) -> bool) {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = Bool(f(v) as u8);
            }
        }
        match op {
            Cmp::Eq => fill(src, dst, |v| v == c),
            Cmp::Ne => fill(src, dst, |v| v != c),
            Cmp::Lt => fill(src, dst, |v| v < c),
            Cmp::Le => fill(src, dst, |v| v <= c),
            Cmp::Gt => fill(src, dst, |v| v > c),
            Cmp::Ge => fill(src, dst, |v| v >= c),
        }
    })
}

/// Shared body of the logical kernels (any input dtypes, truthiness).
fn logical(
    ctx: &KernelContext,
    op: Logic,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
) -> Result<(), KernelError> {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let y = a.tensor(1, "other")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    // Cast both to f64 truthiness through a bool view.
    map2::<Bool, Bool>(ctx, &x, &y, out, false, move |p, q| {
        let (p, q) = (p.is_true(), q.is_true());
        Bool(match op {
            Logic::And => p && q,
            Logic::Or => p || q,
            Logic::Xor => p != q,
        } as u8)
    })
}

fn operands<'x>(
    a: &Args<'_, 'x>,
    scalar_other: bool,
) -> Result<(Operand<'x>, Operand<'x>), KernelError> {
    let x = Operand::Tensor(a.tensor(0, "self")?);
    let y = if scalar_other {
        Operand::Scalar(a.scalar(1, "other")?)
    } else {
        Operand::Tensor(a.tensor(1, "other")?)
    };
    Ok((x, y))
}

fn arith_kernel(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    op: Arith,
    scalar_other: bool,
    alpha_pos: Option<usize>,
) -> Result<(), KernelError> {
    let a = Args::new(ctx, args);
    let (x, y) = operands(&a, scalar_other)?;
    let alpha = match alpha_pos {
        Some(p) => a.scalar(p, "alpha")?,
        None => Scalar::Int(1),
    };
    let out = out_tensor(ctx, outs, 0, "out")?;
    arith(ctx, op, x, y, alpha, out)
}

fn div_mode(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    scalar_other: bool,
) -> Result<(), KernelError> {
    let a = Args::new(ctx, args);
    let (x, y) = operands(&a, scalar_other)?;
    let op = match a.opt_string(2, "rounding_mode")? {
        None => Arith::Div,
        Some("trunc") => Arith::DivTrunc,
        Some("floor") => Arith::DivFloor,
        Some(m) => {
            return Err(ctx.invalid(
                "rounding_mode",
                format!("expected None, \"trunc\" or \"floor\", got {m:?}"),
            ))
        }
    };
    let out = out_tensor(ctx, outs, 0, "out")?;
    arith(ctx, op, x, y, Scalar::Int(1), out)
}

fn cmp_kernel(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    op: Cmp,
    scalar_other: bool,
) -> Result<(), KernelError> {
    let a = Args::new(ctx, args);
    let (x, y) = operands(&a, scalar_other)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    compare(ctx, op, x, y, out)
}

macro_rules! arith_defs {
    ($v:ident; $($name:literal => $op:ident, $scalar:expr, $alpha:expr, $inputs:expr;)*) => {
        $( $v.push(out1($name, $inputs, |c, a, o| arith_kernel(c, a, o, Arith::$op, $scalar, $alpha))); )*
    };
}

macro_rules! cmp_defs {
    ($v:ident; $($name:literal => $op:ident, $scalar:expr;)*) => {
        $( $v.push(out1($name, 2, |c, a, o| cmp_kernel(c, a, o, Cmp::$op, $scalar))); )*
    };
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    let mut v = Vec::new();
    arith_defs!(v;
        "aten::add.out" => Add, false, Some(2), 3;
        "aten::add.Scalar_out" => Add, true, Some(2), 3;
        "aten::sub.out" => Sub, false, Some(2), 3;
        "aten::sub.Scalar_out" => Sub, true, Some(2), 3;
        "aten::mul.out" => Mul, false, None, 2;
        "aten::mul.Scalar_out" => Mul, true, None, 2;
        "aten::div.out" => Div, false, None, 2;
        "aten::div.Scalar_out" => Div, true, None, 2;
        "aten::floor_divide.out" => DivFloor, false, None, 2;
        "aten::remainder.Tensor_out" => Remainder, false, None, 2;
        "aten::remainder.Scalar_out" => Remainder, true, None, 2;
        "aten::fmod.Tensor_out" => Fmod, false, None, 2;
        "aten::fmod.Scalar_out" => Fmod, true, None, 2;
        "aten::pow.Tensor_Tensor_out" => Pow, false, None, 2;
        "aten::pow.Tensor_Scalar_out" => Pow, true, None, 2;
        "aten::maximum.out" => Maximum, false, None, 2;
        "aten::minimum.out" => Minimum, false, None, 2;
        "aten::atan2.out" => Atan2, false, None, 2;
        "aten::bitwise_and.Tensor_out" => BitAnd, false, None, 2;
        "aten::bitwise_and.Scalar_out" => BitAnd, true, None, 2;
        "aten::bitwise_or.Tensor_out" => BitOr, false, None, 2;
        "aten::bitwise_or.Scalar_out" => BitOr, true, None, 2;
        "aten::bitwise_xor.Tensor_out" => BitXor, false, None, 2;
        "aten::bitwise_xor.Scalar_out" => BitXor, true, None, 2;
        "aten::bitwise_left_shift.Tensor_out" => Shl, false, None, 2;
        "aten::bitwise_left_shift.Tensor_Scalar_out" => Shl, true, None, 2;
        "aten::bitwise_right_shift.Tensor_out" => Shr, false, None, 2;
        "aten::bitwise_right_shift.Tensor_Scalar_out" => Shr, true, None, 2;
    );
    v.push(out1("aten::div.out_mode", 3, |c, a, o| div_mode(c, a, o, false)));
    v.push(out1("aten::div.Scalar_mode_out", 3, |c, a, o| div_mode(c, a, o, true)));
    v.push(out1("aten::rsub.Scalar_out", 3, |c, a, o| {
        let r = Args::new(c, a);
        let x = Operand::Tensor(r.tensor(0, "self")?);
        let y = Operand::Scalar(r.scalar(1, "other")?);
        let alpha = r.scalar(2, "alpha")?;
        let out = out_tensor(c, o, 0, "out")?;
        // other - alpha * self
        let ct = result_type(&[x, y]).ok_or_else(|| c.invalid("self", "no common dtype"))?;
        crate::dispatch_all!(ct, T => {
            let al = scalar_calc::<<T as Element>::Calc>(alpha);
            apply2::<T, T>(c, y, x, out, true, move |p, q| T::from_calc(p.sub(q.mul(al))))
        }, _ => Err(c.dtype_err("self", "a computable dtype", ct)))
    }));
    v.push(out1("aten::pow.Scalar_out", 2, |c, a, o| {
        let r = Args::new(c, a);
        let x = Operand::Scalar(r.scalar(0, "self")?);
        let y = Operand::Tensor(r.tensor(1, "exponent")?);
        let out = out_tensor(c, o, 0, "out")?;
        arith(c, Arith::Pow, x, y, Scalar::Int(1), out)
    }));
    cmp_defs!(v;
        "aten::eq.Tensor_out" => Eq, false; "aten::eq.Scalar_out" => Eq, true;
        "aten::ne.Tensor_out" => Ne, false; "aten::ne.Scalar_out" => Ne, true;
        "aten::lt.Tensor_out" => Lt, false; "aten::lt.Scalar_out" => Lt, true;
        "aten::le.Tensor_out" => Le, false; "aten::le.Scalar_out" => Le, true;
        "aten::gt.Tensor_out" => Gt, false; "aten::gt.Scalar_out" => Gt, true;
        "aten::ge.Tensor_out" => Ge, false; "aten::ge.Scalar_out" => Ge, true;
    );
    v.push(out1("aten::logical_and.out", 2, |c, a, o| logical(c, Logic::And, a, o)));
    v.push(out1("aten::logical_or.out", 2, |c, a, o| logical(c, Logic::Or, a, o)));
    v.push(out1("aten::logical_xor.out", 2, |c, a, o| logical(c, Logic::Xor, a, o)));
    v
}
