//! Reductions and scans: `sum`, `mean`, `prod`, `amax`, `amin`, `argmax`, `argmin`,
//! `max.dim`, `min.dim`, `max`/`min` (all), `var`, `any`, `cumsum`, `_softmax`,
//! `_log_softmax`. Floats accumulate in `f64`; float32 `mean` over trailing dims and softmax
//! first try the fast paths of [`crate::ops::fast_reduce`].

use crate::compute::strided::walk;
use crate::dtype::DType;
use crate::element::{Bool, Calc, Element};
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, out_tensors2, Args};
use crate::ops::defs::{out1, out_n};
use crate::ops::fast_reduce::{mean_trailing_f32, softmax_f32};
use crate::ops::pointwise::{calc_values, cast_to, resize, store_via, with_out};
use crate::shape::{normalize_dim, MAX_RANK};
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// Which dims are reduced, and the output sizes.
pub(crate) struct Plan {
    mask: [bool; MAX_RANK],
    pub out_sizes: Vec<usize>,
}

/// Reduction plan for `dims` (None or empty = all dims).
pub(crate) fn plan(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    dims: Option<&[i64]>,
    keepdim: bool,
) -> Result<Plan, KernelError> {
    let rank = x.rank();
    let mut mask = [false; MAX_RANK];
    match dims {
        Some(d) if !d.is_empty() => {
            for &v in d {
                let n = normalize_dim(v, rank).ok_or_else(|| {
                    ctx.invalid("dim", format!("dim {v} out of range for rank {rank}"))
                })?;
                if rank > 0 {
                    if mask[n] {
                        return Err(ctx.invalid("dim", format!("dim {v} appears twice")));
                    }
                    mask[n] = true;
                }
            }
        }
        _ => mask[..rank].iter_mut().for_each(|m| *m = true),
    }
    let mut out_sizes = Vec::with_capacity(rank);
    for (d, &s) in x.sizes().iter().enumerate() {
        if !mask[d] {
            out_sizes.push(s);
        } else if keepdim {
            out_sizes.push(1);
        }
    }
    Ok(Plan { mask, out_sizes })
}

/// Calls `f(out_offset, base, rel)` for every output element: the group's input elements are
/// at offsets `base + rel[k]`, `k` being the logical index within the reduced dims.
pub(crate) fn groups(
    x: &TensorRef<'_>,
    plan: &Plan,
    out_shape: &crate::Shape,
    mut f: impl FnMut(usize, usize, &[usize]),
) {
    let rank = x.rank();
    let xs = x.shape().strides();
    let os = out_shape.strides();
    let keep = out_shape.rank() == rank;
    let mut kept_sizes = Vec::new();
    let mut kept_in = Vec::new();
    let mut kept_out = Vec::new();
    let mut red_sizes = Vec::new();
    let mut red_in = Vec::new();
    let mut od = 0;
    for d in 0..rank {
        if plan.mask[d] {
            red_sizes.push(x.sizes()[d]);
            red_in.push(xs[d]);
            if keep {
                od += 1;
            }
        } else {
            kept_sizes.push(x.sizes()[d]);
            kept_in.push(xs[d]);
            kept_out.push(os[od]);
            od += 1;
        }
    }
    let mut offs = Vec::with_capacity(red_sizes.iter().product());
    walk(&red_sizes, [&red_in[..]], |[o]| offs.push(o));
    if red_sizes.contains(&0) {
        offs.clear();
    }
    if kept_sizes.contains(&0) {
        return;
    }
    walk(&kept_sizes, [&kept_in[..], &kept_out[..]], |[i, o]| f(o, i, &offs));
}

/// Accumulating reduction kinds over f64 values.
#[derive(Clone, Copy, PartialEq)]
enum Acc {
    Sum,
    Mean,
    Prod,
}

fn accumulate(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    kind: Acc,
    dims: Option<&[i64]>,
    keepdim: bool,
    dtype: Option<DType>,
) -> KResult {
    let x = Args::new(ctx, args).tensor(0, "self")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let p = plan(ctx, &x, dims, keepdim)?;
    resize(ctx, out, "out", &p.out_sizes)?;
    let xt = x.dtype();
    let rt = dtype.unwrap_or(if xt.is_float() { xt } else { DType::Long });
    if kind == Acc::Mean && !rt.is_float() {
        return Err(ctx.dtype_err(
            "self",
            "a floating dtype (or a floating dtype argument) for mean",
            xt,
        ));
    }
    if let Some(d) = dtype {
        if out.dtype() != d {
            return Err(ctx.dtype_err("out", format!("{d} (the dtype argument)"), out.dtype()));
        }
    }
    if kind == Acc::Mean
        && rt == DType::Float
        && !ctx.general_only
        && mean_trailing_f32(&x, |d| p.mask[d], out)
    {
        return Ok(());
    }
    let shape = *out.shape();
    if rt.is_float() {
        let v = cast_to::<f64>(&x);
        with_out::<f64>(ctx, out, false, |dst| {
            groups(&x, &p, &shape, |o, b, offs| {
                let vals = offs.iter().map(|&i| v[b + i]);
                dst[o] = match kind {
                    Acc::Sum => vals.sum(),
                    Acc::Mean => vals.sum::<f64>() / offs.len() as f64,
                    Acc::Prod => vals.product(),
                }
            })
        })
    } else {
        let v = cast_to::<i64>(&x);
        with_out::<i64>(ctx, out, false, |dst| {
            groups(&x, &p, &shape, |o, b, offs| {
                dst[o] = match kind {
                    Acc::Prod => offs.iter().fold(1i64, |a, &i| a.wrapping_mul(v[b + i])),
                    _ => offs.iter().fold(0i64, |a, &i| a.wrapping_add(v[b + i])),
                }
            })
        })
    }
}

/// amax/amin (NaN propagates).
fn extreme(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>], max: bool) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let dims = a.int_list(1, "dim")?;
    let keepdim = a.bool(2, "keepdim")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let p = plan(ctx, &x, Some(dims), keepdim)?;
    if x.numel() == 0 {
        return Err(ctx.invalid("self", "reduction over an empty tensor has no identity"));
    }
    resize(ctx, out, "out", &p.out_sizes)?;
    let shape = *out.shape();
    let dt = x.dtype();
    crate::dispatch_all!(dt, T => {
        let v = calc_values::<T>(&x);
        store_via::<T, <T as Element>::Calc>(ctx, out, true, <T as Element>::from_calc, &|dst| {
            extreme_calc(&x, &p, &shape, &v, max, dst)
        })
    }, _ => Err(ctx.dtype_err("self", "a computable dtype", dt)))
}

/// [`extreme`]'s groups in the calc type `C` (exact for every dtype: one instance per calc
/// type, not per dtype).
#[inline(never)]
fn extreme_calc<C: Calc>(
    x: &TensorRef<'_>,
    p: &Plan,
    shape: &crate::Shape,
    v: &[C],
    max: bool,
    dst: &mut [C],
) {
    groups(x, p, shape, |o, b, offs| {
        let mut best = v[b + offs[0]];
        for &i in &offs[1..] {
            let c = v[b + i];
            if c.is_nan() {
                best = c;
                break;
            }
            if (max && c > best) || (!max && c < best) {
                best = c;
            }
        }
        dst[o] = best;
    })
}

/// Index of the max/min along `dim` (or over all elements, flattened, when `dim` is None):
/// first occurrence wins, NaN counts as the extreme. Writes the values too when asked.
fn arg_extreme(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    dim: Option<i64>,
    keepdim: bool,
    max: bool,
    values: Option<&mut TensorMut<'_>>,
    indices: &mut TensorMut<'_>,
) -> KResult {
    if x.numel() == 0 {
        return Err(ctx.invalid("self", "argmax/argmin of an empty tensor"));
    }
    let dims = dim.map(|d| [d]);
    let p = plan(ctx, x, dims.as_ref().map(|d| &d[..]), keepdim)?;
    let vals = cast_to::<f64>(x);
    resize(ctx, indices, "indices", &p.out_sizes)?;
    let shape = *indices.shape();
    // (output offset, logical index in the group, input offset)
    let mut picks: Vec<(usize, usize, usize)> = Vec::new();
    groups(x, &p, &shape, |o, b, offs| {
        let mut bi = 0;
        let mut bv = vals[b + offs[0]];
        if !bv.is_nan() {
            for (k, &i) in offs.iter().enumerate().skip(1) {
                let c = vals[b + i];
                if c.is_nan() {
                    bi = k;
                    break;
                }
                if (max && c > bv) || (!max && c < bv) {
                    bi = k;
                    bv = c;
                }
            }
        }
        picks.push((o, bi, b + offs[bi]));
    });
    with_out::<i64>(ctx, indices, false, |dst| {
        for &(o, k, _) in &picks {
            dst[o] = k as i64;
        }
    })?;
    if let Some(values) = values {
        resize(ctx, values, "values", &p.out_sizes)?;
        let dt = x.dtype();
        crate::dispatch_all!(dt, T => {
            let v = cast_to::<T>(x);
            with_out::<T>(ctx, values, true, |dst| {
                for &(o, _, i) in &picks {
                    dst[o] = v[i];
                }
            })
        }, _ => Err(ctx.dtype_err("self", "a computable dtype", dt)))?;
    }
    Ok(())
}

fn var(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    dims: Option<&[i64]>,
    correction: f64,
    keepdim: bool,
    out: &mut TensorMut<'_>,
) -> KResult {
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("self", "a floating dtype", x.dtype()));
    }
    let p = plan(ctx, x, dims, keepdim)?;
    resize(ctx, out, "out", &p.out_sizes)?;
    let shape = *out.shape();
    let v = cast_to::<f64>(x);
    with_out::<f64>(ctx, out, true, |dst| {
        groups(x, &p, &shape, |o, b, offs| {
            let n = offs.len() as f64;
            let mean = offs.iter().map(|&i| v[b + i]).sum::<f64>() / n;
            let ss: f64 = offs.iter().map(|&i| (v[b + i] - mean) * (v[b + i] - mean)).sum();
            dst[o] = ss / (n - correction).max(0.0);
        })
    })
}

fn any(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    dims: Option<&[i64]>,
    keepdim: bool,
    out: &mut TensorMut<'_>,
) -> KResult {
    let p = plan(ctx, x, dims, keepdim)?;
    resize(ctx, out, "out", &p.out_sizes)?;
    let shape = *out.shape();
    let v = cast_to::<Bool>(x);
    with_out::<Bool>(ctx, out, false, |dst| {
        groups(x, &p, &shape, |o, b, offs| {
            dst[o] = Bool(offs.iter().any(|&i| v[b + i].is_true()) as u8)
        })
    })
}

/// Softmax or log-softmax along `dim`.
fn softmax(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>], log: bool) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let dim = a.int(1, "dim")?;
    let half_to_float = a.bool(2, "half_to_float")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("self", "a floating dtype", x.dtype()));
    }
    if half_to_float && out.dtype() != DType::Float {
        return Err(ctx.dtype_err("out", "float32 (half_to_float)", out.dtype()));
    }
    let p = plan(ctx, &x, Some(&[dim]), true)?;
    resize(ctx, out, "out", x.sizes())?;
    let d = normalize_dim(dim, x.rank()).unwrap_or(0);
    if !ctx.general_only && softmax_f32(&x, d, out, log, &ctx.threads) {
        return Ok(());
    }
    let shape = *out.shape();
    let v = cast_to::<f64>(&x);
    // Output offsets follow the output's own strides: map via a second plan walk.
    let xs = x.shape().strides();
    let os = shape.strides();
    let (xstride, ostride) = if x.rank() == 0 { (0, 0) } else { (xs[d], os[d]) };
    let len = if x.rank() == 0 { 1 } else { x.sizes()[d] };
    with_out::<f64>(ctx, out, true, |dst| {
        // Group by the input layout; recover the output base from the logical index.
        let mut plan_out = Vec::new();
        groups(&x, &p, &shape, |o, b, _| plan_out.push((o, b)));
        for (obase, ibase) in plan_out {
            let row = (0..len).map(|k| v[ibase + k * xstride]);
            let m = row.clone().fold(f64::NEG_INFINITY, |a, b| {
                if b.is_nan() || a.is_nan() {
                    f64::NAN
                } else {
                    a.max(b)
                }
            });
            let sum: f64 = row.clone().map(|t| (t - m).exp()).sum();
            for k in 0..len {
                let t = v[ibase + k * xstride];
                dst[obase + k * ostride] = if log { t - m - sum.ln() } else { (t - m).exp() / sum };
            }
        }
    })
}

fn cumsum(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let dim = a.int(1, "dim")?;
    let dtype = a.opt_dtype(2, "dtype")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let p = plan(ctx, &x, Some(&[dim]), true)?;
    resize(ctx, out, "out", x.sizes())?;
    let shape = *out.shape();
    let d = normalize_dim(dim, x.rank()).unwrap_or(0);
    let (xstride, ostride, len) = if x.rank() == 0 {
        (0, 0, 1)
    } else {
        (x.shape().strides()[d], shape.strides()[d], x.sizes()[d])
    };
    let rt = dtype.unwrap_or(if x.dtype().is_float() { x.dtype() } else { DType::Long });
    let mut bases = Vec::new();
    groups(&x, &p, &shape, |o, b, _| bases.push((o, b)));
    if rt.is_float() {
        let v = cast_to::<f64>(&x);
        with_out::<f64>(ctx, out, false, |dst| {
            for &(o, i) in &bases {
                let mut acc = 0.0;
                for k in 0..len {
                    acc += v[i + k * xstride];
                    dst[o + k * ostride] = acc;
                }
            }
        })
    } else {
        let v = cast_to::<i64>(&x);
        with_out::<i64>(ctx, out, false, |dst| {
            for &(o, i) in &bases {
                let mut acc = 0i64;
                for k in 0..len {
                    acc = acc.wrapping_add(v[i + k * xstride]);
                    dst[o + k * ostride] = acc;
                }
            }
        })
    }
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::sum.IntList_out", 4, |c, a, o| {
            let r = Args::new(c, a);
            let (d, k, t) =
                (r.opt_int_list(1, "dim")?, r.bool(2, "keepdim")?, r.opt_dtype(3, "dtype")?);
            accumulate(c, a, o, Acc::Sum, d, k, t)
        }),
        out1("aten::mean.out", 4, |c, a, o| {
            let r = Args::new(c, a);
            let (d, k, t) =
                (r.opt_int_list(1, "dim")?, r.bool(2, "keepdim")?, r.opt_dtype(3, "dtype")?);
            accumulate(c, a, o, Acc::Mean, d, k, t)
        }),
        out1("aten::mean.dtype_out", 2, |c, a, o| {
            let t = Args::new(c, a).opt_dtype(1, "dtype")?;
            accumulate(c, a, o, Acc::Mean, None, false, t)
        }),
        out1("aten::prod.int_out", 4, |c, a, o| {
            let r = Args::new(c, a);
            let d = [r.int(1, "dim")?];
            let (k, t) = (r.bool(2, "keepdim")?, r.opt_dtype(3, "dtype")?);
            accumulate(c, a, o, Acc::Prod, Some(&d), k, t)
        }),
        out1("aten::prod.out", 2, |c, a, o| {
            let t = Args::new(c, a).opt_dtype(1, "dtype")?;
            accumulate(c, a, o, Acc::Prod, None, false, t)
        }),
        out1("aten::amax.out", 3, |c, a, o| extreme(c, a, o, true)),
        out1("aten::amin.out", 3, |c, a, o| extreme(c, a, o, false)),
        out1("aten::argmax.out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let (x, d, k) = (r.tensor(0, "self")?, r.opt_int(1, "dim")?, r.bool(2, "keepdim")?);
            arg_extreme(c, &x, d, k, true, None, out_tensor(c, o, 0, "out")?)
        }),
        out1("aten::argmin.out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let (x, d, k) = (r.tensor(0, "self")?, r.opt_int(1, "dim")?, r.bool(2, "keepdim")?);
            arg_extreme(c, &x, d, k, false, None, out_tensor(c, o, 0, "out")?)
        }),
        out_n("aten::max.dim_max", 3, 2, |c, a, o| {
            let r = Args::new(c, a);
            let (x, d, k) = (r.tensor(0, "self")?, r.int(1, "dim")?, r.bool(2, "keepdim")?);
            let [v, i] = out_tensors2(c, o, ["max", "max_values"])?;
            arg_extreme(c, &x, Some(d), k, true, Some(v), i)
        }),
        out_n("aten::min.dim_min", 3, 2, |c, a, o| {
            let r = Args::new(c, a);
            let (x, d, k) = (r.tensor(0, "self")?, r.int(1, "dim")?, r.bool(2, "keepdim")?);
            let [v, i] = out_tensors2(c, o, ["min", "min_indices"])?;
            arg_extreme(c, &x, Some(d), k, false, Some(v), i)
        }),
        out1("aten::max.unary_out", 1, |c, a, o| {
            let x = Args::new(c, a).tensor(0, "self")?;
            let args = [Arg::Tensor(x), Arg::IntList(&[]), Arg::Bool(false)];
            extreme(c, &args, o, true)
        }),
        out1("aten::min.unary_out", 1, |c, a, o| {
            let x = Args::new(c, a).tensor(0, "self")?;
            let args = [Arg::Tensor(x), Arg::IntList(&[]), Arg::Bool(false)];
            extreme(c, &args, o, false)
        }),
        out1("aten::var.correction_out", 4, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let d = r.opt_int_list(1, "dim")?;
            let corr = r.opt_scalar(2, "correction")?.map_or(1.0, |s| s.to_f64());
            let k = r.bool(3, "keepdim")?;
            var(c, &x, d, corr, k, out_tensor(c, o, 0, "out")?)
        }),
        out1("aten::var.out", 4, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let d = r.opt_int_list(1, "dim")?;
            let unbiased = r.bool(2, "unbiased")?;
            let k = r.bool(3, "keepdim")?;
            var(c, &x, d, if unbiased { 1.0 } else { 0.0 }, k, out_tensor(c, o, 0, "out")?)
        }),
        out1("aten::any.all_out", 1, |c, a, o| {
            let x = Args::new(c, a).tensor(0, "self")?;
            any(c, &x, None, false, out_tensor(c, o, 0, "out")?)
        }),
        out1("aten::any.dims_out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let (x, d, k) =
                (r.tensor(0, "self")?, r.opt_int_list(1, "dim")?, r.bool(2, "keepdim")?);
            any(c, &x, d, k, out_tensor(c, o, 0, "out")?)
        }),
        out1("aten::any.out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let (x, d, k) = (r.tensor(0, "self")?, [r.int(1, "dim")?], r.bool(2, "keepdim")?);
            any(c, &x, Some(&d), k, out_tensor(c, o, 0, "out")?)
        }),
        out1("aten::cumsum.out", 3, |c, a, o| cumsum(c, a, o)),
        out1("aten::_softmax.out", 3, |c, a, o| softmax(c, a, o, false)),
        out1("aten::_log_softmax.out", 3, |c, a, o| softmax(c, a, o, true)),
    ]
}
