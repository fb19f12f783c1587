//! Adaptive pooling: `_adaptive_avg_pool2d`, whose windows are
//! derived from the output size (output index `o` of `out` over an axis of `len` reads input
//! indices `floor(o * len / out)` up to `ceil((o + 1) * len / out)`).

use super::window::KResult;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
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

/// The kernels of this file.
pub(super) fn kernels() -> Vec<KernelDef> {
    vec![out1("aten::_adaptive_avg_pool2d.out", 2, |c, a, o| adaptive_avg(c, a, o))]
}
