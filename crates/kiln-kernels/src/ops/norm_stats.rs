//! Batch normalization with batch statistics: `_native_batch_norm_legit.out` and
//! `_native_batch_norm_legit.no_stats_out` (what `InstanceNorm*d` and `BatchNorm*d` without
//! running stats export to). Statistics are computed in `f64` with two passes (PyTorch
//! eager's values; ExecuTorch's portable kernel uses `E[x^2] - E[x]^2` in the input dtype,
//! which loses precision for inputs with a large mean). Any dim order.
//!
//! `_native_batch_norm_legit.out` with `training=false` normalizes with the running
//! statistics, exactly as `_native_batch_norm_legit_no_training`. With `training=true` PyTorch
//! would also update `running_mean`/`running_var` in place; ExecuTorch's portable kernel
//! refuses that mode and so does kiln (an error naming the operator, never stale statistics).
//! `no_stats_out` always uses the batch statistics, whatever `training` says (as ExecuTorch;
//! PyTorch eager rejects `training=false` there because there is nothing else to use).

use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensors3, Args};
use crate::ops::defs::out_n;
use crate::ops::norm::{batch_norm, channel_affine, float_check, per_feature};
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

fn legit(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let training = a.bool(5, "training")?;
    if training {
        return Err(ctx.invalid(
            "training",
            "training=true updates running_mean/running_var in place; only inference \
             (training=false) is supported, as in ExecuTorch's portable kernel",
        ));
    }
    // Same computation as `_native_batch_norm_legit_no_training`: drop `training`.
    let pick = |i: usize| args.get(i).copied().unwrap_or(Arg::None);
    let sub = [pick(0), pick(1), pick(2), pick(3), pick(4), pick(6), pick(7)];
    batch_norm(ctx, &sub, outs)
}

fn no_stats(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let w = a.opt_tensor(1, "weight")?;
    let b = a.opt_tensor(2, "bias")?;
    let _training = a.bool(3, "training")?;
    let _momentum = a.double(4, "momentum")?;
    let eps = a.double(5, "eps")?;
    float_check(ctx, &x)?;
    if x.rank() < 2 {
        return Err(ctx.shape_err("input", "at least 2 dimensions (N, C, ...)", x.sizes()));
    }
    let c = x.sizes()[1];
    let per_channel = x.numel() / c.max(1);
    if c > 0 && per_channel == 0 {
        return Err(ctx.shape_err("input", "at least one element per channel", x.sizes()));
    }
    let wv = per_feature(ctx, w, c, "weight")?.unwrap_or_else(|| vec![1.0; c]);
    let bv = per_feature(ctx, b, c, "bias")?.unwrap_or_else(|| vec![0.0; c]);
    // Per-channel sums with a walk whose third operand is the channel index.
    let v = cast_to::<f64>(&x);
    let rank = x.rank();
    let xs = x.shape().strides();
    let mut cs = [0usize; crate::MAX_RANK];
    cs[1] = 1;
    let mut sum = vec![0.0f64; c];
    crate::compute::strided::walk(x.sizes(), [&xs[..rank], &cs[..rank]], |[i, ch]| sum[ch] += v[i]);
    let n = per_channel as f64;
    let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
    let mut sq = vec![0.0f64; c];
    crate::compute::strided::walk(x.sizes(), [&xs[..rank], &cs[..rank]], |[i, ch]| {
        let d = v[i] - mean[ch];
        sq[ch] += d * d;
    });
    let invstd: Vec<f64> = sq.iter().map(|s| 1.0 / (s / n + eps).sqrt()).collect();
    let scale: Vec<f64> = invstd.iter().zip(&wv).map(|(i, w)| i * w).collect();
    let [out, mean_out, invstd_out] = out_tensors3(ctx, outs, ["out", "save_mean", "save_invstd"])?;
    resize(ctx, mean_out, "save_mean", &[c])?;
    resize(ctx, invstd_out, "save_invstd", &[c])?;
    if out.dtype() != x.dtype() {
        return Err(ctx.dtype_err("out", format!("{} (the input dtype)", x.dtype()), out.dtype()));
    }
    channel_affine(ctx, &x, out, &mean, &scale, &bv)?;
    with_out::<f64>(ctx, mean_out, true, |d| d.copy_from_slice(&mean))?;
    with_out::<f64>(ctx, invstd_out, true, |d| d.copy_from_slice(&invstd))
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out_n("aten::_native_batch_norm_legit.out", 8, 3, |c, a, o| legit(c, a, o)),
        out_n("aten::_native_batch_norm_legit.no_stats_out", 6, 3, |c, a, o| no_stats(c, a, o)),
    ]
}
