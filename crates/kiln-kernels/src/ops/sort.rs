//! Selection ops: `topk.values`.
//!
//! NaN orders above every number (PyTorch's rule: the largest for `largest=True`, the last for
//! `largest=False`). Equal values keep their input order (a stable sort); PyTorch leaves the
//! order of ties unspecified. `sorted=False` also returns the sorted selection, one of the
//! orders PyTorch allows.

use std::cmp::Ordering;

use crate::compute::strided::walk;
use crate::dtype::DType;
use crate::element::{Calc, Element};
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensors2, Args};
use crate::ops::defs::out_n;
use crate::ops::pointwise::{cast_to, resize};
use crate::shape::normalize_dim;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// Ascending order with NaN last.
fn nan_last<C: Calc>(a: C, b: C) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Sorts a line of (value, index) pairs by value, largest or smallest first, NaN counting as
/// the largest value (stable: equal values keep their index order). One instance per calc
/// type, not per dtype.
#[inline(never)]
fn sort_line<C: Calc>(line: &mut [(C, usize)], largest: bool) {
    if largest {
        line.sort_by(|a, b| nan_last(b.0, a.0));
    } else {
        line.sort_by(|a, b| nan_last(a.0, b.0));
    }
}

fn topk_typed<T: Element>(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    d: usize,
    k: usize,
    largest: bool,
    values: &mut TensorMut<'_>,
    indices: &mut TensorMut<'_>,
) -> KResult {
    let rank = x.rank();
    let src = cast_to::<T>(x);
    let xs = x.shape().strides();
    let vs = values.shape().strides();
    let is = indices.shape().strides();
    // Lines along `d`: walk the other dims (size 1 at `d`). A 0-dim input has one line of one element (and k = 0 still yields its 0-dim copy, as
    // in PyTorch).
    let (outer, size, step, vstep, istep) = if rank == 0 {
        (Vec::new(), 1, 0, 0, 0)
    } else {
        let mut o = x.sizes().to_vec();
        let size = o[d];
        o[d] = 1;
        (o, size, xs[d], vs[d], is[d])
    };
    let k = if rank == 0 { 1 } else { k };
    let r = outer.len();
    let vdst = values.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("values", e))?;
    let idst = indices.as_mut_slice::<i64>().map_err(|e| ctx.tensor_err("indices", e))?;
    let mut line: Vec<(T::Calc, usize)> = Vec::with_capacity(size);
    walk(&outer, [&xs[..r], &vs[..r], &is[..r]], |[xb, vb, ib]| {
        line.clear();
        line.extend((0..size).map(|j| (src[xb + j * step].to_calc(), j)));
        sort_line(&mut line, largest);
        for (j, &(_, i)) in line.iter().take(k).enumerate() {
            vdst[vb + j * vstep] = src[xb + i * step];
            idst[ib + j * istep] = i as i64;
        }
    });
    Ok(())
}

fn topk(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let k = a.int(1, "k")?;
    let dim = a.int(2, "dim")?;
    let largest = a.bool(3, "largest")?;
    // Any order is allowed for `sorted=False`; the sorted one is returned.
    a.bool(4, "sorted")?;
    let [values, indices] = out_tensors2(ctx, outs, ["values", "indices"])?;
    if !(x.dtype().is_float() || x.dtype().is_int()) {
        return Err(ctx.dtype_err("self", "a floating or integer dtype", x.dtype()));
    }
    if values.dtype() != x.dtype() {
        return Err(ctx.dtype_err(
            "values",
            format!("{} (the dtype of self)", x.dtype()),
            values.dtype(),
        ));
    }
    if indices.dtype() != DType::Long {
        return Err(ctx.dtype_err("indices", "int64", indices.dtype()));
    }
    let d = normalize_dim(dim, x.rank()).ok_or_else(|| {
        ctx.invalid("dim", format!("dim {dim} out of range for rank {}", x.rank()))
    })?;
    let size = if x.rank() == 0 { 1 } else { x.sizes()[d] };
    let k = usize::try_from(k).ok().filter(|&k| k <= size).ok_or_else(|| {
        ctx.invalid("k", format!("k = {k} is out of range for dim {d} of size {size}"))
    })?;
    let mut sizes = x.sizes().to_vec();
    if let Some(s) = sizes.get_mut(d) {
        *s = k;
    }
    resize(ctx, values, "values", &sizes)?;
    resize(ctx, indices, "indices", &sizes)?;
    if (k == 0 && x.rank() > 0) || x.numel() == 0 {
        return Ok(());
    }
    let dt = x.dtype();
    crate::dispatch_all!(dt, T => topk_typed::<T>(ctx, &x, d, k, largest, values, indices),
        _ => Err(ctx.dtype_err("self", "a floating or integer dtype", dt)))
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![out_n("aten::topk.values", 5, 2, |c, a, o| topk(c, a, o))]
}
