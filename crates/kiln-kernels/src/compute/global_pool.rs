//! Global average pooling: the mean of every channel over its pixels, from NCHW or
//! channels-last (NHWC) activations.
//!
//! Each mean is the one kiln's `mean` kernel computes, bit for bit: the channel's float32
//! values summed into an f64 in pixel order, divided in f64, rounded once. Channels are
//! summed side by side (64 at a time channels-last, 16 planes at a time NCHW), so each image
//! is one pass of independent accumulator chains instead of one chain per channel, whichever
//! layout it has.
#![allow(unsafe_code)]

use super::conv2d::Layout;
use super::sgemm::GemmError;

/// Channels summed side by side.
const CHANNELS: usize = 16;

/// The means of `n` images of `channels` channels of `pixels` pixels each, laid out `layout`
/// in `x`, into `out` (`n x channels`, the layout of `[N, C, 1, 1]` either way). An error
/// when a slice does not hold those sizes.
pub fn mean_pixels(
    x: &[f32],
    [n, channels, pixels]: [usize; 3],
    layout: Layout,
    out: &mut [f32],
) -> Result<(), GemmError> {
    let image = channels.checked_mul(pixels).ok_or(GemmError::Overflow("mean"))?;
    if n.checked_mul(image) != Some(x.len()) || n.checked_mul(channels) != Some(out.len()) {
        return Err(GemmError::Invalid("mean: tensor sizes differ from [N, C, pixels]"));
    }
    if image == 0 {
        out.fill(f32::NAN); // 0 / 0, as the kernel's f64 division gives
        return Ok(());
    }
    for (x, out) in x.chunks_exact(image).zip(out.chunks_exact_mut(channels)) {
        let mut c0 = 0;
        while c0 < channels {
            let wide = layout == Layout::Nhwc && channels - c0 >= WIDE;
            let width = if wide { WIDE } else { CHANNELS.min(channels - c0) };
            let mut acc = [0f64; WIDE];
            match layout {
                // Each pixel's channels are adjacent: vector adds per pixel.
                Layout::Nhwc if wide => sum_wide(x, channels, c0, &mut acc),
                Layout::Nhwc => {
                    for px in x.chunks_exact(channels) {
                        for (acc, &v) in acc.iter_mut().zip(&px[c0..c0 + width]) {
                            *acc += f64::from(v);
                        }
                    }
                }
                // Each channel's pixels are adjacent: the block's channels side by side.
                Layout::Nchw => {
                    let planes = &x[c0 * pixels..(c0 + width) * pixels];
                    for p in 0..pixels {
                        for (l, acc) in acc.iter_mut().enumerate().take(width) {
                            *acc += f64::from(planes[l * pixels + p]);
                        }
                    }
                }
            }
            for (o, acc) in out[c0..c0 + width].iter_mut().zip(acc) {
                *o = (acc / pixels as f64) as f32;
            }
            c0 += width;
        }
    }
    Ok(())
}

/// Channels-last channels summed side by side in one pass over the pixels: four AVX-512
/// vectors of f64 sums, enough independent chains to hide the latency of the adds.
const WIDE: usize = 64;

/// Adds channels `c0..c0 + WIDE` of every pixel of the channels-last image `x` (`channels`
/// values per pixel) to `acc`, in pixel order.
fn sum_wide(x: &[f32], channels: usize, c0: usize, acc: &mut [f64; WIDE]) {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::compute::cpu::{has_avx2, has_avx512};
        if has_avx512() {
            // SAFETY: the CPU has AVX-512F, the only feature the function enables.
            return unsafe { sum_wide_avx512(x, channels, c0, acc) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2, the only feature the function enables.
            return unsafe { sum_wide_avx2(x, channels, c0, acc) };
        }
    }
    sum_wide_body(x, channels, c0, acc);
}

/// [`sum_wide_body`] compiled for AVX-512.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum_wide_avx512(x: &[f32], channels: usize, c0: usize, acc: &mut [f64; WIDE]) {
    sum_wide_body(x, channels, c0, acc);
}

/// [`sum_wide_body`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_wide_avx2(x: &[f32], channels: usize, c0: usize, acc: &mut [f64; WIDE]) {
    sum_wide_body(x, channels, c0, acc);
}

/// The sums of [`sum_wide`], in plain Rust the compiler vectorizes (fixed widths, each lane
/// its own chain: the same bits on every instruction set).
#[inline(always)]
fn sum_wide_body(x: &[f32], channels: usize, c0: usize, acc: &mut [f64; WIDE]) {
    for px in x.chunks_exact(channels) {
        let v: &[f32; WIDE] = px[c0..c0 + WIDE].try_into().expect("WIDE channels");
        for (acc, &v) in acc.iter_mut().zip(v) {
            *acc += f64::from(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: each channel's values in pixel order, summed in f64.
    fn mean_of(x: &[f32], [n, c, p]: [usize; 3]) -> Vec<f32> {
        let mut out = Vec::new();
        for i in 0..n {
            for ch in 0..c {
                let mut s = 0f64;
                for px in 0..p {
                    s += f64::from(x[(i * c + ch) * p + px]);
                }
                out.push((s / p as f64) as f32);
            }
        }
        out
    }

    /// Property test: random sizes (channel counts that are and are not multiples of 16),
    /// both layouts, the definition's bits.
    #[test]
    fn both_layouts_give_the_definitions_bits() {
        let mut rng = fastrand::Rng::with_seed(0x6a1);
        for _ in 0..200 {
            // Up to 150 channels: channels-last takes whole runs of 64 and then 16 at a time.
            let sizes = [rng.usize(1..3), rng.usize(1..150), rng.usize(1..60)];
            let [n, c, p] = sizes;
            let x: Vec<f32> = (0..n * c * p).map(|_| rng.f32() * 8.0 - 4.0).collect();
            let want: Vec<u32> = mean_of(&x, sizes).iter().map(|v| v.to_bits()).collect();
            let mut out = vec![f32::NAN; n * c];
            mean_pixels(&x, sizes, Layout::Nchw, &mut out).unwrap();
            assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
            // The same values channels-last.
            let mut nhwc = vec![0f32; x.len()];
            for i in 0..n {
                for ch in 0..c {
                    for px in 0..p {
                        nhwc[(i * p + px) * c + ch] = x[(i * c + ch) * p + px];
                    }
                }
            }
            let mut out = vec![f32::NAN; n * c];
            mean_pixels(&nhwc, sizes, Layout::Nhwc, &mut out).unwrap();
            assert_eq!(out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
        }
    }

    #[test]
    fn every_instruction_set_sums_the_same_bits() {
        let mut rng = fastrand::Rng::with_seed(0x6a2);
        let (channels, pixels) = (WIDE + 16, 37);
        let x: Vec<f32> = (0..channels * pixels).map(|_| rng.f32() * 8.0 - 4.0).collect();
        let bits = |acc: [f64; WIDE]| acc.map(f64::to_bits);
        let mut want = [0f64; WIDE];
        sum_wide_body(&x, channels, 16, &mut want);
        // The definition: each channel's values in pixel order, from zero.
        for (l, &w) in want.iter().enumerate() {
            let s = (0..pixels).fold(0f64, |s, p| s + f64::from(x[p * channels + 16 + l]));
            assert_eq!(s.to_bits(), w.to_bits());
        }
        #[cfg(target_arch = "x86_64")]
        {
            use crate::compute::cpu::{has_avx2, has_avx512};
            if has_avx512() {
                let mut acc = [0f64; WIDE];
                // SAFETY: the CPU has AVX-512F.
                unsafe { sum_wide_avx512(&x, channels, 16, &mut acc) };
                assert_eq!(bits(acc), bits(want));
            }
            if has_avx2() {
                let mut acc = [0f64; WIDE];
                // SAFETY: the CPU has AVX2.
                unsafe { sum_wide_avx2(&x, channels, 16, &mut acc) };
                assert_eq!(bits(acc), bits(want));
            }
        }
    }

    #[test]
    fn wrong_sizes_are_errors() {
        let mut out = [0f32; 2];
        assert!(mean_pixels(&[0.0; 5], [1, 2, 3], Layout::Nchw, &mut out).is_err());
        assert!(mean_pixels(&[0.0; 6], [1, 2, 3], Layout::Nchw, &mut out[..1]).is_err());
        assert!(mean_pixels(&[], [1, usize::MAX, 3], Layout::Nhwc, &mut out).is_err());
        mean_pixels(&[1.0, 3.0, 5.0, 7.0, 9.0, 11.0], [1, 2, 3], Layout::Nhwc, &mut out).unwrap();
        assert_eq!(out, [5.0, 7.0]);
    }
}
