//! Gated and inverse-sigmoid activations: `glu` and `logit`. Both compute in `f32` (in `f64`
//! for double inputs), as PyTorch's opmath does, so `logit`'s `eps` clamp bounds round the
//! same way.

use crate::compute::strided::walk;
use crate::dtype::DType;
use crate::element::Element;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::pointwise::{cast_to, map1, resize, with_out};
use crate::shape::normalize_dim;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// `glu` in compute type `C`: `out = a * sigmoid(b)` for the two halves `a`, `b` of dim `d`.
fn glu_typed<C: Element>(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    d: usize,
    out: &mut TensorMut<'_>,
    f: impl Fn(C, C) -> C,
) -> KResult {
    let mut sizes = x.sizes().to_vec();
    sizes[d] /= 2;
    resize(ctx, out, "out", &sizes)?;
    let xs = x.shape().strides();
    let os = out.shape().strides();
    let r = sizes.len();
    let half = sizes[d] * xs[d];
    let v = cast_to::<C>(x);
    with_out::<C>(ctx, out, true, |dst| {
        walk(&sizes, [&xs[..r], &os[..r]], |[i, o]| dst[o] = f(v[i], v[i + half]));
    })
}

fn glu(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let dim = a.int(1, "dim")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("self", "a floating dtype", x.dtype()));
    }
    if !out.dtype().is_float() {
        return Err(ctx.dtype_err("out", "a floating dtype", out.dtype()));
    }
    if x.rank() == 0 {
        return Err(ctx.shape_err("self", "at least 1 dimension", x.sizes()));
    }
    let d = normalize_dim(dim, x.rank()).ok_or_else(|| {
        ctx.invalid("dim", format!("dim {dim} out of range for rank {}", x.rank()))
    })?;
    if x.sizes()[d] % 2 != 0 {
        return Err(ctx.shape_err("self", format!("an even size in dim {d}"), x.sizes()));
    }
    if x.dtype() == DType::Double {
        glu_typed::<f64>(ctx, &x, d, out, |a, b| a * (1.0 / (1.0 + (-b).exp())))
    } else {
        glu_typed::<f32>(ctx, &x, d, out, |a, b| a * (1.0 / (1.0 + (-b).exp())))
    }
}

fn logit(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    // A negative eps means no clamping (PyTorch).
    let eps = match args.get(1) {
        Some(Arg::None) => None,
        _ => Some(a.double(1, "eps")?),
    }
    .filter(|&e| e >= 0.0);
    let out = out_tensor(ctx, outs, 0, "out")?;
    if !x.dtype().is_computable() {
        return Err(ctx.dtype_err("self", "a computable dtype", x.dtype()));
    }
    if !out.dtype().is_float() {
        return Err(ctx.dtype_err("out", "a floating dtype", out.dtype()));
    }
    // Clamped into `[lo, hi]` where given; NaN stays NaN.
    fn clamp<T: PartialOrd>(v: T, bounds: Option<(T, T)>) -> T {
        match bounds {
            Some((lo, _)) if v < lo => lo,
            Some((_, hi)) if v > hi => hi,
            _ => v,
        }
    }
    if x.dtype() == DType::Double {
        let bounds = eps.map(|e| (e, 1.0 - e));
        map1::<f64, f64>(ctx, &x, out, true, |v| {
            let z = clamp(v, bounds);
            (z / (1.0 - z)).ln()
        })
    } else {
        let bounds = eps.map(|e| (e as f32, 1.0 - e as f32));
        map1::<f32, f32>(ctx, &x, out, true, |v| {
            let z = clamp(v, bounds);
            (z / (1.0 - z)).ln()
        })
    }
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::glu.out", 2, |c, a, o| glu(c, a, o)),
        out1("aten::logit.out", 2, |c, a, o| logit(c, a, o)),
    ]
}
