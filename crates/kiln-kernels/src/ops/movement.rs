//! Rearranging and creating ops: `roll`, `tril`, `diagonal_copy`,
//! `pixel_unshuffle`, `unfold_copy`, `repeat_interleave.Tensor_out`, `empty` and
//! `dim_order_ops::_empty_dim_order`. Outputs keep the input dtype; any dim order works.

use crate::compute::strided::walk;
use crate::dtype::DType;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::pad::remap;
use crate::ops::pointwise::{cast_to, resize};
use crate::ops::shape::{copy_view, dim};
use crate::shape::MAX_RANK;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out, Scalar};

type KResult = Result<(), KernelError>;

/// `out` has `x`'s dtype, or an error naming both.
pub(crate) fn same_dtype(ctx: &KernelContext, x: &TensorRef<'_>, out: &TensorMut<'_>) -> KResult {
    if x.dtype() == out.dtype() {
        Ok(())
    } else {
        Err(ctx.dtype_err("out", format!("{} (the dtype of self)", x.dtype()), out.dtype()))
    }
}

fn one<'c, 'x>(
    ctx: &'c KernelContext,
    args: &'c [Arg<'x>],
) -> Result<(Args<'c, 'x>, TensorRef<'x>), KernelError> {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    Ok((a, x))
}

fn roll(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let (a, x) = one(ctx, args)?;
    let shifts = a.int_list(1, "shifts")?;
    let dims = a.int_list(2, "dims")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let sizes = x.sizes().to_vec();
    let xs = x.shape().strides();
    let r = x.rank();
    if dims.is_empty() {
        // Roll the flattened tensor, then restore the shape.
        let [shift] = shifts else {
            return Err(
                ctx.invalid("shifts", format!("{} shifts without dims (need 1)", shifts.len()))
            );
        };
        let n = x.numel();
        let mut offs = Vec::with_capacity(n);
        walk(&sizes, [&xs[..r]], |[i]| offs.push(i));
        let mut flat = 0usize;
        return remap(ctx, &x, &sizes, out, Scalar::Int(0), |_| {
            let src = (flat as i128 - *shift as i128).rem_euclid(n.max(1) as i128) as usize;
            flat += 1;
            offs.get(src).copied()
        });
    }
    if shifts.len() != dims.len() {
        return Err(
            ctx.invalid("shifts", format!("{} shifts for {} dims", shifts.len(), dims.len()))
        );
    }
    let mut shift = [0i64; MAX_RANK];
    for (&s, &d) in shifts.iter().zip(dims) {
        let d = dim(ctx, d, r, "dims")?;
        shift[d] = shift[d].wrapping_add(s);
    }
    remap(ctx, &x, &sizes, out, Scalar::Int(0), |idx| {
        let mut off = 0;
        for (k, &i) in idx.iter().enumerate() {
            let s = (i as i128 - shift[k] as i128).rem_euclid(sizes[k].max(1) as i128) as usize;
            off += s * xs[k];
        }
        Some(off)
    })
}

fn tril(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let (a, x) = one(ctx, args)?;
    let diagonal = a.int(1, "diagonal")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let r = x.rank();
    if r < 2 {
        return Err(ctx.shape_err("self", "at least 2 dimensions", x.sizes()));
    }
    let xs = x.shape().strides();
    let sizes = x.sizes().to_vec();
    remap(ctx, &x, &sizes, out, Scalar::Int(0), |idx| {
        let (i, j) = (idx[r - 2] as i64, idx[r - 1] as i64);
        (j - i <= diagonal).then(|| idx.iter().zip(&xs).map(|(p, s)| p * s).sum())
    })
}

fn diagonal_copy(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let (a, x) = one(ctx, args)?;
    let offset = a.int(1, "offset")?;
    let r = x.rank();
    if r < 2 {
        return Err(ctx.shape_err("self", "at least 2 dimensions", x.sizes()));
    }
    let d1 = dim(ctx, a.int(2, "dim1")?, r, "dim1")?;
    let d2 = dim(ctx, a.int(3, "dim2")?, r, "dim2")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if d1 == d2 {
        return Err(ctx.invalid("dim2", format!("dim1 and dim2 are both {d1}")));
    }
    let (s1, s2) = (x.sizes()[d1] as i64, x.sizes()[d2] as i64);
    let len = if offset >= 0 {
        s1.min(s2.saturating_sub(offset))
    } else {
        s2.min(s1.saturating_add(offset))
    };
    let len = len.max(0) as usize;
    let xs = x.shape().strides();
    let base = if len == 0 {
        0
    } else if offset >= 0 {
        offset as usize * xs[d2]
    } else {
        offset.unsigned_abs() as usize * xs[d1]
    };
    let mut sizes = Vec::with_capacity(r - 1);
    let mut strides = Vec::with_capacity(r - 1);
    for k in (0..r).filter(|&k| k != d1 && k != d2) {
        sizes.push(x.sizes()[k]);
        strides.push(xs[k]);
    }
    sizes.push(len);
    strides.push(xs[d1] + xs[d2]);
    same_dtype(ctx, &x, out)?;
    copy_view(ctx, &x, &sizes, &strides, base, out)
}

fn pixel_unshuffle(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let (a, x) = one(ctx, args)?;
    let f = a.int(1, "downscale_factor")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let f = usize::try_from(f)
        .ok()
        .filter(|&f| f > 0)
        .ok_or_else(|| ctx.invalid("downscale_factor", format!("{f} must be positive")))?;
    let r = x.rank();
    let ff = f.checked_mul(f).ok_or_else(|| ctx.invalid("downscale_factor", "factor overflows"))?;
    if r < 3 || x.sizes()[r - 2] % f != 0 || x.sizes()[r - 1] % f != 0 {
        return Err(ctx.shape_err(
            "self",
            format!("[*, C, H, W] with H and W divisible by {f}"),
            x.sizes(),
        ));
    }
    let mut sizes = x.sizes().to_vec();
    sizes[r - 3] = sizes[r - 3]
        .checked_mul(ff)
        .ok_or_else(|| ctx.invalid("downscale_factor", "channel count overflows"))?;
    sizes[r - 2] /= f;
    sizes[r - 1] /= f;
    let xs = x.shape().strides();
    remap(ctx, &x, &sizes, out, Scalar::Int(0), |idx| {
        let (c, h, w) = (idx[r - 3], idx[r - 2], idx[r - 1]);
        let rem = c % ff;
        let lead: usize = idx[..r - 3].iter().zip(&xs).map(|(p, s)| p * s).sum();
        Some(
            lead + (c / ff) * xs[r - 3]
                + (h * f + rem / f) * xs[r - 2]
                + (w * f + rem % f) * xs[r - 1],
        )
    })
}

fn unfold_copy(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let (a, x) = one(ctx, args)?;
    let r = x.rank();
    if r == 0 {
        return Err(ctx.shape_err("self", "at least 1 dimension", x.sizes()));
    }
    let d = dim(ctx, a.int(1, "dimension")?, r, "dimension")?;
    let size = a.int(2, "size")?;
    let step = a.int(3, "step")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let n = x.sizes()[d];
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s <= n)
        .ok_or_else(|| ctx.invalid("size", format!("size {size} must be in 0..={n} (dim {d})")))?;
    let step = usize::try_from(step)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| ctx.invalid("step", format!("step {step} must be positive")))?;
    let xs = x.shape().strides();
    let mut sizes = x.sizes().to_vec();
    sizes[d] = (n - size) / step + 1;
    sizes.push(size);
    let mut strides = xs[..r].to_vec();
    strides[d] = xs[d].checked_mul(step).ok_or_else(|| ctx.invalid("step", "stride overflows"))?;
    strides.push(xs[d]);
    same_dtype(ctx, &x, out)?;
    copy_view(ctx, &x, &sizes, &strides, 0, out)
}

fn repeat_interleave(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let reps = a.tensor(0, "repeats")?;
    let output_size = a.opt_int(1, "output_size")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if !matches!(reps.dtype(), DType::Int | DType::Long) {
        return Err(ctx.dtype_err("repeats", "int32 or int64", reps.dtype()));
    }
    if out.dtype() != reps.dtype() {
        return Err(ctx.dtype_err(
            "out",
            format!("{} (the dtype of repeats)", reps.dtype()),
            out.dtype(),
        ));
    }
    if reps.rank() != 1 {
        return Err(ctx.shape_err("repeats", "a 1-D tensor", reps.sizes()));
    }
    let v = cast_to::<i64>(&reps);
    let st = reps.shape().strides()[0];
    let counts: Vec<i64> = (0..reps.numel()).map(|i| v[i * st]).collect();
    let mut total: usize = 0;
    for &c in &counts {
        let c = usize::try_from(c)
            .map_err(|_| ctx.invalid("repeats", format!("repeat count {c} is negative")))?;
        total = total.checked_add(c).ok_or_else(|| ctx.invalid("repeats", "total overflows"))?;
    }
    if let Some(s) = output_size {
        if s != total as i64 {
            return Err(
                ctx.invalid("output_size", format!("{s} differs from the repeat total {total}"))
            );
        }
    }
    resize(ctx, out, "out", &[total])?;
    let os = out.shape().strides()[0];
    let mut k = 0;
    macro_rules! fill {
        ($t:ty) => {{
            let d = out.as_mut_slice::<$t>().map_err(|e| ctx.tensor_err("out", e))?;
            for (i, &c) in counts.iter().enumerate() {
                for _ in 0..c {
                    d[k * os] = i as $t;
                    k += 1;
                }
            }
        }};
    }
    if out.dtype() == DType::Int {
        fill!(i32)
    } else {
        fill!(i64)
    }
    Ok(())
}

/// `empty` / `_empty_dim_order`: resizes `out`; its contents are zeroed (ExecuTorch leaves
/// them as they were; zeroes keep runs reproducible).
fn empty(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    dim_order: bool,
) -> KResult {
    let a = Args::new(ctx, args);
    let sizes = a.sizes(0, "size")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if dim_order {
        let want = a.opt_int_list(1, "dim_order")?;
        let have = out.shape().dim_order();
        let ok = match want {
            Some(w) => w.len() == have.len() && w.iter().zip(have).all(|(&a, &b)| a == b as i64),
            None => out.shape().is_contiguous(),
        };
        if !ok {
            return Err(ctx.invalid(
                "dim_order",
                format!("{want:?} does not match the out dim order {have:?}"),
            ));
        }
    } else if let Some(f) = a.opt_int(1, "memory_format")? {
        // c10::MemoryFormat: 0 contiguous, 1 preserve.
        if f != 0 && f != 1 {
            return Err(ctx.invalid("memory_format", format!("memory format {f} is not supported")));
        }
    }
    resize(ctx, out, "out", &sizes)?;
    out.bytes_mut().fill(0);
    Ok(())
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::roll.out", 3, |c, a, o| roll(c, a, o)),
        out1("aten::tril.out", 2, |c, a, o| tril(c, a, o)),
        out1("aten::diagonal_copy.out", 4, |c, a, o| diagonal_copy(c, a, o)),
        out1("aten::pixel_unshuffle.out", 2, |c, a, o| pixel_unshuffle(c, a, o)),
        out1("aten::unfold_copy.out", 4, |c, a, o| unfold_copy(c, a, o)),
        out1("aten::repeat_interleave.Tensor_out", 2, |c, a, o| repeat_interleave(c, a, o)),
        out1("aten::empty.out", 2, |c, a, o| empty(c, a, o, false)),
        out1("dim_order_ops::_empty_dim_order.out", 2, |c, a, o| empty(c, a, o, true)),
    ]
}
