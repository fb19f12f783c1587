//! Pooling and resampling: `max_pool2d_with_indices`, `avg_pool2d`, `_adaptive_avg_pool2d`,
//! `upsample_nearest2d`, `upsample_bilinear2d`. Inputs are `[N, C, H, W]` or `[C, H, W]`, in
//! any dim order; values accumulate in `f64`.

use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, out_tensors2, Args};
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::ops::{out1, out_n};
use crate::tensor::{TensorMut, TensorRef};

type KResult = Result<(), KernelError>;

/// `[planes, H, W]` view of a 3-D or 4-D tensor: plane count, (n, c) sizes and strides.
struct Planes {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    /// Strides of n, c, h, w (n stride 0 for 3-D tensors).
    st: [usize; 4],
}

fn planes(
    ctx: &KernelContext,
    t: &TensorRef<'_>,
    name: &'static str,
) -> Result<Planes, KernelError> {
    let s = t.shape().strides();
    match t.sizes() {
        &[n, c, h, w] => Ok(Planes { n, c, h, w, st: [s[0], s[1], s[2], s[3]] }),
        &[c, h, w] => Ok(Planes { n: 1, c, h, w, st: [0, s[0], s[1], s[2]] }),
        other => Err(ctx.shape_err(name, "[N, C, H, W] or [C, H, W]", other)),
    }
}

fn out_planes(out: &TensorMut<'_>) -> [usize; 4] {
    let s = out.shape().strides();
    if out.rank() == 4 {
        [s[0], s[1], s[2], s[3]]
    } else {
        [0, s[0], s[1], s[2]]
    }
}

fn out_sizes(x: &TensorRef<'_>, oh: usize, ow: usize) -> Vec<usize> {
    let mut s = x.sizes().to_vec();
    let r = s.len();
    s[r - 2] = oh;
    s[r - 1] = ow;
    s
}

/// A 2-element int list parameter (1 element repeats; `default` when empty).
fn pair(
    ctx: &KernelContext,
    v: &[i64],
    name: &'static str,
    default: Option<[usize; 2]>,
    min: i64,
) -> Result<[usize; 2], KernelError> {
    let p = match (v, default) {
        ([], Some(d)) => return Ok(d),
        ([a], _) => [*a, *a],
        ([a, b], _) => [*a, *b],
        _ => return Err(ctx.invalid(name, format!("expected 1 or 2 values, got {v:?}"))),
    };
    if p.iter().any(|&x| x < min) {
        return Err(ctx.invalid(name, format!("{v:?} has a value below {min}")));
    }
    Ok([p[0] as usize, p[1] as usize])
}

/// PyTorch's `pooling_output_shape`.
fn pool_out(
    ctx: &KernelContext,
    input: usize,
    k: usize,
    pad: usize,
    stride: usize,
    dil: usize,
    ceil: bool,
) -> Result<usize, KernelError> {
    let span = dil * (k - 1) + 1;
    let num = (input + 2 * pad).checked_sub(span).ok_or_else(|| {
        ctx.invalid(
            "kernel_size",
            format!("kernel span {span} exceeds padded input {}", input + 2 * pad),
        )
    })?;
    let mut out = num / stride + 1;
    if ceil && num % stride != 0 {
        out += 1;
        if (out - 1) * stride >= input + pad {
            out -= 1;
        }
    }
    Ok(out)
}

fn max_pool(
    ctx: &KernelContext,
    args: &[crate::Arg<'_>],
    outs: &mut [crate::Out<'_, '_>],
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let k = pair(ctx, a.int_list(1, "kernel_size")?, "kernel_size", None, 1)?;
    let s = pair(ctx, a.int_list(2, "stride")?, "stride", Some(k), 1)?;
    let p = pair(ctx, a.int_list(3, "padding")?, "padding", Some([0, 0]), 0)?;
    let d = pair(ctx, a.int_list(4, "dilation")?, "dilation", Some([1, 1]), 1)?;
    let ceil = a.bool(5, "ceil_mode")?;
    if p[0] * 2 > k[0] || p[1] * 2 > k[1] {
        return Err(ctx.invalid("padding", "padding must be at most half the kernel size"));
    }
    let g = planes(ctx, &x, "self")?;
    let oh = pool_out(ctx, g.h, k[0], p[0], s[0], d[0], ceil)?;
    let ow = pool_out(ctx, g.w, k[1], p[1], s[1], d[1], ceil)?;
    let [out, idx] = out_tensors2(ctx, outs, ["out", "indices"])?;
    let sizes = out_sizes(&x, oh, ow);
    resize(ctx, out, "out", &sizes)?;
    resize(ctx, idx, "indices", &sizes)?;
    let v = cast_to::<f64>(&x);
    let os = out_planes(out);
    let is = out_planes(idx);
    let mut picks = Vec::with_capacity(out.numel());
    for n in 0..g.n {
        for c in 0..g.c {
            let base = n * g.st[0] + c * g.st[1];
            for y in 0..oh {
                for xo in 0..ow {
                    let mut hs = (y * s[0]) as isize - p[0] as isize;
                    let he = (hs + ((k[0] - 1) * d[0] + 1) as isize).min(g.h as isize);
                    while hs < 0 {
                        hs += d[0] as isize;
                    }
                    let mut ws = (xo * s[1]) as isize - p[1] as isize;
                    let we = (ws + ((k[1] - 1) * d[1] + 1) as isize).min(g.w as isize);
                    while ws < 0 {
                        ws += d[1] as isize;
                    }
                    let mut best = f64::NEG_INFINITY;
                    let mut bi = hs as usize * g.w + ws as usize;
                    let mut yy = hs;
                    while yy < he {
                        let mut xx = ws;
                        while xx < we {
                            let val = v[base + yy as usize * g.st[2] + xx as usize * g.st[3]];
                            if val > best || val.is_nan() {
                                best = val;
                                bi = yy as usize * g.w + xx as usize;
                            }
                            xx += d[1] as isize;
                        }
                        yy += d[0] as isize;
                    }
                    picks.push((
                        n * os[0] + c * os[1] + y * os[2] + xo * os[3],
                        n * is[0] + c * is[1] + y * is[2] + xo * is[3],
                        best,
                        bi as i64,
                    ));
                }
            }
        }
    }
    with_out::<f64>(ctx, out, true, |dst| picks.iter().for_each(|p| dst[p.0] = p.2))?;
    with_out::<i64>(ctx, idx, false, |dst| picks.iter().for_each(|p| dst[p.1] = p.3))
}

fn avg_pool(
    ctx: &KernelContext,
    args: &[crate::Arg<'_>],
    outs: &mut [crate::Out<'_, '_>],
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let k = pair(ctx, a.int_list(1, "kernel_size")?, "kernel_size", None, 1)?;
    let s = pair(ctx, a.int_list(2, "stride")?, "stride", Some(k), 1)?;
    let p = pair(ctx, a.int_list(3, "padding")?, "padding", Some([0, 0]), 0)?;
    let ceil = a.bool(4, "ceil_mode")?;
    let include_pad = a.bool(5, "count_include_pad")?;
    let divisor = a.opt_int(6, "divisor_override")?;
    if divisor == Some(0) {
        return Err(ctx.invalid("divisor_override", "must not be zero"));
    }
    if p[0] * 2 > k[0] || p[1] * 2 > k[1] {
        return Err(ctx.invalid("padding", "padding must be at most half the kernel size"));
    }
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("self", "a floating dtype", x.dtype()));
    }
    let g = planes(ctx, &x, "self")?;
    let oh = pool_out(ctx, g.h, k[0], p[0], s[0], 1, ceil)?;
    let ow = pool_out(ctx, g.w, k[1], p[1], s[1], 1, ceil)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    resize(ctx, out, "out", &out_sizes(&x, oh, ow))?;
    let v = cast_to::<f64>(&x);
    let os = out_planes(out);
    with_out::<f64>(ctx, out, true, |dst| {
        for n in 0..g.n {
            for c in 0..g.c {
                let base = n * g.st[0] + c * g.st[1];
                for y in 0..oh {
                    for xo in 0..ow {
                        let hs0 = (y * s[0]) as isize - p[0] as isize;
                        let ws0 = (xo * s[1]) as isize - p[1] as isize;
                        let he0 = (hs0 + k[0] as isize).min((g.h + p[0]) as isize);
                        let we0 = (ws0 + k[1] as isize).min((g.w + p[1]) as isize);
                        let pool = ((he0 - hs0) * (we0 - ws0)) as f64;
                        let (hs, ws) = (hs0.max(0) as usize, ws0.max(0) as usize);
                        let (he, we) = (
                            he0.min(g.h as isize).max(0) as usize,
                            we0.min(g.w as isize).max(0) as usize,
                        );
                        let mut sum = 0.0;
                        for yy in hs..he {
                            for xx in ws..we {
                                sum += v[base + yy * g.st[2] + xx * g.st[3]];
                            }
                        }
                        let cnt = ((he.saturating_sub(hs)) * (we.saturating_sub(ws))) as f64;
                        let div = match divisor {
                            Some(dv) => dv as f64,
                            None if include_pad => pool,
                            None => cnt,
                        };
                        dst[n * os[0] + c * os[1] + y * os[2] + xo * os[3]] =
                            if he <= hs || we <= ws { 0.0 } else { sum / div };
                    }
                }
            }
        }
    })
}

fn adaptive_avg(
    ctx: &KernelContext,
    args: &[crate::Arg<'_>],
    outs: &mut [crate::Out<'_, '_>],
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let size = pair(ctx, a.int_list(1, "output_size")?, "output_size", None, 0)?;
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("self", "a floating dtype", x.dtype()));
    }
    let g = planes(ctx, &x, "self")?;
    let [oh, ow] = size;
    if (oh > 0 && g.h == 0) || (ow > 0 && g.w == 0) {
        return Err(ctx.invalid("self", "empty spatial input"));
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    resize(ctx, out, "out", &out_sizes(&x, oh, ow))?;
    let v = cast_to::<f64>(&x);
    let os = out_planes(out);
    let start = |o: usize, inp: usize, outp: usize| (o * inp) / outp;
    let end = |o: usize, inp: usize, outp: usize| ((o + 1) * inp).div_ceil(outp);
    with_out::<f64>(ctx, out, true, |dst| {
        for n in 0..g.n {
            for c in 0..g.c {
                let base = n * g.st[0] + c * g.st[1];
                for y in 0..oh {
                    let (hs, he) = (start(y, g.h, oh), end(y, g.h, oh));
                    for xo in 0..ow {
                        let (ws, we) = (start(xo, g.w, ow), end(xo, g.w, ow));
                        let mut sum = 0.0;
                        for yy in hs..he {
                            for xx in ws..we {
                                sum += v[base + yy * g.st[2] + xx * g.st[3]];
                            }
                        }
                        dst[n * os[0] + c * os[1] + y * os[2] + xo * os[3]] =
                            sum / ((he - hs) * (we - ws)) as f64;
                    }
                }
            }
        }
    })
}

/// Output size from `output_size` or `scale_factors`, and the per-axis scale arguments.
fn resample_size(
    ctx: &KernelContext,
    g: &Planes,
    size: Option<&[i64]>,
    scales: Option<&[f64]>,
) -> Result<([usize; 2], [Option<f64>; 2]), KernelError> {
    match (size, scales) {
        (Some(s), _) => Ok((pair(ctx, s, "output_size", None, 0)?, [None, None])),
        (None, Some([sh, sw])) if *sh > 0.0 && *sw > 0.0 => Ok((
            [(g.h as f64 * sh).floor() as usize, (g.w as f64 * sw).floor() as usize],
            [Some(*sh), Some(*sw)],
        )),
        _ => Err(ctx.invalid(
            "scale_factors",
            "either output_size or two positive scale_factors are required",
        )),
    }
}

fn upsample_nearest(
    ctx: &KernelContext,
    args: &[crate::Arg<'_>],
    outs: &mut [crate::Out<'_, '_>],
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let g = planes(ctx, &x, "input")?;
    let ([oh, ow], sc) = resample_size(
        ctx,
        &g,
        a.opt_int_list(1, "output_size")?,
        a.opt_double_list(2, "scale_factors")?,
    )?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    resize(ctx, out, "out", &out_sizes(&x, oh, ow))?;
    // PyTorch computes the scale in float32.
    let scale = |inp: usize, outp: usize, s: Option<f64>| -> f32 {
        s.map_or(inp as f32 / outp.max(1) as f32, |s| (1.0 / s) as f32)
    };
    let (fh, fw) = (scale(g.h, oh, sc[0]), scale(g.w, ow, sc[1]));
    let src =
        |o: usize, f: f32, inp: usize| ((o as f32 * f).floor() as usize).min(inp.saturating_sub(1));
    let os = out_planes(out);
    let dt = x.dtype();
    crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(&x);
        with_out::<T>(ctx, out, true, |dst| {
            for n in 0..g.n {
                for c in 0..g.c {
                    for y in 0..oh {
                        let sy = src(y, fh, g.h);
                        for xo in 0..ow {
                            let sx = src(xo, fw, g.w);
                            dst[n * os[0] + c * os[1] + y * os[2] + xo * os[3]] = v[n * g.st[0] + c * g.st[1] + sy * g.st[2] + sx * g.st[3]];
                        }
                    }
                }
            }
        })
    }, _ => Err(ctx.dtype_err("input", "a computable dtype", dt)))
}

fn upsample_bilinear(
    ctx: &KernelContext,
    args: &[crate::Arg<'_>],
    outs: &mut [crate::Out<'_, '_>],
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let g = planes(ctx, &x, "input")?;
    let align = a.bool(2, "align_corners")?;
    let ([oh, ow], sc) = resample_size(
        ctx,
        &g,
        a.opt_int_list(1, "output_size")?,
        a.opt_double_list(3, "scale_factors")?,
    )?;
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("input", "a floating dtype", x.dtype()));
    }
    if (g.h == 0 || g.w == 0) && oh * ow > 0 {
        return Err(ctx.invalid("input", "empty spatial input"));
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    resize(ctx, out, "out", &out_sizes(&x, oh, ow))?;
    let scale = |inp: usize, outp: usize, s: Option<f64>| -> f64 {
        if align {
            if outp > 1 {
                (inp as f64 - 1.0) / (outp as f64 - 1.0)
            } else {
                0.0
            }
        } else {
            s.map_or(inp as f64 / outp.max(1) as f64, |s| 1.0 / s)
        }
    };
    let (fh, fw) = (scale(g.h, oh, sc[0]), scale(g.w, ow, sc[1]));
    let coord = |o: usize, f: f64, inp: usize| -> (usize, usize, f64) {
        let src = if align { f * o as f64 } else { (f * (o as f64 + 0.5) - 0.5).max(0.0) };
        let i0 = (src.floor() as usize).min(inp - 1);
        let i1 = if i0 < inp - 1 { i0 + 1 } else { i0 };
        (i0, i1, (src - i0 as f64).clamp(0.0, 1.0))
    };
    let v = cast_to::<f64>(&x);
    let os = out_planes(out);
    with_out::<f64>(ctx, out, true, |dst| {
        for n in 0..g.n {
            for c in 0..g.c {
                let base = n * g.st[0] + c * g.st[1];
                for y in 0..oh {
                    let (y0, y1, ly) = coord(y, fh, g.h);
                    for xo in 0..ow {
                        let (x0, x1, lx) = coord(xo, fw, g.w);
                        let at = |yy: usize, xx: usize| v[base + yy * g.st[2] + xx * g.st[3]];
                        let val = (1.0 - ly) * ((1.0 - lx) * at(y0, x0) + lx * at(y0, x1))
                            + ly * ((1.0 - lx) * at(y1, x0) + lx * at(y1, x1));
                        dst[n * os[0] + c * os[1] + y * os[2] + xo * os[3]] = val;
                    }
                }
            }
        }
    })
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out_n("aten::max_pool2d_with_indices.out", 6, 2, |c, a, o| max_pool(c, a, o)),
        out1("aten::avg_pool2d.out", 7, |c, a, o| avg_pool(c, a, o)),
        out1("aten::_adaptive_avg_pool2d.out", 2, |c, a, o| adaptive_avg(c, a, o)),
        out1("aten::upsample_nearest2d.vec_out", 3, |c, a, o| upsample_nearest(c, a, o)),
        out1("aten::upsample_bilinear2d.vec_out", 4, |c, a, o| upsample_bilinear(c, a, o)),
    ]
}
