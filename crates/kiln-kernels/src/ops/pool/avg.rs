//! `avg_pool2d`: window sums in `f64`, divided by the window's size inside the padded input
//! (`count_include_pad`), inside the input, or by `divisor_override`.

use super::window::{kernel_stride_padding, window, KResult, Window};
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::planes::{out_planes, out_sizes, planes};
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::value::{Arg, Out};

/// `avg_pool2d.out(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
/// divisor_override, *, out)`.
fn avg_pool(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let [k, s, p] = kernel_stride_padding(ctx, &a)?;
    let ceil = a.bool(4, "ceil_mode")?;
    let include_pad = a.bool(5, "count_include_pad")?;
    let divisor = a.opt_int(6, "divisor_override")?;
    if divisor == Some(0) {
        return Err(ctx.invalid("divisor_override", "must not be zero"));
    }
    if !x.dtype().is_float() {
        return Err(ctx.dtype_err("self", "a floating dtype", x.dtype()));
    }
    let g = planes(ctx, &x, "self")?;
    let Window { oh, ow, .. } = window(ctx, [g.h, g.w], [k, s, p, [1, 1]], ceil)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    resize(ctx, out, "out", &out_sizes(&x, oh, ow))?;
    let v = cast_to::<f64>(&x);
    let os = out_planes(out);
    with_out::<f64>(ctx, out, true, |dst| {
        g.fill(dst, os, [oh, ow], |base, y, xo| {
            let hs0 = (y * s[0]) as isize - p[0] as isize;
            let ws0 = (xo * s[1]) as isize - p[1] as isize;
            let he0 = (hs0 + k[0] as isize).min((g.h + p[0]) as isize);
            let we0 = (ws0 + k[1] as isize).min((g.w + p[1]) as isize);
            let pool = ((he0 - hs0) * (we0 - ws0)) as f64;
            let (hs, ws) = (hs0.max(0) as usize, ws0.max(0) as usize);
            let (he, we) =
                (he0.min(g.h as isize).max(0) as usize, we0.min(g.w as isize).max(0) as usize);
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
            if he <= hs || we <= ws {
                0.0
            } else {
                sum / div
            }
        })
    })
}

/// The kernels of this file.
pub(super) fn kernels() -> Vec<KernelDef> {
    vec![out1("aten::avg_pool2d.out", 7, |c, a, o| avg_pool(c, a, o))]
}
