//! Global average pooling: the mean of every channel over its pixels, from NCHW or
//! channels-last (NHWC) activations.
//!
//! Each mean is the one kiln's `mean` kernel computes, bit for bit: the channel's float32
//! values summed into an f64 in pixel order, divided in f64, rounded once. Channels are
//! summed side by side in runs of fixed width (64, 32, 16 or 8 channels channels-last, then
//! single ones; 16 planes at a time NCHW), so each run is one pass of independent
//! accumulator chains the compiler keeps in vector registers, whichever layout the image
//! has (before, channels-last channels that did not fill a run of 64 were summed 16 at a
//! time in loops of variable width: efficientnet_b0's 112x112x32 mean took 110 us, 37 now).
#![allow(unsafe_code)]

use super::conv2d::Layout;
use super::sgemm::GemmError;

/// Channels summed side by side NCHW.
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
        match layout {
            Layout::Nhwc => mean_nhwc(x, channels, out),
            Layout::Nchw => mean_nchw(x, pixels, out),
        }
    }
    Ok(())
}

/// The means of the channels of the channels-last image `x` (`channels` values per pixel)
/// into `out`, a run of the widest fixed width left at a time.
fn mean_nhwc(x: &[f32], channels: usize, out: &mut [f32]) {
    let pixels = (x.len() / channels) as f64;
    let mut done = 0;
    while done < out.len() {
        let o = &mut out[done..];
        done += match o.len() {
            64.. => sum_run::<64>(x, channels, done, pixels, o),
            32.. => sum_run::<32>(x, channels, done, pixels, o),
            16.. => sum_run::<16>(x, channels, done, pixels, o),
            8.. => sum_run::<8>(x, channels, done, pixels, o),
            _ => sum_run::<1>(x, channels, done, pixels, o),
        };
    }
}

/// The means of the channel planes (`pixels` values each) of `x` into `out`, 16 planes side
/// by side at a time.
fn mean_nchw(x: &[f32], pixels: usize, out: &mut [f32]) {
    for (b, out) in out.chunks_mut(CHANNELS).enumerate() {
        let planes = &x[b * CHANNELS * pixels..][..out.len() * pixels];
        let mut acc = [0f64; CHANNELS];
        for p in 0..pixels {
            for (l, acc) in acc.iter_mut().enumerate().take(out.len()) {
                *acc += f64::from(planes[l * pixels + p]);
            }
        }
        for (o, acc) in out.iter_mut().zip(acc) {
            *o = (acc / pixels as f64) as f32;
        }
    }
}

/// The means of channels `c0..c0 + W` of the channels-last image `x` into `out[..W]`
/// (`pixels` the divisor); says `W`.
fn sum_run<const W: usize>(
    x: &[f32],
    channels: usize,
    c0: usize,
    pixels: f64,
    out: &mut [f32],
) -> usize {
    let mut acc = [0f64; W];
    sum_wide(x, channels, c0, &mut acc);
    for (o, acc) in out.iter_mut().zip(acc) {
        *o = (acc / pixels) as f32;
    }
    W
}

/// Adds channels `c0..c0 + W` of every pixel of the channels-last image `x` (`channels`
/// values per pixel) to `acc`, in pixel order.
fn sum_wide<const W: usize>(x: &[f32], channels: usize, c0: usize, acc: &mut [f64; W]) {
    #[cfg(target_arch = "x86_64")]
    if W >= 8 {
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
unsafe fn sum_wide_avx512<const W: usize>(
    x: &[f32],
    channels: usize,
    c0: usize,
    acc: &mut [f64; W],
) {
    sum_wide_body(x, channels, c0, acc);
}

/// [`sum_wide_body`] compiled for AVX2.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_wide_avx2<const W: usize>(x: &[f32], channels: usize, c0: usize, acc: &mut [f64; W]) {
    sum_wide_body(x, channels, c0, acc);
}

/// The sums of [`sum_wide`], in plain Rust the compiler vectorizes (fixed widths, each lane
/// its own chain: the same bits on every instruction set).
#[inline(always)]
fn sum_wide_body<const W: usize>(x: &[f32], channels: usize, c0: usize, acc: &mut [f64; W]) {
    for px in x.chunks_exact(channels) {
        let v: &[f32; W] = px[c0..c0 + W].try_into().expect("W channels");
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
            // Up to 150 channels: channels-last takes runs of 64, 32, 16, 8 and 1.
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

    /// The widest run.
    const WIDE: usize = 64;

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
