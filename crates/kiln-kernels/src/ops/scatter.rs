//! Writing into views and data-dependent selections: `select_scatter`, `slice_scatter`,
//! `masked_scatter`, `masked_select`, `nonzero`, the in-place `index_put_`, and
//! `executorch_prim::et_copy_index.tensor` (the map/scan loop's "write iteration i of the
//! stacked output"). Outputs whose size depends on the data (`masked_select`, `nonzero`) are
//! resized within their capacity; a result that does not fit is an error naming the capacity.

use crate::compute::strided::{broadcast_shape, broadcast_strides, walk};
use crate::dtype::DType;
use crate::element::{Bool, Element};
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::{in_place, out1};
use crate::ops::index::{index_plan, put_indexed};
use crate::ops::movement::same_dtype;
use crate::ops::pointwise::{cast_to, resize};
use crate::ops::shape::copy_view;
use crate::shape::{normalize_dim, MAX_RANK};
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

fn dim(ctx: &KernelContext, d: i64, rank: usize) -> Result<usize, KernelError> {
    if rank == 0 {
        return Err(ctx.invalid("self", "a 0-dim tensor has no dim to index"));
    }
    normalize_dim(d, rank)
        .ok_or_else(|| ctx.invalid("dim", format!("dim {d} out of range for rank {rank}")))
}

/// Writes `src` (cast to the out dtype) into `out` at storage offsets
/// `base + sum(idx[k] * ost[k])` over `src`'s logical indices; checks the view fits `out`.
fn write_view(
    ctx: &KernelContext,
    src: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    ost: &[usize],
    base: usize,
) -> KResult {
    let r = src.rank();
    if ost.len() != r {
        return Err(ctx.shape_err("src", format!("rank {}", ost.len()), src.sizes()));
    }
    if src.numel() > 0 {
        let mut last = Some(base);
        for (&s, &st) in src.sizes().iter().zip(ost) {
            last = last.and_then(|l| (s - 1).checked_mul(st).and_then(|v| v.checked_add(l)));
        }
        if last.is_none_or(|l| l >= out.numel()) {
            return Err(ctx.invalid("src", "the written view extends past the output"));
        }
    }
    let ss = src.shape().strides();
    let dt = out.dtype();
    crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(src);
        let d = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        walk(src.sizes(), [&ss[..r], ost], |[i, o]| d[base + o] = v[i]);
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

/// Copies `x` into `out` (same dtype), resizing it to `x`'s sizes.
fn copy_self(ctx: &KernelContext, x: &TensorRef<'_>, out: &mut TensorMut<'_>) -> KResult {
    same_dtype(ctx, x, out)?;
    let xs = x.shape().strides();
    copy_view(ctx, x, x.sizes(), &xs[..x.rank()], 0, out)
}

fn select_scatter(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let src = a.tensor(1, "src")?;
    let d = dim(ctx, a.int(2, "dim")?, x.rank())?;
    let index = a.int(3, "index")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let size = x.sizes()[d] as i64;
    let i = if index < 0 { index + size } else { index };
    if !(0..size).contains(&i) {
        return Err(ctx.invalid("index", format!("index {index} out of range for size {size}")));
    }
    let mut want = x.sizes().to_vec();
    want.remove(d);
    if src.sizes() != &want[..] {
        return Err(ctx.shape_err("src", format!("{want:?}"), src.sizes()));
    }
    copy_self(ctx, &x, out)?;
    let os = out.shape().strides();
    let ost: Vec<usize> = (0..x.rank()).filter(|&k| k != d).map(|k| os[k]).collect();
    write_view(ctx, &src, out, &ost, i as usize * os[d])
}

fn slice_scatter(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let src = a.tensor(1, "src")?;
    let d = dim(ctx, a.int(2, "dim")?, x.rank())?;
    let start = a.opt_int(3, "start")?.unwrap_or(0);
    let end = a.opt_int(4, "end")?.unwrap_or(i64::MAX);
    let step = a.int(5, "step")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if step <= 0 {
        return Err(ctx.invalid("step", format!("step {step} must be positive")));
    }
    let size = x.sizes()[d] as i64;
    let norm = |v: i64| if v < 0 { v.saturating_add(size).max(0) } else { v.min(size) };
    let (s, e) = (norm(start), norm(end));
    let len = if e > s { (e - s - 1) / step + 1 } else { 0 } as usize;
    let mut want = x.sizes().to_vec();
    want[d] = len;
    if src.sizes() != &want[..] {
        return Err(ctx.shape_err("src", format!("{want:?}"), src.sizes()));
    }
    copy_self(ctx, &x, out)?;
    let os = out.shape().strides();
    let mut ost = os[..x.rank()].to_vec();
    ost[d] *= step as usize;
    write_view(ctx, &src, out, &ost, s as usize * os[d])
}

/// A broadcast shape with the broadcast strides of `self` and of the mask.
type MaskPlan = (Vec<usize>, [usize; MAX_RANK], [usize; MAX_RANK]);

/// Broadcast shape of `self` and a bool `mask`, with both operands' broadcast strides.
fn mask_plan(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    m: &TensorRef<'_>,
) -> Result<MaskPlan, KernelError> {
    if m.dtype() != DType::Bool {
        return Err(ctx.dtype_err("mask", "bool", m.dtype()));
    }
    let shape = broadcast_shape(x.sizes(), m.sizes()).ok_or_else(|| {
        ctx.shape_err("mask", format!("broadcastable with {:?}", x.sizes()), m.sizes())
    })?;
    let sx = broadcast_strides(x.sizes(), &x.shape().strides()[..x.rank()], &shape);
    let sm = broadcast_strides(m.sizes(), &m.shape().strides()[..m.rank()], &shape);
    Ok((shape, sx, sm))
}

fn masked_scatter(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let m = a.tensor(1, "mask")?;
    let source = a.tensor(2, "source")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    same_dtype(ctx, &x, out)?;
    if source.dtype() != x.dtype() {
        return Err(ctx.dtype_err(
            "source",
            format!("{} (the dtype of self)", x.dtype()),
            source.dtype(),
        ));
    }
    let (shape, sx, sm) = mask_plan(ctx, &x, &m)?;
    resize(ctx, out, "out", &shape)?;
    let r = shape.len();
    let os = out.shape().strides();
    let mask = cast_to::<Bool>(&m);
    let ss = source.shape().strides();
    let mut src_offs = Vec::with_capacity(source.numel());
    walk(source.sizes(), [&ss[..source.rank()]], |[i]| src_offs.push(i));
    let dt = x.dtype();
    let mut short = false;
    crate::dispatch_all!(dt, T => {
        let xv = cast_to::<T>(&x);
        let sv = cast_to::<T>(&source);
        let d = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        let mut k = 0;
        walk(&shape, [&sx[..r], &sm[..r], &os[..r]], |[ix, im, io]| {
            d[io] = if mask[im].is_true() {
                let v = src_offs.get(k).map(|&o| sv[o]);
                k += 1;
                v.unwrap_or_else(|| {
                    short = true;
                    xv[ix]
                })
            } else {
                xv[ix]
            };
        });
    }, _ => return Err(ctx.dtype_err("self", "a computable dtype", dt)));
    if short {
        return Err(ctx.invalid(
            "source",
            format!("{} elements are fewer than the mask's true count", source.numel()),
        ));
    }
    Ok(())
}

fn masked_select(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let m = a.tensor(1, "mask")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    same_dtype(ctx, &x, out)?;
    if out.rank() != 1 {
        return Err(ctx.shape_err("out", "a 1-D tensor", out.sizes()));
    }
    let (shape, sx, sm) = mask_plan(ctx, &x, &m)?;
    let r = shape.len();
    let mask = cast_to::<Bool>(&m);
    let mut picks = Vec::new();
    walk(&shape, [&sx[..r], &sm[..r]], |[ix, im]| {
        if mask[im].is_true() {
            picks.push(ix);
        }
    });
    resize(ctx, out, "out", &[picks.len()])?;
    let dt = x.dtype();
    crate::dispatch_all!(dt, T => {
        let xv = cast_to::<T>(&x);
        let d = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        for (slot, &i) in d.iter_mut().zip(&picks) {
            *slot = xv[i];
        }
        Ok(())
    }, _ => Err(ctx.dtype_err("self", "a computable dtype", dt)))
}

fn nonzero(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let x = Args::new(ctx, args).tensor(0, "self")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != DType::Long {
        return Err(ctx.dtype_err("out", "int64", out.dtype()));
    }
    if out.rank() != 2 {
        return Err(ctx.shape_err("out", "a 2-D tensor", out.sizes()));
    }
    let r = x.rank();
    let xs = x.shape().strides();
    let dt = x.dtype();
    let truth: Vec<bool> = crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(&x);
        let mut t = Vec::with_capacity(x.numel());
        walk(x.sizes(), [&xs[..r]], |[i]| t.push(v[i].is_true()));
        t
    }, _ => return Err(ctx.dtype_err("self", "a computable dtype", dt)));
    let count = truth.iter().filter(|&&b| b).count();
    resize(ctx, out, "out", &[count, r])?;
    let os = out.shape().strides();
    let d = out.as_mut_slice::<i64>().map_err(|e| ctx.tensor_err("out", e))?;
    let mut idx = [0usize; MAX_RANK];
    let mut row = 0;
    for &t in &truth {
        if t {
            for k in 0..r {
                d[row * os[0] + k * os[1]] = idx[k] as i64;
            }
            row += 1;
        }
        for k in (0..r).rev() {
            idx[k] += 1;
            if idx[k] < x.sizes()[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    Ok(())
}

fn index_put_in_place(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let idx = a.opt_tensor_list(1, "indices")?;
    let values = a.tensor(2, "values")?;
    let accumulate = a.bool(3, "accumulate")?;
    let out = out_tensor(ctx, outs, 0, "self")?;
    if values.dtype() != out.dtype() {
        return Err(ctx.dtype_err(
            "values",
            format!("{} (the dtype of self)", out.dtype()),
            values.dtype(),
        ));
    }
    let p = index_plan(ctx, &out.as_ref(), idx)?;
    put_indexed(ctx, out, &p, &values, accumulate, "self")
}

/// `et_copy_index(copy_to, copy_from, index)`: resizes `copy_to` to
/// `[index + 1, *copy_from.sizes]` and writes `copy_from` at `copy_to[index]`.
fn et_copy_index(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let from = a.tensor(1, "copy_from")?;
    let index = a.int(2, "index")?;
    let out = out_tensor(ctx, outs, 0, "copy_to")?;
    let index = usize::try_from(index)
        .map_err(|_| ctx.invalid("index", format!("index {index} must be non-negative")))?;
    if out.dtype() != from.dtype() {
        return Err(ctx.dtype_err(
            "copy_from",
            format!("{} (the dtype of copy_to)", out.dtype()),
            from.dtype(),
        ));
    }
    if out.rank() != from.rank() + 1 || out.sizes()[1..] != *from.sizes() {
        return Err(ctx.shape_err(
            "copy_from",
            format!("the sizes of copy_to {:?} without dim 0", out.sizes()),
            from.sizes(),
        ));
    }
    if out.shape().dim_order().first() != Some(&0) {
        return Err(ctx.invalid(
            "copy_to",
            format!("dim order {:?} does not keep dim 0 outermost", out.shape().dim_order()),
        ));
    }
    let mut sizes = out.sizes().to_vec();
    sizes[0] = index.checked_add(1).ok_or_else(|| ctx.invalid("index", "index overflows"))?;
    resize(ctx, out, "copy_to", &sizes)?;
    let os = out.shape().strides();
    let base = index.checked_mul(os[0]).ok_or_else(|| ctx.invalid("index", "offset overflows"))?;
    write_view(ctx, &from, out, &os[1..sizes.len()], base)
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::select_scatter.out", 4, |c, a, o| select_scatter(c, a, o)),
        out1("aten::slice_scatter.out", 6, |c, a, o| slice_scatter(c, a, o)),
        out1("aten::masked_scatter.out", 3, |c, a, o| masked_scatter(c, a, o)),
        out1("aten::masked_select.out", 2, |c, a, o| masked_select(c, a, o)),
        out1("aten::nonzero.out", 1, |c, a, o| nonzero(c, a, o)),
        in_place("aten::index_put_", 4, |c, a, o| index_put_in_place(c, a, o)),
        // Schema `(Tensor copy_to, Tensor copy_from, int index)` with no return value: three
        // values, `copy_to` (position 0) written in place.
        in_place("executorch_prim::et_copy_index.tensor", 2, |c, a, o| et_copy_index(c, a, o)),
    ]
}
