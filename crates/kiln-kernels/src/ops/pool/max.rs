//! `max_pool2d_with_indices`: the general path over any real dtype (values compared in `f64`,
//! the first of the largest or the last NaN, as PyTorch walks the window) and its float32 fast
//! path, which gives the same bits.

use super::window::{kernel_stride_padding, window, KResult, Window};
use crate::compute::threads::{split, Threads, TASKS_PER_THREAD};
use crate::dtype::DType;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensors2, Args};
use crate::ops::defs::out_n;
use crate::ops::planes::{out_planes, out_sizes, pair, planes, Planes};
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out};

/// `max_pool2d_with_indices.out(self, kernel_size, stride, padding, dilation, ceil_mode, *,
/// out, indices)`.
fn max_pool(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let [k, s, p] = kernel_stride_padding(ctx, &a)?;
    let d = pair(ctx, a.int_list(4, "dilation")?, "dilation", Some([1, 1]), 1)?;
    let ceil = a.bool(5, "ceil_mode")?;
    let g = planes(ctx, &x, "self")?;
    let geo = window(ctx, [g.h, g.w], [k, s, p, d], ceil)?;
    let (oh, ow) = (geo.oh, geo.ow);
    let [out, idx] = out_tensors2(ctx, outs, ["out", "indices"])?;
    let sizes = out_sizes(&x, oh, ow);
    resize(ctx, out, "out", &sizes)?;
    resize(ctx, idx, "indices", &sizes)?;
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

/// The kernels of this file.
pub(super) fn kernels() -> Vec<KernelDef> {
    vec![out_n("aten::max_pool2d_with_indices.out", 6, 2, |c, a, o| max_pool(c, a, o))]
}

#[cfg(test)]
mod tests {
    use crate::compute::threads::Threads;
    use crate::testing::{out, out_sizes, run_kernel};
    use crate::{Arg, Capacity, TensorRef};

    /// `max_pool2d_with_indices` on `threads` with the fast path on or off: (values, indices).
    fn run(
        threads: &Threads,
        general: bool,
        sizes: &[usize],
        x: &[f32],
        win: [[i64; 2]; 4],
        ceil: bool,
    ) -> (Vec<f32>, Vec<i64>) {
        let [k, s, p, d] = win;
        let args = [
            Arg::Tensor(TensorRef::from_slice(sizes, x).unwrap()),
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
        let zeros = vec![0; sizes.len()];
        let mut outs = [
            out(&mut vals, &zeros, &[], Capacity::Bound(cap)),
            out(&mut idx, &zeros, &[], Capacity::Bound(cap)),
        ];
        run_kernel("aten::max_pool2d_with_indices.out", general, threads, &args, &mut outs)
            .unwrap();
        let n = out_sizes(&outs, 0).iter().product();
        (vals[..n].to_vec(), idx[..n].to_vec())
    }

    /// Property test: the float32 fast path gives the general path's values and indices bit
    /// for bit on random shapes, windows and inputs with NaN, infinities and ties.
    #[test]
    fn max_pool_fast_path_equals_general_path() {
        let mut rng = fastrand::Rng::with_seed(0x9001);
        let one = Threads::default();
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
            let (fv, fi) = run(&one, false, &sizes, &x, win, ceil);
            let (gv, gi) = run(&one, true, &sizes, &x, win, ceil);
            assert_eq!(fi, gi, "case {case}: indices");
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fv), bits(&gv), "case {case}: values");
        }
        // Large enough to split over threads: the same values and indices.
        let sizes = [2usize, 37, 30, 31];
        let x: Vec<f32> = (0..sizes.iter().product()).map(|_| rng.f32() * 4.0 - 2.0).collect();
        let win = [[3, 3], [2, 2], [1, 1], [1, 1]];
        let threads = Threads::new(3).unwrap();
        let fast = run(&threads, false, &sizes, &x, win, false);
        assert_eq!(fast, run(&one, true, &sizes, &x, win, false));
    }
}
