//! Depthwise sums with the channels in the vector lanes: blocks of [`BLOCK`] channels laid
//! out channels-last (pixel by pixel, a block's channels contiguous), so every tap of every
//! output pixel is one vector multiply-add however narrow the plane. This suits the small
//! planes of a CNN's later layers, where a row of [`super::rows`] fills a fraction of a
//! vector, and channels-last activations of any size. The arithmetic is that of `taps`, so both give the same bits: for output pixel
//! `(oy, ox)` and each channel, `s = sum_ky sum_kx w[ky][kx] * x[...]` in `ky`, `kx` order
//! from zero, one fused multiply-add per term (taps in the horizontal padding multiply zero,
//! rows in the vertical padding are skipped), then `clamp((s + bias) + residual)` (NaN passes
//! the clamp). The input and output may be a channels-last image whose blocks lie side by
//! side in each pixel (all of them summed, a group of output pixels at a time), or a block
//! laid out on its own. One body, written over [`Lanes`] (a block as vectors of
//! [`F32x`](crate::compute::lanes::F32x): one zmm, two ymm; or a plain array), gives the same
//! bits on AVX-512F, AVX2+FMA and portably.
#![allow(unsafe_code)]

use super::rows::{clamp_as_vectors, RowSpan};
#[cfg(target_arch = "x86_64")]
use crate::compute::lanes::F32x;

/// Channels per block: one AVX-512 vector.
pub(crate) const BLOCK: usize = 16;

/// Output pixels summed side by side (independent accumulator chains): as many as the
/// registers hold with the weights and an input block beside them.
#[cfg(target_arch = "x86_64")]
const PIXELS_AVX512: usize = 8;
const PIXELS: usize = 4;

/// The input of `blocks` blocks of channels side by side, channels-last: pixel `(r, x)` of
/// block `b` is `data[r * row_stride + x * pixel_stride + b * BLOCK..][..BLOCK]`.
#[derive(Clone, Copy)]
pub(crate) struct ChannelPlane<'a> {
    pub data: &'a [f32],
    pub blocks: usize,
    pub row_stride: usize,
    pub pixel_stride: usize,
    /// Columns present: padded column `pc` is column `pc - pad`, zero outside `0..cols`.
    pub cols: usize,
    pub pad: usize,
    /// The input rows each output row sums.
    pub spans: &'a [RowSpan],
    /// Vertical dilation.
    pub dilation_h: usize,
    /// Horizontal stride and dilation.
    pub stride_w: usize,
    pub dilation_w: usize,
    /// `[blocks][kh][kw][BLOCK]` weights.
    pub weights: &'a [f32],
    /// Taps per kernel row.
    pub kw: usize,
}

/// Where the sums go: output pixel `(oy, ox)` of block `b` (and its residual, when there is
/// one) is `[(oy * ow + ox) * pixel_stride + b * BLOCK..][..BLOCK]`.
pub(crate) struct ChannelOut<'a> {
    pub out: &'a mut [f32],
    pub residual: Option<&'a [f32]>,
    pub pixel_stride: usize,
    pub ow: usize,
}

impl ChannelPlane<'_> {
    /// Whether the sums of `oh` output rows read only inside the plane and weights.
    fn covers(&self, oh: usize) -> bool {
        let reach = || -> Option<bool> {
            let pixel_end = self.cols.checked_sub(1)?.checked_mul(self.pixel_stride)?;
            let pixel_end = pixel_end.checked_add(self.blocks.checked_mul(BLOCK)?)?;
            let per_block = self.block_weights();
            let mut ok = self.spans.len() >= oh && per_block * self.blocks == self.weights.len();
            for span in self.spans.iter().take(oh) {
                ok &= span.ky0 <= span.ky1
                    && span.ky1.checked_mul(self.kw)?.checked_mul(BLOCK)? <= per_block;
                if span.ky1 > span.ky0 {
                    let last_row = span.first + (span.ky1 - span.ky0 - 1) * self.dilation_h;
                    let end = last_row.checked_mul(self.row_stride)?.checked_add(pixel_end)?;
                    ok &= end <= self.data.len();
                }
            }
            Some(ok)
        };
        self.kw > 0 && self.blocks > 0 && reach() == Some(true)
    }

    /// Weights per block.
    fn block_weights(&self) -> usize {
        self.weights.len() / self.blocks.max(1)
    }

    /// The output columns `lo..hi` of `ow` whose taps all read columns inside the row: those
    /// left of `lo` reach into the left padding, those from `hi` on into the right.
    fn interior(&self, ow: usize) -> (usize, usize) {
        let lo = self.pad.div_ceil(self.stride_w).min(ow);
        let reach = (self.kw - 1) * self.dilation_w;
        let hi = (self.pad + self.cols).saturating_sub(reach).div_ceil(self.stride_w);
        (lo, hi.clamp(lo, ow))
    }
}

impl ChannelOut<'_> {
    /// Output rows of `blocks` blocks, `None` when a pixel would lie outside the output or
    /// residual.
    fn rows(&self, blocks: usize) -> Option<usize> {
        let width = blocks.checked_mul(BLOCK)?;
        let pixels = self.out.len().checked_sub(width)? / self.pixel_stride.max(1) + 1;
        let rows = pixels / self.ow.max(1);
        let end = (rows * self.ow).checked_sub(1)? * self.pixel_stride + width;
        let fits = |len: usize| end <= len;
        (self.pixel_stride >= width
            && fits(self.out.len())
            && self.residual.is_none_or(|r| fits(r.len())))
        .then_some(rows)
    }
}

/// Computes the output rows `out` holds (see the module docs; with the residual added after
/// the bias, before the clamp) from `plane`. Panics when a sum would read outside the plane
/// or a pixel lie outside the output (caller bugs: [`crate::compute::conv2d`] sizes both).
pub(crate) fn sum_channels(
    out: ChannelOut<'_>,
    plane: &ChannelPlane<'_>,
    bias: &[f32],
    clamp: Option<(f32, f32)>,
) {
    if out.ow == 0 {
        return;
    }
    let oh = out.rows(plane.blocks).expect("depthwise: output pixels outside the output");
    assert!(plane.covers(oh), "depthwise: taps outside the channel plane");
    assert!(bias.len() >= plane.blocks * BLOCK, "depthwise: a bias per channel");
    #[cfg(target_arch = "x86_64")]
    {
        use crate::compute::cpu::{has_avx2, has_avx512};
        if has_avx512() {
            // SAFETY: the CPU has AVX-512F, the only feature the function enables.
            return unsafe { sum_avx512(out, oh, plane, bias, clamp) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA, the features the function enables.
            return unsafe { sum_avx2(out, oh, plane, bias, clamp) };
        }
    }
    // SAFETY: the portable lanes need no CPU feature.
    unsafe { sum_body::<[f32; BLOCK], PIXELS>(out, oh, plane, bias, clamp) }
}

/// [`sum_body`] on AVX-512 registers.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_avx512(
    out: ChannelOut<'_>,
    oh: usize,
    plane: &ChannelPlane<'_>,
    bias: &[f32],
    clamp: Option<(f32, f32)>,
) {
    // SAFETY: the CPU has AVX-512F (this function's contract), all `__m512` lanes need.
    unsafe { sum_body::<x86::Avx512, PIXELS_AVX512>(out, oh, plane, bias, clamp) }
}

/// [`sum_body`] on AVX2 registers.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_avx2(
    out: ChannelOut<'_>,
    oh: usize,
    plane: &ChannelPlane<'_>,
    bias: &[f32],
    clamp: Option<(f32, f32)>,
) {
    // SAFETY: the CPU has AVX2 and FMA (this function's contract), all `Avx2` lanes need.
    unsafe { sum_body::<x86::Avx2, PIXELS>(out, oh, plane, bias, clamp) }
}

/// One block of channels held in registers: the operations of a sum, lane by lane, with
/// the same bits on every implementation (one rounding per fused multiply-add; the clamp of
/// [`clamp_as_vectors`]).
///
/// # Safety
/// Every method may use the instructions of its implementation: call them only on a CPU
/// that has those.
trait Lanes: Copy {
    unsafe fn zero() -> Self;
    unsafe fn load(x: &[f32; BLOCK]) -> Self;
    /// `w * x + acc`, rounded once.
    unsafe fn mul_add(w: Self, x: Self, acc: Self) -> Self;
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn clamp(v: Self, lo: f32, hi: f32) -> Self;
    unsafe fn store(v: Self, out: &mut [f32; BLOCK]);
}

/// The portable lanes: a plain array (the compiler vectorizes what it can).
impl Lanes for [f32; BLOCK] {
    #[inline(always)]
    unsafe fn zero() -> Self {
        [0.0; BLOCK]
    }
    #[inline(always)]
    unsafe fn load(x: &[f32; BLOCK]) -> Self {
        *x
    }
    #[inline(always)]
    unsafe fn mul_add(w: Self, x: Self, acc: Self) -> Self {
        std::array::from_fn(|l| w[l].mul_add(x[l], acc[l]))
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        std::array::from_fn(|l| a[l] + b[l])
    }
    #[inline(always)]
    unsafe fn clamp(v: Self, lo: f32, hi: f32) -> Self {
        v.map(|v| clamp_as_vectors(v, lo, hi))
    }
    #[inline(always)]
    unsafe fn store(v: Self, out: &mut [f32; BLOCK]) {
        *out = v;
    }
}

/// A block as `N` vectors of `V` ([`F32x`]): one zmm, or two ymm.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Vectors<V, const N: usize>([V; N]);

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Vectors;
    use crate::compute::lanes;

    /// One `zmm` register.
    pub(super) type Avx512 = Vectors<lanes::Avx512, 1>;
    /// Two `ymm` registers: lanes `0..8` and `8..16`.
    pub(super) type Avx2 = Vectors<lanes::Avx2, 2>;
}

// The methods are inlined into the `#[target_feature]` function that runs [`sum_body`], so
// each becomes the vector instructions of its set (loops, not closures: a closure would not
// take that function's features).
#[cfg(target_arch = "x86_64")]
impl<V: F32x, const N: usize> Lanes for Vectors<V, N> {
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller's CPU has `V`'s instructions (the trait's contract).
        Self([unsafe { V::zero() }; N])
    }
    #[inline(always)]
    unsafe fn load(x: &[f32; BLOCK]) -> Self {
        const { assert!(N * V::LANES == BLOCK, "the vectors hold one block") };
        // SAFETY: the trait's contract.
        let mut v = unsafe { Self::zero() };
        for h in 0..N {
            // SAFETY: `x` holds the N * V::LANES = BLOCK floats read.
            v.0[h] = unsafe { V::load(x.as_ptr().add(h * V::LANES)) };
        }
        v
    }
    #[inline(always)]
    unsafe fn mul_add(w: Self, x: Self, mut acc: Self) -> Self {
        for h in 0..N {
            // SAFETY: the trait's contract.
            acc.0[h] = unsafe { V::mul_add(w.0[h], x.0[h], acc.0[h]) };
        }
        acc
    }
    #[inline(always)]
    unsafe fn add(mut a: Self, b: Self) -> Self {
        for h in 0..N {
            // SAFETY: the trait's contract.
            a.0[h] = unsafe { V::add(a.0[h], b.0[h]) };
        }
        a
    }
    #[inline(always)]
    unsafe fn clamp(mut v: Self, lo: f32, hi: f32) -> Self {
        // SAFETY: the trait's contract.
        let (lo, hi) = unsafe { (V::splat(lo), V::splat(hi)) };
        for h in 0..N {
            // SAFETY: the trait's contract.
            v.0[h] = unsafe { V::clamp(v.0[h], lo, hi) };
        }
        v
    }
    #[inline(always)]
    unsafe fn store(v: Self, out: &mut [f32; BLOCK]) {
        const { assert!(N * V::LANES == BLOCK, "the vectors hold one block") };
        for h in 0..N {
            // SAFETY: `out` holds the N * V::LANES = BLOCK floats written.
            unsafe { V::store(out.as_mut_ptr().add(h * V::LANES), v.0[h]) }
        }
    }
}

/// The sums, output pixels side by side in groups of `P`, then 4, 2 and 1: the columns
/// whose taps reach into the padding one at a time, so the groups between them read every
/// tap unchecked. Groups of one or two pixels sum several blocks at once, so enough
/// independent accumulator chains hide the latency of the multiply-adds.
///
/// # Safety
/// The CPU has the instructions `V` uses.
#[inline(always)]
unsafe fn sum_body<V: Lanes, const P: usize>(
    mut out: ChannelOut<'_>,
    oh: usize,
    plane: &ChannelPlane<'_>,
    bias: &[f32],
    clamp: Option<(f32, f32)>,
) {
    let ow = out.ow;
    let (lo, hi) = plane.interior(ow);
    // Rows of three taps side by side (dilation 1, stride 1) load each input column once
    // for all the taps that read it ([`sum_pixels`]'s window). At stride 2 each column feeds
    // only one or two taps and the window was slower (112x112x96: 478 -> 530 us).
    let window = (plane.kw, plane.dilation_w, plane.stride_w) == (3, 1, 1);
    for oy in 0..oh {
        let span = plane.spans[oy];
        let mut ox = 0;
        while ox < ow {
            let (n, inside) = match ox {
                _ if ox < lo || ox >= hi => (1, false),
                _ => ([P, 4, 2].into_iter().find(|&n| n <= hi - ox).unwrap_or(1), true),
            };
            let mut b = 0;
            while b < plane.blocks {
                let left = plane.blocks - b;
                let g = Group { ox0: ox, oy, b, span };
                let o = Epilogue { bias, clamp };
                // SAFETY: the CPU has the instructions of `V` (this function's contract).
                b += unsafe {
                    match (inside, window) {
                        (false, _) if left >= 4 => {
                            sum_pixels::<V, 1, 4, false, false>(&mut out, g, plane, o)
                        }
                        (false, _) => sum_pixels::<V, 1, 1, false, false>(&mut out, g, plane, o),
                        (true, true) => sum_inside::<V, P, true>(n, left, &mut out, g, plane, o),
                        (true, false) => sum_inside::<V, P, false>(n, left, &mut out, g, plane, o),
                    }
                };
            }
            ox += n;
        }
    }
}

/// The sums of a group of `n` pixels (`P`, 4, 2 or 1) whose taps all read inside the row,
/// from block `g.b` on with `left` blocks left: groups of one or two pixels take four or two
/// blocks at once. Returns the blocks summed.
///
/// # Safety
/// The CPU has the instructions `V` uses.
#[inline(always)]
unsafe fn sum_inside<V: Lanes, const P: usize, const W: bool>(
    n: usize,
    left: usize,
    out: &mut ChannelOut<'_>,
    g: Group,
    plane: &ChannelPlane<'_>,
    o: Epilogue<'_>,
) -> usize {
    // SAFETY: the CPU has the instructions of `V` (this function's contract).
    unsafe {
        match n {
            1 if left >= 4 => sum_pixels::<V, 1, 4, true, W>(out, g, plane, o),
            1 => sum_pixels::<V, 1, 1, true, W>(out, g, plane, o),
            2 if left >= 2 => sum_pixels::<V, 2, 2, true, W>(out, g, plane, o),
            2 => sum_pixels::<V, 2, 1, true, W>(out, g, plane, o),
            4 => sum_pixels::<V, 4, 1, true, W>(out, g, plane, o),
            _ => sum_pixels::<V, P, 1, true, W>(out, g, plane, o),
        }
    }
}

/// Which sums a call of [`sum_pixels`] makes: output pixels from column `ox0` on, of row
/// `oy` (whose inputs are `span`), in blocks from `b` on.
#[derive(Clone, Copy)]
struct Group {
    ox0: usize,
    oy: usize,
    b: usize,
    span: RowSpan,
}

/// The block of `data` from `i` on, unchecked (a closure here would not inherit the caller's
/// target features, and every load would become a call).
///
/// # Safety
/// `i + BLOCK <= data.len()`, and the CPU has the instructions `V` uses.
#[inline(always)]
unsafe fn load_at<V: Lanes>(data: &[f32], i: usize) -> V {
    debug_assert!(i + BLOCK <= data.len());
    // SAFETY: the caller's contract.
    unsafe { V::load(&*data.as_ptr().add(i).cast::<[f32; BLOCK]>()) }
}

/// The bias (per channel) added to each sum, and the clamp after it.
#[derive(Clone, Copy)]
struct Epilogue<'a> {
    bias: &'a [f32],
    clamp: Option<(f32, f32)>,
}

/// A block's values in `data` from `at` on.
#[inline(always)]
fn block_at(data: &[f32], at: usize) -> &[f32; BLOCK] {
    data[at..][..BLOCK].try_into().expect("BLOCK")
}

/// The `N` output pixels of group `g` in its `M` blocks (each with its `[kh][kw][BLOCK]`
/// weights), into `out`; returns `M`. `INSIDE`: every tap of these pixels reads a column
/// inside the row ([`ChannelPlane::interior`]); otherwise each tap is checked, and taps in
/// the padding multiply zero. `W` (with `INSIDE`): the kernel rows are three taps side by
/// side at stride 1, and each input column of the group is loaded once and added to the
/// (up to three) pixels whose taps read it, in tap order for each pixel, so the bits are those
/// of the general loop, which loads once per tap.
///
/// # Safety
/// The CPU has the instructions `V` uses.
#[inline(always)]
unsafe fn sum_pixels<
    V: Lanes,
    const N: usize,
    const M: usize,
    const INSIDE: bool,
    const W: bool,
>(
    out: &mut ChannelOut<'_>,
    g: Group,
    plane: &ChannelPlane<'_>,
    ep: Epilogue<'_>,
) -> usize {
    // SAFETY (every `V` call below): the CPU has the instructions of `V`.
    let mut acc = [[unsafe { V::zero() }; N]; M];
    let (ps_in, data, span) = (plane.pixel_stride, plane.data, g.span);
    let step = plane.dilation_w * ps_in;
    let per_block = plane.block_weights();
    let weights: [&[f32]; M] = std::array::from_fn(|m| &plane.weights[(g.b + m) * per_block..]);
    // Padded column of pixel q's first tap.
    let first: [usize; N] = std::array::from_fn(|q| (g.ox0 + q) * plane.stride_w);
    for r in 0..span.ky1 - span.ky0 {
        let row = (span.first + r * plane.dilation_h) * plane.row_stride + g.b * BLOCK;
        let taps = (span.ky0 + r) * plane.kw * BLOCK;
        // SAFETY (the `load_at`s): each reads column `x < cols` (checked below, or for every
        // tap of an `INSIDE` group by `interior`) of a row whose columns `covers` proved
        // inside `data` for all `blocks` blocks, so blocks `b..b + M` are inside too.
        if INSIDE && W {
            // Column j of the group's window (from pixel 0's first tap) is tap kx of pixel q
            // for j = q + kx.
            let at0 = row + (first[0] - plane.pad) * ps_in;
            for (m, acc) in acc.iter_mut().enumerate() {
                let wm = weights[m];
                let w = [
                    unsafe { V::load(block_at(wm, taps)) },
                    unsafe { V::load(block_at(wm, taps + BLOCK)) },
                    unsafe { V::load(block_at(wm, taps + 2 * BLOCK)) },
                ];
                for j in 0..N + 2 {
                    let x = unsafe { load_at::<V>(data, at0 + j * ps_in + m * BLOCK) };
                    for (kx, &w) in w.iter().enumerate() {
                        if let Some(acc) = j.checked_sub(kx).and_then(|q| acc.get_mut(q)) {
                            *acc = unsafe { V::mul_add(w, x, *acc) };
                        }
                    }
                }
            }
            continue;
        }
        if INSIDE {
            let at: [usize; N] = std::array::from_fn(|q| row + (first[q] - plane.pad) * ps_in);
            for kx in 0..plane.kw {
                for (m, acc) in acc.iter_mut().enumerate() {
                    let w = unsafe { V::load(block_at(weights[m], taps + kx * BLOCK)) };
                    for (q, acc) in acc.iter_mut().enumerate() {
                        let x = unsafe { load_at(data, at[q] + kx * step + m * BLOCK) };
                        *acc = unsafe { V::mul_add(w, x, *acc) };
                    }
                }
            }
            continue;
        }
        for kx in 0..plane.kw {
            for (m, acc) in acc.iter_mut().enumerate() {
                let w = unsafe { V::load(block_at(weights[m], taps + kx * BLOCK)) };
                for (q, acc) in acc.iter_mut().enumerate() {
                    // Column of tap kx of pixel q; in the padding it wraps past `cols`.
                    let x = (first[q] + kx * plane.dilation_w).wrapping_sub(plane.pad);
                    let x = if x < plane.cols {
                        unsafe { load_at(data, row + x * ps_in + m * BLOCK) }
                    } else {
                        unsafe { V::zero() }
                    };
                    *acc = unsafe { V::mul_add(w, x, *acc) };
                }
            }
        }
    }
    for (m, acc) in acc.iter().enumerate() {
        let c = (g.b + m) * BLOCK;
        let bias = unsafe { V::load(block_at(ep.bias, c)) };
        for (q, &acc) in acc.iter().enumerate() {
            let at = (g.oy * out.ow + g.ox0 + q) * out.pixel_stride + c;
            let mut v = unsafe { V::add(acc, bias) };
            if let Some(r) = out.residual {
                v = unsafe { V::add(v, V::load(block_at(r, at))) };
            }
            if let Some((lo, hi)) = ep.clamp {
                v = unsafe { V::clamp(v, lo, hi) };
            }
            let o: &mut [f32; BLOCK] = (&mut out.out[at..][..BLOCK]).try_into().expect("BLOCK");
            unsafe { V::store(v, o) };
        }
    }
    M
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::conv2d::depthwise::rows::row_spans;
    use crate::compute::sgemm::{clamp1, out_len};

    #[test]
    fn every_instruction_set_gives_the_same_bits_as_the_definition() {
        let mut rng = fastrand::Rng::with_seed(0xb1);
        let mut tested = 0;
        while tested < 150 {
            let (h, w, kh, kw) =
                (rng.usize(1..9), rng.usize(1..12), rng.usize(1..4), rng.usize(1..4));
            let (sh, sw, dh, dw) =
                (rng.usize(1..3), rng.usize(1..3), rng.usize(1..3), rng.usize(1..3));
            let (ph, pw) = (rng.usize(0..3), rng.usize(0..3));
            let (Some(oh), Some(ow)) = (out_len(h, kh, sh, ph, dh), out_len(w, kw, sw, pw, dw))
            else {
                continue;
            };
            // One to five blocks side by side (four or more take the paths that sum four
            // blocks at once), in pixels of a wider channels-last image or
            // of the blocks alone.
            let blocks = rng.usize(1..6);
            let width = blocks * BLOCK;
            let ps = width + BLOCK * rng.usize(0..2);
            let spans = row_spans(h, oh, kh, sh, dh, ph);
            let mut data: Vec<f32> = (0..h * w * ps).map(|_| rng.f32() - 0.5).collect();
            let nan_at = rng.usize(0..data.len());
            data[nan_at] = f32::NAN;
            let weights: Vec<f32> =
                (0..blocks * kh * kw * BLOCK).map(|_| rng.f32() - 0.5).collect();
            let bias: Vec<f32> = (0..width).map(|_| rng.f32() - 0.5).collect();
            let residual: Vec<f32> = (0..oh * ow * ps).map(|_| rng.f32() - 0.5).collect();
            let residual = rng.bool().then_some(&residual[..]);
            let plane = ChannelPlane {
                data: &data,
                blocks,
                row_stride: w * ps,
                pixel_stride: ps,
                cols: w,
                pad: pw,
                spans: &spans,
                dilation_h: dh,
                stride_w: sw,
                dilation_w: dw,
                weights: &weights,
                kw,
            };
            let clamp = rng.bool().then_some((-0.25, 0.25));
            let run = |f: &dyn Fn(ChannelOut<'_>)| {
                let mut out = vec![f32::NAN; oh * ow * ps];
                f(ChannelOut { out: &mut out, residual, pixel_stride: ps, ow });
                out
            };
            // SAFETY: the portable lanes need no CPU feature.
            let want =
                run(&|o| unsafe { sum_body::<[f32; BLOCK], PIXELS>(o, oh, &plane, &bias, clamp) });
            // The definition, summed in the documented order.
            for oy in 0..oh {
                for ox in 0..ow {
                    for l in 0..width {
                        let (b, lane) = (l / BLOCK, l % BLOCK);
                        let w_at = |ky: usize, kx: usize| ((b * kh + ky) * kw + kx) * BLOCK + lane;
                        let mut s = 0f32;
                        for ky in 0..kh {
                            let Some(iy) = (oy * sh + ky * dh).checked_sub(ph).filter(|&y| y < h)
                            else {
                                continue;
                            };
                            for kx in 0..kw {
                                let ix = (ox * sw + kx * dw).checked_sub(pw).filter(|&x| x < w);
                                let x = ix.map_or(0.0, |ix| data[(iy * w + ix) * ps + l]);
                                s = weights[w_at(ky, kx)].mul_add(x, s);
                            }
                        }
                        let at = (oy * ow + ox) * ps + l;
                        let mut v = s + bias[l];
                        if let Some(r) = residual {
                            v += r[at];
                        }
                        if let Some((lo, hi)) = clamp {
                            v = clamp1(v, lo, hi);
                        }
                        assert_eq!(want[at].to_bits(), v.to_bits(), "({oy}, {ox}, {l})");
                    }
                }
            }
            let same = |got: Vec<f32>| {
                let lanes = |v: &[f32]| -> Vec<u32> {
                    v.chunks_exact(ps)
                        .flat_map(|p| p[..width].iter().map(|x| x.to_bits()))
                        .collect()
                };
                assert_eq!(lanes(&got), lanes(&want));
            };
            #[cfg(target_arch = "x86_64")]
            {
                use crate::compute::cpu::{has_avx2, has_avx512};
                if has_avx512() {
                    // SAFETY: the CPU has AVX-512F.
                    same(run(&|o| unsafe { sum_avx512(o, oh, &plane, &bias, clamp) }));
                }
                if has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA.
                    same(run(&|o| unsafe { sum_avx2(o, oh, &plane, &bias, clamp) }));
                }
            }
            tested += 1;
        }
    }
}
