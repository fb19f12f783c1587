//! Pooling and resampling: `max_pool2d_with_indices`, `avg_pool2d`, `_adaptive_avg_pool2d`,
//! `upsample_nearest2d`, `upsample_bilinear2d`. Inputs are `[N, C, H, W]` or `[C, H, W]`, in
//! any dim order; values accumulate in `f64`.

use crate::compute::max_pool::pool_len;
use crate::compute::threads::{split, Threads, TASKS_PER_THREAD};
use crate::dtype::DType;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, out_tensors2, Args};
use crate::ops::defs::{out1, out_n};
use crate::ops::pointwise::{cast_to, resize, with_out};
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

/// PyTorch's `pooling_output_shape` ([`pool_len`]), with the error it raises.
fn pool_out(
    ctx: &KernelContext,
    input: usize,
    k: usize,
    pad: usize,
    stride: usize,
    dil: usize,
    ceil: bool,
) -> Result<usize, KernelError> {
    pool_len(input, k, pad, stride, dil, ceil).ok_or_else(|| {
        let span = dil.saturating_mul(k.saturating_sub(1)).saturating_add(1);
        ctx.invalid(
            "kernel_size",
            format!("kernel span {span} exceeds padded input {}", input + 2 * pad),
        )
    })
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
    let geo = Window { k, s, p, d, oh, ow };
    if !ctx.general_only && max_pool_f32(&x, &g, &geo, out, idx, &ctx.threads) {
        return Ok(());
    }
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
    // The maximum is one of the input's values, so any real dtype (int8 for XNNPACK's
    // quantized pooling) stores it exactly; the output has the input's dtype.
    if out.dtype() != x.dtype() {
        return Err(ctx.dtype_err(
            "out",
            format!("{} (the input's dtype)", x.dtype().name()),
            out.dtype(),
        ));
    }
    with_out::<f64>(ctx, out, false, |dst| picks.iter().for_each(|p| dst[p.0] = p.2))?;
    with_out::<i64>(ctx, idx, false, |dst| picks.iter().for_each(|p| dst[p.1] = p.3))
}

/// A pooling window: kernel, stride, padding, dilation (h, w) and the output size.
struct Window {
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    oh: usize,
    ow: usize,
}

/// Fast path of `max_pool2d_with_indices` for float32 input and dense outputs: the general
/// path's walk and comparisons in f32 (exact, as f32 -> f64 is), written straight into the
/// outputs without the f64 copy and the list of picks; large inputs split their planes over
/// `threads`. `false` when it does not apply.
fn max_pool_f32(
    x: &TensorRef<'_>,
    g: &Planes,
    w: &Window,
    out: &mut TensorMut<'_>,
    idx: &mut TensorMut<'_>,
    threads: &Threads,
) -> bool {
    let dense = out.shape().is_dense_row_major() && idx.shape().is_dense_row_major();
    if x.dtype() != DType::Float || out.dtype() != DType::Float || !dense {
        return false;
    }
    let (Ok(v), Ok(o), Ok(ix)) =
        (x.as_slice::<f32>(), out.as_mut_slice::<f32>(), idx.as_mut_slice::<i64>())
    else {
        return false;
    };
    let (k, s, p, d) = (w.k, w.s, w.p, w.d);
    let (planes, ohw) = (g.n * g.c, w.oh * w.ow);
    let compares = (planes * ohw).saturating_mul(k[0] * k[1]);
    let parts = match compares >= PARALLEL_COMPARES {
        true => threads.tasks_for(TASKS_PER_THREAD, planes),
        false => 1,
    };
    // Each part takes a run of planes and their pieces of both outputs.
    let (o, ix) = (&mut o[..planes * ohw], &mut ix[..planes * ohw]);
    let tasks = split(planes, 1, parts).scan((o, ix), |(o, ix), run| {
        let (mine_o, rest_o) = std::mem::take(o).split_at_mut(run.len() * ohw);
        let (mine_i, rest_i) = std::mem::take(ix).split_at_mut(run.len() * ohw);
        (*o, *ix) = (rest_o, rest_i);
        Some((run, mine_o, mine_i))
    });
    // Output columns whose windows lie inside the row: they run LANES at a time.
    let inner_end = (g.w + p[1]).checked_sub((k[1] - 1) * d[1] + 1).map_or(0, |v| v / s[1] + 1);
    let inner = p[1].div_ceil(s[1]).min(w.ow)..inner_end.min(w.ow);
    threads.for_each(tasks, |(run, o, ix)| {
        let mut at = 0usize;
        for plane in run {
            let base = plane / g.c * g.st[0] + plane % g.c * g.st[1];
            for y in 0..w.oh {
                let mut hs = (y * s[0]) as isize - p[0] as isize;
                let he = (hs + ((k[0] - 1) * d[0] + 1) as isize).min(g.h as isize);
                while hs < 0 {
                    hs += d[0] as isize;
                }
                let rows = (hs as usize..he.max(hs) as usize).step_by(d[0]);
                let mut xo = 0;
                while xo < w.ow {
                    if inner.contains(&xo) && xo + LANES <= inner.end {
                        let (o, ix) = (&mut o[at..][..LANES], &mut ix[at..][..LANES]);
                        window_lanes(v, base, g, w, hs as usize, rows.clone(), xo, o, ix);
                        (xo, at) = (xo + LANES, at + LANES);
                        continue;
                    }
                    let mut ws = (xo * s[1]) as isize - p[1] as isize;
                    let we = (ws + ((k[1] - 1) * d[1] + 1) as isize).min(g.w as isize);
                    while ws < 0 {
                        ws += d[1] as isize;
                    }
                    let mut m = WindowMax::new(hs as usize * g.w + ws as usize);
                    for yy in rows.clone() {
                        let row = base + yy * g.st[2];
                        let mut xx = ws;
                        while xx < we {
                            m.visit(v[row + xx as usize * g.st[3]], yy * g.w + xx as usize);
                            xx += d[1] as isize;
                        }
                    }
                    (o[at], ix[at]) = m.result();
                    (xo, at) = (xo + 1, at + 1);
                }
            }
        }
    });
    true
}

/// Output columns [`window_lanes`] computes side by side.
const LANES: usize = 8;

/// The maxima and their indices of `LANES` adjacent output columns from `xo` on, whose windows
/// lie inside the input row, over input `rows` (the first is `top`): one independent
/// [`WindowMax`] per column instead of one long chain through every window.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn window_lanes(
    v: &[f32],
    base: usize,
    g: &Planes,
    w: &Window,
    top: usize,
    rows: std::iter::StepBy<std::ops::Range<usize>>,
    xo: usize,
    o: &mut [f32],
    ix: &mut [i64],
) {
    let (k, s, p, d) = (w.k[1], w.s[1], w.p[1], w.d[1]);
    // Input column of lane `l`'s first tap.
    let x0 = |l: usize| (xo + l) * s - p;
    let mut m: [WindowMax; LANES] = std::array::from_fn(|l| WindowMax::new(top * g.w + x0(l)));
    for yy in rows {
        let row = base + yy * g.st[2];
        for kx in 0..k {
            for (l, m) in m.iter_mut().enumerate() {
                let xx = x0(l) + kx * d;
                m.visit(v[row + xx * g.st[3]], yy * g.w + xx);
            }
        }
    }
    for ((o, ix), m) in o.iter_mut().zip(ix).zip(m) {
        (*o, *ix) = m.result();
    }
}

/// The running maximum of one window, visited in the scalar walk's order, with the walk's
/// result: the first of the largest values and its index, or, when the window holds a NaN,
/// the last NaN and its index. The comparison that decides the maximum is the plain `>` the
/// compiler turns into `maxss` and a conditional move; NaNs take a separate, rarely taken
/// branch, so random data costs no mispredicted jumps.
#[derive(Clone, Copy)]
struct WindowMax {
    best: f32,
    at: usize,
    nan: Option<(f32, usize)>,
}

impl WindowMax {
    /// Before any element: `at` is the index reported when no element beats -inf.
    #[inline(always)]
    fn new(at: usize) -> Self {
        WindowMax { best: f32::NEG_INFINITY, at, nan: None }
    }

    #[inline(always)]
    fn visit(&mut self, val: f32, at: usize) {
        if val.is_nan() {
            self.nan = Some((val, at));
        }
        self.at = if val > self.best { at } else { self.at };
        self.best = if val > self.best { val } else { self.best };
    }

    #[inline(always)]
    fn result(self) -> (f32, i64) {
        let (v, at) = self.nan.unwrap_or((self.best, self.at));
        (v, at as i64)
    }
}

/// Window comparisons from which [`max_pool_f32`] splits over threads.
const PARALLEL_COMPARES: usize = 1 << 16;

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

#[cfg(test)]
mod tests {
    use crate::compute::threads::Threads;
    use crate::{
        find_kernel, Arg, Capacity, DType, KernelContext, Out, Shape, TensorMut, TensorRef,
    };

    /// `max_pool2d_with_indices` with the fast path on or off: (values, indices).
    fn run(
        general: bool,
        sizes: &[usize],
        x: &[f32],
        win: [[i64; 2]; 4],
        ceil: bool,
    ) -> (Vec<f32>, Vec<i64>) {
        run_on(&Threads::default(), general, sizes, x, win, ceil)
    }

    /// [`run`] with worker threads.
    fn run_on(
        threads: &Threads,
        general: bool,
        sizes: &[usize],
        x: &[f32],
        win: [[i64; 2]; 4],
        ceil: bool,
    ) -> (Vec<f32>, Vec<i64>) {
        let def = find_kernel("aten::max_pool2d_with_indices.out").unwrap();
        let xr = TensorRef::new(
            DType::Float,
            Shape::contiguous(sizes).unwrap(),
            bytemuck::cast_slice(x),
        )
        .unwrap();
        let [k, s, p, d] = win;
        let args = [
            Arg::Tensor(xr),
            Arg::IntList(&k),
            Arg::IntList(&s),
            Arg::IntList(&p),
            Arg::IntList(&d),
            Arg::Bool(ceil),
            Arg::Output,
            Arg::Output,
            Arg::Output,
        ];
        // Padding and ceil mode can make the output larger than the input.
        let cap = 16 * x.len() + 64;
        let mut vals = vec![f32::NAN; cap];
        let mut idx = vec![-1i64; cap];
        let shape = Shape::contiguous(&vec![0; sizes.len()]).unwrap();
        let mut outs = [
            Out::Tensor(
                TensorMut::new(
                    DType::Float,
                    shape,
                    Capacity::Bound(cap),
                    bytemuck::cast_slice_mut(&mut vals),
                )
                .unwrap(),
            ),
            Out::Tensor(
                TensorMut::new(
                    DType::Long,
                    shape,
                    Capacity::Bound(cap),
                    bytemuck::cast_slice_mut(&mut idx),
                )
                .unwrap(),
            ),
        ];
        let mut ctx = KernelContext::new(def.name).with_threads(threads.clone());
        ctx.general_only = general;
        (def.run)(&mut ctx, &args, &mut outs).unwrap();
        let n = match &outs[0] {
            Out::Tensor(t) => t.numel(),
            _ => 0,
        };
        (vals[..n].to_vec(), idx[..n].to_vec())
    }

    /// Property test: the float32 fast path gives the general path's values and indices bit
    /// for bit on random shapes, windows and inputs with NaN, infinities and ties.
    #[test]
    fn max_pool_fast_path_equals_general_path() {
        let mut rng = fastrand::Rng::with_seed(0x9001);
        for case in 0..300 {
            let (kh, kw) = (rng.usize(1..4), rng.usize(1..4));
            let (dh, dw) = (rng.usize(1..3), rng.usize(1..3));
            // Rows wide enough for several runs of LANES columns, and narrow ones.
            let wide = if rng.bool() { 40 } else { 9 };
            let (h, w) = (rng.usize(kh * dh..kh * dh + 9), rng.usize(kw * dw..kw * dw + wide));
            let sizes: Vec<usize> = if rng.bool() {
                vec![rng.usize(1..3), rng.usize(1..4), h, w]
            } else {
                vec![rng.usize(1..4), h, w]
            };
            let n: usize = sizes.iter().product();
            let x: Vec<f32> = (0..n)
                .map(|_| match rng.u8(0..20) {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => f32::NEG_INFINITY,
                    3..=6 => 1.0,
                    _ => rng.f32() * 4.0 - 2.0,
                })
                .collect();
            let win = [
                [kh as i64, kw as i64],
                [rng.i64(1..4), rng.i64(1..4)],
                [rng.i64(0..=(kh as i64 / 2)), rng.i64(0..=(kw as i64 / 2))],
                [dh as i64, dw as i64],
            ];
            let ceil = rng.bool();
            let (fv, fi) = run(false, &sizes, &x, win, ceil);
            let (gv, gi) = run(true, &sizes, &x, win, ceil);
            assert_eq!(fi, gi, "case {case}: indices");
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fv), bits(&gv), "case {case}: values");
        }
        // Large enough to split over threads: the same values and indices.
        let sizes = [2usize, 37, 30, 31];
        let x: Vec<f32> = (0..sizes.iter().product()).map(|_| rng.f32() * 4.0 - 2.0).collect();
        let win = [[3, 3], [2, 2], [1, 1], [1, 1]];
        let threads = Threads::new(3).unwrap();
        let fast = run_on(&threads, false, &sizes, &x, win, false);
        assert_eq!(fast, run(true, &sizes, &x, win, false));
    }
}
