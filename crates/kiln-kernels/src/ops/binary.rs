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
use crate::ops::pointwise::{
    calc_lanes, map2, result_type, scalar_calc, store_via, with_out, zip_lanes, Lane, Operand,
};
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

/// Whether an integer operator sees a scalar operand as the common dtype holds it (wrapped to
/// its width), as PyTorch does; `+`, `-` and `*` wrap alike either way and see it whole.
fn narrows_scalar(op: Arith) -> bool {
    !matches!(op, Arith::Add | Arith::Sub | Arith::Mul | Arith::Maximum | Arith::Minimum)
}

/// The arithmetic operator on operands of the common dtype `T`: checks what `T` rules out,
/// then computes in `T`'s calc type ([`arith_calc`], one instance per calc type rather than
/// per dtype) and narrows the results to `T`.
fn arith_typed<T: Element>(
    ctx: &KernelContext,
    op: Arith,
    a: Operand<'_>,
    b: Operand<'_>,
    alpha: Scalar,
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let is_float = T::DTYPE.is_float();
    let bitwise =
        matches!(op, Arith::BitAnd | Arith::BitOr | Arith::BitXor | Arith::Shl | Arith::Shr);
    if is_float && bitwise {
        return Err(ctx.dtype_err("self", "an integer or bool dtype", T::DTYPE));
    }
    if let (Arith::Pow, false, Operand::Scalar(s)) = (op, is_float, b) {
        if s.to_i64() < 0 {
            return Err(
                ctx.invalid("exponent", "integers to negative integer powers are not allowed")
            );
        }
    }
    let narrow = !is_float && narrows_scalar(op);
    let [x, y] = calc_lanes::<T>(ctx, a, b, out, narrow)?;
    // Integer division by zero is an error, as in PyTorch.
    let divides = matches!(op, Arith::DivTrunc | Arith::DivFloor | Arith::Remainder | Arith::Fmod);
    if !is_float && divides && y.has_zero() {
        return Err(ctx.invalid("other", "integer division by zero"));
    }
    let alpha = scalar_calc::<T::Calc>(alpha);
    let bits = (T::DTYPE.size() * 8) as i64;
    store_via::<T, T::Calc>(ctx, out, true, T::from_calc, &|dst| {
        arith_calc(op, &x, &y, alpha, bits, dst)
    })
}

/// `dst = x op y` in the calc type `C`: floats through `f64` where PyTorch's CPU kernels compute
/// in double, integers wrapping (`bits`: the width of the dtype they will be narrowed to, for
/// shifts).
#[inline(never)]
fn arith_calc<C: Calc>(
    op: Arith,
    x: &Lane<'_, C>,
    y: &Lane<'_, C>,
    alpha: C,
    bits: i64,
    dst: &mut [C],
) {
    let fl = |f: fn(f64, f64) -> f64| move |p: C, q: C| C::of_f64(f(p.as_f64(), q.as_f64()));
    let int = |f: fn(i64, i64) -> i64| move |p: C, q: C| C::of_i64(f(p.as_i64(), q.as_i64()));
    match op {
        Arith::Add => zip_lanes(dst, x, y, |p, q| p.add(q.mul(alpha))),
        Arith::Sub => zip_lanes(dst, x, y, |p, q| p.sub(q.mul(alpha))),
        Arith::Mul => zip_lanes(dst, x, y, |p, q| p.mul(q)),
        Arith::Maximum | Arith::Minimum => {
            let max = op == Arith::Maximum;
            if C::FLOAT {
                zip_lanes(dst, x, y, |p, q| C::of_f64(max_nan(p.as_f64(), q.as_f64(), max)))
            } else {
                zip_lanes(dst, x, y, |p, q| if (p > q) == max { p } else { q })
            }
        }
        _ if C::FLOAT => match op {
            Arith::DivTrunc => zip_lanes(dst, x, y, fl(|p, q| (p / q).trunc())),
            Arith::DivFloor => zip_lanes(dst, x, y, fl(div_floor_f)),
            Arith::Remainder => zip_lanes(
                dst,
                x,
                y,
                fl(|p, q| {
                    let m = p % q;
                    if m != 0.0 && (q < 0.0) != (m < 0.0) {
                        m + q
                    } else {
                        m
                    }
                }),
            ),
            Arith::Fmod => zip_lanes(dst, x, y, fl(|p, q| p % q)),
            Arith::Pow => zip_lanes(dst, x, y, fl(f64::powf)),
            Arith::Atan2 => zip_lanes(dst, x, y, fl(f64::atan2)),
            // Div, and the bitwise operators a float dtype refused before.
            _ => zip_lanes(dst, x, y, fl(|p, q| p / q)),
        },
        Arith::DivTrunc => zip_lanes(dst, x, y, int(i64::wrapping_div)),
        Arith::DivFloor => zip_lanes(dst, x, y, int(div_floor_i)),
        Arith::Remainder => zip_lanes(
            dst,
            x,
            y,
            int(|p, q| {
                let r = p.wrapping_rem(q);
                if r != 0 && (r < 0) != (q < 0) {
                    r + q
                } else {
                    r
                }
            }),
        ),
        Arith::Fmod => zip_lanes(dst, x, y, int(i64::wrapping_rem)),
        Arith::Pow => zip_lanes(dst, x, y, int(pow_i)),
        Arith::BitAnd => zip_lanes(dst, x, y, int(|p, q| p & q)),
        Arith::BitOr => zip_lanes(dst, x, y, int(|p, q| p | q)),
        Arith::BitXor => zip_lanes(dst, x, y, int(|p, q| p ^ q)),
        Arith::Shl => zip_lanes(dst, x, y, move |p: C, q: C| {
            let (p, q) = (p.as_i64(), q.as_i64());
            C::of_i64(if (0..bits).contains(&q) { p.wrapping_shl(q as u32) } else { 0 })
        }),
        Arith::Shr => zip_lanes(dst, x, y, move |p: C, q: C| {
            let (p, q) = (p.as_i64(), q.as_i64());
            C::of_i64(if (0..bits).contains(&q) {
                p >> q
            } else if p < 0 {
                -1
            } else {
                0
            })
        }),
        // Div and Atan2 always compute in a float dtype.
        Arith::Div | Arith::Atan2 => zip_lanes(dst, x, y, fl(|p, q| p / q)),
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
    crate::dispatch_all!(ct, T => {
        let [x, y] = calc_lanes::<T>(ctx, a, b, out, false)?;
        with_out::<Bool>(ctx, out, false, |dst| compare_calc(op, &x, &y, dst))
    }, _ => Err(ctx.dtype_err("self", "a computable dtype", ct)))
}

/// `dst = x op y` in the calc type `C`.
#[inline(never)]
fn compare_calc<C: Calc>(op: Cmp, x: &Lane<'_, C>, y: &Lane<'_, C>, dst: &mut [Bool]) {
    let b = |v: bool| Bool(v as u8);
    match op {
        Cmp::Eq => zip_lanes(dst, x, y, |p, q| b(p == q)),
        Cmp::Ne => zip_lanes(dst, x, y, |p, q| b(p != q)),
        Cmp::Lt => zip_lanes(dst, x, y, |p, q| b(p < q)),
        Cmp::Le => zip_lanes(dst, x, y, |p, q| b(p <= q)),
        Cmp::Gt => zip_lanes(dst, x, y, |p, q| b(p > q)),
        Cmp::Ge => zip_lanes(dst, x, y, |p, q| b(p >= q)),
    }
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
        arith(c, Arith::Sub, y, x, alpha, out)
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
