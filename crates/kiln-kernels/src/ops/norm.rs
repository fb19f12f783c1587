//! Normalization: `native_layer_norm`, `_native_batch_norm_legit_no_training`,
//! `native_group_norm`. Statistics in `f64`; any dim order.

use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensors3, Args};
use crate::ops::defs::out_n;
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::ops::reduce::{groups, plan};
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

pub(crate) fn float_check(ctx: &KernelContext, x: &TensorRef<'_>) -> KResult {
    if x.dtype().is_float() {
        Ok(())
    } else {
        Err(ctx.dtype_err("input", "a floating dtype", x.dtype()))
    }
}

/// Logical-order values of an optional per-feature tensor (checked to have `n` elements).
pub(crate) fn per_feature(
    ctx: &KernelContext,
    t: Option<TensorRef<'_>>,
    n: usize,
    name: &'static str,
) -> Result<Option<Vec<f64>>, KernelError> {
    let Some(t) = t else { return Ok(None) };
    if t.numel() != n {
        return Err(ctx.shape_err(name, format!("{n} elements"), t.sizes()));
    }
    let v = cast_to::<f64>(&t);
    let s = t.shape().strides();
    let r = t.rank();
    let mut out = Vec::with_capacity(n);
    crate::compute::strided::walk(t.sizes(), [&s[..r]], |[i]| out.push(v[i]));
    Ok(Some(out))
}

fn layer_norm(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let normalized = a.sizes(1, "normalized_shape")?;
    let w = a.opt_tensor(2, "weight")?;
    let b = a.opt_tensor(3, "bias")?;
    let eps = a.double(4, "eps")?;
    float_check(ctx, &x)?;
    let rank = x.rank();
    let k = normalized.len();
    if k == 0 || k > rank || x.sizes()[rank - k..] != normalized[..] {
        return Err(ctx.shape_err(
            "normalized_shape",
            format!("the trailing sizes of input {:?}", x.sizes()),
            &normalized,
        ));
    }
    let inner: usize = normalized.iter().product();
    let wv = per_feature(ctx, w, inner, "weight")?;
    let bv = per_feature(ctx, b, inner, "bias")?;
    let dims: Vec<i64> = (rank - k..rank).map(|d| d as i64).collect();
    let p = plan(ctx, &x, Some(&dims), true)?;
    let [out, mean_out, rstd_out] = out_tensors3(ctx, outs, ["out", "mean", "rstd"])?;
    resize(ctx, out, "out", x.sizes())?;
    resize(ctx, mean_out, "mean", &p.out_sizes)?;
    resize(ctx, rstd_out, "rstd", &p.out_sizes)?;
    if !ctx.general_only
        && crate::ops::fast::layer_norm_rows_f32(
            &x,
            inner,
            eps,
            wv.as_deref(),
            bv.as_deref(),
            out,
            mean_out,
            rstd_out,
            &ctx.threads,
        )
    {
        return Ok(());
    }
    let v = cast_to::<f64>(&x);
    let stat_shape = *mean_out.shape();
    // Per group: (stat offset, input base, mean, rstd).
    let mut stats = Vec::new();
    groups(&x, &p, &stat_shape, |o, base, offs| {
        let n = offs.len() as f64;
        let mean = offs.iter().map(|&i| v[base + i]).sum::<f64>() / n;
        let var = offs.iter().map(|&i| (v[base + i] - mean).powi(2)).sum::<f64>() / n;
        stats.push((o, base, mean, 1.0 / (var + eps).sqrt()));
    });
    // Output offsets: same grouping over the output's layout.
    let out_shape = *out.shape();
    let xs = x.shape().strides();
    let os = out_shape.strides();
    let red_in: Vec<usize> = (rank - k..rank).map(|d| xs[d]).collect();
    let red_out: Vec<usize> = (rank - k..rank).map(|d| os[d]).collect();
    // Map input base -> output base by walking kept dims of the output as well.
    let kept_sizes: Vec<usize> = x.sizes()[..rank - k].to_vec();
    let mut obases = Vec::with_capacity(stats.len());
    crate::compute::strided::walk(&kept_sizes, [&os[..rank - k]], |[o]| obases.push(o));
    if kept_sizes.is_empty() {
        obases = vec![0];
    }
    with_out::<f64>(ctx, out, true, |dst| {
        for ((_, base, mean, rstd), &ob) in stats.iter().zip(&obases) {
            let mut k_idx = 0;
            crate::compute::strided::walk(&normalized, [&red_in[..], &red_out[..]], |[i, o]| {
                let mut y = (v[base + i] - mean) * rstd;
                if let Some(w) = &wv {
                    y *= w[k_idx];
                }
                if let Some(b) = &bv {
                    y += b[k_idx];
                }
                dst[ob + o] = y;
                k_idx += 1;
            });
        }
    })?;
    with_out::<f64>(ctx, mean_out, true, |dst| stats.iter().for_each(|s| dst[s.0] = s.2))?;
    with_out::<f64>(ctx, rstd_out, true, |dst| stats.iter().for_each(|s| dst[s.0] = s.3))
}

/// Per-channel affine normalisation `y = (x - mean[c]) * scale[c] + shift[c]` over dim 1.
pub(crate) fn channel_affine(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    mean: &[f64],
    scale: &[f64],
    shift: &[f64],
) -> KResult {
    resize(ctx, out, "out", x.sizes())?;
    if !ctx.general_only && crate::ops::fast::channel_affine_f32(x, out, mean, scale, shift) {
        return Ok(());
    }
    let v = cast_to::<f64>(x);
    let rank = x.rank();
    let xs = x.shape().strides();
    let os = out.shape().strides();
    // Walk with a channel-index stride: use a third "operand" whose stride is 1 on dim 1.
    let mut cs = [0usize; crate::MAX_RANK];
    if rank > 1 {
        cs[1] = 1;
    }
    with_out::<f64>(ctx, out, true, |dst| {
        crate::compute::strided::walk(
            x.sizes(),
            [&xs[..rank], &os[..rank], &cs[..rank]],
            |[i, o, c]| {
                dst[o] = (v[i] - mean[c]) * scale[c] + shift[c];
            },
        )
    })
}

pub(crate) fn batch_norm(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let w = a.opt_tensor(1, "weight")?;
    let b = a.opt_tensor(2, "bias")?;
    let rm = a.tensor(3, "running_mean")?;
    let rv = a.tensor(4, "running_var")?;
    let eps = a.double(6, "eps")?;
    float_check(ctx, &x)?;
    if x.rank() < 2 {
        return Err(ctx.shape_err("input", "at least 2 dimensions (N, C, ...)", x.sizes()));
    }
    let c = x.sizes()[1];
    let mean = per_feature(ctx, Some(rm), c, "running_mean")?.unwrap_or_default();
    let var = per_feature(ctx, Some(rv), c, "running_var")?.unwrap_or_default();
    let wv = per_feature(ctx, w, c, "weight")?.unwrap_or_else(|| vec![1.0; c]);
    let bv = per_feature(ctx, b, c, "bias")?.unwrap_or_else(|| vec![0.0; c]);
    let scale: Vec<f64> = (0..c).map(|i| wv[i] / (var[i] + eps).sqrt()).collect();
    let [out, o1, o2] = out_tensors3(ctx, outs, ["out", "save_mean", "save_invstd"])?;
    resize(ctx, o1, "save_mean", &[0])?;
    resize(ctx, o2, "save_invstd", &[0])?;
    channel_affine(ctx, &x, out, &mean, &scale, &bv)
}

fn group_norm(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let w = a.opt_tensor(1, "weight")?;
    let b = a.opt_tensor(2, "bias")?;
    let n = a.int(3, "N")?;
    let c = a.int(4, "C")?;
    let hxw = a.int(5, "HxW")?;
    let group = a.int(6, "group")?;
    let eps = a.double(7, "eps")?;
    float_check(ctx, &x)?;
    let as_usize = |v: i64, name: &'static str| {
        usize::try_from(v).map_err(|_| ctx.invalid(name, format!("{v} is negative")))
    };
    let (n, c, hxw, group) =
        (as_usize(n, "N")?, as_usize(c, "C")?, as_usize(hxw, "HxW")?, as_usize(group, "group")?);
    if group == 0
        || c % group != 0
        || x.rank() < 2
        || x.sizes()[0] != n
        || x.sizes()[1] != c
        || n.checked_mul(c).and_then(|v| v.checked_mul(hxw)) != Some(x.numel())
    {
        return Err(ctx.shape_err("input", format!("[N={n}, C={c}, ...] with {hxw} elements per channel and C divisible by group={group}"), x.sizes()));
    }
    let wv = per_feature(ctx, w, c, "weight")?.unwrap_or_else(|| vec![1.0; c]);
    let bv = per_feature(ctx, b, c, "bias")?.unwrap_or_else(|| vec![0.0; c]);
    let [out, mean_out, rstd_out] = out_tensors3(ctx, outs, ["out", "mean", "rstd"])?;
    resize(ctx, out, "out", x.sizes())?;
    resize(ctx, mean_out, "mean", &[n, group])?;
    resize(ctx, rstd_out, "rstd", &[n, group])?;
    // Logical-order values.
    let v = cast_to::<f64>(&x);
    let xs = x.shape().strides();
    let r = x.rank();
    let mut logical = Vec::with_capacity(x.numel());
    crate::compute::strided::walk(x.sizes(), [&xs[..r]], |[i]| logical.push(v[i]));
    let cg = c / group;
    let per = cg * hxw;
    let mut means = vec![0.0; n * group];
    let mut rstds = vec![0.0; n * group];
    let mut y = vec![0.0; logical.len()];
    for ni in 0..n {
        for gi in 0..group {
            let start = (ni * c + gi * cg) * hxw;
            let seg = &logical[start..start + per];
            let mean = seg.iter().sum::<f64>() / per as f64;
            let var = seg.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / per as f64;
            let rstd = 1.0 / (var + eps).sqrt();
            means[ni * group + gi] = mean;
            rstds[ni * group + gi] = rstd;
            for (k, t) in seg.iter().enumerate() {
                let ch = gi * cg + k / hxw.max(1);
                y[start + k] = (t - mean) * rstd * wv[ch] + bv[ch];
            }
        }
    }
    let os = out.shape().strides();
    with_out::<f64>(ctx, out, true, |dst| {
        let mut k = 0;
        crate::compute::strided::walk(x.sizes(), [&os[..r]], |[o]| {
            dst[o] = y[k];
            k += 1;
        });
    })?;
    with_out::<f64>(ctx, mean_out, true, |dst| dst.copy_from_slice(&means))?;
    with_out::<f64>(ctx, rstd_out, true, |dst| dst.copy_from_slice(&rstds))
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out_n("aten::native_layer_norm.out", 5, 3, |c, a, o| layer_norm(c, a, o)),
        out_n("aten::_native_batch_norm_legit_no_training.out", 7, 3, |c, a, o| {
            batch_norm(c, a, o)
        }),
        out_n("aten::native_group_norm.out", 8, 3, |c, a, o| group_norm(c, a, o)),
    ]
}
