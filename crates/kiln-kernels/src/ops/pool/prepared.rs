//! 2-D max pooling of float32 NCHW planes or channels-last images, values only: what the
//! compiled graph runs for a `max_pool2d_with_indices` whose indices nobody reads.
//!
//! The result is the value `max_pool2d_with_indices` reports, bit for bit: walking the
//! window row by row, the first of the largest values, or the last NaN when the window holds
//! one. That walk is a left fold of `pick`, which is associative, so each window is
//! folded row by row ("horizontal" partials of every input row, computed once per plane and
//! shared by the overlapping windows of adjacent output rows) and then down the rows: long
//! independent loops the compiler vectorizes, instead of one dependent chain per window.

#![allow(unsafe_code)]

use super::window::Window;
use crate::compute::conv2d::{Layout, Layouts};
use crate::compute::sgemm::GemmError;
use crate::compute::threads::{split, with_pieces, Threads, TASKS_PER_THREAD};
use crate::shape::int_pair;

/// A value max pooling runs over: float32, or int8 (the quantized activations of an XNNPACK
/// delegate: quantization is monotone, so the largest quantized value is the quantized
/// largest).
pub trait PoolValue: Copy + Send + Sync + 'static {
    /// What padded cells hold: never ahead of a real value.
    const LOWEST: Self;
    /// The window walk's step: `b` follows `a`.
    fn pick(a: Self, b: Self) -> Self;
}

impl PoolValue for f32 {
    const LOWEST: f32 = f32::NEG_INFINITY;

    /// The later value wins when it is a NaN, or when it is larger and the earlier is not a
    /// NaN.
    #[inline(always)]
    fn pick(a: f32, b: f32) -> f32 {
        if b.is_nan() || (b > a && !a.is_nan()) {
            b
        } else {
            a
        }
    }
}

impl PoolValue for i8 {
    const LOWEST: i8 = i8::MIN;

    /// The later value wins when it is larger.
    #[inline(always)]
    fn pick(a: i8, b: i8) -> i8 {
        a.max(b)
    }
}

/// Channels `c0..c0 + L` of the pixels of `x` starting at each of `window`, folded with
/// [`PoolValue::pick`] from [`PoolValue::LOWEST`] into `out[..L]`.
#[inline(always)]
fn fold_run<const L: usize, T: PoolValue>(x: &[T], window: &[usize], c0: usize, out: &mut [T]) {
    let mut acc = [T::LOWEST; L];
    for &at in window {
        let v: &[T; L] = x[at + c0..][..L].try_into().expect("L channels");
        for (a, &v) in acc.iter_mut().zip(v) {
            *a = T::pick(*a, v);
        }
    }
    out[..L].copy_from_slice(&acc);
}

/// What a `max_pool2d_with_indices` call says beside its tensors, as the compile stage lifts
/// it into a values-only step: kernel, stride, padding and dilation as (rows, columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2dArgs {
    /// Window rows and columns.
    pub kernel: [usize; 2],
    /// Step between windows.
    pub stride: [usize; 2],
    /// Implicit `-inf` padding on both sides.
    pub padding: [usize; 2],
    /// Step between a window's taps.
    pub dilation: [usize; 2],
    /// Whether a last partial window counts (`ceil_mode`).
    pub ceil: bool,
}

impl MaxPool2dArgs {
    /// The arguments from the call's int lists, read as the eager kernel reads them
    /// ([`int_pair`]): one value stands for both axes, an empty stride for the kernel, an
    /// empty padding for 0 and an empty dilation for 1. `None` when a list has another length
    /// or a value below its minimum (1, or 0 for padding).
    pub fn from_lists(
        kernel: &[i64],
        stride: &[i64],
        padding: &[i64],
        dilation: &[i64],
        ceil: bool,
    ) -> Option<Self> {
        let kernel = int_pair(kernel, None, 1)?;
        Some(MaxPool2dArgs {
            kernel,
            stride: int_pair(stride, Some(kernel), 1)?,
            padding: int_pair(padding, Some([0, 0]), 0)?,
            dilation: int_pair(dilation, Some([1, 1]), 1)?,
            ceil,
        })
    }

    /// Whether the pooling runs with `layouts`: NCHW to NCHW, or NHWC to NHWC (a 4-D input).
    pub fn supports(layouts: Layouts) -> bool {
        layouts.input == layouts.output
    }

    /// The pooling prepared for an `input` of sizes `[N, C, H, W]` or `[C, H, W]` laid out
    /// in `layout` (NHWC needs 4-D), checked to write `output`.
    pub fn prepare(
        &self,
        input: &[usize],
        output: &[usize],
        layout: Layout,
    ) -> Result<PreparedMaxPool2d, GemmError> {
        let Some((outer, &[h, w])) = input.split_last_chunk::<2>() else {
            return Err(GemmError::Window(input.to_vec()));
        };
        let planes = outer.iter().product();
        let [k, s, p, d] = [self.kernel, self.stride, self.padding, self.dilation];
        let pool = MaxPool2d::new(planes, [h, w], k, s, p, d, self.ceil)
            .ok_or_else(|| GemmError::Window(input.to_vec()))?;
        let want: Vec<usize> = outer.iter().copied().chain(pool.out_size()).collect();
        if output != want {
            let (what, actual, expected) = ("output", output.to_vec(), format!("{want:?}"));
            return Err(GemmError::Sizes { what, actual, expected });
        }
        let channels = match (layout, input) {
            (Layout::Nchw, _) => None,
            (Layout::Nhwc, &[_, c, _, _]) => Some(c),
            (Layout::Nhwc, _) => {
                let (what, actual) = ("NHWC input", input.to_vec());
                return Err(GemmError::Sizes { what, actual, expected: "4-D".into() });
            }
        };
        Ok(PreparedMaxPool2d { pool, channels })
    }
}

/// A max pooling prepared by [`MaxPool2dArgs::prepare`]: its geometry checked once, and the
/// channels of its channels-last images when it runs NHWC.
#[derive(Clone, Debug)]
pub struct PreparedMaxPool2d {
    pool: MaxPool2d,
    channels: Option<usize>,
}

impl PreparedMaxPool2d {
    /// Pools `x` into `y`, each laid out as prepared.
    pub fn run<T: PoolValue>(
        &self,
        x: &[T],
        y: &mut [T],
        threads: &Threads,
    ) -> Result<(), GemmError> {
        match self.channels {
            None => self.pool.run(x, y, threads),
            Some(c) => self.pool.run_nhwc(c, x, y, threads),
        }
    }
}

/// The geometry of one max pooling over `planes` planes of `h x w` (kernel, stride, padding
/// and dilation as (rows, columns)), checked once.
#[derive(Clone, Debug)]
pub struct MaxPool2d {
    planes: usize,
    h: usize,
    w: usize,
    win: Window,
}

/// Output elements from which a pooling splits its planes over threads.
const PARALLEL_OUTPUTS: usize = 1 << 14;

impl MaxPool2d {
    /// The pooling, or `None` when PyTorch would reject it: a zero size, stride or
    /// dilation, padding above half the kernel, or a kernel wider than the padded input.
    pub fn new(
        planes: usize,
        [h, w]: [usize; 2],
        k: [usize; 2],
        s: [usize; 2],
        p: [usize; 2],
        d: [usize; 2],
        ceil: bool,
    ) -> Option<Self> {
        if [planes, h, w, k[0], k[1], d[0], d[1]].contains(&0) || p[0] * 2 > k[0] {
            return None;
        }
        if p[1] * 2 > k[1] {
            return None;
        }
        let win = Window::new([h, w], [k, s, p, d], ceil).ok()?;
        planes.checked_mul(h)?.checked_mul(w)?;
        planes.checked_mul(win.oh)?.checked_mul(win.ow)?;
        Some(MaxPool2d { planes, h, w, win })
    }

    /// Output rows and columns.
    pub fn out_size(&self) -> [usize; 2] {
        [self.win.oh, self.win.ow]
    }

    /// Pools the planes of `x` (`planes x h x w`, contiguous) into `y` (`planes x oh x ow`).
    pub fn run<T: PoolValue>(
        &self,
        x: &[T],
        y: &mut [T],
        threads: &Threads,
    ) -> Result<(), GemmError> {
        let (hw, ohw) = (self.h * self.w, self.win.oh * self.win.ow);
        if x.len() != self.planes * hw || y.len() != self.planes * ohw {
            return Err(GemmError::Invalid("max_pool2d: tensor sizes differ from the geometry"));
        }
        let parts = match y.len() >= PARALLEL_OUTPUTS {
            true => threads.tasks_for(TASKS_PER_THREAD, self.planes),
            false => 1,
        };
        let tasks = with_pieces(split(self.planes, 1, parts), y, ohw);
        threads.for_each(tasks, |(run, y)| {
            let mut rows = vec![T::LOWEST; self.h * self.win.ow];
            for (plane, y) in run.zip(y.chunks_exact_mut(ohw)) {
                self.plane(&x[plane * hw..][..hw], y, &mut rows);
            }
        });
        Ok(())
    }

    /// Pools channels-last images: `x` is `[planes / channels, h, w, channels]`, `y`
    /// `[planes / channels, oh, ow, channels]`. Each output pixel folds its window's pixels,
    /// all channels side by side, in the walk's order.
    pub fn run_nhwc<T: PoolValue>(
        &self,
        channels: usize,
        x: &[T],
        y: &mut [T],
        threads: &Threads,
    ) -> Result<(), GemmError> {
        if channels == 0 || !self.planes.is_multiple_of(channels) {
            return Err(GemmError::Invalid("max_pool2d: the channels do not divide the planes"));
        }
        if x.len() != self.planes * self.h * self.w
            || y.len() != self.planes * self.win.oh * self.win.ow
        {
            return Err(GemmError::Invalid("max_pool2d: tensor sizes differ from the geometry"));
        }
        let (image, row) = (self.h * self.w * channels, self.win.ow * channels);
        let rows = self.planes / channels * self.win.oh;
        let parts = match y.len() >= PARALLEL_OUTPUTS {
            true => threads.tasks_for(TASKS_PER_THREAD, rows),
            false => 1,
        };
        threads.for_each(with_pieces(split(rows, 1, parts), y, row), |(rows, y)| {
            for (r, out) in rows.zip(y.chunks_exact_mut(row)) {
                self.nhwc_row(
                    channels,
                    &x[r / self.win.oh * image..][..image],
                    r % self.win.oh,
                    out,
                );
            }
        });
        Ok(())
    }

    /// Output row `oy` of channels-last image `x` into `out` (`ow x c`), on 16- or 8-lane
    /// vectors where the CPU has them.
    fn nhwc_row<T: PoolValue>(&self, c: usize, x: &[T], oy: usize, out: &mut [T]) {
        #[cfg(target_arch = "x86_64")]
        {
            if crate::compute::cpu::has_avx512() {
                // SAFETY: the CPU has AVX-512F, the only feature the function enables.
                return unsafe { self.nhwc_row_avx512(c, x, oy, out) };
            }
            if crate::compute::cpu::has_avx2() {
                // SAFETY: the CPU has AVX2, the only feature the function enables.
                return unsafe { self.nhwc_row_avx2(c, x, oy, out) };
            }
        }
        self.nhwc_row_body(c, x, oy, out)
    }

    /// [`MaxPool2d::nhwc_row_body`] compiled for AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn nhwc_row_avx2<T: PoolValue>(&self, c: usize, x: &[T], oy: usize, out: &mut [T]) {
        self.nhwc_row_body(c, x, oy, out)
    }

    /// [`MaxPool2d::nhwc_row_body`] compiled for AVX-512 (the compiler vectorizes the fold
    /// over channels; the baseline build has 4-lane vectors).
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn nhwc_row_avx512<T: PoolValue>(&self, c: usize, x: &[T], oy: usize, out: &mut [T]) {
        self.nhwc_row_body(c, x, oy, out)
    }

    /// The body of [`MaxPool2d::nhwc_row`]: each output pixel's channels in runs of 16, then
    /// 8, then one at a time, each run folded over the window (rows, then columns) in fixed-size
    /// registers.
    #[inline(always)]
    fn nhwc_row_body<T: PoolValue>(&self, c: usize, x: &[T], oy: usize, out: &mut [T]) {
        let inside = |o: usize, k: usize, axis: usize, len: usize| {
            (o * self.win.s[axis] + k * self.win.d[axis])
                .checked_sub(self.win.p[axis])
                .filter(|&i| i < len)
        };
        let rows: Vec<usize> =
            (0..self.win.k[0]).filter_map(|ky| inside(oy, ky, 0, self.h)).collect();
        // A window whose columns are all inside the input: each pixel's offset from the
        // window's first column, in the walk's order (rows, then columns).
        let (kw, dw) = (self.win.k[1], self.win.d[1]);
        let rel: Vec<usize> = rows
            .iter()
            .flat_map(|&iy| (0..kw).map(move |kx| (iy * self.w + kx * dw) * c))
            .collect();
        let span = (kw - 1) * dw;
        // The window's pixels, in the walk's order: where each pixel's channels start in `x`.
        let mut window = Vec::with_capacity(rows.len() * kw);
        for (ox, o) in out.chunks_exact_mut(c).enumerate() {
            window.clear();
            match (ox * self.win.s[1]).checked_sub(self.win.p[1]) {
                Some(ix) if ix + span < self.w => window.extend(rel.iter().map(|&r| r + ix * c)),
                _ => {
                    for &iy in &rows {
                        let cols = (0..kw).filter_map(|kx| inside(ox, kx, 1, self.w));
                        window.extend(cols.map(|ix| (iy * self.w + ix) * c));
                    }
                }
            }
            let mut c0 = 0;
            while c - c0 >= 16 {
                fold_run::<16, T>(x, &window, c0, &mut o[c0..]);
                c0 += 16;
            }
            if c - c0 >= 8 {
                fold_run::<8, T>(x, &window, c0, &mut o[c0..]);
                c0 += 8;
            }
            for ch in c0..c {
                fold_run::<1, T>(x, &window, ch, &mut o[ch..]);
            }
        }
    }

    /// One plane; `rows` holds the horizontal partials (`h x ow`).
    fn plane<T: PoolValue>(&self, x: &[T], y: &mut [T], rows: &mut [T]) {
        for (row, partial) in x.chunks_exact(self.w).zip(rows.chunks_exact_mut(self.win.ow)) {
            self.across(row, partial);
        }
        let (k, s, p, d) = (self.win.k[0], self.win.s[0], self.win.p[0], self.win.d[0]);
        for (oy, out) in y.chunks_exact_mut(self.win.ow).enumerate() {
            out.fill(T::LOWEST);
            for ky in 0..k {
                let Some(iy) = (oy * s + ky * d).checked_sub(p).filter(|&iy| iy < self.h) else {
                    continue;
                };
                for (o, &v) in out.iter_mut().zip(&rows[iy * self.win.ow..][..self.win.ow]) {
                    *o = T::pick(*o, v);
                }
            }
        }
    }

    /// The fold of each output column's window over one input row into `out` (`ow` values).
    fn across<T: PoolValue>(&self, row: &[T], out: &mut [T]) {
        let (k, s, p, d) = (self.win.k[1], self.win.s[1], self.win.p[1], self.win.d[1]);
        out.fill(T::LOWEST);
        // Columns whose whole window lies inside the row, then the clipped ones at the edges.
        let span = (k - 1) * d;
        let first = p.div_ceil(s).min(self.win.ow);
        let end =
            (self.w + p).checked_sub(span + 1).map_or(0, |v| v / s + 1).clamp(first, self.win.ow);
        for kx in 0..k {
            let inner = &mut out[first..end];
            // The input column of output column `first + i` at this tap.
            let at = |i: usize| (first + i) * s + kx * d - p;
            match s {
                _ if inner.is_empty() => {}
                1 => inner.iter_mut().zip(&row[at(0)..]).for_each(|(o, &v)| *o = T::pick(*o, v)),
                2 => {
                    // Exact pairs (the last window's tap may end the row: its pair is cut).
                    let n = inner.len();
                    let (pairs, last) = row[at(0)..][..2 * n - 1].split_at(2 * (n - 1));
                    let (head, tail) = inner.split_at_mut(n - 1);
                    for (o, v) in head.iter_mut().zip(pairs.chunks_exact(2)) {
                        *o = T::pick(*o, v[0]);
                    }
                    tail[0] = T::pick(tail[0], last[0]);
                }
                _ => inner.iter_mut().enumerate().for_each(|(i, o)| *o = T::pick(*o, row[at(i)])),
            }
            for xo in (0..first).chain(end..self.win.ow) {
                if let Some(ix) = (xo * s + kx * d).checked_sub(p).filter(|&ix| ix < self.w) {
                    out[xo] = T::pick(out[xo], row[ix]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: the window walked row by row, as `max_pool2d_with_indices` walks it.
    fn walk(m: &MaxPool2d, x: &[f32]) -> Vec<f32> {
        let mut y = Vec::new();
        for plane in x.chunks_exact(m.h * m.w) {
            for oy in 0..m.win.oh {
                for ox in 0..m.win.ow {
                    let mut best = f32::NEG_INFINITY;
                    for ky in 0..m.win.k[0] {
                        let Some(iy) = (oy * m.win.s[0] + ky * m.win.d[0]).checked_sub(m.win.p[0])
                        else {
                            continue;
                        };
                        for kx in 0..m.win.k[1] {
                            let Some(ix) =
                                (ox * m.win.s[1] + kx * m.win.d[1]).checked_sub(m.win.p[1])
                            else {
                                continue;
                            };
                            if iy < m.h && ix < m.w {
                                let v = plane[iy * m.w + ix];
                                if v > best || v.is_nan() {
                                    best = v;
                                }
                            }
                        }
                    }
                    y.push(best);
                }
            }
        }
        y
    }

    /// Property test: random geometries (strides 1, 2 and 3, dilation, padding, ceil mode)
    /// and inputs with NaNs of two payloads, infinities, signed zeros and ties give the walk's
    /// bits, on one thread and split over three.
    #[test]
    fn pooling_gives_the_walks_bits() {
        let mut rng = fastrand::Rng::with_seed(0x3a7);
        let threads = Threads::new(3).unwrap();
        let mut tested = 0;
        while tested < 400 {
            let (kh, kw) = (rng.usize(1..4), rng.usize(1..4));
            let (h, w) = (rng.usize(1..12), rng.usize(1..40));
            let s = [rng.usize(1..4), rng.usize(1..4)];
            let d = [rng.usize(1..3), rng.usize(1..3)];
            let p = [rng.usize(0..=kh / 2), rng.usize(0..=kw / 2)];
            // Channels-last runs of 16, 8 and single channels: 24 and 41 channels.
            let planes = [1, 2, 3, 24, 41][rng.usize(0..5)];
            let Some(m) = MaxPool2d::new(planes, [h, w], [kh, kw], s, p, d, rng.bool()) else {
                continue;
            };
            let x: Vec<f32> = (0..planes * h * w)
                .map(|_| match rng.u8(0..24) {
                    0 => f32::NAN,
                    1 => f32::from_bits(0x7fc0_0123),
                    2 => f32::INFINITY,
                    3 => f32::NEG_INFINITY,
                    4 => 0.0,
                    5 => -0.0,
                    6..=8 => 1.0,
                    _ => rng.f32() * 4.0 - 2.0,
                })
                .collect();
            let want: Vec<u32> = walk(&m, &x).iter().map(|v| v.to_bits()).collect();
            // The same planes as channels-last images of `c` channels.
            let c = match planes {
                2 => [1, 2][rng.usize(0..2)],
                24 => [8, 24][rng.usize(0..2)],
                _ => planes,
            };
            let (hw, ohw) = (h * w, m.win.oh * m.win.ow);
            let x_nhwc: Vec<f32> =
                (0..x.len()).map(|i| x[(i / (hw * c) * c + i % c) * hw + i / c % hw]).collect();
            for t in [&Threads::new(1).unwrap(), &threads] {
                let mut y = vec![0.5; planes * ohw];
                m.run(&x, &mut y, t).unwrap();
                let got: Vec<u32> = y.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{m:?}");
                m.run_nhwc(c, &x_nhwc, &mut y, t).unwrap();
                let got: Vec<u32> = (0..y.len())
                    .map(|i| y[(i / (ohw * c) * ohw + i % ohw) * c + i / ohw % c].to_bits())
                    .collect();
                assert_eq!(got, want, "{m:?} channels-last, {c} channels");
            }
            tested += 1;
        }
    }

    /// A pooling prepared from a call's int lists ([`MaxPool2dArgs::from_lists`]) writes the
    /// bits the eager `max_pool2d_with_indices` kernel writes from the same lists (one value
    /// for both axes, empty stride, padding and dilation lists, values out of range), and is
    /// refused where the eager kernel refuses the call.
    #[test]
    fn prepared_from_lists_matches_the_eager_kernel() {
        use crate::{testing, Arg, Capacity, DType, Shape, TensorRef};
        let mut rng = fastrand::Rng::with_seed(0x51);
        let one = Threads::new(1).unwrap();
        let list = |rng: &mut fastrand::Rng, lo: i64, hi: i64| -> Vec<i64> {
            (0..[0, 1, 2, 2, 3][rng.usize(0..5)]).map(|_| rng.i64(lo..hi)).collect()
        };
        let (mut ran, mut refused) = (0, 0);
        while ran < 200 || refused < 50 {
            let sizes = [1, rng.usize(1..3), rng.usize(1..9), rng.usize(1..9)];
            let kernel = list(&mut rng, 0, 4);
            let stride = list(&mut rng, 0, 4);
            let padding = list(&mut rng, -1, 3);
            let dilation = list(&mut rng, 0, 3);
            let ceil = rng.bool();
            let x: Vec<f32> = (0..sizes.iter().product()).map(|_| rng.f32() * 4.0 - 2.0).collect();
            let shape = Shape::contiguous(&sizes).unwrap();
            let xt = TensorRef::new(DType::Float, shape, bytemuck::cast_slice(&x)).unwrap();
            let cap = sizes[1] * (sizes[2] + 4) * (sizes[3] + 4);
            let (mut y, mut indices) = (vec![0f32; cap], vec![0i64; cap]);
            let args = [
                Arg::Tensor(xt),
                Arg::IntList(&kernel),
                Arg::IntList(&stride),
                Arg::IntList(&padding),
                Arg::IntList(&dilation),
                Arg::Bool(ceil),
                Arg::Output,
                Arg::Output,
                Arg::Output,
            ];
            let name = "aten::max_pool2d_with_indices.out";
            let (eager, out) = {
                let mut outs = [
                    testing::out(&mut y, &sizes, &[], Capacity::Bound(cap)),
                    testing::out(&mut indices, &sizes, &[], Capacity::Bound(cap)),
                ];
                let eager = testing::run_kernel(name, true, &one, &args, &mut outs);
                (eager, testing::out_sizes(&outs, 0))
            };
            let lists = (&kernel, &stride, &padding, &dilation, ceil);
            let pool_args = MaxPool2dArgs::from_lists(&kernel, &stride, &padding, &dilation, ceil);
            if eager.is_err() {
                let refused_too = pool_args.is_none_or(|a| {
                    matches!(a.prepare(&sizes, &out, Layout::Nchw), Err(GemmError::Window(_)))
                });
                assert!(refused_too, "{lists:?}: eager refuses ({eager:?}), prepared does not");
                refused += 1;
                continue;
            }
            let pool = pool_args.and_then(|a| a.prepare(&sizes, &out, Layout::Nchw).ok());
            let pool = pool.unwrap_or_else(|| panic!("{lists:?}: eager runs, prepared refuses"));
            let n: usize = out.iter().product();
            let mut got = vec![0f32; n];
            pool.run(&x, &mut got, &one).unwrap();
            let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&y[..n]), "{lists:?} over {sizes:?}");
            ran += 1;
        }
    }

    #[test]
    fn rejects_what_pytorch_rejects() {
        let ok = |k, p, s| MaxPool2d::new(1, [4, 4], [k, k], [s, s], [p, p], [1, 1], false);
        assert!(ok(3, 1, 2).is_some());
        assert!(ok(3, 2, 2).is_none(), "padding above half the kernel");
        assert!(ok(3, 1, 0).is_none(), "zero stride");
        assert!(ok(7, 0, 1).is_none(), "kernel wider than the input");
        let mut y = [0.0; 4];
        let m = ok(3, 1, 2).unwrap();
        let one = Threads::new(1).unwrap();
        assert!(m.run(&[0.0; 15], &mut y, &one).is_err());
        assert!(m.run_nhwc(0, &[0.0; 16], &mut y, &one).is_err(), "no channels");
        assert!(m.run_nhwc(2, &[0.0; 16], &mut y, &one).is_err(), "2 channels of 1 plane");
    }
}
