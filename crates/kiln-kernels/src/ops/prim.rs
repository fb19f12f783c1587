//! Symbolic-shape and scalar ops: `aten::sym_size.int`, `aten::sym_numel`,
//! `aten::_local_scalar_dense`, the `executorch_prim::*.Scalar` arithmetic and comparison ops,
//! and `executorch_prim::et_view.default` (a view: the runtime shares the input's storage).

use crate::element::Element;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_scalar, out_view, Args};
use crate::ops::defs::{ret_scalar, ret_view};
use crate::shape::normalize_dim;
use crate::tensor::Capacity;
use crate::value::{Arg, Out, Scalar};

type KResult = Result<(), KernelError>;

fn binary(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    fi: fn(i64, i64) -> Option<Scalar>,
    ff: fn(f64, f64) -> Scalar,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.scalar(0, "a")?;
    let y = a.scalar(1, "b")?;
    let r = match (x, y) {
        (Scalar::Double(_), _) | (_, Scalar::Double(_)) => ff(x.to_f64(), y.to_f64()),
        _ => fi(x.to_i64(), y.to_i64())
            .ok_or_else(|| ctx.invalid("b", "integer division by zero"))?,
    };
    *out_scalar(ctx, outs)? = r;
    Ok(())
}

fn unary(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    f: fn(Scalar) -> Scalar,
) -> KResult {
    let x = Args::new(ctx, args).scalar(0, "a")?;
    *out_scalar(ctx, outs)? = f(x);
    Ok(())
}

fn floordiv_i(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let q = a.wrapping_div(b);
    Some(if (a % b != 0) && ((a < 0) != (b < 0)) { q - 1 } else { q })
}

fn mod_i(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let r = a.wrapping_rem(b);
    Some(if r != 0 && (r < 0) != (b < 0) { r + b } else { r })
}

fn et_view(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let size = a.int_list(1, "size")?;
    let v = out_view(ctx, outs)?;
    let mut sizes = Vec::with_capacity(size.len());
    let mut infer = None;
    let mut known = 1usize;
    for (i, &s) in size.iter().enumerate() {
        if s == -1 && infer.is_none() {
            infer = Some(i);
            sizes.push(0);
        } else {
            let u =
                usize::try_from(s).map_err(|_| ctx.invalid("size", format!("invalid size {s}")))?;
            known = known.checked_mul(u).ok_or_else(|| ctx.invalid("size", "size overflows"))?;
            sizes.push(u);
        }
    }
    if let Some(i) = infer {
        if known == 0 || x.numel() % known != 0 {
            return Err(ctx.invalid("size", format!("cannot view {:?} as {size:?}", x.sizes())));
        }
        sizes[i] = x.numel() / known;
    }
    if sizes.iter().product::<usize>() != x.numel() {
        return Err(ctx.shape_err("size", format!("{} elements", x.numel()), &sizes));
    }
    if !x.shape().is_dense_row_major() {
        return Err(ctx.invalid("self", "et_view needs a contiguous input"));
    }
    if v.dtype != x.dtype() {
        return Err(ctx.dtype_err("out", format!("{} (the input dtype)", x.dtype()), v.dtype));
    }
    if sizes != v.shape.sizes() {
        let ok = match v.capacity {
            Capacity::Static => false,
            Capacity::Bound(b) => sizes.len() == v.shape.rank() && x.numel() <= b,
        };
        if !ok {
            return Err(
                ctx.invalid("out", format!("cannot resize view output {} to {sizes:?}", v.shape))
            );
        }
    }
    v.shape = crate::Shape::contiguous(&sizes).map_err(|e| ctx.invalid("size", e.to_string()))?;
    Ok(())
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    use Scalar::{Bool as B, Double as D, Int as I};
    vec![
        ret_scalar("aten::sym_size.int", 2, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let d = normalize_dim(r.int(1, "dim")?, x.rank())
                .ok_or_else(|| c.invalid("dim", "out of range"))?;
            *out_scalar(c, o)? = I(x.sizes().get(d).copied().unwrap_or(1) as i64);
            Ok(())
        }),
        ret_scalar("aten::sym_numel", 1, |c, a, o| {
            let x = Args::new(c, a).tensor(0, "self")?;
            *out_scalar(c, o)? = I(x.numel() as i64);
            Ok(())
        }),
        ret_scalar("aten::_local_scalar_dense", 1, |c, a, o| {
            let x = Args::new(c, a).tensor(0, "self")?;
            if x.numel() != 1 {
                return Err(c.shape_err("self", "one element", x.sizes()));
            }
            let dt = x.dtype();
            let s = crate::dispatch_all!(dt, T => {
                let v = crate::ops::pointwise::cast_to::<T>(&x)[0];
                if dt.is_float() { D(v.to_f64()) } else if dt == crate::DType::Bool { B(v.is_true()) } else { I(v.to_i64()) }
            }, _ => return Err(c.dtype_err("self", "a computable dtype", dt)));
            *out_scalar(c, o)? = s;
            Ok(())
        }),
        ret_scalar("executorch_prim::add.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(I(x.wrapping_add(y))), |x, y| D(x + y))
        }),
        ret_scalar("executorch_prim::sub.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(I(x.wrapping_sub(y))), |x, y| D(x - y))
        }),
        ret_scalar("executorch_prim::mul.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(I(x.wrapping_mul(y))), |x, y| D(x * y))
        }),
        ret_scalar("executorch_prim::floordiv.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| floordiv_i(x, y).map(I), |x, y| D((x / y).floor()))
        }),
        ret_scalar("executorch_prim::floordiv.int", 2, |c, a, o| {
            binary(c, a, o, |x, y| floordiv_i(x, y).map(I), |x, y| D((x / y).floor()))
        }),
        ret_scalar("executorch_prim::truediv.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(D(x as f64 / y as f64)), |x, y| D(x / y))
        }),
        ret_scalar("executorch_prim::mod.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| mod_i(x, y).map(I), |x, y| D(x - (x / y).floor() * y))
        }),
        ret_scalar("executorch_prim::mod.int", 2, |c, a, o| {
            binary(c, a, o, |x, y| mod_i(x, y).map(I), |x, y| D(x - (x / y).floor() * y))
        }),
        ret_scalar("executorch_prim::sym_max.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(I(x.max(y))), |x, y| D(x.max(y)))
        }),
        ret_scalar("executorch_prim::sym_min.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(I(x.min(y))), |x, y| D(x.min(y)))
        }),
        ret_scalar("executorch_prim::eq.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(B(x == y)), |x, y| B(x == y))
        }),
        ret_scalar("executorch_prim::gt.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(B(x > y)), |x, y| B(x > y))
        }),
        ret_scalar("executorch_prim::lt.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(B(x < y)), |x, y| B(x < y))
        }),
        ret_scalar("executorch_prim::ge.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(B(x >= y)), |x, y| B(x >= y))
        }),
        ret_scalar("executorch_prim::le.Scalar", 2, |c, a, o| {
            binary(c, a, o, |x, y| Some(B(x <= y)), |x, y| B(x <= y))
        }),
        ret_scalar("executorch_prim::neg.Scalar", 1, |c, a, o| {
            unary(c, a, o, |x| match x {
                D(v) => D(-v),
                v => I(v.to_i64().wrapping_neg()),
            })
        }),
        ret_scalar("executorch_prim::sym_not.Scalar", 1, |c, a, o| {
            unary(c, a, o, |x| B(x.to_i64() == 0 && x.to_f64() == 0.0))
        }),
        ret_scalar("executorch_prim::sym_float.Scalar", 1, |c, a, o| {
            unary(c, a, o, |x| D(x.to_f64()))
        }),
        ret_scalar("executorch_prim::sym_int.Scalar", 1, |c, a, o| {
            unary(c, a, o, |x| I(x.to_i64()))
        }),
        ret_scalar("executorch_prim::ceil.Scalar", 1, |c, a, o| {
            unary(c, a, o, |x| I(x.to_f64().ceil() as i64))
        }),
        ret_scalar("executorch_prim::round.Scalar", 1, |c, a, o| {
            unary(c, a, o, |x| match x {
                D(v) => I(v.round_ties_even() as i64),
                v => I(v.to_i64()),
            })
        }),
        ret_scalar("executorch_prim::trunc.Scalar", 1, |c, a, o| {
            unary(c, a, o, |x| I(x.to_f64().trunc() as i64))
        }),
        ret_scalar("executorch_prim::sym_ite.Scalar", 3, |c, a, o| {
            let r = Args::new(c, a);
            let cond = r.scalar(0, "b")?;
            let v = if cond.to_i64() != 0 { r.scalar(1, "t")? } else { r.scalar(2, "f")? };
            *out_scalar(c, o)? = v;
            Ok(())
        }),
        ret_view("executorch_prim::et_view.default", 2, |c, a, o| et_view(c, a, o)),
    ]
}
