//! `var_mean.correction_out`: variance and mean over dims in one call (accumulated in `f64`).

use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensors2, Args};
use crate::ops::defs::out_n;
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::ops::reduce::{groups, plan};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

fn var_mean(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let dims = a.opt_int_list(1, "dim")?;
    let correction = a.opt_scalar(2, "correction")?.map_or(1.0, |s| s.to_f64());
    let keepdim = a.bool(3, "keepdim")?;
    let [var, mean] = out_tensors2(ctx, outs, ["out0", "out1"])?;
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("self", "a floating dtype", x.dtype()));
    }
    for (name, t) in [("out0", &var), ("out1", &mean)] {
        if !t.dtype().is_float() {
            return Err(ctx.dtype_err(name, "a floating dtype", t.dtype()));
        }
    }
    let p = plan(ctx, &x, dims, keepdim)?;
    resize(ctx, var, "out0", &p.out_sizes)?;
    resize(ctx, mean, "out1", &p.out_sizes)?;
    let v = cast_to::<f64>(&x);
    let stats = |b: usize, offs: &[usize]| {
        let n = offs.len() as f64;
        let m = offs.iter().map(|&i| v[b + i]).sum::<f64>() / n;
        let ss: f64 = offs.iter().map(|&i| (v[b + i] - m) * (v[b + i] - m)).sum();
        (ss / (n - correction).max(0.0), m)
    };
    let shape = *var.shape();
    with_out::<f64>(ctx, var, true, |dst| {
        groups(&x, &p, &shape, |o, b, offs| dst[o] = stats(b, offs).0);
    })?;
    let shape = *mean.shape();
    with_out::<f64>(ctx, mean, true, |dst| {
        groups(&x, &p, &shape, |o, b, offs| dst[o] = stats(b, offs).1);
    })
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![out_n("aten::var_mean.correction_out", 4, 2, |c, a, o| var_mean(c, a, o))]
}
