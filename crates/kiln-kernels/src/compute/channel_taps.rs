//! Depthwise sums with the channels in the vector lanes: blocks of [`BLOCK`] channels laid
//! out channels-last (pixel by pixel, a block's channels contiguous), so every tap of every
//! output pixel is one vector multiply-add however narrow the plane. This suits the small
//! planes of a CNN's later layers, where a row of [`super::taps`] fills a fraction of a
//! vector, and channels-last activations of any size. The arithmetic is that of `taps`, so both give the same bits: for output pixel
//! `(oy, ox)` and each channel, `s = sum_ky sum_kx w[ky][kx] * x[...]` in `ky`, `kx` order
//! from zero, one fused multiply-add per term (taps in the horizontal padding multiply zero,
//! rows in the vertical padding are skipped), then `clamp((s + bias) + residual)` (NaN passes
//! the clamp). The input and output may be a channels-last image whose blocks lie side by
//! side in each pixel (all of them summed, a group of output pixels at a time), or a block
//! laid out on its own. One body, written over [`Lanes`] (one zmm, two ymm, or a plain
//! array), gives the same bits on AVX-512F, AVX2+FMA and portably.
#![allow(unsafe_code)]

use super::taps::{clamp_as_vectors, RowSpan};

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

    /// Whether every tap of output columns `ox0..ox0 + n` reads a column inside the row.
    #[inline(always)]
    fn inside(&self, ox0: usize, n: usize) -> bool {
        let first = ox0 * self.stride_w;
        let last = (ox0 + n - 1) * self.stride_w + (self.kw - 1) * self.dilation_w;
        first >= self.pad && last < self.pad + self.cols
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
/// or a pixel lie outside the output (caller bugs: [`super::conv2d`] sizes both).
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
        use crate::compute::sgemm::x86::{has_avx2, has_avx512};
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

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Lanes, BLOCK};
    use std::arch::x86_64::*;

    /// One `zmm` register.
    #[derive(Clone, Copy)]
    pub(super) struct Avx512(__m512);

    impl Lanes for Avx512 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn zero() -> Self {
            Self(_mm512_setzero_ps())
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load(x: &[f32; BLOCK]) -> Self {
            // SAFETY: `x` holds the 16 floats read.
            Self(unsafe { _mm512_loadu_ps(x.as_ptr()) })
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn mul_add(w: Self, x: Self, acc: Self) -> Self {
            Self(_mm512_fmadd_ps(w.0, x.0, acc.0))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn add(a: Self, b: Self) -> Self {
            Self(_mm512_add_ps(a.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn clamp(v: Self, lo: f32, hi: f32) -> Self {
            let v = _mm512_max_ps(_mm512_set1_ps(lo), v.0);
            Self(_mm512_min_ps(_mm512_set1_ps(hi), v))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn store(v: Self, out: &mut [f32; BLOCK]) {
            // SAFETY: `out` holds the 16 floats written.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), v.0) }
        }
    }

    /// Two `ymm` registers: lanes `0..8` and `8..16`.
    #[derive(Clone, Copy)]
    pub(super) struct Avx2([__m256; 2]);

    impl Lanes for Avx2 {
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn zero() -> Self {
            Self([_mm256_setzero_ps(); 2])
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn load(x: &[f32; BLOCK]) -> Self {
            // SAFETY: `x` holds the 16 floats read.
            unsafe { Self([_mm256_loadu_ps(x.as_ptr()), _mm256_loadu_ps(x.as_ptr().add(8))]) }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn mul_add(w: Self, x: Self, acc: Self) -> Self {
            Self([0, 1].map(|h| _mm256_fmadd_ps(w.0[h], x.0[h], acc.0[h])))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn add(a: Self, b: Self) -> Self {
            Self([0, 1].map(|h| _mm256_add_ps(a.0[h], b.0[h])))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn clamp(v: Self, lo: f32, hi: f32) -> Self {
            let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
            Self(v.0.map(|v| _mm256_min_ps(hi, _mm256_max_ps(lo, v))))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn store(v: Self, out: &mut [f32; BLOCK]) {
            // SAFETY: `out` holds the 16 floats written.
            unsafe {
                _mm256_storeu_ps(out.as_mut_ptr(), v.0[0]);
                _mm256_storeu_ps(out.as_mut_ptr().add(8), v.0[1]);
            }
        }
    }
}

/// The sums, `P` output pixels side by side where their taps lie inside the row (then 2,
/// then 1).
///
/// # Safety
/// The CPU has the instructions `V` uses.
#[inline(always)]
unsafe fn sum_body<V: Lanes, const P: usize>(
    out: ChannelOut<'_>,
    oh: usize,
    plane: &ChannelPlane<'_>,
    bias: &[f32],
    clamp: Option<(f32, f32)>,
) {
    let (ow, ps) = (out.ow, out.pixel_stride);
    let per_block = plane.block_weights();
    for oy in 0..oh {
        let span = plane.spans[oy];
        let mut ox = 0;
        while ox < ow {
            let n = if ow - ox >= P && plane.inside(ox, P) {
                P
            } else if ow - ox >= 2 && plane.inside(ox, 2) {
                2
            } else {
                1
            };
            // Every block of these pixels in turn: their input rows stay in cache.
            for b in 0..plane.blocks {
                let at = (oy * ow + ox) * ps + b * BLOCK;
                let res = out.residual.map(|r| &r[at..]);
                let o = &mut out.out[at..];
                let bias = bias[b * BLOCK..][..BLOCK].try_into().expect("BLOCK");
                let ep = Epilogue { bias, clamp };
                let w = &plane.weights[b * per_block..][..per_block];
                // SAFETY: the CPU has the instructions of `V` (this function's contract).
                unsafe {
                    match n {
                        1 => sum_pixels::<V, 1, false>(o, res, ps, ox, b, w, span, plane, ep),
                        2 => sum_pixels::<V, 2, true>(o, res, ps, ox, b, w, span, plane, ep),
                        _ => sum_pixels::<V, P, true>(o, res, ps, ox, b, w, span, plane, ep),
                    }
                }
            }
            ox += n;
        }
    }
}

/// What is added to each sum, and the clamp after it.
#[derive(Clone, Copy)]
struct Epilogue<'a> {
    bias: &'a [f32; BLOCK],
    clamp: Option<(f32, f32)>,
}

/// A block's values in `data` from `at` on.
#[inline(always)]
fn block_at(data: &[f32], at: usize) -> &[f32; BLOCK] {
    data[at..][..BLOCK].try_into().expect("BLOCK")
}

/// The `N` output pixels from column `ox0` on of block `b` (its `[kh][kw][BLOCK]` weights
/// `block_weights`) of the output row whose inputs are `span`, into `out` (and from
/// `residual`) with pixels `ps` apart.
///
/// # Safety
/// The CPU has the instructions `V` uses.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn sum_pixels<V: Lanes, const N: usize, const INSIDE: bool>(
    out: &mut [f32],
    residual: Option<&[f32]>,
    ps: usize,
    ox0: usize,
    b: usize,
    block_weights: &[f32],
    span: RowSpan,
    plane: &ChannelPlane<'_>,
    ep: Epilogue<'_>,
) {
    // SAFETY (every `V` call below): the CPU has the instructions of `V`.
    let mut acc = [unsafe { V::zero() }; N];
    let ps_in = plane.pixel_stride;
    for r in 0..span.ky1 - span.ky0 {
        let row = (span.first + r * plane.dilation_h) * plane.row_stride + b * BLOCK;
        let weights = &block_weights[(span.ky0 + r) * plane.kw * BLOCK..][..plane.kw * BLOCK];
        if INSIDE {
            // Every tap of these pixels is inside the row (`ChannelPlane::inside`) and the
            // row inside the plane (`ChannelPlane::covers`): pixel q's first tap, then one
            // step per tap.
            let at: [usize; N] =
                std::array::from_fn(|q| row + ((ox0 + q) * plane.stride_w - plane.pad) * ps_in);
            let (step, data) = (plane.dilation_w * ps_in, plane.data);
            for kx in 0..plane.kw {
                let w = unsafe { V::load(block_at(weights, kx * BLOCK)) };
                for (q, acc) in acc.iter_mut().enumerate() {
                    let i = at[q] + kx * step;
                    debug_assert!(i + BLOCK <= data.len());
                    // SAFETY: tap kx of pixel q is column `(ox0 + q) * stride_w + kx *
                    // dilation_w - pad < cols` of a row whose columns `covers` proved inside
                    // `data` for all `blocks` blocks, so block b's BLOCK values are too.
                    let x = unsafe { &*data.as_ptr().add(i).cast::<[f32; BLOCK]>() };
                    *acc = unsafe { V::mul_add(w, V::load(x), *acc) };
                }
            }
            continue;
        }
        for kx in 0..plane.kw {
            let w = unsafe { V::load(block_at(weights, kx * BLOCK)) };
            for (q, acc) in acc.iter_mut().enumerate() {
                let pc = (ox0 + q) * plane.stride_w + kx * plane.dilation_w;
                // Taps in the horizontal padding multiply zero, as the definition does.
                let x = match pc.checked_sub(plane.pad).filter(|&x| x < plane.cols) {
                    Some(x) => unsafe { V::load(block_at(plane.data, row + x * ps_in)) },
                    None => unsafe { V::zero() },
                };
                *acc = unsafe { V::mul_add(w, x, *acc) };
            }
        }
    }
    let bias = unsafe { V::load(ep.bias) };
    for (q, &acc) in acc.iter().enumerate() {
        let mut v = unsafe { V::add(acc, bias) };
        if let Some(r) = residual {
            v = unsafe { V::add(v, V::load(block_at(r, q * ps))) };
        }
        if let Some((lo, hi)) = ep.clamp {
            v = unsafe { V::clamp(v, lo, hi) };
        }
        let o: &mut [f32; BLOCK] = (&mut out[q * ps..][..BLOCK]).try_into().expect("BLOCK");
        unsafe { V::store(v, o) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::sgemm::{clamp1, out_len};
    use crate::compute::taps::row_spans;

    #[test]
    fn every_instruction_set_gives_the_same_bits_as_the_definition() {
        let mut rng = fastrand::Rng::with_seed(0xb1);
        let mut tested = 0;
        while tested < 60 {
            let (h, w, kh, kw) =
                (rng.usize(1..9), rng.usize(1..12), rng.usize(1..4), rng.usize(1..4));
            let (sh, sw, dh, dw) =
                (rng.usize(1..3), rng.usize(1..3), rng.usize(1..3), rng.usize(1..3));
            let (ph, pw) = (rng.usize(0..3), rng.usize(0..3));
            let (Some(oh), Some(ow)) = (out_len(h, kh, sh, ph, dh), out_len(w, kw, sw, pw, dw))
            else {
                continue;
            };
            // One to three blocks side by side, in pixels of a wider channels-last image or
            // of the blocks alone.
            let blocks = rng.usize(1..4);
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
                use crate::compute::sgemm::x86::{has_avx2, has_avx512};
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
