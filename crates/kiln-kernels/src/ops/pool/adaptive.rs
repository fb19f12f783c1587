//! Adaptive pooling: `_adaptive_avg_pool2d` and `adaptive_max_pool2d`, whose windows are
//! derived from the output size (output index `o` of `out` over an axis of `len` reads input
//! indices `floor(o * len / out)` up to `ceil((o + 1) * len / out)`).

use super::window::KResult;
use crate::dtype::DType;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, out_tensors2, Args};
use crate::ops::defs::{out1, out_n};
use crate::ops::planes::{out_planes, out_sizes, pair, planes};
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::value::{Arg, Out};

/// The input span `[start, end)` of each of `out` output indices over an axis of `len`.
fn spans(len: usize, out: usize) -> Vec<(usize, usize)> {
    (0..out).map(|o| ((o * len) / out, ((o + 1) * len).div_ceil(out))).collect()
}

/// `_adaptive_avg_pool2d.out(self, output_size, *, out)`.
fn adaptive_avg(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
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
    let (rows, cols) = (spans(g.h, oh), spans(g.w, ow));
    with_out::<f64>(ctx, out, true, |dst| {
        g.fill(dst, os, [oh, ow], |base, y, xo| {
            let ((hs, he), (ws, we)) = (rows[y], cols[xo]);
            let mut sum = 0.0;
            for yy in hs..he {
                for xx in ws..we {
                    sum += v[base + yy * g.st[2] + xx * g.st[3]];
                }
            }
            sum / ((he - hs) * (we - ws)) as f64
        })
    })
}

/// `adaptive_max_pool2d.out(self, output_size, *, out, indices)`: each adaptive window's
/// maximum and its flat index `h * W + w` in the input plane, as PyTorch's CPU kernel walks
/// the window (row by row: the first of the largest values, or the last NaN). Any floating
/// dtype; the values compare in `f64` (exactly) and keep the input's dtype.
fn adaptive_max(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let [oh, ow] = match a.int_list(1, "output_size")? {
        &[h, w] if h >= 0 && w >= 0 => [h as usize, w as usize],
        other => {
            let msg = format!("expected two sizes of at least 0, got {other:?}");
            return Err(ctx.invalid("output_size", msg));
        }
    };
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("self", "a floating dtype", x.dtype()));
    }
    let g = planes(ctx, &x, "self")?;
    // PyTorch refuses an empty channel or spatial dimension (the batch may be empty).
    if x.sizes()[x.rank() - 3..].contains(&0) {
        return Err(ctx.shape_err("self", "non-empty channel, height and width", x.sizes()));
    }
    let [out, idx] = out_tensors2(ctx, outs, ["out", "indices"])?;
    if out.dtype() != x.dtype() {
        let want = format!("{} (the input's dtype)", x.dtype().name());
        return Err(ctx.dtype_err("out", want, out.dtype()));
    }
    if idx.dtype() != DType::Long {
        return Err(ctx.dtype_err("indices", "int64", idx.dtype()));
    }
    let sizes = out_sizes(&x, oh, ow);
    resize(ctx, out, "out", &sizes)?;
    resize(ctx, idx, "indices", &sizes)?;
    let v = cast_to::<f64>(&x);
    let (rows, cols) = (spans(g.h, oh), spans(g.w, ow));
    let mut picks = Vec::with_capacity(g.n * g.c * oh * ow);
    for n in 0..g.n {
        for c in 0..g.c {
            let base = n * g.st[0] + c * g.st[1];
            for &(hs, he) in &rows {
                for &(ws, we) in &cols {
                    let (mut best, mut at) = (f64::NEG_INFINITY, hs * g.w + ws);
                    for yy in hs..he {
                        for xx in ws..we {
                            let val = v[base + yy * g.st[2] + xx * g.st[3]];
                            if val > best || val.is_nan() {
                                (best, at) = (val, yy * g.w + xx);
                            }
                        }
                    }
                    picks.push((best, at as i64));
                }
            }
        }
    }
    let (os, is) = (out_planes(out), out_planes(idx));
    let mut values = picks.iter().map(|p| p.0);
    with_out::<f64>(ctx, out, false, |dst| {
        g.fill(dst, os, [oh, ow], |_, _, _| values.next().unwrap_or(f64::NAN))
    })?;
    let mut indices = picks.iter().map(|p| p.1);
    with_out::<i64>(ctx, idx, false, |dst| {
        g.fill(dst, is, [oh, ow], |_, _, _| indices.next().unwrap_or(-1))
    })
}

/// The kernels of this file.
pub(super) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::_adaptive_avg_pool2d.out", 2, |c, a, o| adaptive_avg(c, a, o)),
        out_n("aten::adaptive_max_pool2d.out", 2, 2, |c, a, o| adaptive_max(c, a, o)),
    ]
}
