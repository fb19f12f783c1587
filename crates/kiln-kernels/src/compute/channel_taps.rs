//! Depthwise sums with the channels in the vector lanes: a block of [`BLOCK`] channels laid
//! out channels-last (pixel by pixel, the block's channels contiguous), so every tap of every
//! output pixel is one vector multiply-add however narrow the plane. This suits the small
//! planes of a CNN's later layers, where a row of [`super::taps`] fills a fraction of a
//! vector. The arithmetic is that of `taps`, so both give the same bits: for output pixel
//! `(oy, ox)` and each channel, `s = sum_ky sum_kx w[ky][kx] * x[...]` in `ky`, `kx` order
//! from zero, one fused multiply-add per term (taps in the horizontal padding multiply zero,
//! rows in the vertical padding are skipped), then `clamp(s + bias)` (NaN passes the clamp).
//! One body, compiled for AVX-512F, for AVX2+FMA and portably, gives the same bits on each.
#![allow(unsafe_code)]

use super::taps::{clamp_as_vectors, RowSpan};

/// Channels per block: one AVX-512 vector.
pub(crate) const BLOCK: usize = 16;

/// Output pixels summed side by side (independent accumulator chains).
const PIXELS: usize = 4;

/// One block of channels laid out channels-last for the sums.
#[derive(Clone, Copy)]
pub(crate) struct ChannelPlane<'a> {
    /// Input rows of `cols` pixels of [`BLOCK`] values each; pixel `pc` of a row is padded
    /// column `pc` (input column `pc - padding`, zero outside the input).
    pub data: &'a [f32],
    /// Pixels per row.
    pub cols: usize,
    /// The input rows each output row sums.
    pub spans: &'a [RowSpan],
    /// Vertical dilation.
    pub dilation_h: usize,
    /// Horizontal stride and dilation.
    pub stride_w: usize,
    pub dilation_w: usize,
    /// `[kh][kw][BLOCK]` weights.
    pub weights: &'a [f32],
    /// Taps per kernel row.
    pub kw: usize,
}

impl ChannelPlane<'_> {
    /// Whether the sums of `oh x ow` output pixels read only inside the plane and weights.
    fn covers(&self, oh: usize, ow: usize) -> bool {
        let reach = || -> Option<bool> {
            let last_col = (ow.checked_sub(1)?)
                .checked_mul(self.stride_w)?
                .checked_add((self.kw - 1).checked_mul(self.dilation_w)?)?;
            let row_len = self.cols.checked_mul(BLOCK)?;
            let mut ok = last_col < self.cols && self.spans.len() >= oh;
            for span in self.spans.iter().take(oh) {
                ok &= span.ky0 <= span.ky1
                    && span.ky1.checked_mul(self.kw)?.checked_mul(BLOCK)? <= self.weights.len();
                if span.ky1 > span.ky0 {
                    let last_row = span.first + (span.ky1 - span.ky0 - 1) * self.dilation_h;
                    ok &= last_row.checked_add(1)?.checked_mul(row_len)? <= self.data.len();
                }
            }
            Some(ok)
        };
        self.kw > 0 && reach() == Some(true)
    }
}

/// Computes `out` (`[oh][ow][BLOCK]`, `oh = out.len() / (ow * BLOCK)`) from `plane` (see the
/// module docs). Panics when a sum would read outside the plane (a caller bug:
/// [`super::conv2d`] sizes the plane for its taps).
pub(crate) fn sum_channels(
    out: &mut [f32],
    ow: usize,
    plane: &ChannelPlane<'_>,
    bias: &[f32; BLOCK],
    clamp: Option<(f32, f32)>,
) {
    if ow == 0 || out.len() < ow * BLOCK {
        return;
    }
    let oh = out.len() / (ow * BLOCK);
    assert!(plane.covers(oh, ow), "depthwise: taps outside the channel plane");
    #[cfg(target_arch = "x86_64")]
    {
        use crate::compute::sgemm::x86::{has_avx2, has_avx512};
        if has_avx512() {
            // SAFETY: the CPU has AVX-512F, the only feature the function enables.
            return unsafe { sum_avx512(out, ow, plane, bias, clamp) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA, the features the function enables.
            return unsafe { sum_avx2(out, ow, plane, bias, clamp) };
        }
    }
    sum_body(out, ow, plane, bias, clamp)
}

/// [`sum_body`] compiled for AVX-512F.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_avx512(
    out: &mut [f32],
    ow: usize,
    plane: &ChannelPlane<'_>,
    bias: &[f32; BLOCK],
    clamp: Option<(f32, f32)>,
) {
    sum_body(out, ow, plane, bias, clamp)
}

/// [`sum_body`] compiled for AVX2 and FMA.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum_avx2(
    out: &mut [f32],
    ow: usize,
    plane: &ChannelPlane<'_>,
    bias: &[f32; BLOCK],
    clamp: Option<(f32, f32)>,
) {
    sum_body(out, ow, plane, bias, clamp)
}

#[inline(always)]
fn sum_body(
    out: &mut [f32],
    ow: usize,
    plane: &ChannelPlane<'_>,
    bias: &[f32; BLOCK],
    clamp: Option<(f32, f32)>,
) {
    for (oy, out) in out.chunks_exact_mut(ow * BLOCK).enumerate() {
        let span = plane.spans[oy];
        let mut groups = out.chunks_exact_mut(PIXELS * BLOCK);
        let mut ox = 0;
        for group in &mut groups {
            sum_pixels::<PIXELS>(group, ox, span, plane, bias, clamp);
            ox += PIXELS;
        }
        for pixel in groups.into_remainder().chunks_exact_mut(BLOCK) {
            sum_pixels::<1>(pixel, ox, span, plane, bias, clamp);
            ox += 1;
        }
    }
}

/// The `N` output pixels from column `ox0` on of the output row whose inputs are `span`.
#[inline(always)]
fn sum_pixels<const N: usize>(
    out: &mut [f32],
    ox0: usize,
    span: RowSpan,
    plane: &ChannelPlane<'_>,
    bias: &[f32; BLOCK],
    clamp: Option<(f32, f32)>,
) {
    let row_len = plane.cols * BLOCK;
    let mut acc = [[0f32; BLOCK]; N];
    for r in 0..span.ky1 - span.ky0 {
        let row = &plane.data[(span.first + r * plane.dilation_h) * row_len..][..row_len];
        let weights = &plane.weights[(span.ky0 + r) * plane.kw * BLOCK..][..plane.kw * BLOCK];
        for (kx, w) in weights.chunks_exact(BLOCK).enumerate() {
            let w: &[f32; BLOCK] = w.try_into().expect("chunks of BLOCK");
            for (q, acc) in acc.iter_mut().enumerate() {
                let col = (ox0 + q) * plane.stride_w + kx * plane.dilation_w;
                let x: &[f32; BLOCK] = row[col * BLOCK..][..BLOCK].try_into().expect("BLOCK");
                for l in 0..BLOCK {
                    acc[l] = w[l].mul_add(x[l], acc[l]);
                }
            }
        }
    }
    for (acc, out) in acc.iter().zip(out.chunks_exact_mut(BLOCK)) {
        for l in 0..BLOCK {
            let mut v = acc[l] + bias[l];
            if let Some((lo, hi)) = clamp {
                v = clamp_as_vectors(v, lo, hi);
            }
            out[l] = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::taps::row_spans;

    #[test]
    fn every_instruction_set_gives_the_same_bits() {
        let mut rng = fastrand::Rng::with_seed(0xb1);
        for _ in 0..50 {
            let (h, kh, kw) = (rng.usize(1..9), rng.usize(1..4), rng.usize(1..4));
            let (sh, sw, dh, dw) = (rng.usize(1..3), rng.usize(1..3), 1, rng.usize(1..3));
            let pad = rng.usize(0..kh);
            let Some(oh) = crate::compute::sgemm::out_len(h, kh, sh, pad, dh) else { continue };
            let ow = rng.usize(1..11);
            let cols = (ow - 1) * sw + (kw - 1) * dw + 1;
            let spans = row_spans(h, oh, kh, sh, dh, pad);
            let mut data: Vec<f32> = (0..h * cols * BLOCK).map(|_| rng.f32() - 0.5).collect();
            let nan_at = rng.usize(0..data.len());
            data[nan_at] = f32::NAN;
            let weights: Vec<f32> = (0..kh * kw * BLOCK).map(|_| rng.f32() - 0.5).collect();
            let bias: [f32; BLOCK] = std::array::from_fn(|_| rng.f32() - 0.5);
            let plane = ChannelPlane {
                data: &data,
                cols,
                spans: &spans,
                dilation_h: dh,
                stride_w: sw,
                dilation_w: dw,
                weights: &weights,
                kw,
            };
            let clamp = rng.bool().then_some((-0.25, 0.25));
            let mut want = vec![0f32; oh * ow * BLOCK];
            sum_body(&mut want, ow, &plane, &bias, clamp);
            // The definition, summed in the documented order.
            for oy in 0..oh {
                let span = spans[oy];
                for ox in 0..ow {
                    for l in 0..BLOCK {
                        let mut s = 0f32;
                        for r in 0..span.ky1 - span.ky0 {
                            for kx in 0..kw {
                                let at = ((span.first + r * dh) * cols + ox * sw + kx * dw) * BLOCK;
                                let w = weights[((span.ky0 + r) * kw + kx) * BLOCK + l];
                                s = w.mul_add(data[at + l], s);
                            }
                        }
                        let mut v = s + bias[l];
                        if let Some((lo, hi)) = clamp {
                            v = crate::compute::sgemm::clamp1(v, lo, hi);
                        }
                        let got = want[(oy * ow + ox) * BLOCK + l];
                        assert_eq!(got.to_bits(), v.to_bits(), "({oy}, {ox}, {l})");
                    }
                }
            }
            #[cfg(target_arch = "x86_64")]
            {
                use crate::compute::sgemm::x86::{has_avx2, has_avx512};
                let mut got = vec![0f32; want.len()];
                if has_avx512() {
                    // SAFETY: the CPU has AVX-512F.
                    unsafe { sum_avx512(&mut got, ow, &plane, &bias, clamp) };
                    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
                }
                if has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA.
                    unsafe { sum_avx2(&mut got, ow, &plane, &bias, clamp) };
                    assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
                }
            }
        }
    }
}
