//! Weight-only quantized kernels (`quantized_decomposed`): `embedding_2bit` / `embedding_4bit`
//! (`.out` and `.dtype_out`: packed sub-byte embedding rows with per-row or per-group scales)
//! and `mixed_mm` / `mixed_linear` (float activations times int8 weights with per-row or
//! per-group scales), as ExecuTorch's quantized kernels compute them.
//!
//! Packing (ExecuTorch's `embeddingxb`): a `uint8` weight row of `P` bytes holds `4P` 2-bit
//! values (value `k` in bits `2(k%4)..`, stored offset by +2) or `2P` 4-bit values (even `k`
//! in the high nibble, odd `k` in the low one, stored offset by +8). Each value dequantizes as
//! `(w - zero_point) * scale` in `f32`. Indices must lie in `[0, rows)`.
//!
//! `mixed_mm(input [m, n], weight [n, p], scales [n])` is
//! `sum_k input[i, k] * weight[k, j] * scales[k]`; `mixed_linear(input [m, n], weight [p, n],
//! scales [p] or [p, G])` is `sum_g scales[j, g] * sum_{k in group g} input[i, k] * weight[j, k]`
//! with groups of `ceil(n / G)` columns. Arithmetic is ExecuTorch's: `f32`, and every
//! operation between float16 operands (or stored into a float16 accumulator) rounds to
//! float16. Weight zero points are rejected, as in ExecuTorch
//! ("zero points not supported yet"), and so is a group count that does not tile `n`.

use crate::dtype::DType;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::dense::{logical, store_logical};
use crate::ops::pointwise::resize;
use crate::ops::quant::{scale_groups, zero_points_err, EmbeddingArgs};
use crate::tensor::TensorRef;
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// The signed value `k` of a packed `nbit` row.
fn unpack(row: &[u8], k: usize, nbit: usize) -> i32 {
    if nbit == 2 {
        ((row[k / 4] >> (2 * (k % 4))) & 3) as i32 - 2
    } else if k.is_multiple_of(2) {
        (row[k / 2] >> 4) as i32 - 8
    } else {
        (row[k / 2] & 0x0F) as i32 - 8
    }
}

fn out_float(ctx: &KernelContext, dt: DType, what: &'static str) -> KResult {
    if matches!(dt, DType::Float | DType::Half | DType::BFloat16) {
        Ok(())
    } else {
        Err(ctx.dtype_err(what, "float32, float16 or bfloat16", dt))
    }
}

fn embedding_xbit(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    nbit: usize,
    dtype_pos: Option<usize>,
) -> KResult {
    let EmbeddingArgs { w, scales, zps, qmin, qmax, idx, dtype: want } =
        EmbeddingArgs::read(&Args::new(ctx, args), dtype_pos)?;
    if qmin > qmax {
        return Err(ctx.invalid("weight_quant_min", format!("{qmin} > weight_quant_max {qmax}")));
    }
    if w.dtype() != DType::Byte {
        return Err(ctx.dtype_err("weight", "uint8 (packed values)", w.dtype()));
    }
    let (rows, packed) = match w.sizes() {
        &[r, p] => (r, p),
        other => return Err(ctx.shape_err("weight", "[num_embeddings, packed_dim]", other)),
    };
    let dim = packed * (8 / nbit);
    out_float(ctx, scales.dtype(), "weight_scales")?;
    let groups = scale_groups(ctx, &scales, rows, dim)?;
    let sv = logical::<f32>(&scales);
    let zv = match &zps {
        Some(z) if z.sizes() == scales.sizes() && z.dtype().is_float() => logical::<f32>(z),
        Some(z) => return Err(zero_points_err(ctx, &scales, z, "a floating tensor of shape ")),
        None => vec![0.0; sv.len()],
    };
    if !matches!(idx.dtype(), DType::Long | DType::Int) {
        return Err(ctx.dtype_err("indices", "int64 or int32", idx.dtype()));
    }
    let ids = logical::<i64>(&idx);
    let wv = logical::<u8>(&w);
    let out = out_tensor(ctx, outs, 0, "out")?;
    out_float(ctx, out.dtype(), "out")?;
    if let Some(d) = want {
        if d != out.dtype() {
            return Err(ctx.dtype_err("out", format!("{d} (the dtype argument)"), out.dtype()));
        }
    }
    let mut sizes = idx.sizes().to_vec();
    sizes.push(dim);
    resize(ctx, out, "out", &sizes)?;
    let gsize = dim / groups;
    let mut res = Vec::with_capacity(ids.len() * dim);
    for &id in &ids {
        let row = usize::try_from(id).ok().filter(|&r| r < rows).ok_or_else(|| {
            ctx.invalid("indices", format!("index {id} out of range for {rows} rows"))
        })?;
        let bytes = &wv[row * packed..(row + 1) * packed];
        for k in 0..dim {
            let g = row * groups + k / gsize;
            res.push((unpack(bytes, k, nbit) as f32 - zv[g]) * sv[g]);
        }
    }
    store_logical(ctx, out, &res, true)
}

/// `v` rounded to float16 when `half` (an operation on `c10::Half` operands), else as is.
fn narrow(v: f32, half: bool) -> f32 {
    if half {
        half::f16::from_f32(v).to_f32()
    } else {
        v
    }
}

/// Checks shared by the mixed kernels: 2-D float input, int8 weight, scales in the input's
/// dtype, no zero points.
fn mixed_common(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    w: &TensorRef<'_>,
    s: &TensorRef<'_>,
    zp: Option<TensorRef<'_>>,
) -> Result<(usize, usize), KernelError> {
    if !matches!(x.dtype(), DType::Float | DType::Half) {
        return Err(ctx.dtype_err("input", "float32 or float16", x.dtype()));
    }
    let (m, n) = match x.sizes() {
        &[m, n] => (m, n),
        other => return Err(ctx.shape_err("input", "[m, n]", other)),
    };
    if w.dtype() != DType::Char || w.rank() != 2 {
        return Err(ctx.shape_err("weight", "a 2-D int8 tensor", w.sizes()));
    }
    if s.dtype() != x.dtype() {
        return Err(ctx.dtype_err(
            "weight_scales",
            format!("{} (the input dtype)", x.dtype()),
            s.dtype(),
        ));
    }
    if zp.is_some() {
        return Err(ctx.invalid("weight_zero_points", "weight zero points are not supported"));
    }
    Ok((m, n))
}

fn mixed_mm(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let w = a.tensor(1, "weight")?;
    let s = a.tensor(2, "weight_scales")?;
    let zp = a.opt_tensor(3, "weight_zero_points")?;
    let (m, n) = mixed_common(ctx, &x, &w, &s, zp)?;
    let p = match w.sizes() {
        &[k, p] if k == n => p,
        other => return Err(ctx.shape_err("weight", format!("[{n}, p]"), other)),
    };
    if s.sizes() != [n] {
        return Err(ctx.shape_err("weight_scales", format!("[{n}]"), s.sizes()));
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != x.dtype() {
        return Err(ctx.dtype_err("out", format!("{} (the input dtype)", x.dtype()), out.dtype()));
    }
    resize(ctx, out, "out", &[m, p])?;
    let half = x.dtype() == DType::Half;
    let (xv, wv, sv) = (logical::<f32>(&x), logical::<f32>(&w), logical::<f32>(&s));
    let mut res = Vec::with_capacity(m * p);
    for i in 0..m {
        for j in 0..p {
            let mut sum = 0.0f32;
            for k in 0..n {
                let term = narrow(narrow(xv[i * n + k] * wv[k * p + j], half) * sv[k], half);
                sum = narrow(sum + term, half);
            }
            res.push(sum);
        }
    }
    store_logical(ctx, out, &res, true)
}

fn mixed_linear(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let w = a.tensor(1, "weight")?;
    let s = a.tensor(2, "weight_scales")?;
    let zp = a.opt_tensor(3, "weight_zero_points")?;
    let want = a.opt_dtype(4, "dtype")?;
    let (m, n) = mixed_common(ctx, &x, &w, &s, zp)?;
    let p = match w.sizes() {
        &[p, k] if k == n => p,
        other => return Err(ctx.shape_err("weight", format!("[p, {n}]"), other)),
    };
    let groups = match s.sizes() {
        [r] if *r == p => 1,
        [r, g] if *r == p && *g > 0 => *g,
        other => {
            return Err(ctx.shape_err("weight_scales", format!("[{p}] or [{p}, groups]"), other))
        }
    };
    let gsize = n.div_ceil(groups).max(1);
    if n.div_ceil(gsize) != groups && n > 0 {
        return Err(ctx.invalid(
            "weight_scales",
            format!(
                "{groups} groups of ceil({n} / {groups}) = {gsize} columns do not tile {n} columns"
            ),
        ));
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    if !matches!(out.dtype(), DType::Float | DType::Half) {
        return Err(ctx.dtype_err("out", "float32 or float16", out.dtype()));
    }
    if let Some(d) = want {
        if d != out.dtype() {
            return Err(ctx.dtype_err("out", format!("{d} (the dtype argument)"), out.dtype()));
        }
    }
    resize(ctx, out, "out", &[m, p])?;
    let in_half = x.dtype() == DType::Half;
    let out_half = out.dtype() == DType::Half;
    let (xv, wv, sv) = (logical::<f32>(&x), logical::<f32>(&w), logical::<f32>(&s));
    let mut res = Vec::with_capacity(m * p);
    for i in 0..m {
        let row = &xv[i * n..(i + 1) * n];
        for j in 0..p {
            let wr = &wv[j * n..(j + 1) * n];
            let mut sum = 0.0f32;
            for (g, (xc, wc)) in row.chunks(gsize).zip(wr.chunks(gsize)).enumerate() {
                let mut part = 0.0f32;
                for (a, b) in xc.iter().zip(wc) {
                    part = narrow(part + narrow(a * b, in_half), out_half);
                }
                let scaled = narrow(part * sv[j * groups + g], in_half && out_half);
                sum = narrow(sum + scaled, out_half);
            }
            res.push(sum);
        }
    }
    store_logical(ctx, out, &res, true)
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("quantized_decomposed::embedding_2bit.out", 6, |c, a, o| {
            embedding_xbit(c, a, o, 2, None)
        }),
        out1("quantized_decomposed::embedding_2bit.dtype_out", 7, |c, a, o| {
            embedding_xbit(c, a, o, 2, Some(6))
        }),
        out1("quantized_decomposed::embedding_4bit.out", 6, |c, a, o| {
            embedding_xbit(c, a, o, 4, None)
        }),
        out1("quantized_decomposed::embedding_4bit.dtype_out", 7, |c, a, o| {
            embedding_xbit(c, a, o, 4, Some(6))
        }),
        out1("quantized_decomposed::mixed_mm.out", 4, |c, a, o| mixed_mm(c, a, o)),
        out1("quantized_decomposed::mixed_linear.out", 5, |c, a, o| mixed_linear(c, a, o)),
    ]
}
