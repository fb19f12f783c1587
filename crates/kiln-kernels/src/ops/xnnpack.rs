//! `kiln_xnnpack::*` kernels: the quantized nodes of ExecuTorch's XNNPACK delegate payload,
//! computed with XNNPACK's own integer arithmetic ([`crate::compute::xnn_quant`]).
//!
//! Activations are in the payload's physical layout (NHWC for convolution and pooling).
//! Dtypes: qint8 is `Char`, quint8 `Byte`, int32 `Int`, fp32 `Float`. Scales and fused bounds
//! arrive as doubles and are used as f32 (XNNPACK stores `float`); quantized scales must be
//! positive normal floats and zero points inside their dtype's range. Fused float bounds
//! `[output_min, output_max]` (±inf allowed) become integer bounds by
//! `xnn_qs8_quantize`.
//!
//! Kernels (inputs, then the out tensor):
//! - `convert.out(x, x_scale, x_zero_point, out_scale, out_zero_point, out)`: f32 → Char/Byte,
//!   Char/Byte → f32, Char → Char and Byte → Byte (XNNPACK's `qs8-vcvt` / `qu8-vcvt`).
//! - `qd8_fully_connected.out(x, weight, weight_kind, scales, block_size, bias, output_min,
//!   output_max, out)`: dynamic per-row int8 activations times qc8w (0), qc4w (1) or qb4w (2)
//!   weights, or any of them laid out once as panels of 16 output channels (3: int8, 4: 4-bit
//!   weights two a byte; `xnn_quant::qd8_panel_shapes`, block size 0 for per-channel scales).
//! - `qs8_fully_connected.out(x, x_scale, x_zero_point, weight, weight_scales, bias,
//!   out_scale, out_zero_point, output_min, output_max, out)`.
//! - `qs8_convolution.out(x, x_scale, x_zero_point, weight, weight_scales, bias, stride,
//!   padding, dilation, groups, depthwise, out_scale, out_zero_point, output_min, output_max,
//!   out)`.
//! - `qs8_add.out` / `qs8_subtract.out` / `qs8_multiply.out(a, a_scale, a_zero_point, b,
//!   b_scale, b_zero_point, out_scale, out_zero_point, output_min, output_max, out)`, with
//!   numpy broadcasting.
//! - `qs8_global_avg_pool.out(x, x_scale, x_zero_point, out_scale, out_zero_point,
//!   output_min, output_max, out)`: NHWC `[N, H, W, C]` → `[N, 1, 1, C]`.
//! - `qs8_max_pool.out(x, kernel, stride, padding, dilation, out)`: NHWC max pooling, padding
//!   (rows, columns) on both sides.

use std::borrow::Cow;

use crate::compute::strided::broadcast_shape;
use crate::compute::xnn_lut::{lookup_qs8, Qs8Table};
use crate::compute::xnn_qconv::PackedQs8Conv;
use crate::compute::xnn_quant::{self as xq, ConvGeometry, Qd8Weights, Qs8Out};
use crate::dtype::DType;
use crate::element::Element;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::dense::{logical, store_logical};
use crate::ops::pointwise::{map2, resize};
use crate::ops::pool::MaxPool2d;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// The elements of `t` (whose dtype is `T`, checked by the caller) in logical row-major
/// order, borrowed when `t` is dense row-major.
fn dense<'a, T: Element>(t: &TensorRef<'a>) -> Cow<'a, [T]> {
    if t.shape().is_dense_row_major() {
        if let Ok(s) = t.as_slice::<T>() {
            return Cow::Borrowed(s);
        }
    }
    Cow::Owned(logical::<T>(t))
}

/// Runs `f` on `out`'s elements (dtype `T`, checked by the caller; already resized) in
/// logical row-major order, through a temporary when `out` is not dense row-major.
fn write_out<T: Element>(
    ctx: &KernelContext,
    out: &mut TensorMut<'_>,
    f: impl FnOnce(&mut [T]),
) -> KResult {
    if out.dtype() != T::DTYPE {
        return Err(ctx.dtype_err("out", format!("{}", T::DTYPE), out.dtype()));
    }
    if out.shape().is_dense_row_major() {
        let s = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        f(s);
        Ok(())
    } else {
        let mut tmp = vec![T::default(); out.numel()];
        f(&mut tmp);
        store_logical(ctx, out, &tmp, false)
    }
}

/// A quantization scale: a positive normal f32.
fn scale_arg(a: &Args<'_, '_>, pos: usize, name: &'static str) -> Result<f32, KernelError> {
    let v = a.double(pos, name)?;
    let s = v as f32;
    if s.is_normal() && s > 0.0 {
        Ok(s)
    } else {
        Err(a.ctx.invalid(name, format!("scale {v} is not a positive normal float32")))
    }
}

/// The zero-point range of a quantized dtype.
fn zp_range(dt: DType) -> (i64, i64) {
    if dt == DType::Byte {
        (0, 255)
    } else {
        (-128, 127)
    }
}

/// A zero point of dtype `dt` (Char or Byte).
fn zp_arg(a: &Args<'_, '_>, pos: usize, name: &'static str, dt: DType) -> Result<i32, KernelError> {
    let v = a.int(pos, name)?;
    let (lo, hi) = zp_range(dt);
    if (lo..=hi).contains(&v) {
        Ok(v as i32)
    } else {
        Err(a.ctx.invalid(name, format!("zero point {v} outside [{lo}, {hi}] for {dt}")))
    }
}

/// The fused float bounds `[output_min, output_max]` at `pos`, `pos + 1` (±inf allowed; NaN
/// and `min > max` rejected).
fn bounds_arg(a: &Args<'_, '_>, pos: usize) -> Result<(f32, f32), KernelError> {
    let lo = a.double(pos, "output_min")? as f32;
    let hi = a.double(pos + 1, "output_max")? as f32;
    if lo.is_nan() || hi.is_nan() || lo > hi {
        return Err(a.ctx.invalid("output_min", format!("bounds [{lo}, {hi}] are not a range")));
    }
    Ok((lo, hi))
}

/// Output scale, zero point and fused bounds of a QS8 node, as a [`Qs8Out`] plus the scale.
fn qs8_out_arg(
    a: &Args<'_, '_>,
    scale_pos: usize,
    zp_pos: usize,
    bounds_pos: usize,
) -> Result<(f32, Qs8Out), KernelError> {
    let s = scale_arg(a, scale_pos, "out_scale")?;
    let zp = zp_arg(a, zp_pos, "out_zero_point", DType::Char)?;
    let (lo, hi) = bounds_arg(a, bounds_pos)?;
    let (qmin, qmax) = xq::qs8_output_range(lo, hi, s, zp);
    if qmin > qmax {
        return Err(a.ctx.invalid("output_min", "the quantized bounds are empty"));
    }
    Ok((s, Qs8Out { zero_point: zp, qmin, qmax }))
}

fn want_dtype(ctx: &KernelContext, t: &TensorRef<'_>, name: &'static str, dt: DType) -> KResult {
    if t.dtype() == dt {
        Ok(())
    } else {
        Err(ctx.dtype_err(name, format!("{dt}"), t.dtype()))
    }
}

/// Per-channel weight scales: f32 `[n]`, or `[1]` (per tensor) repeated; each a positive
/// normal float.
fn weight_scales(
    ctx: &KernelContext,
    s: &TensorRef<'_>,
    n: usize,
) -> Result<Vec<f32>, KernelError> {
    want_dtype(ctx, s, "weight_scales", DType::Float)?;
    let v = match s.sizes() {
        [m] if *m == n => logical::<f32>(s),
        [1] => vec![logical::<f32>(s)[0]; n],
        other => return Err(ctx.shape_err("weight_scales", format!("[{n}] or [1]"), other)),
    };
    if let Some(bad) = v.iter().find(|x| !(x.is_normal() && **x > 0.0)) {
        return Err(ctx.invalid("weight_scales", format!("scale {bad} is not positive normal")));
    }
    Ok(v)
}

/// An optional bias of dtype `dt` and shape `[n]`.
fn bias_arg<T: Element>(
    ctx: &KernelContext,
    b: Option<TensorRef<'_>>,
    n: usize,
) -> Result<Option<Vec<T>>, KernelError> {
    match b {
        None => Ok(None),
        Some(b) => {
            want_dtype(ctx, &b, "bias", T::DTYPE)?;
            if b.sizes() != [n] {
                return Err(ctx.shape_err("bias", format!("[{n}]"), b.sizes()));
            }
            Ok(Some(logical::<T>(&b)))
        }
    }
}

/// `[..., k]` input: `(k, leading sizes)`; rejects rank 0 and `k == 0`.
fn rows(ctx: &KernelContext, x: &TensorRef<'_>) -> Result<(usize, Vec<usize>), KernelError> {
    match x.sizes().split_last() {
        Some((&k, lead)) if k > 0 => Ok((k, lead.to_vec())),
        _ => Err(ctx.shape_err("x", "[..., K] with K > 0", x.sizes())),
    }
}

fn convert(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "x")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let (xd, od) = (x.dtype(), out.dtype());
    let quant = |d: DType| matches!(d, DType::Char | DType::Byte);
    if !(xd == DType::Float && quant(od) || quant(xd) && (od == DType::Float || od == xd)) {
        return Err(ctx.invalid(
            "out",
            format!("unsupported conversion {xd} -> {od} (f32 <-> int8/uint8, or int8 -> int8 / uint8 -> uint8)"),
        ));
    }
    resize(ctx, out, "out", x.sizes())?;
    match (xd, od) {
        (DType::Float, _) => {
            let s = scale_arg(&a, 3, "out_scale")?;
            let zp = zp_arg(&a, 4, "out_zero_point", od)?;
            let v = dense::<f32>(&x);
            if od == DType::Char {
                write_out::<i8>(ctx, out, |d| xq::f32_to_qs8(&v, s, zp, d))
            } else {
                write_out::<u8>(ctx, out, |d| xq::f32_to_qu8(&v, s, zp, d))
            }
        }
        (_, DType::Float) => {
            let s = scale_arg(&a, 1, "x_scale")?;
            let zp = zp_arg(&a, 2, "x_zero_point", xd)?;
            if xd == DType::Char {
                let v = dense::<i8>(&x);
                write_out::<f32>(ctx, out, |d| xq::qs8_to_f32(&v, s, zp, d))
            } else {
                let v = dense::<u8>(&x);
                write_out::<f32>(ctx, out, |d| xq::qu8_to_f32(&v, s, zp, d))
            }
        }
        _ => {
            let si = scale_arg(&a, 1, "x_scale")?;
            let zi = zp_arg(&a, 2, "x_zero_point", xd)?;
            let so = scale_arg(&a, 3, "out_scale")?;
            let zo = zp_arg(&a, 4, "out_zero_point", od)?;
            let p = xq::q8_cvt_params(si, zi, so, zo).ok_or_else(|| {
                ctx.invalid(
                    "out_scale",
                    format!("x_scale / out_scale = {} is outside XNNPACK's [2^-8, 2^7]", si / so),
                )
            })?;
            if xd == DType::Char {
                let v = dense::<i8>(&x);
                write_out::<i8>(ctx, out, |d| xq::qs8_cvt(&v, &p, d))
            } else {
                let v = dense::<u8>(&x);
                write_out::<u8>(ctx, out, |d| xq::qu8_cvt(&v, &p, d))
            }
        }
    }
}

fn qd8_fully_connected(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "x")?;
    let w = a.tensor(1, "weight")?;
    let kind = a.int(2, "weight_kind")?;
    let s = a.tensor(3, "scales")?;
    let block = a.int(4, "block_size")?;
    let bias = a.opt_tensor(5, "bias")?;
    let (lo, hi) = bounds_arg(&a, 6)?;
    want_dtype(ctx, &x, "x", DType::Float)?;
    let (k, osizes) = rows(ctx, &x)?;
    want_dtype(ctx, &s, "scales", DType::Float)?;
    if let Some(form) = panel_form(kind) {
        return qd8_fully_connected_panels(
            ctx,
            (&x, k, osizes),
            (&w, &s, block, form),
            bias,
            (lo, hi),
            outs,
        );
    }
    let (wdt, cols) = match kind {
        0 => (DType::Char, k),
        1 => (DType::Byte, k.div_ceil(2)),
        2 => {
            if block <= 0 || block % 32 != 0 || k as i64 % block != 0 {
                return Err(ctx.invalid(
                    "block_size",
                    format!("{block} is not a positive multiple of 32 dividing K = {k}"),
                ));
            }
            (DType::Byte, k / 2)
        }
        _ => {
            return Err(ctx.invalid(
                "weight_kind",
                format!(
                    "{kind} is not 0 (qc8w), 1 (qc4w), 2 (qb4w), 3 (int8 panels) or 4 (int4 panels)"
                ),
            ))
        }
    };
    want_dtype(ctx, &w, "weight", wdt)?;
    let n = match w.sizes() {
        &[n, c] if c == cols => n,
        other => return Err(ctx.shape_err("weight", format!("[N, {cols}]"), other)),
    };
    let want_scales: Vec<usize> = if kind == 2 { vec![n, k / block as usize] } else { vec![n] };
    if s.sizes() != want_scales.as_slice() {
        return Err(ctx.shape_err("scales", format!("{want_scales:?}"), s.sizes()));
    }
    let bias = bias_arg::<f32>(ctx, bias, n)?;
    let out = qd8_out(ctx, outs, osizes, n)?;
    let (xv, sv) = (dense::<f32>(&x), dense::<f32>(&s));
    let w8: Cow<'_, [i8]> = if kind == 0 { dense::<i8>(&w) } else { Cow::Borrowed(&[]) };
    let w4: Cow<'_, [u8]> = if kind == 0 { Cow::Borrowed(&[]) } else { dense::<u8>(&w) };
    let weights = match kind {
        0 => Qd8Weights::Qc8w { w: &w8, scales: &sv },
        1 => Qd8Weights::Qc4w { w: &w4, scales: &sv },
        _ => Qd8Weights::Qb4w { w: &w4, scales: &sv, block_size: block as usize },
    };
    if !weights.fits(n, k) {
        return Err(ctx.shape_err("weight", format!("[{n}, {cols}]"), w.sizes()));
    }
    qd8_compute(ctx, (&xv, k), &weights, bias.as_deref(), (lo, hi), out)
}

/// The float32 output of a QD8 fully connected layer: `rows` (its leading sizes) plus `n`.
fn qd8_out<'o, 'x>(
    ctx: &KernelContext,
    outs: &'o mut [Out<'_, 'x>],
    mut rows: Vec<usize>,
    n: usize,
) -> Result<&'o mut TensorMut<'x>, KernelError> {
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != DType::Float {
        return Err(ctx.dtype_err("out", "float32", out.dtype()));
    }
    rows.push(n);
    resize(ctx, out, "out", &rows)?;
    Ok(out)
}

/// Runs a QD8 fully connected layer whose arguments were checked: the scalar loops when the
/// context asks for them, else the fast ones.
fn qd8_compute(
    ctx: &KernelContext,
    (x, k): (&[f32], usize),
    weights: &Qd8Weights<'_>,
    bias: Option<&[f32]>,
    (lo, hi): (f32, f32),
    out: &mut TensorMut<'_>,
) -> KResult {
    let n = out.sizes().last().copied().unwrap_or(0);
    write_out::<f32>(ctx, out, |d| {
        if ctx.general_only {
            xq::qd8_fully_connected_scalar(x, k, weights, n, bias, lo, hi, d)
        } else {
            xq::qd8_fully_connected(x, k, weights, n, bias, lo, hi, d, &ctx.threads)
        }
    })
}

/// The panel form of weight kind 3 (int8 panels) and 4 (int4 panels).
fn panel_form(kind: i64) -> Option<xq::Qd8PanelForm> {
    match kind {
        3 => Some(xq::Qd8PanelForm::Int8),
        4 => Some(xq::Qd8PanelForm::Int4),
        _ => None,
    }
}

/// `qd8_fully_connected` with weight kind 3 or 4: panels `[ceil(N / 16), blocks, segment]` of
/// [`Qd8Weights::Panels`]' layout (each block's column sums, then its weights four inputs per
/// channel, as bytes or two a byte) and their scales `[ceil(N / 16), 1, 16]` (block size 0:
/// per channel) or `[ceil(N / 16), K / block, 16]`; `N` is the output's last dimension.
fn qd8_fully_connected_panels(
    ctx: &KernelContext,
    (x, k, osizes): (&TensorRef<'_>, usize, Vec<usize>),
    (w, s, block, form): (&TensorRef<'_>, &TensorRef<'_>, i64, xq::Qd8PanelForm),
    bias: Option<TensorRef<'_>>,
    (lo, hi): (f32, f32),
    outs: &mut [Out<'_, '_>],
) -> KResult {
    want_dtype(ctx, w, "weight", DType::Char)?;
    let n = match outs.first() {
        Some(Out::Tensor(o)) => o.sizes().last().copied().unwrap_or(0),
        _ => 0,
    };
    let shapes =
        usize::try_from(block).ok().and_then(|b| Some((b, xq::qd8_panel_shapes(n, k, b, form)?)));
    let Some((block, (wshape, sshape))) = shapes else {
        let need = if form == xq::Qd8PanelForm::Int4 { 8 } else { 4 };
        return Err(ctx.invalid(
            "block_size",
            format!("{block} is not 0 or a multiple of {need} dividing K = {k}"),
        ));
    };
    if s.sizes() != sshape {
        return Err(ctx.shape_err("scales", format!("{sshape:?}"), s.sizes()));
    }
    if w.sizes() != wshape {
        return Err(ctx.shape_err("weight", format!("{wshape:?}"), w.sizes()));
    }
    let bias = bias_arg::<f32>(ctx, bias, n)?;
    let out = qd8_out(ctx, outs, osizes, n)?;
    let (xv, sv, wv) = (dense::<f32>(x), dense::<f32>(s), dense::<i8>(w));
    let weights = Qd8Weights::Panels { w: &wv, scales: &sv, block_size: block, form };
    qd8_compute(ctx, (&xv, k), &weights, bias.as_deref(), (lo, hi), out)
}

fn qs8_fully_connected(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "x")?;
    let x_scale = scale_arg(&a, 1, "x_scale")?;
    let x_zp = zp_arg(&a, 2, "x_zero_point", DType::Char)?;
    let w = a.tensor(3, "weight")?;
    let ws = a.tensor(4, "weight_scales")?;
    let bias = a.opt_tensor(5, "bias")?;
    let (out_scale, o) = qs8_out_arg(&a, 6, 7, 8)?;
    want_dtype(ctx, &x, "x", DType::Char)?;
    want_dtype(ctx, &w, "weight", DType::Char)?;
    let (k, mut osizes) = rows(ctx, &x)?;
    let n = match w.sizes() {
        &[n, c] if c == k => n,
        other => return Err(ctx.shape_err("weight", format!("[N, {k}] (K from x)"), other)),
    };
    let scales = xq::qs8_requant_scales(x_scale, &weight_scales(ctx, &ws, n)?, out_scale);
    let bias = bias_arg::<i32>(ctx, bias, n)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != DType::Char {
        return Err(ctx.dtype_err("out", "int8", out.dtype()));
    }
    osizes.push(n);
    resize(ctx, out, "out", &osizes)?;
    let (xv, wv) = (dense::<i8>(&x), dense::<i8>(&w));
    let filter = xq::Qs8Filter { w: &wv, bias: bias.as_deref(), scales: &scales, o: &o };
    write_out::<i8>(ctx, out, |d| {
        if ctx.general_only {
            xq::qs8_fully_connected_scalar(&xv, k, x_zp, &filter, d)
        } else {
            xq::qs8_fully_connected(&xv, k, x_zp, &filter, d, &ctx.threads)
        }
    })
}

/// Non-negative entries of an int list of exactly `len` values.
fn usize_list<const N: usize>(
    a: &Args<'_, '_>,
    pos: usize,
    name: &'static str,
    min: usize,
) -> Result<[usize; N], KernelError> {
    let v = a.int_list(pos, name)?;
    if v.len() != N {
        return Err(a.ctx.invalid(name, format!("expected {N} values, got {}", v.len())));
    }
    let mut r = [0usize; N];
    for (d, &s) in r.iter_mut().zip(v) {
        *d = usize::try_from(s)
            .ok()
            .filter(|&u| u >= min && u <= 1 << 24)
            .ok_or_else(|| a.ctx.invalid(name, format!("value {s} outside [{min}, 2^24]")))?;
    }
    Ok(r)
}

/// The arguments a QS8 convolution and a QS8 transposed convolution share: input, its scale
/// and zero point, weight, weight scales, bias, stride, padding (top, right, bottom, left) and
/// dilation at positions 0-8, the output's scale, zero point and bounds at 11-14.
#[derive(Clone, Copy)]
struct Qs8ConvArgs<'x> {
    x_scale: f32,
    x_zp: i32,
    w: TensorRef<'x>,
    ws: TensorRef<'x>,
    bias: Option<TensorRef<'x>>,
    stride: [usize; 2],
    padding: [usize; 4],
    dilation: [usize; 2],
    out_scale: f32,
    o: Qs8Out,
}

impl<'x> Qs8ConvArgs<'x> {
    fn read(a: &Args<'_, 'x>) -> Result<Self, KernelError> {
        let x_scale = scale_arg(a, 1, "x_scale")?;
        let x_zp = zp_arg(a, 2, "x_zero_point", DType::Char)?;
        let w = a.tensor(3, "weight")?;
        let ws = a.tensor(4, "weight_scales")?;
        let bias = a.opt_tensor(5, "bias")?;
        let stride = usize_list::<2>(a, 6, "stride", 1)?;
        let padding = usize_list::<4>(a, 7, "padding", 0)?;
        let dilation = usize_list::<2>(a, 8, "dilation", 1)?;
        let (out_scale, o) = qs8_out_arg(a, 11, 12, 13)?;
        want_dtype(a.ctx, &w, "weight", DType::Char)?;
        Ok(Qs8ConvArgs { x_scale, x_zp, w, ws, bias, stride, padding, dilation, out_scale, o })
    }

    /// The geometry of this convolution over the NHWC input `[n, h, w, c]`: `o` output
    /// channels of a `kh x kw` kernel giving `oh x ow` pixels.
    fn geometry(
        &self,
        [n, h, w, c]: [usize; 4],
        [o, kh, kw]: [usize; 3],
        [oh, ow]: [usize; 2],
        groups: usize,
        depthwise: bool,
    ) -> ConvGeometry {
        let ([pad_top, _, _, pad_left], stride, dilation) =
            (self.padding, self.stride, self.dilation);
        ConvGeometry {
            n,
            h,
            w,
            c,
            kh,
            kw,
            oh,
            ow,
            o,
            stride,
            dilation,
            pad_top,
            pad_left,
            groups,
            depthwise,
        }
    }

    /// Checks `g`, the weight scales and the bias against it and calls `f` with the filter
    /// (weight, bias, requantization scales, output).
    fn with_filter<R>(
        &self,
        ctx: &KernelContext,
        g: &ConvGeometry,
        f: impl FnOnce(&xq::Qs8Filter) -> Result<R, KernelError>,
    ) -> Result<R, KernelError> {
        if !g.is_valid() {
            return Err(ctx.invalid("x", "sizes overflow"));
        }
        let ws = weight_scales(ctx, &self.ws, g.o)?;
        let scales = xq::qs8_requant_scales(self.x_scale, &ws, self.out_scale);
        let bias = bias_arg::<i32>(ctx, self.bias, g.o)?;
        let wv = dense::<i8>(&self.w);
        f(&xq::Qs8Filter { w: &wv, bias: bias.as_deref(), scales: &scales, o: &self.o })
    }
}

/// Resizes the int8 output to `[n, oh, ow, o]` of `g` and runs `f(x, output)` on the int8
/// input `x`.
fn run_conv(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    outs: &mut [Out<'_, '_>],
    g: &ConvGeometry,
    f: impl FnOnce(&[i8], &mut [i8]),
) -> KResult {
    want_dtype(ctx, x, "x", DType::Char)?;
    if x.sizes() != [g.n, g.h, g.w, g.c] {
        let want = format!("[{}, {}, {}, {}] (the sizes it was prepared for)", g.n, g.h, g.w, g.c);
        return Err(ctx.shape_err("x", want, x.sizes()));
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != DType::Char {
        return Err(ctx.dtype_err("out", "int8", out.dtype()));
    }
    resize(ctx, out, "out", &[g.n, g.oh, g.ow, g.o])?;
    let xv = dense::<i8>(x);
    write_out::<i8>(ctx, out, |d| f(&xv, d))
}

/// The geometry of a `qs8_convolution.out` call over an input of `x_sizes`, checked.
fn qs8_conv_geometry(
    a: &Args<'_, '_>,
    conv: &Qs8ConvArgs<'_>,
    x_sizes: &[usize],
) -> Result<ConvGeometry, KernelError> {
    let ctx = a.ctx;
    let groups = a.int(9, "groups")?;
    let depthwise = a.bool(10, "depthwise")?;
    let Qs8ConvArgs { w, stride, padding: [pt, pr, pb, pl], dilation, .. } = *conv;
    let &[n, h, wd, c] = x_sizes else {
        return Err(ctx.shape_err("x", "NHWC [N, H, W, C]", x_sizes));
    };
    if c == 0 {
        return Err(ctx.shape_err("x", "at least one channel", x_sizes));
    }
    let groups = usize::try_from(groups)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| ctx.invalid("groups", format!("{groups} is not positive")))?;
    let (oc, kh, kw) = if depthwise {
        let &[1, kh, kw, oc] = w.sizes() else {
            return Err(ctx.shape_err("weight", "depthwise [1, KH, KW, O]", w.sizes()));
        };
        if groups != c {
            return Err(
                ctx.invalid("groups", format!("{groups} != input channels {c} (depthwise)"))
            );
        }
        if !oc.is_multiple_of(c) {
            return Err(ctx.shape_err(
                "weight",
                format!("[1, KH, KW, O] with O a positive multiple of C = {c}"),
                w.sizes(),
            ));
        }
        (oc, kh, kw)
    } else {
        let &[oc, kh, kw, ci] = w.sizes() else {
            return Err(ctx.shape_err("weight", "OHWI [O, KH, KW, C/groups]", w.sizes()));
        };
        if !c.is_multiple_of(groups) || ci != c / groups {
            return Err(ctx.shape_err(
                "weight",
                format!("[O, KH, KW, {}] (C = {c} / groups = {groups})", c / groups),
                w.sizes(),
            ));
        }
        if !oc.is_multiple_of(groups) {
            return Err(ctx.invalid("groups", format!("{groups} does not divide O = {oc}")));
        }
        (oc, kh, kw)
    };
    if oc == 0 {
        return Err(ctx.shape_err("weight", "at least one output channel", w.sizes()));
    }
    let oh = ConvGeometry::out_size(h, pt, pb, kh, stride[0], dilation[0]);
    let ow = ConvGeometry::out_size(wd, pl, pr, kw, stride[1], dilation[1]);
    let (Some(oh), Some(ow)) = (oh, ow) else {
        return Err(ctx.invalid(
            "weight",
            format!(
                "kernel {kh}x{kw} (dilation {dilation:?}) does not fit the padded input {h}x{wd}"
            ),
        ));
    };
    Ok(conv.geometry([n, h, wd, c], [oc, kh, kw], [oh, ow], groups, depthwise))
}

/// A `qs8_convolution.out` call's arguments checked and its weights laid out for this CPU,
/// for an input of `x_sizes` (the input's data is not read): what a compiled step prepares
/// once, at load, and the kernel per call.
pub fn prepare_qs8_convolution(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    x_sizes: &[usize],
) -> Result<PackedQs8Conv, KernelError> {
    let a = Args::new(ctx, args);
    let conv = Qs8ConvArgs::read(&a)?;
    let g = qs8_conv_geometry(&a, &conv, x_sizes)?;
    conv.with_filter(ctx, &g, |f| {
        PackedQs8Conv::new(g, conv.x_zp, f).map_err(|e| ctx.invalid("weight", e.to_string()))
    })
}

/// Runs a prepared QS8 convolution on the int8 NHWC input `x` into `outs[0]` (resized).
pub fn run_qs8_convolution(
    ctx: &KernelContext,
    conv: &PackedQs8Conv,
    x: &TensorRef<'_>,
    outs: &mut [Out<'_, '_>],
) -> KResult {
    run_conv(ctx, x, outs, conv.geometry(), |x, d| conv.run(x, d, &ctx.threads))
}

/// Looks each element of int8 `x` up in `table` into the first out (int8, resized to `x`'s
/// sizes): the prepared form of elementwise operators between converts from and to int8.
pub fn run_qs8_lookup(
    ctx: &KernelContext,
    table: &Qs8Table,
    x: &TensorRef<'_>,
    outs: &mut [Out<'_, '_>],
) -> KResult {
    want_dtype(ctx, x, "x", DType::Char)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != DType::Char {
        return Err(ctx.dtype_err("out", "int8", out.dtype()));
    }
    resize(ctx, out, "out", x.sizes())?;
    let xv = dense::<i8>(x);
    write_out::<i8>(ctx, out, |d| lookup_qs8(&xv, table, d, &ctx.threads))
}

fn qs8_convolution(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let x = Args::new(ctx, args).tensor(0, "x")?;
    if ctx.general_only {
        let a = Args::new(ctx, args);
        let conv = Qs8ConvArgs::read(&a)?;
        let g = qs8_conv_geometry(&a, &conv, x.sizes())?;
        return conv.with_filter(ctx, &g, |f| {
            run_conv(ctx, &x, outs, &g, |x, d| xq::qs8_convolution_scalar(&g, x, conv.x_zp, f, d))
        });
    }
    let packed = prepare_qs8_convolution(ctx, args, x.sizes())?;
    run_qs8_convolution(ctx, &packed, &x, outs)
}

/// `qs8_deconvolution.out(x, x_scale, x_zero_point, weight, weight_scales, bias, stride,
/// padding, dilation, adjustment, groups, out_scale, out_zero_point, output_min, output_max,
/// out)`: XNNPACK's QS8 transposed convolution, NHWC, weight `[O, KH, KW, C/groups]`, padding
/// (top, right, bottom, left), adjustment (output padding, height and width).
fn qs8_deconvolution(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "x")?;
    let conv = Qs8ConvArgs::read(&a)?;
    let adjustment = usize_list::<2>(&a, 9, "adjustment", 0)?;
    let groups = a.int(10, "groups")?;
    let Qs8ConvArgs { w, stride, padding: [pt, pr, pb, pl], dilation, .. } = conv;
    let &[n, h, wd, c] = x.sizes() else {
        return Err(ctx.shape_err("x", "NHWC [N, H, W, C]", x.sizes()));
    };
    let groups = usize::try_from(groups)
        .ok()
        .filter(|&g| g > 0 && c.is_multiple_of(g))
        .ok_or_else(|| ctx.invalid("groups", format!("{groups} does not divide C = {c}")))?;
    let &[oc, kh, kw, ci] = w.sizes() else {
        return Err(ctx.shape_err("weight", "[O, KH, KW, C/groups]", w.sizes()));
    };
    if ci != c / groups || oc == 0 || !oc.is_multiple_of(groups) || c == 0 {
        return Err(ctx.shape_err(
            "weight",
            format!("[O, KH, KW, {}] with O a multiple of groups = {groups}", c / groups),
            w.sizes(),
        ));
    }
    // stride*(in-1) + adjustment + dil*(k-1) + 1 - pads, checked.
    let size = |input: usize, s: usize, adj: usize, d: usize, k: usize, p0: usize, p1: usize| {
        let full = s
            .checked_mul(input.checked_sub(1)?)?
            .checked_add(adj)?
            .checked_add(d.checked_mul(k.checked_sub(1)?)?)?
            .checked_add(1)?;
        full.checked_sub(p0.checked_add(p1)?).filter(|&o| o > 0)
    };
    let oh = size(h, stride[0], adjustment[0], dilation[0], kh, pt, pb);
    let ow = size(wd, stride[1], adjustment[1], dilation[1], kw, pl, pr);
    let (Some(oh), Some(ow)) = (oh, ow) else {
        return Err(ctx.invalid("padding", "no output pixel is left after the padding"));
    };
    let g = conv.geometry([n, h, wd, c], [oc, kh, kw], [oh, ow], groups, false);
    conv.with_filter(ctx, &g, |f| {
        run_conv(ctx, &x, outs, &g, |x, d| xq::qs8_deconvolution(&g, x, conv.x_zp, f, d))
    })
}

#[derive(Clone, Copy)]
enum BinOp {
    Add,
    Subtract,
    Multiply,
}

fn qs8_binary(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    op: BinOp,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "a")?;
    let a_scale = scale_arg(&a, 1, "a_scale")?;
    let a_zp = zp_arg(&a, 2, "a_zero_point", DType::Char)?;
    let y = a.tensor(3, "b")?;
    let b_scale = scale_arg(&a, 4, "b_scale")?;
    let b_zp = zp_arg(&a, 5, "b_zero_point", DType::Char)?;
    let (out_scale, o) = qs8_out_arg(&a, 6, 7, 8)?;
    want_dtype(ctx, &x, "a", DType::Char)?;
    want_dtype(ctx, &y, "b", DType::Char)?;
    if broadcast_shape(x.sizes(), y.sizes()).is_none() {
        return Err(ctx.shape_err("b", format!("broadcastable with a {:?}", x.sizes()), y.sizes()));
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != DType::Char {
        return Err(ctx.dtype_err("out", "int8", out.dtype()));
    }
    match op {
        BinOp::Add | BinOp::Subtract => {
            let sub = matches!(op, BinOp::Subtract);
            let p = xq::qs8_add_params(a_scale, a_zp, b_scale, b_zp, out_scale, sub)
                .ok_or_else(|| {
                    ctx.invalid(
                        "out_scale",
                        format!(
                            "max(a_scale, b_scale) / out_scale = {} is outside XNNPACK's [2^-10, 2^8)",
                            a_scale.max(b_scale) / out_scale
                        ),
                    )
                })?;
            elementwise(ctx, &x, &y, out, |u, v| xq::qs8_add(u, v, &p, &o))
        }
        BinOp::Multiply => {
            let s = xq::qs8_mul_scale(a_scale, b_scale, out_scale);
            elementwise(ctx, &x, &y, out, |u, v| xq::qs8_mul(u, v, a_zp, b_zp, s, &o))
        }
    }
}

/// `out = f(a, b)` over int8 tensors with numpy broadcasting: flat vector loops
/// ([`xq::qs8_rows`]) when both are dense and one is the other's shape or one row of its last
/// dim repeated, the general walk otherwise.
fn elementwise(
    ctx: &KernelContext,
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    f: impl Fn(i8, i8) -> i8 + Sync,
) -> KResult {
    let rows = |big: &TensorRef<'_>, small: &TensorRef<'_>| {
        let lead = small.sizes().split_last().map(|(_, l)| l.iter().all(|&s| s == 1));
        big.shape().is_dense_row_major()
            && small.shape().is_dense_row_major()
            && small.numel() > 0
            && (small.sizes() == big.sizes()
                || lead == Some(true)
                    && small.sizes().last() == big.sizes().last()
                    && small.rank() <= big.rank())
    };
    if rows(a, b) {
        elementwise_rows(ctx, a, b, out, f)
    } else if rows(b, a) {
        elementwise_rows(ctx, b, a, out, |u, v| f(v, u))
    } else {
        map2::<i8, i8>(ctx, a, b, out, false, f)
    }
}

/// `out = f(big, small)` where `small` is `big`'s shape or one row of it ([`xq::qs8_rows`]).
fn elementwise_rows(
    ctx: &KernelContext,
    big: &TensorRef<'_>,
    small: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    f: impl Fn(i8, i8) -> i8 + Sync,
) -> KResult {
    resize(ctx, out, "out", big.sizes())?;
    let (bv, sv) = (dense::<i8>(big), dense::<i8>(small));
    write_out::<i8>(ctx, out, |d| xq::qs8_rows(&bv, &sv, d, &ctx.threads, f))
}

fn qs8_global_avg_pool(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "x")?;
    let x_scale = scale_arg(&a, 1, "x_scale")?;
    let x_zp = zp_arg(&a, 2, "x_zero_point", DType::Char)?;
    let (out_scale, o) = qs8_out_arg(&a, 3, 4, 5)?;
    want_dtype(ctx, &x, "x", DType::Char)?;
    let &[n, h, w, c] = x.sizes() else {
        return Err(ctx.shape_err("x", "NHWC [N, H, W, C]", x.sizes()));
    };
    let hw = h.saturating_mul(w);
    if hw == 0 || hw >= 1 << 24 {
        return Err(ctx.shape_err("x", "H * W in [1, 2^24)", x.sizes()));
    }
    let p = xq::qs8_mean_params(x_scale, x_zp, out_scale, o.zero_point, hw);
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != DType::Char {
        return Err(ctx.dtype_err("out", "int8", out.dtype()));
    }
    resize(ctx, out, "out", &[n, 1, 1, c])?;
    let xv = dense::<i8>(&x);
    write_out::<i8>(ctx, out, |d| xq::qs8_global_avg_pool(&xv, n, hw, c, &p, &o, d, &ctx.threads))
}

/// `qs8_max_pool.out(x, kernel, stride, padding, dilation, out)`: max pooling of an int8 NHWC
/// `[N, H, W, C]` input in place of its layout (no transposes around it), padding (top and
/// bottom, left and right) never ahead of a value; the output `[N, OH, OW, C]`.
fn qs8_max_pool(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "x")?;
    let kernel = usize_list::<2>(&a, 1, "kernel", 1)?;
    let stride = usize_list::<2>(&a, 2, "stride", 1)?;
    let padding = usize_list::<2>(&a, 3, "padding", 0)?;
    let dilation = usize_list::<2>(&a, 4, "dilation", 1)?;
    want_dtype(ctx, &x, "x", DType::Char)?;
    let &[n, h, w, c] = x.sizes() else {
        return Err(ctx.shape_err("x", "NHWC [N, H, W, C]", x.sizes()));
    };
    let planes = n.checked_mul(c).filter(|&p| p > 0);
    let pool =
        planes.and_then(|p| MaxPool2d::new(p, [h, w], kernel, stride, padding, dilation, false));
    let Some(pool) = pool else {
        let what = format!(
            "kernel {kernel:?} stride {stride:?} padding {padding:?} dilation {dilation:?}"
        );
        return Err(ctx.invalid("kernel", format!("{what} does not fit the input {:?}", x.sizes())));
    };
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != DType::Char {
        return Err(ctx.dtype_err("out", "int8", out.dtype()));
    }
    let [oh, ow] = pool.out_size();
    resize(ctx, out, "out", &[n, oh, ow, c])?;
    let xv = dense::<i8>(&x);
    let mut failed = None;
    write_out::<i8>(ctx, out, |d| {
        failed = pool.run_nhwc(c, &xv, d, &ctx.threads).err();
    })?;
    match failed {
        Some(e) => Err(ctx.invalid("x", e.to_string())),
        None => Ok(()),
    }
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("kiln_xnnpack::convert.out", 5, |c, a, o| convert(c, a, o)),
        out1("kiln_xnnpack::qd8_fully_connected.out", 8, |c, a, o| qd8_fully_connected(c, a, o)),
        out1("kiln_xnnpack::qs8_fully_connected.out", 10, |c, a, o| qs8_fully_connected(c, a, o)),
        out1("kiln_xnnpack::qs8_convolution.out", 15, |c, a, o| qs8_convolution(c, a, o)),
        out1("kiln_xnnpack::qs8_deconvolution.out", 15, |c, a, o| qs8_deconvolution(c, a, o)),
        out1("kiln_xnnpack::qs8_add.out", 10, |c, a, o| qs8_binary(c, a, o, BinOp::Add)),
        out1("kiln_xnnpack::qs8_subtract.out", 10, |c, a, o| qs8_binary(c, a, o, BinOp::Subtract)),
        out1("kiln_xnnpack::qs8_multiply.out", 10, |c, a, o| qs8_binary(c, a, o, BinOp::Multiply)),
        out1("kiln_xnnpack::qs8_global_avg_pool.out", 7, |c, a, o| qs8_global_avg_pool(c, a, o)),
        out1("kiln_xnnpack::qs8_max_pool.out", 5, |c, a, o| qs8_max_pool(c, a, o)),
    ]
}

#[cfg(test)]
mod tests {
    use crate::{
        find_kernel, Arg, Capacity, DType, KernelContext, Out, Shape, TensorMut, TensorRef,
    };

    /// A scale of 0.1 and a zero point of 0.
    const QUANT: [Arg<'static>; 2] = [Arg::Double(0.1), Arg::Int(0)];

    /// Output bounds that clamp nothing.
    const UNBOUNDED: [Arg<'static>; 2] =
        [Arg::Double(f64::NEG_INFINITY), Arg::Double(f64::INFINITY)];

    type Res = Result<(Vec<usize>, Vec<f64>), crate::KernelError>;

    /// Runs `name` on `inputs` with an out tensor of dtype `dt`, rank `rank` and room for
    /// `cap` elements; returns the out sizes and values (as f64, exact for every dtype here).
    fn run(name: &'static str, inputs: &[Arg<'_>], dt: DType, rank: usize, cap: usize) -> Res {
        let def = find_kernel(name).expect(name);
        let mut args = inputs.to_vec();
        args.extend([Arg::Output, Arg::Output]);
        assert_eq!(args.len(), def.arity as usize, "{name}");
        let mut buf = vec![0f32; cap];
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut buf);
        let len = cap * dt.size();
        let shape = Shape::contiguous(&vec![0; rank]).unwrap();
        let om = TensorMut::new(dt, shape, Capacity::Bound(cap), &mut bytes[..len]).unwrap();
        let mut outs = [Out::Tensor(om)];
        (def.run)(&mut KernelContext::new(def.name), &args, &mut outs)?;
        let Out::Tensor(t) = &outs[0] else { unreachable!() };
        let sizes = t.sizes().to_vec();
        let n = t.numel();
        let vals = match dt {
            DType::Float => buf[..n].iter().map(|&v| v as f64).collect(),
            DType::Char => {
                let b: &[u8] = bytemuck::cast_slice(&buf);
                b[..n].iter().map(|&v| v as i8 as f64).collect()
            }
            _ => {
                let b: &[u8] = bytemuck::cast_slice(&buf);
                b[..n].iter().map(|&v| v as f64).collect()
            }
        };
        Ok((sizes, vals))
    }

    fn t<'a, T: crate::element::Element>(sizes: &[usize], v: &'a [T]) -> Arg<'a> {
        Arg::Tensor(TensorRef::from_slice(sizes, v).unwrap())
    }

    /// f64 reference quantization: clamp(round(v) + zp) with any rounding of ties.
    fn q_ref(real: f64, zp: i32, lo: i32, hi: i32) -> f64 {
        (real.round() + zp as f64).clamp(lo as f64, hi as f64)
    }

    /// The doc's `xnn_qs8_quantize` bound, written out.
    fn bound(v: f64, s: f64, zp: i64) -> i32 {
        ((v as f32 / s as f32 + zp as f32).clamp(-128.0, 127.0)).round_ties_even() as i32
    }

    fn rand_i8(rng: &mut fastrand::Rng, n: usize) -> Vec<i8> {
        (0..n).map(|_| rng.i8(..)).collect()
    }

    /// Property: f32 -> qs8 / qu8 within 1 LSB of the f64 quantization (exact off ties),
    /// qs8 -> f32 exactly `(q - zp) as f32 * scale`; hand ties through the kernel.
    #[test]
    fn convert_kernel() {
        let name = "kiln_xnnpack::convert.out";
        let x = [1.25f32, -1.25, 0.0];
        let args = [t(&[3], &x), Arg::Double(0.0), Arg::Int(0), Arg::Double(0.5), Arg::Int(3)];
        let (sz, v) = run(name, &args, DType::Char, 1, 8).unwrap();
        assert_eq!((sz, v), (vec![3], vec![5.0, 1.0, 3.0]));
        let mut rng = fastrand::Rng::with_seed(11);
        for _ in 0..50 {
            let s = rng.f64() * 0.1 + 0.001;
            let zp = rng.i64(-128..128);
            let x: Vec<f32> = (0..37).map(|_| (rng.f32() - 0.5) * 30.0).collect();
            let args = [t(&[37], &x), Arg::Double(1.0), Arg::Int(0), Arg::Double(s), Arg::Int(zp)];
            let (_, v) = run(name, &args, DType::Char, 1, 64).unwrap();
            for (&q, &xv) in v.iter().zip(&x) {
                let r = q_ref(xv as f64 / s, zp as i32, -128, 127);
                assert!((q - r).abs() <= 1.0, "{xv} / {s} + {zp}: {q} vs {r}");
            }
            let zpu = zp + 128;
            let args = [t(&[37], &x), Arg::Double(1.0), Arg::Int(0), Arg::Double(s), Arg::Int(zpu)];
            let (_, v) = run(name, &args, DType::Byte, 1, 64).unwrap();
            for (&q, &xv) in v.iter().zip(&x) {
                let r = q_ref(xv as f64 / s, zpu as i32, 0, 255);
                assert!((q - r).abs() <= 1.0);
            }
            let q = rand_i8(&mut rng, 37);
            let args = [t(&[37], &q), Arg::Double(s), Arg::Int(zp), Arg::Double(0.0), Arg::Int(0)];
            let (_, v) = run(name, &args, DType::Float, 1, 64).unwrap();
            for (&f, &qv) in v.iter().zip(&q) {
                assert_eq!(f as f32, (qv as i32 - zp as i32) as f32 * s as f32);
            }
            // qs8 -> qs8 within 1 LSB of the f64 requantization (multiplier rounded to 1/256).
            let s2 = s * (0.3 + rng.f64() * 3.0);
            let zo = rng.i64(-128..128);
            let args = [t(&[37], &q), Arg::Double(s), Arg::Int(zp), Arg::Double(s2), Arg::Int(zo)];
            let (_, v) = run(name, &args, DType::Char, 1, 64).unwrap();
            for (&o, &qv) in v.iter().zip(&q) {
                let r = q_ref((qv as f64 - zp as f64) * s / s2, zo as i32, -128, 127);
                assert!((o - r).abs() <= 1.0, "{qv}: {o} vs {r}");
            }
        }
        // Errors: int32 input, a bad zero point, a zero scale, a mismatched out dtype.
        let i = [1i32];
        let bad = [t(&[1], &i), Arg::Double(1.0), Arg::Int(0), Arg::Double(1.0), Arg::Int(0)];
        assert!(run(name, &bad, DType::Char, 1, 4).is_err());
        let f = [1.0f32];
        let bad = [t(&[1], &f), Arg::Double(1.0), Arg::Int(0), Arg::Double(1.0), Arg::Int(300)];
        assert!(run(name, &bad, DType::Char, 1, 4).is_err());
        let bad = [t(&[1], &f), Arg::Double(1.0), Arg::Int(0), Arg::Double(0.0), Arg::Int(0)];
        assert!(run(name, &bad, DType::Char, 1, 4).is_err());
        assert!(run(name, &bad, DType::Float, 1, 4).is_err());
        let q = [1i8];
        let bad = [t(&[1], &q), Arg::Double(1.0), Arg::Int(0), Arg::Double(1e4), Arg::Int(0)];
        assert!(run(name, &bad, DType::Char, 1, 4).is_err());
        assert!(run(name, &bad, DType::Byte, 1, 4).is_err());
        // Too small an out.
        let x = [0f32; 8];
        let ok = [t(&[8], &x), Arg::Double(1.0), Arg::Int(0), Arg::Double(1.0), Arg::Int(0)];
        assert!(run(name, &ok, DType::Char, 1, 4).is_err());
    }

    /// Literal doc formula for static QS8 requantization of one accumulator.
    fn requant_ref(
        acc: i32,
        s_in: f32,
        s_w: f32,
        s_out: f32,
        zp: i32,
        qmin: i32,
        qmax: i32,
    ) -> f64 {
        let scale = (s_in * s_w) / s_out;
        let v = (acc as f32 * scale).clamp((qmin - zp) as f32, (qmax - zp) as f32);
        (v.round_ties_even() as i32 + zp) as f64
    }

    /// Property: QS8 fully connected is bit-exact against the literal doc formula and within
    /// 1 LSB of the f64 dequantize-compute-quantize reference; per-tensor scales, no bias,
    /// fused bounds and 3-D inputs included.
    #[test]
    fn qs8_fully_connected_kernel() {
        let name = "kiln_xnnpack::qs8_fully_connected.out";
        let mut rng = fastrand::Rng::with_seed(21);
        for case in 0..60 {
            let (b, m, k, n) =
                (rng.usize(1..3), rng.usize(1..4), rng.usize(1..40), rng.usize(1..9));
            let x = rand_i8(&mut rng, b * m * k);
            let w = rand_i8(&mut rng, n * k);
            let per_tensor = case % 3 == 0;
            let ws: Vec<f32> =
                (0..if per_tensor { 1 } else { n }).map(|_| rng.f32() * 0.01 + 1e-4).collect();
            let bias: Vec<i32> = (0..n).map(|_| rng.i32(-5000..5000)).collect();
            let (s_in, s_out) = (rng.f64() * 0.05 + 0.001, rng.f64() * 0.5 + 0.01);
            let (zi, zo) = (rng.i64(-128..128), rng.i64(-128..128));
            let (lo, hi) =
                if case % 4 == 1 { (0.0, 6.0) } else { (f64::NEG_INFINITY, f64::INFINITY) };
            let use_bias = case % 5 != 2;
            let args = [
                t(&[b, m, k], &x),
                Arg::Double(s_in),
                Arg::Int(zi),
                t(&[n, k], &w),
                t(&[ws.len()], &ws),
                if use_bias { t(&[n], &bias) } else { Arg::None },
                Arg::Double(s_out),
                Arg::Int(zo),
                Arg::Double(lo),
                Arg::Double(hi),
            ];
            let (sz, v) = run(name, &args, DType::Char, 3, b * m * n).unwrap();
            assert_eq!(sz, vec![b, m, n]);
            let (qmin, qmax) = (bound(lo, s_out, zo), bound(hi, s_out, zo));
            for r in 0..b * m {
                for j in 0..n {
                    let mut acc = if use_bias { bias[j] } else { 0 };
                    for kk in 0..k {
                        acc += (x[r * k + kk] as i32 - zi as i32) * w[j * k + kk] as i32;
                    }
                    let sw = ws[if per_tensor { 0 } else { j }];
                    let got = v[r * n + j];
                    let exact =
                        requant_ref(acc, s_in as f32, sw, s_out as f32, zo as i32, qmin, qmax);
                    assert_eq!(got, exact, "case {case}");
                    let real = acc as f64 * s_in * sw as f64 / s_out;
                    assert!((got - q_ref(real, zo as i32, qmin, qmax)).abs() <= 1.0);
                }
            }
        }
        // Errors: K mismatch, float weight, bias of the wrong dtype / size, scales [2] for N=3.
        let x = [1i8; 4];
        let w = [1i8; 6];
        let wf = [1f32; 6];
        let s3 = [0.1f32; 3];
        let s2 = [0.1f32; 2];
        let b3 = [0i32; 3];
        let bf = [0f32; 3];
        let mk = |x: Arg<'static>, w: Arg<'static>, s: Arg<'static>, b: Arg<'static>| {
            [&[x][..], &QUANT, &[w, s, b], &QUANT, &UNBOUNDED].concat()
        };
        let xs: &'static [i8] = Box::leak(Box::new(x));
        let ws: &'static [i8] = Box::leak(Box::new(w));
        let wfs: &'static [f32] = Box::leak(Box::new(wf));
        let s3s: &'static [f32] = Box::leak(Box::new(s3));
        let s2s: &'static [f32] = Box::leak(Box::new(s2));
        let b3s: &'static [i32] = Box::leak(Box::new(b3));
        let bfs: &'static [f32] = Box::leak(Box::new(bf));
        let ok = mk(t(&[2, 2], xs), t(&[3, 2], ws), t(&[3], s3s), t(&[3], b3s));
        assert!(run(name, &ok, DType::Char, 2, 6).is_ok());
        for bad in [
            mk(t(&[1, 4], xs), t(&[3, 2], ws), t(&[3], s3s), t(&[3], b3s)),
            mk(t(&[2, 2], xs), t(&[3, 2], wfs), t(&[3], s3s), t(&[3], b3s)),
            mk(t(&[2, 2], xs), t(&[3, 2], ws), t(&[3], s3s), t(&[3], bfs)),
            mk(t(&[2, 2], xs), t(&[3, 2], ws), t(&[3], s3s), t(&[2], &b3s[..2])),
            mk(t(&[2, 2], xs), t(&[3, 2], ws), t(&[2], s2s), t(&[3], b3s)),
            mk(t(&[2, 2], xs), t(&[6], ws), t(&[3], s3s), Arg::None),
            mk(Arg::Int(3), t(&[3, 2], ws), t(&[3], s3s), Arg::None),
        ] {
            assert!(run(name, &bad, DType::Char, 2, 6).is_err());
        }
        assert!(run(name, &ok, DType::Float, 2, 6).is_err());
    }

    /// Literal doc reference for QS8 convolution, NHWC / OHWI / 1HWO, padded cells holding
    /// `zp_in` explicitly.
    #[allow(clippy::too_many_arguments)]
    fn conv_ref(
        x: &[i8],
        [n, h, w, c]: [usize; 4],
        wt: &[i8],
        kh: usize,
        kw: usize,
        oc: usize,
        st: [usize; 2],
        pad: [usize; 4],
        dil: [usize; 2],
        groups: usize,
        dw: bool,
        zi: i32,
        bias: Option<&[i32]>,
    ) -> (Vec<usize>, Vec<i32>) {
        let oh = (h + pad[0] + pad[2] - dil[0] * (kh - 1) - 1) / st[0] + 1;
        let ow = (w + pad[3] + pad[1] - dil[1] * (kw - 1) - 1) / st[1] + 1;
        let mut accs = Vec::new();
        for b in 0..n {
            for oy in 0..oh {
                for ox in 0..ow {
                    for o in 0..oc {
                        let mut acc = bias.map_or(0, |bv| bv[o]);
                        for ty in 0..kh {
                            for tx in 0..kw {
                                let iy = (oy * st[0] + ty * dil[0]) as i64 - pad[0] as i64;
                                let ix = (ox * st[1] + tx * dil[1]) as i64 - pad[3] as i64;
                                let inside =
                                    iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w;
                                let px = |ch: usize| {
                                    if inside {
                                        x[((b * h + iy as usize) * w + ix as usize) * c + ch] as i32
                                    } else {
                                        zi
                                    }
                                };
                                if dw {
                                    let ch = o / (oc / c);
                                    acc += (px(ch) - zi) * wt[(ty * kw + tx) * oc + o] as i32;
                                } else {
                                    let cg = c / groups;
                                    let g = o / (oc / groups);
                                    for ci in 0..cg {
                                        let wv = wt[((o * kh + ty) * kw + tx) * cg + ci] as i32;
                                        acc += (px(g * cg + ci) - zi) * wv;
                                    }
                                }
                            }
                        }
                        accs.push(acc);
                    }
                }
            }
        }
        (vec![n, oh, ow, oc], accs)
    }

    /// Property: QS8 convolution (grouped, depthwise with multipliers, asymmetric padding,
    /// stride, dilation) is bit-exact against the literal reference and within 1 LSB of f64.
    #[test]
    fn qs8_convolution_kernel() {
        let name = "kiln_xnnpack::qs8_convolution.out";
        let mut rng = fastrand::Rng::with_seed(31);
        let mut checked = 0;
        for case in 0..120 {
            let dw = case % 3 == 0;
            let groups = if dw { 0 } else { [1, 1, 2, 3][rng.usize(0..4)] };
            let c = if dw { rng.usize(1..6) } else { groups * rng.usize(1..4) };
            let groups = if dw { c } else { groups };
            let oc = if dw { c * rng.usize(1..3) } else { groups * rng.usize(1..4) };
            let (n, h, w) = (rng.usize(1..3), rng.usize(1..8), rng.usize(1..8));
            let (kh, kw) = (rng.usize(1..4), rng.usize(1..4));
            let st = [rng.usize(1..3), rng.usize(1..3)];
            let dil = [rng.usize(1..3), rng.usize(1..3)];
            let pad = [rng.usize(0..3), rng.usize(0..3), rng.usize(0..3), rng.usize(0..3)];
            if h + pad[0] + pad[2] < dil[0] * (kh - 1) + 1
                || w + pad[1] + pad[3] < dil[1] * (kw - 1) + 1
            {
                continue;
            }
            let x = rand_i8(&mut rng, n * h * w * c);
            let wshape = if dw { vec![1, kh, kw, oc] } else { vec![oc, kh, kw, c / groups] };
            let wt = rand_i8(&mut rng, wshape.iter().product());
            let ws: Vec<f32> = (0..oc).map(|_| rng.f32() * 0.01 + 1e-4).collect();
            let bias: Vec<i32> = (0..oc).map(|_| rng.i32(-3000..3000)).collect();
            let (s_in, s_out) = (rng.f64() * 0.05 + 0.001, rng.f64() * 0.3 + 0.01);
            let (zi, zo) = (rng.i64(-128..128), rng.i64(-128..128));
            let (lo, hi) = if case % 2 == 1 {
                (0.0, f64::INFINITY)
            } else {
                (f64::NEG_INFINITY, f64::INFINITY)
            };
            let i = |v: [usize; 2]| v.map(|x| x as i64);
            let (sl, dl, pl) = (i(st), i(dil), pad.map(|x| x as i64));
            let args = [
                t(&[n, h, w, c], &x),
                Arg::Double(s_in),
                Arg::Int(zi),
                t(&wshape, &wt),
                t(&[oc], &ws),
                t(&[oc], &bias),
                Arg::IntList(&sl),
                Arg::IntList(&pl),
                Arg::IntList(&dl),
                Arg::Int(groups as i64),
                Arg::Bool(dw),
                Arg::Double(s_out),
                Arg::Int(zo),
                Arg::Double(lo),
                Arg::Double(hi),
            ];
            let (rs, accs) = conv_ref(
                &x,
                [n, h, w, c],
                &wt,
                kh,
                kw,
                oc,
                st,
                pad,
                dil,
                groups,
                dw,
                zi as i32,
                Some(&bias),
            );
            let (sz, v) = run(name, &args, DType::Char, 4, accs.len()).unwrap();
            assert_eq!(sz, rs, "case {case}");
            let (qmin, qmax) = (bound(lo, s_out, zo), bound(hi, s_out, zo));
            for (idx, (&got, &acc)) in v.iter().zip(&accs).enumerate() {
                let o = idx % oc;
                let exact =
                    requant_ref(acc, s_in as f32, ws[o], s_out as f32, zo as i32, qmin, qmax);
                assert_eq!(got, exact, "case {case} idx {idx}");
                let real = acc as f64 * s_in * ws[o] as f64 / s_out;
                assert!((got - q_ref(real, zo as i32, qmin, qmax)).abs() <= 1.0);
            }
            checked += 1;
        }
        assert!(checked > 60);
    }

    /// Error paths of the convolution: every check returns an error, none panics.
    #[test]
    fn qs8_convolution_errors() {
        let name = "kiln_xnnpack::qs8_convolution.out";
        let x = [0i8; 2 * 3 * 3 * 4];
        let w = [1i8; 6 * 3 * 3 * 2];
        let wdw = [1i8; 3 * 3 * 8];
        let s6 = [0.1f32; 6];
        let s8 = [0.1f32; 8];
        let s1 = [0.1f32];
        let b6 = [0i32; 6];
        let xf = [0f32; 72];
        let one: [i64; 2] = [1, 1];
        let pad: [i64; 4] = [1, 1, 1, 1];
        let conv = |x: Arg<'_>,
                    w: Arg<'_>,
                    s: Arg<'_>,
                    b: Arg<'_>,
                    st: &[i64],
                    p: &[i64],
                    g: i64,
                    dw: bool| {
            let conv = [w, s, b, Arg::IntList(st), Arg::IntList(p), Arg::IntList(&one)];
            let args = [&[x][..], &QUANT, &conv, &[Arg::Int(g), Arg::Bool(dw)], &QUANT, &UNBOUNDED]
                .concat();
            run(name, &args, DType::Char, 4, 1000)
        };
        let (xa, wa, s6a) = (|| t(&[2, 3, 3, 4], &x), || t(&[6, 3, 3, 2], &w), || t(&[6], &s6));
        // Valid: groups 2, per-tensor scale, and depthwise with multiplier 2.
        assert!(conv(xa(), wa(), t(&[1], &s1), t(&[6], &b6), &one, &pad, 2, false).is_ok());
        assert!(conv(xa(), t(&[1, 3, 3, 8], &wdw), t(&[8], &s8), Arg::None, &one, &pad, 4, true)
            .is_ok());
        let bads = [
            // groups 1 but weight has C/2 channels
            conv(xa(), wa(), s6a(), Arg::None, &one, &pad, 1, false),
            // groups 4 does not divide O = 6
            conv(xa(), t(&[6, 3, 3, 1], &w[..54]), s6a(), Arg::None, &one, &pad, 4, false),
            // scales / bias of the wrong length
            conv(xa(), wa(), t(&[8], &s8), Arg::None, &one, &pad, 2, false),
            conv(xa(), wa(), s6a(), t(&[5], &b6[..5]), &one, &pad, 2, false),
            // depthwise with groups != C, and with O not a multiple of C
            conv(xa(), t(&[1, 3, 3, 8], &wdw), t(&[8], &s8), Arg::None, &one, &pad, 2, true),
            conv(xa(), t(&[1, 3, 3, 6], &wdw[..54]), s6a(), Arg::None, &one, &pad, 4, true),
            // stride 0, negative padding, 3 padding values, zero groups
            conv(xa(), wa(), s6a(), Arg::None, &[0, 1], &pad, 2, false),
            conv(xa(), wa(), s6a(), Arg::None, &one, &[-1, 0, 0, 0], 2, false),
            conv(xa(), wa(), s6a(), Arg::None, &one, &pad[..3], 2, false),
            conv(xa(), wa(), s6a(), Arg::None, &one, &pad, 0, false),
            // kernel larger than the padded input
            conv(
                xa(),
                t(&[1, 6, 3, 2], &w[..36]),
                t(&[1], &s1),
                Arg::None,
                &one,
                &[0; 4],
                2,
                false,
            ),
            // float input, 3-D input
            conv(t(&[2, 3, 3, 4], &xf), wa(), s6a(), Arg::None, &one, &pad, 2, false),
            conv(t(&[6, 3, 4], &x), wa(), s6a(), Arg::None, &one, &pad, 2, false),
            // a non-positive weight scale
            conv(xa(), wa(), t(&[1], &[0.0f32]), Arg::None, &one, &pad, 2, false),
        ];
        for (i, r) in bads.iter().enumerate() {
            assert!(r.is_err(), "bad case {i} was accepted");
        }
        // Out too small for [2, 3, 3, 6].
        let args = [
            xa(),
            Arg::Double(0.1),
            Arg::Int(0),
            t(&[6, 3, 3, 2], &w),
            t(&[6], &s6),
            Arg::None,
            Arg::IntList(&one),
            Arg::IntList(&pad),
            Arg::IntList(&one),
            Arg::Int(2),
            Arg::Bool(false),
            Arg::Double(0.1),
            Arg::Int(0),
            Arg::Double(0.0),
            Arg::Double(-1.0),
        ];
        assert!(run(name, &args, DType::Char, 4, 1000).is_err(), "min > max");
        let mut ok = args;
        ok[14] = Arg::Double(1.0);
        assert!(run(name, &ok, DType::Char, 4, 10).is_err());
    }

    /// Property: QS8 add / subtract / multiply with broadcasting, within 1 LSB of f64 (add
    /// and subtract round ties up, multiply to even) and bit-exact against the literal doc
    /// formulas; hand-worked broadcast case.
    #[test]
    fn qs8_binary_kernels() {
        let mut rng = fastrand::Rng::with_seed(41);
        // Hand case: a [2, 1] = [[2], [4]] (scale 0.5), b [3] = [0, 2, -2] (scale 0.25),
        // out scale 1: a+b = [[1, 1.5, 0.5], [2, 2.5, 1.5]] -> half up [[1, 2, 1], [2, 3, 2]].
        let (a, b) = ([2i8, 4], [0i8, 2, -2]);
        let args = |a: Arg<'static>, b: Arg<'static>| {
            let (qa, qb) = ([Arg::Double(0.5), Arg::Int(0)], [Arg::Double(0.25), Arg::Int(0)]);
            [&[a][..], &qa, &[b], &qb, &[Arg::Double(1.0), Arg::Int(0)], &UNBOUNDED].concat()
        };
        let (al, bl): (&'static [i8], &'static [i8]) =
            (Box::leak(Box::new(a)), Box::leak(Box::new(b)));
        let hand = args(t(&[2, 1], al), t(&[3], bl));
        let on_hand = |op: &'static str| run(op, &hand, DType::Char, 2, 6).unwrap();
        let (sz, v) = on_hand("kiln_xnnpack::qs8_add.out");
        assert_eq!(sz, vec![2, 3]);
        assert_eq!(v, vec![1.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
        // a - b = [[1, 0.5, 1.5], [2, 1.5, 2.5]] -> [[1, 1, 2], [2, 2, 3]].
        assert_eq!(on_hand("kiln_xnnpack::qs8_subtract.out").1, vec![1.0, 1.0, 2.0, 2.0, 2.0, 3.0]);
        // a * b with scale 0.125: [[0, 0.5, -0.5], [0, 1, -1]] -> to even [[0, 0, 0], [0, 1, -1]].
        assert_eq!(
            on_hand("kiln_xnnpack::qs8_multiply.out").1,
            vec![0.0, 0.0, 0.0, 0.0, 1.0, -1.0]
        );
        // Incompatible shapes, a float operand.
        let c: &'static [i8] = Box::leak(Box::new([0i8; 4]));
        let add = "kiln_xnnpack::qs8_add.out";
        assert!(run(add, &args(t(&[2], al), t(&[4], c)), DType::Char, 1, 8).is_err());
        let f: &'static [f32] = Box::leak(Box::new([0f32; 3]));
        let mul = "kiln_xnnpack::qs8_multiply.out";
        assert!(run(mul, &args(t(&[2, 1], al), t(&[3], f)), DType::Char, 2, 8).is_err());
        assert!(run(add, &hand, DType::Float, 2, 8).is_err());

        for case in 0..90 {
            let op = case % 3;
            let name = [
                "kiln_xnnpack::qs8_add.out",
                "kiln_xnnpack::qs8_subtract.out",
                "kiln_xnnpack::qs8_multiply.out",
            ][op];
            let sa = [rng.usize(1..4), rng.usize(1..4), rng.usize(1..5)];
            let mut sb = sa;
            for d in sb.iter_mut() {
                if rng.bool() {
                    *d = 1;
                }
            }
            let sb = &sb[rng.usize(0..3)..];
            let x = rand_i8(&mut rng, sa.iter().product());
            let y = rand_i8(&mut rng, sb.iter().product());
            let (s_a, s_b) = (rng.f64() * 0.1 + 0.01, rng.f64() * 0.1 + 0.01);
            let s_o = if op == 2 {
                s_a * s_b * (rng.f64() * 100.0 + 1.0)
            } else {
                (s_a + s_b) * (rng.f64() + 0.3)
            };
            let (za, zb, zo) = (rng.i64(-128..128), rng.i64(-128..128), rng.i64(-128..128));
            let (lo, hi) =
                if case % 4 == 1 { (-1.0, 1.0) } else { (f64::NEG_INFINITY, f64::INFINITY) };
            let args = [
                t(&sa, &x),
                Arg::Double(s_a),
                Arg::Int(za),
                t(sb, &y),
                Arg::Double(s_b),
                Arg::Int(zb),
                Arg::Double(s_o),
                Arg::Int(zo),
                Arg::Double(lo),
                Arg::Double(hi),
            ];
            let (sz, v) = run(name, &args, DType::Char, 3, 64).unwrap();
            assert_eq!(sz, sa.to_vec());
            let (qmin, qmax) = (bound(lo, s_o, zo), bound(hi, s_o, zo));
            let off = 3 - sb.len();
            for i0 in 0..sa[0] {
                for i1 in 0..sa[1] {
                    for i2 in 0..sa[2] {
                        let ia = [i0, i1, i2];
                        let mut ib = 0;
                        for (d, &s) in sb.iter().enumerate() {
                            ib = ib * s + if s == 1 { 0 } else { ia[off + d] };
                        }
                        let (qa, qb) = (x[(i0 * sa[1] + i1) * sa[2] + i2] as f64, y[ib] as f64);
                        let (ra, rb) = ((qa - za as f64) * s_a, (qb - zb as f64) * s_b);
                        let real = match op {
                            0 => ra + rb,
                            1 => ra - rb,
                            _ => ra * rb,
                        } / s_o;
                        let got = v[(i0 * sa[1] + i1) * sa[2] + i2];
                        let r = q_ref(real, zo as i32, qmin, qmax);
                        assert!((got - r).abs() <= 1.0, "case {case}: {got} vs {r} ({real})");
                        if op == 2 {
                            // Literal doc formula for QS8 Mul.
                            let scale = (s_a as f32 * s_b as f32) / s_o as f32;
                            let acc = (qa as i32 - za as i32) * (qb as i32 - zb as i32);
                            let lo = (-128 - zo) as f32;
                            let hi = (127 - zo) as f32;
                            let q = (acc as f32 * scale).clamp(lo, hi).round_ties_even() as i32
                                + zo as i32;
                            assert_eq!(got, q.clamp(qmin, qmax) as f64, "case {case}");
                        }
                    }
                }
            }
        }
    }

    /// Literal doc reference of the qd8 row parameters and quantized row.
    fn qd8_ref(row: &[f32]) -> (Vec<i32>, i32, f32) {
        let rmin = row.iter().fold(0f32, |a, &b| a.min(b));
        let rmax = row.iter().fold(0f32, |a, &b| a.max(b));
        let m = if rmin == rmax { 1.0 } else { 255.0 / (rmax - rmin) };
        let (dmin, dmax) = (rmin * m, rmax * m);
        let zp = if (-128.0 + dmin) + (127.0 + dmax) > 0.0 { -128.0 - dmin } else { 127.0 - dmax };
        let zp = zp.clamp(-128.0, 127.0).round_ties_even() as i32;
        let q = row
            .iter()
            .map(|&x| {
                (x * m).clamp((-128 - zp) as f32, (127 - zp) as f32).round_ties_even() as i32 + zp
            })
            .collect();
        (q, zp, 1.0 / m)
    }

    /// Property: dynamically quantized FC (qc8w, qc4w with odd K, qb4w) is bit-exact against
    /// the literal doc formulas and close to the f64 product of the dequantized operands.
    #[test]
    fn qd8_fully_connected_kernel() {
        let name = "kiln_xnnpack::qd8_fully_connected.out";
        let mut rng = fastrand::Rng::with_seed(51);
        for case in 0..60 {
            let kind = case % 3;
            let (m, n) = (rng.usize(1..5), rng.usize(1..7));
            let bs = 32 * rng.usize(1..3);
            let k = match kind {
                2 => bs * rng.usize(1..4),
                _ => rng.usize(1..70),
            };
            let x: Vec<f32> = (0..m * k).map(|_| (rng.f32() - 0.3) * 4.0).collect();
            // Signed weights in [-8, 7] (int4) or [-128, 127].
            let wvals: Vec<i32> = (0..n * k)
                .map(|_| if kind == 0 { rng.i32(-128..128) } else { rng.i32(-8..8) })
                .collect();
            let nb = if kind == 2 { k / bs } else { 1 };
            let scales: Vec<f32> = (0..n * nb).map(|_| rng.f32() * 0.05 + 0.001).collect();
            let bias: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let w8: Vec<i8> = wvals.iter().map(|&v| v as i8).collect();
            let kp = if kind == 1 { k.div_ceil(2) } else { k / 2 };
            let mut w4 = vec![0x88u8; n * kp];
            for j in (0..n).filter(|_| kind != 0) {
                for kk in 0..k {
                    let nib = (wvals[j * k + kk] + 8) as u8;
                    let byte = &mut w4[j * kp + kk / 2];
                    *byte = if kk % 2 == 0 {
                        (*byte & 0xF0) | nib
                    } else {
                        (*byte & 0x0F) | (nib << 4)
                    };
                }
            }
            let (lo, hi) =
                if case % 4 == 3 { (-0.5, 0.5) } else { (f64::NEG_INFINITY, f64::INFINITY) };
            let sshape = if kind == 2 { vec![n, nb] } else { vec![n] };
            let use_bias = case % 5 != 0;
            let args = [
                t(&[m, k], &x),
                if kind == 0 { t(&[n, k], &w8) } else { t(&[n, kp], &w4) },
                Arg::Int(kind as i64),
                t(&sshape, &scales),
                Arg::Int(bs as i64),
                if use_bias { t(&[n], &bias) } else { Arg::None },
                Arg::Double(lo),
                Arg::Double(hi),
            ];
            let (sz, v) = run(name, &args, DType::Float, 2, m * n).unwrap();
            assert_eq!(sz, vec![m, n]);
            for r in 0..m {
                let row = &x[r * k..(r + 1) * k];
                let (q, zp, s) = qd8_ref(row);
                for j in 0..n {
                    let b = if use_bias { bias[j] } else { 0.0 };
                    let wr = &wvals[j * k..(j + 1) * k];
                    let want = if kind == 2 {
                        let mut sum = 0f32;
                        for blk in 0..nb {
                            let acc: i32 =
                                (blk * bs..(blk + 1) * bs).map(|i| (q[i] - zp) * wr[i]).sum();
                            sum += acc as f32 * scales[j * nb + blk];
                        }
                        sum * s + b
                    } else {
                        let acc: i32 = (0..k).map(|i| (q[i] - zp) * wr[i]).sum();
                        ((acc as f32) * s) * scales[j] + b
                    };
                    let want = want.max(lo as f32).min(hi as f32);
                    let got = v[r * n + j];
                    assert_eq!(got as f32, want, "case {case} kind {kind}");
                    // f64 reference from the unquantized row: within the row's quantization
                    // error (half a step per element) times the weights.
                    let step = s as f64;
                    let (mut real, mut err) = (0f64, 0f64);
                    for i in 0..k {
                        let sw = scales[j * nb + if kind == 2 { i / bs } else { 0 }] as f64;
                        real += row[i] as f64 * wr[i] as f64 * sw;
                        err += 0.5 * step * (wr[i] as f64 * sw).abs();
                    }
                    let real = (real + b as f64).clamp(lo, hi);
                    assert!(
                        (got - real).abs() <= err * 1.01 + 1e-5,
                        "case {case}: {got} vs {real}"
                    );
                }
            }
        }
        // Errors: unknown kind, bad block sizes, odd packed width, scales shape, float out.
        let x = [1f32; 64];
        let w4 = [0x88u8; 64];
        let s2 = [0.1f32; 4];
        let fc = |kind: i64, w: Arg<'_>, s: Arg<'_>, bs: i64, dt: DType| {
            let fc = [t(&[1, 64], &x), w, Arg::Int(kind), s, Arg::Int(bs), Arg::None];
            let args = [&fc[..], &UNBOUNDED].concat();
            run(name, &args, dt, 2, 16)
        };
        assert!(fc(2, t(&[2, 32], &w4), t(&[2, 2], &s2), 32, DType::Float).is_ok());
        assert!(fc(1, t(&[2, 32], &w4), t(&[2], &s2[..2]), 0, DType::Float).is_ok());
        for (i, r) in [
            fc(3, t(&[2, 32], &w4), t(&[2, 2], &s2), 32, DType::Float),
            fc(2, t(&[2, 32], &w4), t(&[2, 2], &s2), 48, DType::Float),
            fc(2, t(&[2, 32], &w4), t(&[2, 2], &s2), 16, DType::Float),
            fc(2, t(&[2, 32], &w4), t(&[2, 2], &s2), 0, DType::Float),
            fc(2, t(&[2, 32], &w4), t(&[4], &s2), 32, DType::Float),
            fc(1, t(&[4, 16], &w4), t(&[4], &s2), 0, DType::Float),
            fc(0, t(&[2, 32], &w4), t(&[2], &s2[..2]), 0, DType::Float),
            fc(2, t(&[2, 32], &w4), t(&[2, 2], &s2), 32, DType::Char),
        ]
        .iter()
        .enumerate()
        {
            assert!(r.is_err(), "bad case {i} was accepted");
        }
    }

    /// Property: QS8 global average pooling within 1 LSB of the f64 mean, exact against
    /// the literal reduce arithmetic; errors for non-4-D input and bad zero points.
    #[test]
    fn qs8_global_avg_pool_kernel() {
        let name = "kiln_xnnpack::qs8_global_avg_pool.out";
        let mut rng = fastrand::Rng::with_seed(61);
        for case in 0..40 {
            let (n, h, w, c) = (rng.usize(1..3), rng.usize(1..6), rng.usize(1..6), rng.usize(1..9));
            let x = rand_i8(&mut rng, n * h * w * c);
            let (s_in, s_out) = (rng.f64() * 0.1 + 0.01, rng.f64() * 0.1 + 0.01);
            let (zi, zo) = (rng.i64(-128..128), rng.i64(-128..128));
            let (lo, hi) = if case % 3 == 0 {
                (0.0, f64::INFINITY)
            } else {
                (f64::NEG_INFINITY, f64::INFINITY)
            };
            let args = [
                t(&[n, h, w, c], &x),
                Arg::Double(s_in),
                Arg::Int(zi),
                Arg::Double(s_out),
                Arg::Int(zo),
                Arg::Double(lo),
                Arg::Double(hi),
            ];
            let (sz, v) = run(name, &args, DType::Char, 4, n * c).unwrap();
            assert_eq!(sz, vec![n, 1, 1, c]);
            let (qmin, qmax) = (bound(lo, s_out, zo), bound(hi, s_out, zo));
            let cnt = h * w;
            for b in 0..n {
                for ch in 0..c {
                    let sum: i32 = (0..cnt).map(|p| x[(b * cnt + p) * c + ch] as i32).sum();
                    let real = (sum as f64 / cnt as f64 - zi as f64) * s_in / s_out;
                    let got = v[b * c + ch];
                    assert!((got - q_ref(real, zo as i32, qmin, qmax)).abs() <= 1.0);
                    let scale = (s_in as f32 / s_out as f32) * (1.0 / cnt as f32);
                    let zpf = zo as f32 - (cnt as f32 * zi as f32) * scale;
                    let q =
                        (sum as f32 * scale + zpf).round_ties_even().clamp(-128.0, 127.0) as i32;
                    assert_eq!(got, q.clamp(qmin, qmax) as f64, "case {case}");
                }
            }
        }
        let x = [0i8; 12];
        let mk = |x: Arg<'_>, zp: i64| {
            let args = [&[x, Arg::Double(0.1), Arg::Int(zp)][..], &QUANT, &UNBOUNDED].concat();
            run(name, &args, DType::Char, 4, 16)
        };
        assert!(mk(t(&[1, 2, 2, 3], &x), 0).is_ok());
        assert!(mk(t(&[4, 3], &x), 0).is_err());
        assert!(mk(t(&[1, 2, 2, 3], &x), 128).is_err());
        assert!(mk(t(&[1, 0, 2, 3], &x[..0]), 0).is_err());
        assert!(mk(t(&[1, 2, 2, 3], &[0f32; 12]), 0).is_err());
    }
}
