//! Resampling: `upsample_nearest2d` and `upsample_bilinear2d` (`[N, C, H, W]` or `[C, H, W]`),
//! `_upsample_bilinear2d_aa` (antialiased bilinear resize, the triangle filter
//! widened by the downscale factor, as `interpolate(..., antialias=True)`) and
//! `grid_sampler_2d` (bilinear, nearest and bicubic sampling at grid coordinates with zeros,
//! border and reflection padding). Inputs are `[N, C, H, W]` floating tensors in any dim
//! order.
//!
//! `grid_sampler_2d` computes in the input's precision (`f32`, `f64`, or half/bfloat16 with
//! every operation rounded) with the formulas of PyTorch's vectorized CPU kernel, so
//! nearest-neighbour ties and non-finite coordinates behave as in PyTorch eager: NaN
//! coordinates clamp to 0 under border/reflection padding, and an infinite coordinate under
//! zeros padding gives NaN for bilinear/bicubic (a zero sample times a NaN weight) and 0 for
//! nearest.

use crate::dtype::DType;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::dense::{logical, store_logical};
use crate::ops::planes::{out_planes, out_sizes, pair, planes, Planes};
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::tensor::TensorRef;
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// `[N, C, H, W]` sizes and element strides of a 4-D tensor.
fn nchw(
    ctx: &KernelContext,
    t: &TensorRef<'_>,
    name: &'static str,
) -> Result<([usize; 4], [usize; 4]), KernelError> {
    match t.sizes() {
        &[n, c, h, w] => {
            let s = t.shape().strides();
            Ok(([n, c, h, w], [s[0], s[1], s[2], s[3]]))
        }
        other => Err(ctx.shape_err(name, "[N, C, H, W]", other)),
    }
}

fn float_input(ctx: &KernelContext, t: &TensorRef<'_>, name: &'static str) -> KResult {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(ctx.dtype_err(name, "a floating dtype", t.dtype()))
    }
}

// ---------------------------------------------------------------- antialiased bilinear

/// PyTorch's `area_pixel_compute_scale`: input pixels per output pixel.
fn area_scale(input: usize, output: usize, align_corners: bool, scale: Option<f64>) -> f64 {
    if align_corners {
        if output > 1 {
            (input as f64 - 1.0) / (output as f64 - 1.0)
        } else {
            0.0
        }
    } else {
        match scale {
            Some(s) if s > 0.0 => 1.0 / s,
            _ => input as f64 / output as f64,
        }
    }
}

/// The antialiasing taps of one output index: first input index and normalized weights.
fn aa_taps(i: usize, input: usize, scale: f64) -> (usize, Vec<f64>) {
    let support = if scale >= 1.0 { scale } else { 1.0 };
    let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let max_taps = (support.ceil() as i64).saturating_mul(2).saturating_add(1);
    let center = scale * (i as f64 + 0.5);
    // `static_cast<int64_t>` truncates toward zero.
    let xmin = ((center - support + 0.5) as i64).max(0);
    let xmax = ((center + support + 0.5) as i64).min(input as i64);
    let size = (xmax - xmin).clamp(0, max_taps);
    let mut w: Vec<f64> = (0..size)
        .map(|j| {
            let x = ((j + xmin) as f64 - center + 0.5) * invscale;
            let x = x.abs();
            if x < 1.0 {
                1.0 - x
            } else {
                0.0
            }
        })
        .collect();
    let total: f64 = w.iter().sum();
    if total != 0.0 {
        w.iter_mut().for_each(|v| *v /= total);
    }
    (xmin as usize, w)
}

fn upsample_aa(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let size = a.int_list(1, "output_size")?;
    let align = a.bool(2, "align_corners")?;
    let scales_h = opt_double(&a, 3, "scales_h")?;
    let scales_w = opt_double(&a, 4, "scales_w")?;
    float_input(ctx, &x, "self")?;
    let ([n, c, h, w], st) = nchw(ctx, &x, "self")?;
    let (oh, ow) = match size {
        &[oh, ow] if oh > 0 && ow > 0 => (oh as usize, ow as usize),
        other => {
            return Err(
                ctx.invalid("output_size", format!("expected 2 positive sizes, got {other:?}"))
            )
        }
    };
    if h == 0 || w == 0 {
        return Err(ctx.shape_err("self", "non-empty spatial dims", x.sizes()));
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != x.dtype() {
        return Err(ctx.dtype_err("out", format!("{} (the input dtype)", x.dtype()), out.dtype()));
    }
    resize(ctx, out, "out", &[n, c, oh, ow])?;
    let rows: Vec<(usize, Vec<f64>)> =
        (0..oh).map(|i| aa_taps(i, h, area_scale(h, oh, align, scales_h))).collect();
    let cols: Vec<(usize, Vec<f64>)> =
        (0..ow).map(|i| aa_taps(i, w, area_scale(w, ow, align, scales_w))).collect();
    let v = cast_to::<f64>(&x);
    let mut res = Vec::with_capacity(n * c * oh * ow);
    for ni in 0..n {
        for ci in 0..c {
            let base = ni * st[0] + ci * st[1];
            for (y0, wy) in &rows {
                for (x0, wx) in &cols {
                    let mut acc = 0.0;
                    for (dy, fy) in wy.iter().enumerate() {
                        let row = base + (y0 + dy) * st[2];
                        let mut line = 0.0;
                        for (dx, fx) in wx.iter().enumerate() {
                            line += v[row + (x0 + dx) * st[3]] * fx;
                        }
                        acc += line * fy;
                    }
                    res.push(acc);
                }
            }
        }
    }
    store_logical(ctx, out, &res, true)
}

fn opt_double(
    a: &Args<'_, '_>,
    pos: usize,
    name: &'static str,
) -> Result<Option<f64>, KernelError> {
    match a.args.get(pos) {
        Some(Arg::None) => Ok(None),
        _ => a.double(pos, name).map(Some),
    }
}

// ---------------------------------------------------------------- grid sampler

/// The float arithmetic grid sampling runs in (`f32` or `f64`, as PyTorch's `scalar_t`).
trait Real:
    Copy
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
{
    fn of(v: f64) -> Self;
    fn f64(self) -> f64;
    fn floor(self) -> Self;
    fn abs(self) -> Self;
    fn rint(self) -> Self;
    fn trunc(self) -> Self;
    fn nan(self) -> bool;
}

macro_rules! real {
    ($t:ty) => {
        impl Real for $t {
            fn of(v: f64) -> Self {
                v as $t
            }
            fn f64(self) -> f64 {
                self as f64
            }
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            fn rint(self) -> Self {
                <$t>::round_ties_even(self)
            }
            fn trunc(self) -> Self {
                <$t>::trunc(self)
            }
            fn nan(self) -> bool {
                self.is_nan()
            }
        }
    };
}
real!(f32);
real!(f64);

/// Half and bfloat16 round every operation to their precision, as PyTorch's `Vectorized`
/// arithmetic on them does.
macro_rules! real_narrow {
    ($t:ty) => {
        impl Real for $t {
            fn of(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            fn f64(self) -> f64 {
                self.to_f64()
            }
            fn floor(self) -> Self {
                <$t>::from_f32(self.to_f32().floor())
            }
            fn abs(self) -> Self {
                <$t>::from_f32(self.to_f32().abs())
            }
            fn rint(self) -> Self {
                <$t>::from_f32(self.to_f32().round_ties_even())
            }
            fn trunc(self) -> Self {
                <$t>::from_f32(self.to_f32().trunc())
            }
            fn nan(self) -> bool {
                self.is_nan()
            }
        }
    };
}
real_narrow!(half::f16);
real_narrow!(half::bf16);

#[derive(Clone, Copy, PartialEq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// One spatial axis: its size and the coordinate mapping of PyTorch's `ComputeLocation`.
struct Axis<R> {
    size: usize,
    align: bool,
    padding: Padding,
    _r: std::marker::PhantomData<R>,
}

impl<R: Real> Axis<R> {
    fn unnormalize(&self, g: R) -> R {
        let one = R::of(1.0);
        if self.align {
            (g + one) * R::of((self.size as f64 - 1.0) / 2.0)
        } else {
            (g + one) * R::of(self.size as f64 / 2.0) - R::of(0.5)
        }
    }

    /// Clamp to `[0, size - 1]`; NaN becomes 0 (the operand order of PyTorch's clamp).
    fn clip(&self, x: R) -> R {
        if x.nan() {
            return R::of(0.0);
        }
        let hi = R::of(self.size as f64 - 1.0);
        let x = if x > R::of(0.0) { x } else { R::of(0.0) };
        if x < hi {
            x
        } else {
            hi
        }
    }

    /// Reflection about the borders, in the operation order of PyTorch's vectorized kernel
    /// (`|x| - trunc(|x| / 2span) * 2span`, then the nearer of the two mirror images).
    fn reflect(&self, x: R) -> R {
        let (twice, shift) = if self.align {
            (2.0 * (self.size as f64 - 1.0), 0.0)
        } else {
            (2.0 * self.size as f64, 0.5)
        };
        if twice <= 0.0 {
            return R::of(0.0);
        }
        let ts = R::of(twice);
        let d = (x + R::of(shift)).abs();
        let extra = d - (d / ts).trunc() * ts;
        let other = ts - extra;
        let m = if extra.nan() || extra < other { extra } else { other };
        m - R::of(shift)
    }

    /// Padding applied to an unnormalized coordinate.
    fn pad(&self, x: R) -> R {
        match self.padding {
            Padding::Zeros => x,
            Padding::Border => self.clip(x),
            Padding::Reflection => self.clip(self.reflect(x)),
        }
    }

    fn in_bounds(&self, x: R) -> bool {
        x > R::of(-1.0) && x < R::of(self.size as f64)
    }
}

fn cubic_coeffs<R: Real>(t: R) -> [R; 4] {
    let a = R::of(-0.75);
    let one = R::of(1.0);
    let c1 = |x: R| ((a + R::of(2.0)) * x - (a + R::of(3.0))) * x * x + one;
    let c2 = |x: R| ((a * x - R::of(5.0) * a) * x + R::of(8.0) * a) * x - R::of(4.0) * a;
    [c2(t + one), c1(t), c1(one - t), c2(R::of(2.0) - t)]
}

struct Sampler<'v, R> {
    v: &'v [R],
    h: Axis<R>,
    w: Axis<R>,
    sy: usize,
    sx: usize,
}

impl<R: Real> Sampler<'_, R> {
    /// The value at integral (x, y) of a plane at `base`, 0 outside.
    fn at(&self, base: usize, x: R, y: R) -> R {
        if self.w.in_bounds(x) && self.h.in_bounds(y) {
            self.v[base + y.f64() as usize * self.sy + x.f64() as usize * self.sx]
        } else {
            R::of(0.0)
        }
    }

    fn bilinear(&self, base: usize, gx: R, gy: R) -> R {
        let x = self.w.pad(self.w.unnormalize(gx));
        let y = self.h.pad(self.h.unnormalize(gy));
        let one = R::of(1.0);
        let (xw, yn) = (x.floor(), y.floor());
        let (we, wn) = (x - xw, y - yn);
        let (ww, ws) = (one - we, one - wn);
        self.at(base, xw, yn) * (ws * ww)
            + self.at(base, xw + one, yn) * (ws * we)
            + self.at(base, xw, yn + one) * (wn * ww)
            + self.at(base, xw + one, yn + one) * (wn * we)
    }

    fn nearest(&self, base: usize, gx: R, gy: R) -> R {
        let x = self.w.pad(self.w.unnormalize(gx)).rint();
        let y = self.h.pad(self.h.unnormalize(gy)).rint();
        self.at(base, x, y)
    }

    fn bicubic(&self, base: usize, gx: R, gy: R) -> R {
        let x = self.w.unnormalize(gx);
        let y = self.h.unnormalize(gy);
        let (ix, iy) = (x.floor(), y.floor());
        let cx = cubic_coeffs(x - ix);
        let cy = cubic_coeffs(y - iy);
        let tap = |dx: f64, dy: f64| {
            let px = self.w.pad(ix + R::of(dx));
            let py = self.h.pad(iy + R::of(dy));
            self.at(base, px, py)
        };
        let mut acc = R::of(0.0);
        for (j, &fy) in cy.iter().enumerate() {
            let dy = j as f64 - 1.0;
            let row = cx[0] * tap(-1.0, dy)
                + cx[1] * tap(0.0, dy)
                + cx[2] * tap(1.0, dy)
                + cx[3] * tap(2.0, dy);
            acc = acc + fy * row;
        }
        acc
    }
}

struct GridArgs<'t> {
    x: TensorRef<'t>,
    grid: TensorRef<'t>,
    mode: i64,
    padding: Padding,
    align: bool,
}

fn sample_all<R: Real + crate::element::Element>(
    g: &GridArgs<'_>,
    dims: [usize; 4],
    st: [usize; 4],
    out_hw: (usize, usize),
) -> Vec<R> {
    let [n, c, h, w] = dims;
    let (oh, ow) = out_hw;
    let v = cast_to::<R>(&g.x);
    let grid = logical::<R>(&g.grid);
    let axis = |size| Axis { size, align: g.align, padding: g.padding, _r: Default::default() };
    let s = Sampler { v: &v, h: axis(h), w: axis(w), sy: st[2], sx: st[3] };
    let mut res = Vec::with_capacity(n * c * oh * ow);
    for ni in 0..n {
        for ci in 0..c {
            let base = ni * st[0] + ci * st[1];
            for p in 0..oh * ow {
                let gi = (ni * oh * ow + p) * 2;
                let (gx, gy) = (grid[gi], grid[gi + 1]);
                res.push(match g.mode {
                    0 => s.bilinear(base, gx, gy),
                    1 => s.nearest(base, gx, gy),
                    _ => s.bicubic(base, gx, gy),
                });
            }
        }
    }
    res
}

fn grid_sampler(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "input")?;
    let grid = a.tensor(1, "grid")?;
    let mode = a.int(2, "interpolation_mode")?;
    let padding = match a.int(3, "padding_mode")? {
        0 => Padding::Zeros,
        1 => Padding::Border,
        2 => Padding::Reflection,
        p => {
            return Err(ctx.invalid(
                "padding_mode",
                format!("{p} is not 0 (zeros), 1 (border) or 2 (reflection)"),
            ))
        }
    };
    let align = a.bool(4, "align_corners")?;
    if !(0..=2).contains(&mode) {
        return Err(ctx.invalid(
            "interpolation_mode",
            format!("{mode} is not 0 (bilinear), 1 (nearest) or 2 (bicubic)"),
        ));
    }
    float_input(ctx, &x, "input")?;
    if grid.dtype() != x.dtype() {
        return Err(ctx.dtype_err(
            "grid",
            format!("{} (the input dtype)", x.dtype()),
            grid.dtype(),
        ));
    }
    let (dims, st) = nchw(ctx, &x, "input")?;
    let (oh, ow) = match grid.sizes() {
        &[gn, oh, ow, 2] if gn == dims[0] => (oh, ow),
        other => {
            return Err(ctx.shape_err("grid", format!("[{}, H_out, W_out, 2]", dims[0]), other))
        }
    };
    if dims[2] == 0 || dims[3] == 0 {
        return Err(ctx.shape_err("input", "non-empty spatial dims", x.sizes()));
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != x.dtype() {
        return Err(ctx.dtype_err("out", format!("{} (the input dtype)", x.dtype()), out.dtype()));
    }
    resize(ctx, out, "out", &[dims[0], dims[1], oh, ow])?;
    let g = GridArgs { x, grid, mode, padding, align };
    match x.dtype() {
        DType::Double => store_logical(ctx, out, &sample_all::<f64>(&g, dims, st, (oh, ow)), true),
        DType::Half => {
            store_logical(ctx, out, &sample_all::<half::f16>(&g, dims, st, (oh, ow)), true)
        }
        DType::BFloat16 => {
            store_logical(ctx, out, &sample_all::<half::bf16>(&g, dims, st, (oh, ow)), true)
        }
        _ => store_logical(ctx, out, &sample_all::<f32>(&g, dims, st, (oh, ow)), true),
    }
}

// ---------------------------------------------------------------- nearest and bilinear

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

fn upsample_nearest(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
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
    // The source offset of each output row and column, within a plane.
    let src = |len: usize, f: f32, inp: usize, stride: usize| -> Vec<usize> {
        let at = |o: usize| ((o as f32 * f).floor() as usize).min(inp.saturating_sub(1));
        (0..len).map(|o| at(o) * stride).collect()
    };
    let rows = src(oh, scale(g.h, oh, sc[0]), g.h, g.st[2]);
    let cols = src(ow, scale(g.w, ow, sc[1]), g.w, g.st[3]);
    let os = out_planes(out);
    let dt = x.dtype();
    crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(&x);
        with_out::<T>(ctx, out, true, |dst| {
            g.fill(dst, os, [oh, ow], |base, y, xo| v[base + rows[y] + cols[xo]])
        })
    }, _ => Err(ctx.dtype_err("input", "a computable dtype", dt)))
}

fn upsample_bilinear(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
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
    let (fh, fw) = (area_scale(g.h, oh, align, sc[0]), area_scale(g.w, ow, align, sc[1]));
    let coord = |o: usize, f: f64, inp: usize| -> (usize, usize, f64) {
        let src = if align { f * o as f64 } else { (f * (o as f64 + 0.5) - 0.5).max(0.0) };
        let i0 = (src.floor() as usize).min(inp - 1);
        let i1 = if i0 < inp - 1 { i0 + 1 } else { i0 };
        (i0, i1, (src - i0 as f64).clamp(0.0, 1.0))
    };
    let v = cast_to::<f64>(&x);
    let os = out_planes(out);
    let rows: Vec<_> = (0..oh).map(|y| coord(y, fh, g.h)).collect();
    let cols: Vec<_> = (0..ow).map(|x| coord(x, fw, g.w)).collect();
    with_out::<f64>(ctx, out, true, |dst| {
        g.fill(dst, os, [oh, ow], |base, y, xo| {
            let ((y0, y1, ly), (x0, x1, lx)) = (rows[y], cols[xo]);
            let at = |yy: usize, xx: usize| v[base + yy * g.st[2] + xx * g.st[3]];
            (1.0 - ly) * ((1.0 - lx) * at(y0, x0) + lx * at(y0, x1))
                + ly * ((1.0 - lx) * at(y1, x0) + lx * at(y1, x1))
        })
    })
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::upsample_nearest2d.vec_out", 3, |c, a, o| upsample_nearest(c, a, o)),
        out1("aten::upsample_bilinear2d.vec_out", 4, |c, a, o| upsample_bilinear(c, a, o)),
        out1("aten::_upsample_bilinear2d_aa.out", 5, |c, a, o| upsample_aa(c, a, o)),
        out1("aten::grid_sampler_2d.out", 5, |c, a, o| grid_sampler(c, a, o)),
    ]
}
