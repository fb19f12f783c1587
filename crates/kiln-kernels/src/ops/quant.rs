//! `quantized_decomposed` ops: affine quantize/dequantize per tensor and per channel, and
//! `embedding_byte` (int8 embedding rows with per-row or per-group scales). Arithmetic is in
//! `float32`, as ExecuTorch's quantized kernels do (`q = zp + nearbyint(x * (1/scale))`).

use crate::dtype::DType;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::shape::normalize_dim;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// Scale and zero point for each element (per tensor: one pair; per channel: by `axis`).
struct QParams {
    scales: Vec<f64>,
    zps: Vec<i64>,
    axis: Option<usize>,
}

fn qrange(
    ctx: &KernelContext,
    a: &Args<'_, '_>,
    min_pos: usize,
    dtype_pos: usize,
) -> Result<(i64, i64, DType), KernelError> {
    let qmin = a.int(min_pos, "quant_min")?;
    let qmax = a.int(min_pos + 1, "quant_max")?;
    let dt = a.dtype(dtype_pos, "dtype")?;
    if qmin > qmax {
        return Err(ctx.invalid("quant_min", format!("{qmin} > quant_max {qmax}")));
    }
    Ok((qmin, qmax, dt))
}

fn channel_index(x: &TensorRef<'_>, axis: Option<usize>) -> Vec<usize> {
    // Channel of each element in storage order.
    let Some(ax) = axis else { return Vec::new() };
    let s = x.shape().strides();
    let r = x.rank();
    let mut cs = [0usize; crate::MAX_RANK];
    cs[ax] = 1;
    let mut ch = vec![0usize; x.numel()];
    crate::compute::strided::walk(x.sizes(), [&s[..r], &cs[..r]], |[i, c]| ch[i] = c);
    ch
}

fn quantize(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    q: &QParams,
    qmin: i64,
    qmax: i64,
    dtype: DType,
    out: &mut TensorMut<'_>,
) -> KResult {
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("input", "a floating dtype", x.dtype()));
    }
    if out.dtype() != dtype {
        return Err(ctx.dtype_err("out", format!("{dtype} (the dtype argument)"), out.dtype()));
    }
    if out.shape().dim_order() != x.shape().dim_order() {
        return Err(ctx.invalid("out", "out must have the input's dim order"));
    }
    resize(ctx, out, "out", x.sizes())?;
    let v = cast_to::<f32>(x);
    if let Some(fast) = PerTensor::of(q, qmin, qmax, dtype) {
        let inv = 1.0f32 / q.scales[0] as f32;
        let (zp, lo, hi) = (fast.zp, fast.lo, fast.hi);
        return match dtype {
            DType::Char => with_out::<i8>(ctx, out, false, |d| {
                crate::compute::xnn_quant::quantize_per_tensor(&v, inv, zp, lo, hi, d)
            }),
            _ => with_out::<u8>(ctx, out, false, |d| {
                crate::compute::xnn_quant::quantize_per_tensor(&v, inv, zp, lo, hi, d)
            }),
        };
    }
    let ch = channel_index(x, q.axis);
    with_out::<i64>(ctx, out, false, |dst| {
        for (i, (d, &val)) in dst.iter_mut().zip(v.iter()).enumerate() {
            let c = if q.axis.is_some() { ch[i] } else { 0 };
            let inv = 1.0f32 / q.scales[c] as f32;
            let qv = q.zps[c].saturating_add((val * inv).round_ties_even() as i64);
            *d = qv.clamp(qmin, qmax);
        }
    })
}

fn dequantize(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    q: &QParams,
    dtype: DType,
    out: &mut TensorMut<'_>,
) -> KResult {
    if x.dtype() != dtype {
        return Err(ctx.dtype_err("input", format!("{dtype} (the dtype argument)"), x.dtype()));
    }
    if !out.dtype().is_float() {
        return Err(ctx.dtype_err("out", "a floating dtype", out.dtype()));
    }
    if out.shape().dim_order() != x.shape().dim_order() {
        return Err(ctx.invalid("out", "out must have the input's dim order"));
    }
    resize(ctx, out, "out", x.sizes())?;
    if let Some(zps) = block_zero_points(x, q, dtype, out.dtype()) {
        let scales = &q.scales;
        return match dtype {
            DType::Char => {
                let v = cast_to::<i8>(x);
                with_out::<f32>(ctx, out, true, |d| dequantize_blocks(&v, &zps, scales, d))
            }
            _ => {
                let v = cast_to::<u8>(x);
                with_out::<f32>(ctx, out, true, |d| dequantize_blocks(&v, &zps, scales, d))
            }
        };
    }
    let v = cast_to::<i64>(x);
    let ch = channel_index(x, q.axis);
    with_out::<f32>(ctx, out, true, |dst| {
        for (i, (d, &val)) in dst.iter_mut().zip(v.iter()).enumerate() {
            let c = if q.axis.is_some() { ch[i] } else { 0 };
            *d = (val - q.zps[c]) as f32 * q.scales[c] as f32;
        }
    })
}

/// One scale and zero point for quantizing into an int8 or uint8 tensor, with the zero point
/// small and `[qmin, qmax]` inside the dtype's range: the case the vector loop of
/// [`crate::compute::xnn_quant::quantize_per_tensor`] computes exactly as the general loop
/// (whose cast of a value outside the dtype's range is not a clamp).
struct PerTensor {
    zp: i32,
    lo: i32,
    hi: i32,
}

impl PerTensor {
    /// `q`'s one pair and `[qmin, qmax]`, when they are that case.
    fn of(q: &QParams, qmin: i64, qmax: i64, dtype: DType) -> Option<PerTensor> {
        let range = match dtype {
            DType::Char => -128..=127,
            DType::Byte => 0..=255,
            _ => return None,
        };
        let (&[zp], None) = (q.zps.as_slice(), q.axis) else { return None };
        let zp = i32::try_from(zp).ok().filter(|z| z.abs() <= 1 << 24)?;
        (range.contains(&qmin) && range.contains(&qmax)).then_some(PerTensor {
            zp,
            lo: qmin as i32,
            hi: qmax as i32,
        })
    }
}

/// The zero points of a dequantization of an int8 or uint8 tensor into float32 whose every
/// scale covers one contiguous block: per tensor (one block), or per channel along the first
/// dimension of a dense row-major tensor (a weight's channels). `None` unless every zero
/// point is small enough for [`crate::compute::xnn_quant::dequantize_per_tensor`], which then
/// computes each block with the general loop's values.
fn block_zero_points(x: &TensorRef<'_>, q: &QParams, dtype: DType, out: DType) -> Option<Vec<i32>> {
    let n = q.zps.len();
    let blocks = match q.axis {
        None => n == 1,
        Some(axis) => axis == 0 && x.shape().is_dense_row_major() && x.sizes().first() == Some(&n),
    };
    let int8 = matches!(dtype, DType::Char | DType::Byte);
    if !blocks || !int8 || out != DType::Float || x.numel() == 0 {
        return None;
    }
    q.zps.iter().map(|&z| i32::try_from(z).ok().filter(|z| z.abs() <= 1 << 24)).collect()
}

/// Each of the `zps.len()` equal blocks of `x` dequantized with its zero point and scale.
fn dequantize_blocks<T: Copy + Sync + Into<i32>>(
    x: &[T],
    zps: &[i32],
    scales: &[f64],
    d: &mut [f32],
) {
    let per = x.len() / zps.len();
    for ((dc, xc), (&zp, &s)) in
        d.chunks_exact_mut(per).zip(x.chunks_exact(per)).zip(zps.iter().zip(scales))
    {
        crate::compute::xnn_quant::dequantize_per_tensor(xc, zp, s as f32, dc);
    }
}

fn tensor_qparams(
    ctx: &KernelContext,
    scale: &TensorRef<'_>,
    zp: Option<&TensorRef<'_>>,
    n: usize,
    axis: Option<usize>,
) -> Result<QParams, KernelError> {
    if scale.numel() != n {
        return Err(ctx.shape_err("scale", format!("{n} elements"), scale.sizes()));
    }
    let scales = cast_to::<f64>(scale).into_owned();
    let zps = match zp {
        Some(z) => {
            if z.numel() != n {
                return Err(ctx.shape_err("zero_point", format!("{n} elements"), z.sizes()));
            }
            cast_to::<i64>(z).into_owned()
        }
        None => vec![0; n],
    };
    Ok(QParams { scales, zps, axis })
}

fn per_tensor(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    quant: bool,
    tensor_params: bool,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let q = if tensor_params {
        let s = a.tensor(1, "scale")?;
        let z = a.tensor(2, "zero_point")?;
        tensor_qparams(ctx, &s, Some(&z), 1, None)?
    } else {
        QParams {
            scales: vec![a.double(1, "scale")?],
            zps: vec![a.int(2, "zero_point")?],
            axis: None,
        }
    };
    let (qmin, qmax, dt) = qrange(ctx, &a, 3, 5)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if quant {
        quantize(ctx, &x, &q, qmin, qmax, dt, out)
    } else {
        if let Some(od) = a.opt_dtype(6, "out_dtype")? {
            if od != out.dtype() {
                return Err(ctx.dtype_err("out", format!("{od} (out_dtype)"), out.dtype()));
            }
        }
        dequantize(ctx, &x, &q, dt, out)
    }
}

fn per_channel(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    quant: bool,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let s = a.tensor(1, "scales")?;
    let z = if quant { Some(a.tensor(2, "zero_points")?) } else { a.opt_tensor(2, "zero_points")? };
    let axis = normalize_dim(a.int(3, "axis")?, x.rank())
        .filter(|_| x.rank() > 0)
        .ok_or_else(|| ctx.invalid("axis", "out of range"))?;
    let q = tensor_qparams(ctx, &s, z.as_ref(), x.sizes()[axis], Some(axis))?;
    let (qmin, qmax, dt) = qrange(ctx, &a, 4, 6)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if quant {
        quantize(ctx, &x, &q, qmin, qmax, dt, out)
    } else {
        dequantize(ctx, &x, &q, dt, out)
    }
}

/// The arguments of the quantized embedding kernels: `weight, weight_scales,
/// weight_zero_points, weight_quant_min, weight_quant_max, indices` and, at `dtype_pos`, the
/// output dtype.
pub(crate) struct EmbeddingArgs<'x> {
    pub(crate) w: TensorRef<'x>,
    pub(crate) scales: TensorRef<'x>,
    pub(crate) zps: Option<TensorRef<'x>>,
    pub(crate) qmin: i64,
    pub(crate) qmax: i64,
    pub(crate) idx: TensorRef<'x>,
    pub(crate) dtype: Option<DType>,
}

impl<'x> EmbeddingArgs<'x> {
    /// Reads them.
    pub(crate) fn read(a: &Args<'_, 'x>, dtype_pos: Option<usize>) -> Result<Self, KernelError> {
        Ok(EmbeddingArgs {
            w: a.tensor(0, "weight")?,
            scales: a.tensor(1, "weight_scales")?,
            zps: a.opt_tensor(2, "weight_zero_points")?,
            qmin: a.int(3, "weight_quant_min")?,
            qmax: a.int(4, "weight_quant_max")?,
            idx: a.tensor(5, "indices")?,
            dtype: dtype_pos.map(|p| a.opt_dtype(p, "dtype")).transpose()?.flatten(),
        })
    }
}

fn embedding_byte(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    dtype_pos: Option<usize>,
) -> KResult {
    let EmbeddingArgs { w, scales, zps, idx, .. } =
        EmbeddingArgs::read(&Args::new(ctx, args), dtype_pos)?;
    if w.rank() != 2 || !matches!(w.dtype(), DType::Char | DType::Byte) {
        return Err(ctx.shape_err(
            "weight",
            "an int8/uint8 [num_embeddings, dim] tensor",
            w.sizes(),
        ));
    }
    let (rows, dim) = (w.sizes()[0], w.sizes()[1]);
    let groups = scale_groups(ctx, &scales, rows, dim)?;
    let sv = cast_to::<f64>(&scales);
    let zv = match &zps {
        Some(z) if z.numel() == scales.numel() => cast_to::<f64>(z).into_owned(),
        Some(z) => return Err(zero_points_err(ctx, &scales, z, "")),
        None => vec![0.0; scales.numel()],
    };
    if !w.shape().is_contiguous() || !scales.shape().is_contiguous() {
        return Err(ctx.invalid("weight", "weight and scales must be contiguous"));
    }
    let ids = crate::ops::pointwise::cast_to::<i64>(&idx);
    if !idx.shape().is_dense_row_major() || !matches!(idx.dtype(), DType::Long | DType::Int) {
        return Err(ctx.dtype_err("indices", "contiguous int64 or int32", idx.dtype()));
    }
    let wv = cast_to::<i64>(&w);
    let out = out_tensor(ctx, outs, 0, "out")?;
    let mut sizes = idx.sizes().to_vec();
    sizes.push(dim);
    resize(ctx, out, "out", &sizes)?;
    if !out.shape().is_dense_row_major() {
        return Err(ctx.invalid("out", "out must be contiguous"));
    }
    let gsize = dim / groups;
    let mut bad = None;
    with_out::<f32>(ctx, out, true, |dst| {
        for (k, &id) in ids.iter().enumerate() {
            let row = if id < 0 { id + rows as i64 } else { id };
            if row < 0 || row >= rows as i64 {
                bad = Some(id);
                return;
            }
            let row = row as usize;
            for j in 0..dim {
                let g = row * groups + j / gsize;
                dst[k * dim + j] = ((wv[row * dim + j] as f64 - zv[g]) * sv[g]) as f32;
            }
        }
    })?;
    match bad {
        Some(id) => Err(ctx.invalid("indices", format!("index {id} out of range for {rows} rows"))),
        None => Ok(()),
    }
}

/// The groups per row of an embedding table's `weight_scales`: `[rows]` is one group,
/// `[rows, groups]` splits each row of `dim` values into `groups` equal parts.
pub(crate) fn scale_groups(
    ctx: &KernelContext,
    scales: &TensorRef<'_>,
    rows: usize,
    dim: usize,
) -> Result<usize, KernelError> {
    match scales.sizes() {
        [r] if *r == rows => Ok(1),
        [r, g] if *r == rows && *g > 0 && dim.is_multiple_of(*g) => Ok(*g),
        other => Err(ctx.shape_err(
            "weight_scales",
            format!("[{rows}] or [{rows}, groups dividing {dim}]"),
            other,
        )),
    }
}

/// The error for `weight_zero_points` `z` that do not match `weight_scales` (the expected
/// shape, after `what`).
pub(crate) fn zero_points_err(
    ctx: &KernelContext,
    scales: &TensorRef<'_>,
    z: &TensorRef<'_>,
    what: &str,
) -> KernelError {
    ctx.shape_err("weight_zero_points", format!("{what}{:?}", scales.sizes()), z.sizes())
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("quantized_decomposed::quantize_per_tensor.out", 6, |c, a, o| {
            per_tensor(c, a, o, true, false)
        }),
        out1("quantized_decomposed::quantize_per_tensor.Tensor_out", 6, |c, a, o| {
            per_tensor(c, a, o, true, true)
        }),
        out1("quantized_decomposed::dequantize_per_tensor.out", 7, |c, a, o| {
            per_tensor(c, a, o, false, false)
        }),
        out1("quantized_decomposed::dequantize_per_tensor.Tensor_out", 7, |c, a, o| {
            per_tensor(c, a, o, false, true)
        }),
        out1("quantized_decomposed::quantize_per_channel.out", 7, |c, a, o| {
            per_channel(c, a, o, true)
        }),
        out1("quantized_decomposed::dequantize_per_channel.out", 8, |c, a, o| {
            per_channel(c, a, o, false)
        }),
        out1("quantized_decomposed::embedding_byte.out", 6, |c, a, o| {
            embedding_byte(c, a, o, None)
        }),
        out1("quantized_decomposed::embedding_byte.dtype_out", 7, |c, a, o| {
            embedding_byte(c, a, o, Some(6))
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A weight's channels dequantized block by block equal the general loop's formula,
    /// `(q - zp[c]) as f32 * scale[c] as f32`, element by element.
    #[test]
    fn channel_blocks_equal_the_general_formula() {
        let mut rng = fastrand::Rng::with_seed(79);
        for case in 0..50 {
            let (n, per) = (rng.usize(1..20), rng.usize(1..70));
            let x: Vec<i8> = (0..n * per).map(|_| rng.i8(..)).collect();
            let zps: Vec<i32> = (0..n).map(|_| rng.i32(-128..128)).collect();
            let scales: Vec<f64> = (0..n).map(|_| rng.f64() * 0.1 + 1e-4).collect();
            let mut got = vec![0f32; n * per];
            dequantize_blocks(&x, &zps, &scales, &mut got);
            for (i, (&q, &g)) in x.iter().zip(&got).enumerate() {
                let c = i / per;
                let want = (i64::from(q) - i64::from(zps[c])) as f32 * scales[c] as f32;
                assert_eq!(g.to_bits(), want.to_bits(), "case {case} element {i}");
            }
        }
    }
}
