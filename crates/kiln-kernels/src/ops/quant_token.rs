//! Dynamic and per-token quantization (`quantized_decomposed`): `choose_qparams.Tensor_out`,
//! `choose_qparams_per_token_asymmetric.out`, `quantize_per_token.out`,
//! `dequantize_per_token.out`, and the quantized elementwise `add.out`.
//!
//! These follow ExecuTorch's quantized kernels bit for bit, which is what an exported program
//! computes at run time: scales are chosen in `f32`/`f64` exactly as
//! `calculate_scale_and_zero_point` does (XNNPACK's nudged zero point, a 6.1e-5 floor on the
//! scale, `eps` unused), quantization multiplies by the `f32` reciprocal of the scale and
//! rounds half to even, dequantization multiplies in `f32`. PyTorch's Python reference
//! (`torch/ao/quantization/fx/_decomposed.py`) chooses parameters differently (an `eps` floor
//! and a plainly rounded zero point); the two agree on ordinary inputs, not on all inputs.

use crate::dtype::DType;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, out_tensors2, Args};
use crate::ops::defs::{out1, out_n};
use crate::ops::dense::{logical, store_logical};
use crate::ops::pointwise::{cast_to, resize};
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// ExecuTorch's lower bound on chosen scales (`SMALL_SCALE_THRESHOLD`, an `f32`).
const SMALL_SCALE: f32 = 6.1e-5;

/// ExecuTorch's `calculate_scale_and_zero_point` for the range `[min, max]`.
fn scale_and_zero_point(min: f32, max: f32, qmin: i32, qmax: i32) -> (f64, i64) {
    let mut min = min.min(0.0);
    let mut max = max.max(0.0);
    let span = (qmax as i64 - qmin as i64) as f64;
    let mut scale = (max as f64 - min as f64) / span;
    if scale as f32 == 0.0 || (1.0f32 / scale as f32).is_infinite() {
        scale = 0.1;
    }
    if scale < SMALL_SCALE as f64 {
        let org = scale as f32;
        scale = SMALL_SCALE as f64;
        if min == 0.0 {
            max = SMALL_SCALE * span as f32;
        } else if max == 0.0 {
            min = -SMALL_SCALE * span as f32;
        } else {
            let amp = SMALL_SCALE / org;
            min *= amp;
            max *= amp;
        }
    }
    let from_min = qmin as f64 - min as f64 / scale;
    let from_max = qmax as f64 - max as f64 / scale;
    let err_min = (qmin.unsigned_abs() as f64) - (min as f64 / scale).abs();
    let err_max = (qmax.unsigned_abs() as f64) - (max as f64 / scale).abs();
    let initial = if err_min < err_max { from_min } else { from_max };
    let zp = if initial < qmin as f64 {
        qmin as i64
    } else if initial > qmax as f64 {
        qmax as i64
    } else {
        (initial as f32).round_ties_even() as i64
    };
    (scale, zp)
}

/// `std::min_element` / `std::max_element` over `f32` (first extreme by `<`).
fn min_max(v: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi) = (v[0], v[0]);
    for &x in &v[1..] {
        if x < lo {
            lo = x;
        }
        if hi < x {
            hi = x;
        }
    }
    (lo, hi)
}

fn float32_input(ctx: &KernelContext, x: &TensorRef<'_>) -> KResult {
    if x.dtype() != DType::Float {
        return Err(ctx.dtype_err("input", "float32", x.dtype()));
    }
    if x.numel() == 0 {
        return Err(ctx.shape_err("input", "at least one element", x.sizes()));
    }
    Ok(())
}

fn qparam_outs(ctx: &KernelContext, scale: &TensorMut<'_>, zp: &TensorMut<'_>) -> KResult {
    if scale.dtype() != DType::Double {
        return Err(ctx.dtype_err("scale_out", "float64", scale.dtype()));
    }
    if zp.dtype() != DType::Long {
        return Err(ctx.dtype_err("zero_point_out", "int64", zp.dtype()));
    }
    Ok(())
}

fn write_qparams(
    ctx: &KernelContext,
    scale_out: &mut TensorMut<'_>,
    zp_out: &mut TensorMut<'_>,
    params: &[(f64, i64)],
) -> KResult {
    let s: Vec<f64> = params.iter().map(|p| p.0).collect();
    let z: Vec<i64> = params.iter().map(|p| p.1).collect();
    store_logical(ctx, scale_out, &s, false)?;
    store_logical(ctx, zp_out, &z, false)
}

fn choose_qparams(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let qmin = a.int(1, "quant_min")?;
    let qmax = a.int(2, "quant_max")?;
    let _eps = a.double(3, "eps")?;
    let _dtype = a.dtype(4, "dtype")?;
    let (qmin, qmax) = qrange_i32(ctx, qmin, qmax)?;
    float32_input(ctx, &x)?;
    let [scale_out, zp_out] = out_tensors2(ctx, outs, ["scale_out", "zero_point_out"])?;
    qparam_outs(ctx, scale_out, zp_out)?;
    if scale_out.numel() != 1 || zp_out.numel() != 1 {
        return Err(ctx.shape_err("scale_out", "one element", scale_out.sizes()));
    }
    let v = cast_to::<f32>(&x);
    let (lo, hi) = min_max(&v);
    write_qparams(ctx, scale_out, zp_out, &[scale_and_zero_point(lo, hi, qmin, qmax)])
}

/// A strictly increasing quant range that fits `i32`.
fn qrange_i32(ctx: &KernelContext, qmin: i64, qmax: i64) -> Result<(i32, i32), KernelError> {
    match (i32::try_from(qmin), i32::try_from(qmax)) {
        (Ok(lo), Ok(hi)) if lo < hi => Ok((lo, hi)),
        _ => {
            Err(ctx
                .invalid("quant_min", format!("[{qmin}, {qmax}] is not an increasing int32 range")))
        }
    }
}

/// `input.sizes()[..-1] + [1]` and the token count and length.
fn token_shape(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
) -> Result<(Vec<usize>, usize, usize), KernelError> {
    let Some((&last, lead)) = x.sizes().split_last() else {
        return Err(ctx.shape_err("input", "at least 1 dimension", x.sizes()));
    };
    let mut s = lead.to_vec();
    s.push(1);
    Ok((s, lead.iter().product(), last))
}

fn choose_per_token(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let _dtype = a.dtype(1, "dtype")?;
    float32_input(ctx, &x)?;
    let (sizes, tokens, len) = token_shape(ctx, &x)?;
    let [scale_out, zp_out] = out_tensors2(ctx, outs, ["scale_out", "zero_point_out"])?;
    qparam_outs(ctx, scale_out, zp_out)?;
    resize(ctx, scale_out, "scale_out", &sizes)?;
    resize(ctx, zp_out, "zero_point_out", &sizes)?;
    let v = logical::<f32>(&x);
    let params: Vec<(f64, i64)> = (0..tokens)
        .map(|t| {
            let (lo, hi) = min_max(&v[t * len..(t + 1) * len]);
            scale_and_zero_point(lo, hi, -128, 127)
        })
        .collect();
    write_qparams(ctx, scale_out, zp_out, &params)
}

/// The representable range of a quantized integer dtype.
fn dtype_bounds(ctx: &KernelContext, dt: DType) -> Result<(i64, i64), KernelError> {
    Ok(match dt {
        DType::Byte => (0, 255),
        DType::Char => (-128, 127),
        DType::Short => (i16::MIN as i64, i16::MAX as i64),
        DType::Int => (i32::MIN as i64, i32::MAX as i64),
        other => return Err(ctx.dtype_err("dtype", "uint8, int8, int16 or int32", other)),
    })
}

/// Quant range arguments checked against the quantized dtype.
fn checked_range(
    ctx: &KernelContext,
    qmin: i64,
    qmax: i64,
    dt: DType,
) -> Result<(i64, i64), KernelError> {
    let (lo, hi) = dtype_bounds(ctx, dt)?;
    if qmin > qmax || qmin < lo || qmax > hi {
        return Err(ctx.invalid(
            "quant_min",
            format!("[{qmin}, {qmax}] is not an ordered range within {dt}'s [{lo}, {hi}]"),
        ));
    }
    Ok((qmin, qmax))
}

/// Per-token scales (float or double) and zero points (int32 or int64), one per token.
fn token_params(
    ctx: &KernelContext,
    scales: &TensorRef<'_>,
    zps: &TensorRef<'_>,
    tokens: usize,
) -> Result<(Vec<f32>, Vec<i64>), KernelError> {
    if !matches!(scales.dtype(), DType::Double | DType::Float) {
        return Err(ctx.dtype_err("scales", "float64 or float32", scales.dtype()));
    }
    if !matches!(zps.dtype(), DType::Long | DType::Int) {
        return Err(ctx.dtype_err("zero_points", "int64 or int32", zps.dtype()));
    }
    if scales.numel() != tokens {
        return Err(ctx.shape_err(
            "scales",
            format!("{tokens} elements (one per token)"),
            scales.sizes(),
        ));
    }
    if zps.numel() != tokens {
        return Err(ctx.shape_err(
            "zero_points",
            format!("{tokens} elements (one per token)"),
            zps.sizes(),
        ));
    }
    let s = logical::<f64>(scales).into_iter().map(|v| v as f32).collect();
    Ok((s, logical::<i64>(zps)))
}

/// ExecuTorch's `quantize_val`: `zp + nearbyint(f32(1/scale) * x)`, clamped.
fn quantize_val(x: f64, double_input: bool, scale: f32, zp: i64, lo: i64, hi: i64) -> i64 {
    let inv = 1.0f32 / scale;
    let prod = if double_input { (inv as f64 * x) as f32 } else { inv * x as f32 };
    let q = (zp as i32 as f32 + prod.round_ties_even()) as i64;
    q.clamp(lo, hi)
}

fn quantize_per_token(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let scales = a.tensor(1, "scales")?;
    let zps = a.tensor(2, "zero_points")?;
    let dt = a.dtype(5, "dtype")?;
    let (lo, hi) = checked_range(ctx, a.int(3, "quant_min")?, a.int(4, "quant_max")?, dt)?;
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("input", "a floating dtype", x.dtype()));
    }
    let (_, tokens, len) = token_shape(ctx, &x)?;
    let (s, z) = token_params(ctx, &scales, &zps, tokens)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != dt {
        return Err(ctx.dtype_err("out", format!("{dt} (the dtype argument)"), out.dtype()));
    }
    resize(ctx, out, "out", x.sizes())?;
    let double = x.dtype() == DType::Double;
    let v = logical::<f64>(&x);
    let q: Vec<i64> = v
        .iter()
        .enumerate()
        .map(|(i, &val)| {
            let t = i / len.max(1);
            quantize_val(val, double, s[t], z[t], lo, hi)
        })
        .collect();
    store_logical(ctx, out, &q, false)
}

fn dequantize_per_token(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let scales = a.tensor(1, "scales")?;
    let zps = a.tensor(2, "zero_points")?;
    let (qmin, qmax) = (a.int(3, "quant_min")?, a.int(4, "quant_max")?);
    let dt = a.dtype(5, "dtype")?;
    let out_dt = a.dtype(6, "output_dtype")?;
    if qmin > qmax {
        return Err(ctx.invalid("quant_min", format!("{qmin} > quant_max {qmax}")));
    }
    dtype_bounds(ctx, dt)?;
    if x.dtype() != dt {
        return Err(ctx.dtype_err("input", format!("{dt} (the dtype argument)"), x.dtype()));
    }
    let (_, tokens, len) = token_shape(ctx, &x)?;
    let (s, z) = token_params(ctx, &scales, &zps, tokens)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != out_dt || !out_dt.is_float() {
        return Err(ctx.dtype_err(
            "out",
            format!("{out_dt} (output_dtype, a floating dtype)"),
            out.dtype(),
        ));
    }
    resize(ctx, out, "out", x.sizes())?;
    let v = logical::<i64>(&x);
    let r: Vec<f32> = v
        .iter()
        .enumerate()
        .map(|(i, &q)| {
            let t = i / len.max(1);
            (q - z[t] as i32 as i64) as f32 * s[t]
        })
        .collect();
    store_logical(ctx, out, &r, true)
}

/// Scale, zero point and range of one operand of `add.out`, starting at schema position `p`.
fn operand(a: &Args<'_, '_>, p: usize) -> Result<(f32, i64, i64, i64), KernelError> {
    let scale = a.double(p, "scale")? as f32;
    let zp = a.int(p + 1, "zero_point")?;
    let (lo, hi) = (a.int(p + 2, "quant_min")?, a.int(p + 3, "quant_max")?);
    if lo > hi {
        return Err(a.ctx.invalid("quant_min", format!("{lo} > quant_max {hi}")));
    }
    if i32::try_from(zp).is_err() {
        return Err(a.ctx.invalid("zero_point", format!("{zp} does not fit int32")));
    }
    Ok((scale, zp, lo, hi))
}

fn quantized_add(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let qa = a.tensor(0, "a")?;
    let (sa, za, _, _) = operand(&a, 1)?;
    let qb = a.tensor(5, "b")?;
    let (sb, zb, _, _) = operand(&a, 6)?;
    let (so, zo, lo, hi) = operand(&a, 10)?;
    let dt = qa.dtype();
    checked_range(ctx, lo, hi, dt)?;
    if qb.dtype() != dt {
        return Err(ctx.dtype_err("b", format!("{dt} (the dtype of a)"), qb.dtype()));
    }
    if qb.sizes() != qa.sizes() {
        return Err(ctx.shape_err("b", format!("{:?} (the shape of a)", qa.sizes()), qb.sizes()));
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != dt {
        return Err(ctx.dtype_err("out", format!("{dt} (the dtype of a)"), out.dtype()));
    }
    resize(ctx, out, "out", qa.sizes())?;
    let va = logical::<i64>(&qa);
    let vb = logical::<i64>(&qb);
    let inv = 1.0f32 / so;
    let r: Vec<i64> = va
        .iter()
        .zip(&vb)
        .map(|(&x, &y)| {
            let sum = (x - za) as f32 * sa + (y - zb) as f32 * sb;
            let q = (zo as i32 as f32 + (inv * sum).round_ties_even()) as i64;
            q.clamp(lo, hi)
        })
        .collect();
    store_logical(ctx, out, &r, false)
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out_n("quantized_decomposed::choose_qparams.Tensor_out", 5, 2, |c, a, o| {
            choose_qparams(c, a, o)
        }),
        out_n("quantized_decomposed::choose_qparams_per_token_asymmetric.out", 2, 2, |c, a, o| {
            choose_per_token(c, a, o)
        }),
        out1("quantized_decomposed::quantize_per_token.out", 6, |c, a, o| {
            quantize_per_token(c, a, o)
        }),
        out1("quantized_decomposed::dequantize_per_token.out", 7, |c, a, o| {
            dequantize_per_token(c, a, o)
        }),
        out1("quantized_decomposed::add.out", 14, |c, a, o| quantized_add(c, a, o)),
    ]
}
