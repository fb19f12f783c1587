//! Data-movement ops: the `_copy` view ops (`view_copy`, `permute_copy`, `transpose_copy`,
//! `t_copy`, `expand_copy`, `slice_copy`, `narrow_copy`, `select_copy`, `unsqueeze_copy`,
//! `squeeze_copy`, `alias_copy`, `detach_copy`, `lift_fresh_copy`, `split*_copy`,
//! `unbind_copy`), `cat`, `stack`, `clone`, `_to_copy`, `copy`, `copy_`, the dim-order ops,
//! `flip`, `repeat` and `pixel_shuffle`. Copies respect both tensors' dim orders.

use crate::compute::strided::{broadcast_strides, walk};
use crate::compute::transpose::Moved;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_list, out_tensor, Args};
use crate::ops::defs::{in_place, out1, out_list as def_list};
use crate::ops::pointwise::{cast_to, resize};
use crate::shape::{normalize_dim, MAX_RANK};
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// `d` normalized against `rank`, or an error naming argument `name`.
pub(crate) fn dim(
    ctx: &KernelContext,
    d: i64,
    rank: usize,
    name: &'static str,
) -> Result<usize, KernelError> {
    normalize_dim(d, rank)
        .ok_or_else(|| ctx.invalid(name, format!("dim {d} out of range for rank {rank}")))
}

fn copy_same<P: bytemuck::Pod + Moved>(
    src: &[u8],
    dst: &mut [u8],
    sizes: &[usize],
    strides: &[usize],
    base: usize,
    os: &[usize],
) -> bool {
    let (Ok(s), Ok(d)) =
        (bytemuck::try_cast_slice::<u8, P>(src), bytemuck::try_cast_slice_mut::<u8, P>(dst))
    else {
        return false;
    };
    let (sizes, [strides, os]) = crate::compute::strided::coalesce(sizes, [strides, os]);
    let (sizes, strides, os) = (&sizes[..], &strides[..], &os[..]);
    if let Some(ok) = crate::ops::fast::copy_runs(s, d, sizes, strides, base, os) {
        return ok;
    }
    if let Some(ok) = crate::ops::fast::copy_transposed(s, d, sizes, strides, base, os) {
        return ok;
    }
    walk(sizes, [strides, os], |[i, o]| d[o] = s[base + i]);
    true
}

/// Copies the strided view `(sizes, strides, base)` of `x` into `out` (resized to `sizes`),
/// converting to the out dtype when it differs. A view reaching past `x` is an error, found
/// with checked arithmetic (the strides may come straight from a program).
pub(crate) fn copy_view(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    sizes: &[usize],
    strides: &[usize],
    base: usize,
    out: &mut TensorMut<'_>,
) -> KResult {
    let numel = sizes.iter().try_fold(1usize, |n, &s| n.checked_mul(s));
    let numel = numel.ok_or_else(|| ctx.invalid("size", format!("{sizes:?} overflows")))?;
    if numel > 0 {
        let mut last = Some(base);
        for (&s, &st) in sizes.iter().zip(strides) {
            last = last.and_then(|l| (s - 1).checked_mul(st).and_then(|v| v.checked_add(l)));
        }
        if last.is_none_or(|l| l >= x.numel()) {
            return Err(ctx.invalid(
                "self",
                format!(
                    "view sizes {sizes:?} strides {strides:?} offset {base} reaches past the {} input elements",
                    x.numel()
                ),
            ));
        }
    }
    resize(ctx, out, "out", sizes)?;
    let os = out.shape().strides();
    let r = sizes.len();
    if x.dtype() == out.dtype() {
        let src = x.bytes();
        let ok = match x.dtype().size() {
            1 => copy_same::<u8>(src, out.bytes_mut(), sizes, strides, base, &os[..r]),
            2 => copy_same::<u16>(src, out.bytes_mut(), sizes, strides, base, &os[..r]),
            4 => copy_same::<f32>(src, out.bytes_mut(), sizes, strides, base, &os[..r]),
            _ => copy_same::<u64>(src, out.bytes_mut(), sizes, strides, base, &os[..r]),
        };
        return if ok { Ok(()) } else { Err(ctx.invalid("self", "misaligned tensor data")) };
    }
    let dt = out.dtype();
    crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(x);
        let d = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        walk(sizes, [strides, &os[..r]], |[i, o]| d[o] = v[base + i]);
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

/// `as_strided`: the view `(sizes, strides, offset)` over `x`'s storage (its elements in memory
/// order, whatever its dim order), as ExecuTorch and PyTorch define it for a tensor that owns
/// its storage. Negative sizes, strides or offset, and views reaching past the storage, are
/// errors.
fn as_strided(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    sizes: &[i64],
    strides: &[i64],
    offset: i64,
    out: &mut TensorMut<'_>,
) -> KResult {
    if sizes.len() != strides.len() || sizes.len() > MAX_RANK {
        return Err(ctx.invalid(
            "stride",
            format!("{} strides for {} sizes (at most {MAX_RANK})", strides.len(), sizes.len()),
        ));
    }
    let non_negative = |v: &[i64], name: &'static str| -> Result<Vec<usize>, KernelError> {
        v.iter()
            .map(|&d| usize::try_from(d).map_err(|_| ctx.invalid(name, format!("{v:?}: {d} < 0"))))
            .collect()
    };
    let (sizes, strides) = (non_negative(sizes, "size")?, non_negative(strides, "stride")?);
    let base = usize::try_from(offset)
        .map_err(|_| ctx.invalid("storage_offset", format!("{offset} < 0")))?;
    let mut last = Some(base);
    for (&n, &st) in sizes.iter().zip(&strides) {
        last = last
            .zip(n.checked_sub(1).map_or(Some(0), |m| m.checked_mul(st)))
            .and_then(|(l, span)| l.checked_add(span));
    }
    let numel = sizes.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n));
    match (last, numel) {
        (_, Some(0)) => {}
        (Some(l), Some(_)) if l < x.numel() => {}
        _ => {
            return Err(ctx.invalid(
                "size",
                format!(
                    "view {sizes:?} strides {strides:?} offset {base} reaches past the input's \
                     {} elements",
                    x.numel()
                ),
            ))
        }
    }
    copy_view(ctx, x, &sizes, &strides, base, out)
}

/// The full view of `x` (its sizes and strides).
fn whole(x: &TensorRef<'_>) -> ([usize; MAX_RANK], usize) {
    (x.shape().strides(), x.rank())
}

/// Copies `x` in logical (row-major) order into `out` resized to `sizes` (same element count).
pub(crate) fn reshape_copy(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    sizes: &[usize],
    out: &mut TensorMut<'_>,
) -> KResult {
    let n: usize = sizes.iter().product();
    if n != x.numel() {
        return Err(ctx.shape_err("size", format!("{} elements (the input's)", x.numel()), sizes));
    }
    if x.shape().is_dense_row_major() {
        let mut st = [0usize; MAX_RANK];
        let mut acc = 1;
        for d in (0..sizes.len()).rev() {
            st[d] = acc;
            acc *= sizes[d];
        }
        return copy_view(ctx, x, sizes, &st[..sizes.len()], 0, out);
    }
    // Materialize the logical order first.
    let (xs, r) = whole(x);
    let mut offs = Vec::with_capacity(x.numel());
    walk(x.sizes(), [&xs[..r]], |[i]| offs.push(i));
    resize(ctx, out, "out", sizes)?;
    let os = out.shape().strides();
    let dt = out.dtype();
    crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(x);
        let d = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        let mut k = 0;
        walk(sizes, [&os[..sizes.len()]], |[o]| {
            d[o] = v[offs[k]];
            k += 1;
        });
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

fn same_dtype(ctx: &KernelContext, x: &TensorRef<'_>, out: &TensorMut<'_>) -> KResult {
    if x.dtype() == out.dtype() {
        Ok(())
    } else {
        Err(ctx.dtype_err("out", format!("{} (the input dtype)", x.dtype()), out.dtype()))
    }
}

/// `view_copy`: sizes with at most one -1.
fn infer_sizes(ctx: &KernelContext, size: &[i64], numel: usize) -> Result<Vec<usize>, KernelError> {
    let mut infer = None;
    let mut known = 1usize;
    let mut out = Vec::with_capacity(size.len());
    for (i, &s) in size.iter().enumerate() {
        if s == -1 {
            if infer.replace(i).is_some() {
                return Err(ctx.invalid("size", "only one dimension can be inferred"));
            }
            out.push(0);
        } else {
            let v =
                usize::try_from(s).map_err(|_| ctx.invalid("size", format!("invalid size {s}")))?;
            known = known.checked_mul(v).ok_or_else(|| ctx.invalid("size", "size overflows"))?;
            out.push(v);
        }
    }
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(ctx.invalid(
                "size",
                format!("cannot infer a dimension of {size:?} for {numel} elements"),
            ));
        }
        out[i] = numel / known;
    }
    Ok(out)
}

fn permute(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    dims: &[i64],
    out: &mut TensorMut<'_>,
) -> KResult {
    let r = x.rank();
    if dims.len() != r {
        return Err(ctx.invalid("dims", format!("{} dims for a rank-{r} tensor", dims.len())));
    }
    let xs = x.shape().strides();
    let mut sizes = [0usize; MAX_RANK];
    let mut strides = [0usize; MAX_RANK];
    let mut seen = [false; MAX_RANK];
    for (i, &d) in dims.iter().enumerate() {
        let d = dim(ctx, d, r, "dims")?;
        if r > 0 && std::mem::replace(&mut seen[d], true) {
            return Err(ctx.invalid("dims", format!("{dims:?} repeats a dim")));
        }
        sizes[i] = x.sizes().get(d).copied().unwrap_or(1);
        strides[i] = xs[d];
    }
    copy_view(ctx, x, &sizes[..r], &strides[..r], 0, out)
}

fn slice(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    d: usize,
    start: i64,
    end: i64,
    step: i64,
    out: &mut TensorMut<'_>,
) -> KResult {
    if step <= 0 {
        return Err(ctx.invalid("step", format!("step {step} must be positive")));
    }
    let size = x.sizes()[d] as i64;
    let norm = |v: i64| if v < 0 { (v + size).max(0) } else { v.min(size) };
    let (s, e) = (norm(start), norm(end));
    let len = if e > s { ((e - s) + step - 1) / step } else { 0 } as usize;
    let (xs, r) = whole(x);
    let mut sizes: Vec<usize> = x.sizes().to_vec();
    sizes[d] = len;
    let mut st = xs;
    st[d] *= step as usize;
    copy_view(ctx, x, &sizes, &st[..r], s as usize * xs[d], out)
}

fn select(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    d: usize,
    index: i64,
    out: &mut TensorMut<'_>,
) -> KResult {
    if x.rank() == 0 {
        return Err(ctx.invalid("self", "select on a 0-dim tensor"));
    }
    let size = x.sizes()[d] as i64;
    let i = if index < 0 { index + size } else { index };
    if !(0..size).contains(&i) {
        return Err(ctx.invalid("index", format!("index {index} out of range for size {size}")));
    }
    let xs = x.shape().strides();
    let mut sizes = Vec::new();
    let mut st = Vec::new();
    for k in 0..x.rank() {
        if k != d {
            sizes.push(x.sizes()[k]);
            st.push(xs[k]);
        }
    }
    copy_view(ctx, x, &sizes, &st, i as usize * xs[d], out)
}

/// Splits `x` along `d` into chunks of `sizes`, one per output.
fn split(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    d: usize,
    sizes: &[usize],
    outs: &mut [TensorMut<'_>],
) -> KResult {
    if outs.len() != sizes.len() {
        return Err(
            ctx.invalid("out", format!("{} outputs for {} chunks", outs.len(), sizes.len()))
        );
    }
    if sizes.iter().sum::<usize>() != x.sizes()[d] {
        return Err(
            ctx.invalid("split_sizes", format!("{sizes:?} does not sum to {}", x.sizes()[d]))
        );
    }
    let (xs, r) = whole(x);
    let mut start = 0;
    for (o, &len) in outs.iter_mut().zip(sizes) {
        let mut sz = x.sizes().to_vec();
        sz[d] = len;
        copy_view(ctx, x, &sz, &xs[..r], start * xs[d], o)?;
        start += len;
    }
    Ok(())
}

fn cat(ctx: &KernelContext, tensors: &[TensorRef<'_>], d: i64, out: &mut TensorMut<'_>) -> KResult {
    // Legacy behaviour: 1-D empty tensors are skipped.
    let parts: Vec<&TensorRef<'_>> =
        tensors.iter().filter(|t| !(t.rank() == 1 && t.numel() == 0)).collect();
    let Some(first) = parts.first() else {
        return resize(ctx, out, "out", &[0]);
    };
    let r = first.rank();
    if r == 0 {
        return Err(ctx.invalid("tensors", "zero-dimensional tensors cannot be concatenated"));
    }
    let dd = dim(ctx, d, r, "dim")?;
    let mut sizes = first.sizes().to_vec();
    sizes[dd] = 0;
    for t in &parts {
        if t.rank() != r || (0..r).any(|k| k != dd && t.sizes()[k] != first.sizes()[k]) {
            return Err(ctx.shape_err(
                "tensors",
                format!("sizes matching {:?} except in dim {dd}", first.sizes()),
                t.sizes(),
            ));
        }
        sizes[dd] += t.sizes()[dd];
    }
    resize(ctx, out, "out", &sizes)?;
    let dt = out.dtype();
    let dense = |s: &crate::shape::Shape| s.is_dense_row_major();
    if dense(out.shape()) && parts.iter().all(|t| t.dtype() == dt && dense(t.shape())) {
        return cat_blocks(ctx, &parts, dd, out);
    }
    let os = out.shape().strides();
    let mut offset = 0;
    for t in parts {
        let ts = t.shape().strides();
        let base = offset * os[dd];
        crate::dispatch_all!(dt, T => {
            let v = cast_to::<T>(t);
            let dst = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
            walk(t.sizes(), [&ts[..r], &os[..r]], |[i, o]| dst[base + o] = v[i]);
        }, _ => return Err(ctx.dtype_err("out", "a computable dtype", dt)));
        offset += t.sizes()[dd];
    }
    Ok(())
}

/// [`cat`] of row-major tensors of `out`'s dtype into the row-major `out` (already sized):
/// for each index of the dimensions before `d`, each part's block is one contiguous run of
/// `out` (a channel concat of NCHW activations is one copy per part), copied as such rather
/// than element by element.
fn cat_blocks(
    ctx: &KernelContext,
    parts: &[&TensorRef<'_>],
    d: usize,
    out: &mut TensorMut<'_>,
) -> KResult {
    let sizes = out.sizes().to_vec();
    let outer: usize = sizes[..d].iter().product();
    let inner: usize = sizes[d + 1..].iter().product();
    let row = sizes[d] * inner;
    crate::dispatch_all!(out.dtype(), T => {
        let dst = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        let mut at = 0;
        for t in parts {
            let src = t.as_slice::<T>().map_err(|e| ctx.tensor_err("tensors", e))?;
            let len = t.sizes()[d] * inner;
            for (o, block) in src.chunks_exact(len.max(1)).take(outer).enumerate() {
                dst[o * row + at..][..len].copy_from_slice(&block[..len]);
            }
            at += len;
        }
    }, _ => return Err(ctx.dtype_err("out", "a computable dtype", out.dtype())));
    Ok(())
}

fn stack(
    ctx: &KernelContext,
    tensors: &[TensorRef<'_>],
    d: i64,
    out: &mut TensorMut<'_>,
) -> KResult {
    let Some(first) = tensors.first() else {
        return Err(ctx.invalid("tensors", "stack needs at least one tensor"));
    };
    let r = first.rank() + 1;
    let dd = dim(ctx, d, r, "dim")?;
    let mut sizes = first.sizes().to_vec();
    sizes.insert(dd, tensors.len());
    for t in tensors {
        if t.sizes() != first.sizes() {
            return Err(ctx.shape_err(
                "tensors",
                format!("{:?} (all equal)", first.sizes()),
                t.sizes(),
            ));
        }
    }
    resize(ctx, out, "out", &sizes)?;
    let os = out.shape().strides();
    let mut os_in: Vec<usize> = (0..r).filter(|&k| k != dd).map(|k| os[k]).collect();
    if os_in.is_empty() {
        os_in.push(0);
    }
    let dt = out.dtype();
    for (k, t) in tensors.iter().enumerate() {
        let ts = t.shape().strides();
        let base = k * os[dd];
        crate::dispatch_all!(dt, T => {
            let v = cast_to::<T>(t);
            let dst = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
            walk(t.sizes(), [&ts[..t.rank()], &os_in[..t.rank()]], |[i, o]| dst[base + o] = v[i]);
        }, _ => return Err(ctx.dtype_err("out", "a computable dtype", dt)));
    }
    Ok(())
}

/// Copies `x` into `out` at the same sizes (any dim orders, dtype conversion).
fn copy_all(ctx: &KernelContext, x: &TensorRef<'_>, out: &mut TensorMut<'_>) -> KResult {
    let (xs, r) = whole(x);
    copy_view(ctx, x, x.sizes(), &xs[..r], 0, out)
}

/// `out[idx] = x[src]` for every logical output index `idx` (at flat position `flat`), `src`
/// set by `map(idx, flat, src)` (slow general path).
pub(crate) fn gather_index(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    sizes: &[usize],
    out: &mut TensorMut<'_>,
    map: impl Fn(&[usize], usize, &mut [usize]),
) -> KResult {
    resize(ctx, out, "out", sizes)?;
    let xs = x.shape().strides();
    let os = out.shape().strides();
    let r = sizes.len();
    let n: usize = sizes.iter().product();
    let mut idx = vec![0usize; r];
    let mut src = vec![0usize; x.rank()];
    let mut pairs = Vec::with_capacity(n);
    for flat in 0..n {
        map(&idx, flat, &mut src);
        let i: usize = src.iter().zip(&xs).map(|(a, b)| a * b).sum();
        let o: usize = idx.iter().zip(&os).map(|(a, b)| a * b).sum();
        pairs.push((i, o));
        for k in (0..r).rev() {
            idx[k] += 1;
            if idx[k] < sizes[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    let dt = out.dtype();
    crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(x);
        let dst = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        for (i, o) in pairs {
            dst[o] = v[i];
        }
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

fn one(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    f: impl FnOnce(&Args<'_, '_>, TensorRef<'_>, &mut TensorMut<'_>) -> KResult,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    f(&a, x, out)
}

fn dim_order_copy(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    clone: bool,
) -> KResult {
    one(ctx, args, outs, |a, x, out| {
        if let Some(order) = a.opt_int_list(2, "dim_order")? {
            let want: Vec<u8> = order.iter().map(|&d| d as u8).collect();
            if out.shape().dim_order() != &want[..]
                || order.iter().any(|&d| !(0..=255).contains(&d))
            {
                return Err(ctx.invalid(
                    "dim_order",
                    format!("out has dim order {:?}, not {order:?}", out.shape().dim_order()),
                ));
            }
        }
        if clone {
            same_dtype(ctx, &x, out)?;
        }
        copy_all(ctx, &x, out)
    })
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::view_copy.out", 2, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let s = infer_sizes(c, a.int_list(1, "size")?, x.numel())?;
                same_dtype(c, &x, out)?;
                reshape_copy(c, &x, &s, out)
            })
        }),
        out1("aten::_unsafe_view.out", 2, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let s = infer_sizes(c, a.int_list(1, "size")?, x.numel())?;
                reshape_copy(c, &x, &s, out)
            })
        }),
        out1("aten::permute_copy.out", 2, |c, a, o| {
            one(c, a, o, |a, x, out| permute(c, &x, a.int_list(1, "dims")?, out))
        }),
        out1("aten::transpose_copy.int_out", 3, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let r = x.rank();
                let (d0, d1) =
                    (dim(c, a.int(1, "dim0")?, r, "dim0")?, dim(c, a.int(2, "dim1")?, r, "dim1")?);
                let mut dims: Vec<i64> = (0..r as i64).collect();
                if r > 0 {
                    dims.swap(d0, d1);
                }
                permute(c, &x, &dims, out)
            })
        }),
        out1("aten::t_copy.out", 1, |c, a, o| {
            one(c, a, o, |_, x, out| {
                if x.rank() > 2 {
                    return Err(c.shape_err("self", "at most 2 dimensions", x.sizes()));
                }
                let dims: Vec<i64> = (0..x.rank() as i64).rev().collect();
                permute(c, &x, &dims, out)
            })
        }),
        out1("aten::expand_copy.out", 3, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let size = a.int_list(1, "size")?;
                let r = size.len();
                if r < x.rank() {
                    return Err(c.invalid(
                        "size",
                        format!("{size:?} has fewer dims than the input {:?}", x.sizes()),
                    ));
                }
                let lead = r - x.rank();
                let mut sizes = vec![0usize; r];
                for (i, &s) in size.iter().enumerate() {
                    let cur = if i >= lead { Some(x.sizes()[i - lead]) } else { None };
                    sizes[i] = match (s, cur) {
                        (-1, Some(c0)) => c0,
                        (s, Some(c0)) if s >= 0 && (c0 == 1 || c0 as i64 == s) => s as usize,
                        (s, None) if s >= 0 => s as usize,
                        _ => {
                            return Err(c.invalid(
                                "size",
                                format!("cannot expand {:?} to {size:?}", x.sizes()),
                            ))
                        }
                    };
                }
                let xs = x.shape().strides();
                let st = broadcast_strides(x.sizes(), &xs[..x.rank()], &sizes);
                copy_view(c, &x, &sizes, &st[..r], 0, out)
            })
        }),
        out1("aten::slice_copy.Tensor_out", 5, |c, a, o| {
            one(c, a, o, |a, x, out| {
                if x.rank() == 0 {
                    return Err(c.invalid("self", "slice of a 0-dim tensor"));
                }
                let d = dim(c, a.int(1, "dim")?, x.rank(), "dim")?;
                let start = a.opt_int(2, "start")?.unwrap_or(0);
                let end = a.opt_int(3, "end")?.unwrap_or(i64::MAX);
                slice(c, &x, d, start, end, a.int(4, "step")?, out)
            })
        }),
        out1("aten::as_strided_copy.out", 4, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let (sizes, strides) = (a.int_list(1, "size")?, a.int_list(2, "stride")?);
                let offset = a.opt_int(3, "storage_offset")?.unwrap_or(0);
                same_dtype(c, &x, out)?;
                as_strided(c, &x, sizes, strides, offset, out)
            })
        }),
        out1("aten::narrow_copy.out", 4, |c, a, o| {
            one(c, a, o, |a, x, out| {
                if x.rank() == 0 {
                    return Err(c.invalid("self", "narrow of a 0-dim tensor"));
                }
                let d = dim(c, a.int(1, "dim")?, x.rank(), "dim")?;
                let size = x.sizes()[d] as i64;
                let mut start = a.int(2, "start")?;
                let len = a.int(3, "length")?;
                if start < 0 {
                    start += size;
                }
                if start < 0 || len < 0 || start + len > size {
                    return Err(c.invalid(
                        "length",
                        format!("start {start} + length {len} exceeds size {size}"),
                    ));
                }
                slice(c, &x, d, start, start + len, 1, out)
            })
        }),
        out1("aten::select_copy.int_out", 3, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let d = dim(c, a.int(1, "dim")?, x.rank(), "dim")?;
                select(c, &x, d, a.int(2, "index")?, out)
            })
        }),
        out1("aten::unsqueeze_copy.out", 2, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let d = dim(c, a.int(1, "dim")?, x.rank() + 1, "dim")?;
                let mut s = x.sizes().to_vec();
                s.insert(d, 1);
                same_dtype(c, &x, out)?;
                reshape_copy(c, &x, &s, out)
            })
        }),
        out1("aten::squeeze_copy.dim_out", 2, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let d = dim(c, a.int(1, "dim")?, x.rank(), "dim")?;
                let s: Vec<usize> = x
                    .sizes()
                    .iter()
                    .enumerate()
                    .filter(|&(k, &v)| !(k == d && v == 1))
                    .map(|(_, &v)| v)
                    .collect();
                reshape_copy(c, &x, &s, out)
            })
        }),
        out1("aten::squeeze_copy.dims_out", 2, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let mut mask = [false; MAX_RANK];
                for &d in a.int_list(1, "dim")? {
                    let d = dim(c, d, x.rank(), "dim")?;
                    mask[d] = true;
                }
                let s: Vec<usize> = x
                    .sizes()
                    .iter()
                    .enumerate()
                    .filter(|&(k, &v)| !(mask[k] && v == 1))
                    .map(|(_, &v)| v)
                    .collect();
                reshape_copy(c, &x, &s, out)
            })
        }),
        out1("aten::squeeze_copy.out", 1, |c, a, o| {
            one(c, a, o, |_, x, out| {
                let s: Vec<usize> = x.sizes().iter().copied().filter(|&v| v != 1).collect();
                reshape_copy(c, &x, &s, out)
            })
        }),
        out1("aten::alias_copy.out", 1, |c, a, o| one(c, a, o, |_, x, out| copy_all(c, &x, out))),
        out1("aten::detach_copy.out", 1, |c, a, o| one(c, a, o, |_, x, out| copy_all(c, &x, out))),
        out1("aten::lift_fresh_copy.out", 1, |c, a, o| {
            one(c, a, o, |_, x, out| copy_all(c, &x, out))
        }),
        out1("aten::clone.out", 2, |c, a, o| {
            one(c, a, o, |_, x, out| {
                same_dtype(c, &x, out)?;
                copy_all(c, &x, out)
            })
        }),
        out1("aten::_to_copy.out", 3, |c, a, o| one(c, a, o, |_, x, out| copy_all(c, &x, out))),
        out1("dim_order_ops::_to_dim_order_copy.out", 3, |c, a, o| dim_order_copy(c, a, o, false)),
        out1("dim_order_ops::_clone_dim_order.out", 3, |c, a, o| dim_order_copy(c, a, o, true)),
        out1("aten::copy.out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let src = r.tensor(1, "src")?;
            let out = out_tensor(c, o, 0, "out")?;
            broadcast_into(c, &src, x.sizes(), out)
        }),
        in_place("aten::copy_", 3, |c, a, o| {
            let src = Args::new(c, a).tensor(1, "src")?;
            let out = out_tensor(c, o, 0, "self")?;
            let sizes = out.sizes().to_vec();
            broadcast_into(c, &src, &sizes, out)
        }),
        def_list("aten::split_with_sizes_copy.out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let sizes = r.sizes(1, "split_sizes")?;
            let d = dim(c, r.int(2, "dim")?, x.rank(), "dim")?;
            split(c, &x, d, &sizes, out_list(c, o, "out")?)
        }),
        def_list("aten::split_copy.Tensor_out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let chunk = r.int(1, "split_size")?;
            let d = dim(c, r.int(2, "dim")?, x.rank(), "dim")?;
            let total = x.sizes().get(d).copied().unwrap_or(0);
            let chunk = usize::try_from(chunk).map_err(|_| c.invalid("split_size", "negative"))?;
            let outs = out_list(c, o, "out")?;
            let mut sizes = Vec::new();
            let mut left = total;
            while left > 0 && chunk > 0 {
                sizes.push(chunk.min(left));
                left -= chunk.min(left);
            }
            if sizes.is_empty() {
                sizes.push(0);
            }
            split(c, &x, d, &sizes, outs)
        }),
        def_list("aten::unbind_copy.int_out", 2, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let d = dim(c, r.int(1, "dim")?, x.rank(), "dim")?;
            let outs = out_list(c, o, "out")?;
            if outs.len() != x.sizes()[d] {
                return Err(
                    c.invalid("out", format!("{} outputs for size {}", outs.len(), x.sizes()[d]))
                );
            }
            for (i, out) in outs.iter_mut().enumerate() {
                select(c, &x, d, i as i64, out)?;
            }
            Ok(())
        }),
        out1("aten::cat.out", 2, |c, a, o| {
            let r = Args::new(c, a);
            let ts = r.tensor_list(0, "tensors")?;
            cat(c, ts, r.int(1, "dim")?, out_tensor(c, o, 0, "out")?)
        }),
        out1("aten::stack.out", 2, |c, a, o| {
            let r = Args::new(c, a);
            let ts = r.tensor_list(0, "tensors")?;
            stack(c, ts, r.int(1, "dim")?, out_tensor(c, o, 0, "out")?)
        }),
        out1("aten::flip.out", 2, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let mut mask = [false; MAX_RANK];
                for &d in a.int_list(1, "dims")? {
                    mask[dim(c, d, x.rank(), "dims")?] = true;
                }
                let sizes = x.sizes().to_vec();
                gather_index(c, &x, &sizes.clone(), out, |idx, _, src| {
                    for k in 0..idx.len() {
                        src[k] = if mask[k] { sizes[k] - 1 - idx[k] } else { idx[k] };
                    }
                })
            })
        }),
        out1("aten::repeat.out", 2, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let reps = a.sizes(1, "repeats")?;
                if reps.len() < x.rank() {
                    return Err(c.invalid("repeats", "fewer repeats than input dims"));
                }
                let lead = reps.len() - x.rank();
                let xin: Vec<usize> = x.sizes().to_vec();
                let sizes: Vec<usize> = (0..reps.len())
                    .map(|k| reps[k] * if k >= lead { xin[k - lead] } else { 1 })
                    .collect();
                gather_index(c, &x, &sizes, out, |idx, _, src| {
                    for k in 0..src.len() {
                        src[k] = idx[k + lead] % xin[k];
                    }
                })
            })
        }),
        out1("aten::pixel_shuffle.out", 2, |c, a, o| {
            one(c, a, o, |a, x, out| {
                let f = usize::try_from(a.int(1, "upscale_factor")?)
                    .ok()
                    .filter(|&f| f > 0)
                    .ok_or_else(|| c.invalid("upscale_factor", "must be positive"))?;
                let r = x.rank();
                if r < 3 || x.sizes()[r - 3] % (f * f) != 0 {
                    return Err(c.shape_err("self", format!("[*, C*{f}*{f}, H, W]"), x.sizes()));
                }
                let mut sizes = x.sizes().to_vec();
                sizes[r - 3] /= f * f;
                sizes[r - 2] *= f;
                sizes[r - 1] *= f;
                gather_index(c, &x, &sizes, out, |idx, _, src| {
                    src[..r - 3].copy_from_slice(&idx[..r - 3]);
                    let (ch, h, w) = (idx[r - 3], idx[r - 2], idx[r - 1]);
                    src[r - 3] = ch * f * f + (h % f) * f + (w % f);
                    src[r - 2] = h / f;
                    src[r - 1] = w / f;
                })
            })
        }),
    ]
}

/// Broadcasts `src` to `sizes` into `out` (casting).
fn broadcast_into(
    ctx: &KernelContext,
    src: &TensorRef<'_>,
    sizes: &[usize],
    out: &mut TensorMut<'_>,
) -> KResult {
    if crate::compute::strided::broadcast_shape(src.sizes(), sizes).as_deref() != Some(sizes) {
        return Err(ctx.shape_err("src", format!("broadcastable to {sizes:?}"), src.sizes()));
    }
    let ss = src.shape().strides();
    let st = broadcast_strides(src.sizes(), &ss[..src.rank()], sizes);
    copy_view(ctx, src, sizes, &st[..sizes.len()], 0, out)
}
