//! Grouped convolutions (`1 < groups`, more than one channel per group: RegNet's and
//! ResNeXt's 3x3 layers) on channels-last activations, computed directly.
//!
//! Each output pixel's group is a dot product of its window's `taps x cin_g` input values
//! with each of the group's `cout_g` filters. The filters are laid out so that one vector
//! holds the `cout_g` outputs' weights for one tap and input channel (`WIDTH` lanes, zeros past
//! `cout_g`), and [`PIXELS`] consecutive output pixels are computed together: each filter vector
//! loaded serves all of them, each with its own accumulator. A product per group would pad
//! its few output channels (8 in RegNet) to the GEMM microkernel's 32 columns.
//!
//! The sums are fused multiply-adds over taps, then input channels, in that order, from the
//! bias: the same bits on every instruction set and for any split over threads.
#![allow(unsafe_code)]

use super::geometry::Conv2dGeometry;
use crate::compute::sgemm::{clamp1, GemmError};

/// Output pixels computed together, one accumulator each: 12 leaves the two registers of
/// a filter vector and a broadcast input free among AVX2's 16.
pub(super) const PIXELS: usize = 12;

/// Output channels of a group at most: wider groups are better served by a product.
pub(super) const MAX_GROUP_OUT: usize = 64;

/// A grouped convolution's filters prepared for [`Grouped::pixels`].
#[derive(Debug)]
pub(super) struct Grouped {
    g: Conv2dGeometry,
    ow: usize,
    /// Lanes per filter vector: 8, or 16 for groups of more than 8 output channels.
    width: usize,
    /// Filter vectors per tap and input channel: `cout_g / width`, rounded up.
    chunks: usize,
    /// `[group][chunk][tap][cin_g][width]`, zeros past `cout_g`.
    weight: Vec<f32>,
    /// `[group][chunk][width]`, zeros past `cout_g`.
    bias: Vec<f32>,
    /// `Cin` zeros: the input of a window position in the padding.
    zeros: Vec<f32>,
}

/// Whether [`Grouped`] computes convolution `g`: groups of at least two input and output
/// channels, at most [`MAX_GROUP_OUT`] outputs each.
pub(super) fn supports(g: &Conv2dGeometry) -> bool {
    let (cin_g, cout_g) = (g.in_channels / g.groups.max(1), g.out_channels / g.groups.max(1));
    g.groups > 1 && cin_g >= 2 && (2..=MAX_GROUP_OUT).contains(&cout_g)
}

impl Grouped {
    /// Lays out `weight` (`[Cout, cin_g, kh, kw]`) and `bias` for an output `ow` pixels
    /// wide; the caller has checked their lengths against `g`.
    pub(super) fn new(
        g: &Conv2dGeometry,
        ow: usize,
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<Grouped, GemmError> {
        if !supports(g) {
            return Err(GemmError::Invalid("conv2d: not a grouped convolution"));
        }
        let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
        let taps = g.kh * g.kw;
        let width = if cout_g > 8 { 16 } else { 8 };
        let chunks = cout_g.div_ceil(width);
        let len = g.groups * chunks * taps * cin_g * width;
        let mut packed = vec![0f32; len];
        let mut packed_bias = vec![0f32; g.groups * chunks * width];
        for gi in 0..g.groups {
            for o in 0..cout_g {
                let (j, lane) = (o / width, o % width);
                let filter = &weight[(gi * cout_g + o) * cin_g * taps..][..cin_g * taps];
                let chunk = (gi * chunks + j) * taps * cin_g;
                for ci in 0..cin_g {
                    for t in 0..taps {
                        packed[(chunk + t * cin_g + ci) * width + lane] = filter[ci * taps + t];
                    }
                }
                if let Some(b) = bias {
                    packed_bias[(gi * chunks + j) * width + lane] = b[gi * cout_g + o];
                }
            }
        }
        Ok(Grouped {
            g: *g,
            ow,
            width,
            chunks,
            weight: packed,
            bias: packed_bias,
            zeros: vec![0.0; g.in_channels],
        })
    }

    /// Bytes of prepared constants.
    pub(super) fn heap_bytes(&self) -> usize {
        (self.weight.capacity() + self.bias.capacity() + self.zeros.capacity()) * 4
    }

    /// Output pixels `pixels` (row-major) of the channels-last image `x` into `y` (those
    /// pixels, channels-last), bias added, then clamped to `clamp` (`(min, max)`, NaN
    /// propagating, as [`Activation::Clamp`](crate::compute::sgemm::Activation::Clamp)) if
    /// given; no residual or other activation. The pixels are taken
    /// [`PIXELS`] at a time in order, a run crossing from one row into the next: a split
    /// into runs of whole [`PIXELS`] wastes no lanes.
    pub(super) fn pixels(
        &self,
        x: &[f32],
        pixels: std::ops::Range<usize>,
        clamp: Option<(f32, f32)>,
        y: &mut [f32],
    ) {
        let g = &self.g;
        let (cout, taps) = (g.out_channels, g.kh * g.kw);
        let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
        let mut inputs: Vec<[&[f32]; PIXELS]> = vec![[&[]; PIXELS]; taps];
        for (p0, out) in pixels.clone().step_by(PIXELS).zip(y.chunks_mut(PIXELS * cout)) {
            let n = PIXELS.min(pixels.end - p0);
            self.window_inputs(x, p0, n, &mut inputs);
            for gi in 0..g.groups {
                for j in 0..self.chunks {
                    let at = (gi * self.chunks + j) * taps * cin_g * self.width;
                    let tile = Tile {
                        inputs: &inputs,
                        channel0: gi * cin_g,
                        cin_g,
                        weight: &self.weight[at..][..taps * cin_g * self.width],
                        bias: &self.bias[(gi * self.chunks + j) * self.width..][..self.width],
                        clamp,
                    };
                    let lanes = (cout_g - j * self.width).min(self.width);
                    let out = TileOut { y: out, at: gi * cout_g + j * self.width, lanes, cout };
                    match self.width {
                        8 => tile.run::<8>(n, out),
                        _ => tile.run::<16>(n, out),
                    }
                }
            }
        }
    }

    /// For output pixels `p0..p0 + pixels` (row-major over the output image), each tap's
    /// input pixel (all `Cin` channels) in the channels-last image `x`, or zeros in the
    /// padding; the slots past `pixels` repeat the last pixel's. Every slice written holds
    /// exactly `Cin` values, which [`Tile::sums`] relies on.
    fn window_inputs<'x>(
        &'x self,
        x: &'x [f32],
        p0: usize,
        pixels: usize,
        inputs: &mut [[&'x [f32]; PIXELS]],
    ) {
        let g = &self.g;
        let at = |o: usize, k: usize, axis: usize, size: usize| {
            (o * g.stride[axis] + k * g.dilation[axis])
                .checked_sub(g.padding[axis])
                .filter(|&v| v < size)
        };
        let cin = g.in_channels;
        for p in 0..PIXELS {
            let pixel = p0 + p.min(pixels - 1);
            let (oy, ox) = (pixel / self.ow, pixel % self.ow);
            for (ky, taps) in inputs.chunks_exact_mut(g.kw).enumerate() {
                let iy = at(oy, ky, 0, g.in_h);
                for (kx, slot) in taps.iter_mut().enumerate() {
                    slot[p] = match (iy, at(ox, kx, 1, g.in_w)) {
                        (Some(iy), Some(ix)) => &x[(iy * g.in_w + ix) * cin..][..cin],
                        _ => &self.zeros[..cin],
                    };
                }
            }
        }
    }
}

/// The inputs of one tile: [`PIXELS`] pixels of one chunk of one group's output channels.
struct Tile<'a> {
    /// Per tap, each pixel's input values, all channels ([`Grouped::window_inputs`]).
    inputs: &'a [[&'a [f32]; PIXELS]],
    /// The group's first input channel.
    channel0: usize,
    cin_g: usize,
    /// `[tap][cin_g][W]`.
    weight: &'a [f32],
    /// `W` biases.
    bias: &'a [f32],
    /// Bounds the sums are clamped to before they are stored.
    clamp: Option<(f32, f32)>,
}

/// Where a tile's sums go: `lanes` channels from channel `at` of each of its pixels in `y`
/// (`cout` values per pixel).
struct TileOut<'a> {
    y: &'a mut [f32],
    at: usize,
    lanes: usize,
    cout: usize,
}

impl Tile<'_> {
    /// The sums of the first `pixels` pixels into `out`, on the widest instructions the CPU
    /// has for `W` lanes.
    fn run<const W: usize>(&self, pixels: usize, out: TileOut<'_>) {
        #[cfg(target_arch = "x86_64")]
        {
            use crate::compute::cpu::{has_avx2, has_avx512};
            if W == 16 && has_avx512() {
                // SAFETY: the CPU has AVX-512F, the only feature the function enables.
                return unsafe { self.run_avx512(pixels, out) };
            }
            if W == 8 && has_avx2() {
                // SAFETY: the CPU has AVX2 and FMA, the features the function enables.
                return unsafe { self.run_avx2(pixels, out) };
            }
        }
        self.sums_portable::<W>(pixels, out);
    }

    /// [`Tile::sums`] on 16 lanes of AVX-512.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn run_avx512(&self, pixels: usize, out: TileOut<'_>) {
        // SAFETY: the caller's contract: the CPU has what `Avx512` uses.
        unsafe { self.sums::<crate::compute::lanes::Avx512>(pixels, out) }
    }

    /// [`Tile::sums`] on 8 lanes of AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self, pixels: usize, out: TileOut<'_>) {
        // SAFETY: the caller's contract: the CPU has what `Avx2` uses.
        unsafe { self.sums::<crate::compute::lanes::Avx2>(pixels, out) }
    }

    /// The tile's sums in vector registers of `L::LANES` lanes (the tile's width): one
    /// accumulator per pixel, one filter vector loaded per tap and input channel and
    /// multiplied into every pixel's accumulator by its input value.
    ///
    /// # Safety
    /// The CPU has the instructions of `L`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn sums<L: crate::compute::lanes::F32x>(&self, pixels: usize, out: TileOut<'_>) {
        let (w_len, cin_g) = (L::LANES, self.cin_g);
        let TileOut { y, at, lanes, cout } = out;
        // Checked once here: what the loads and stores below touch.
        let bias = &self.bias[..w_len];
        let weight = &self.weight[..self.inputs.len() * cin_g * w_len];
        let channel0 = self.channel0;
        let in_channels = self.inputs.first().map_or(0, |px| px[0].len());
        assert!(channel0 + cin_g <= in_channels, "a group past the input's channels");
        // Pixel `p`'s lanes are `y[p * cout + at..][..lanes]`: checked once here for the last.
        assert!(
            lanes <= w_len && pixels.saturating_sub(1) * cout + at + lanes <= y.len(),
            "tile output"
        );
        // SAFETY: `bias` holds `LANES` values.
        let mut acc = [unsafe { L::load(bias.as_ptr()) }; PIXELS];
        for (pixel_inputs, w) in self.inputs.iter().zip(weight.chunks_exact(cin_g * w_len)) {
            // SAFETY: every input slice holds `in_channels` values (`window_inputs`), and
            // `channel0 + cin_g <= in_channels` (checked above): each pointer has the
            // group's `cin_g` values after it.
            let inputs: [*const f32; PIXELS] =
                std::array::from_fn(|p| unsafe { pixel_inputs[p].as_ptr().add(channel0) });
            let w = w.as_ptr();
            for ci in 0..cin_g {
                // SAFETY: `w` points at `cin_g * LANES` values, each input at `cin_g`, and
                // `ci < cin_g`.
                unsafe {
                    let wv = L::load(w.add(ci * w_len));
                    for (acc, input) in acc.iter_mut().zip(&inputs) {
                        *acc = L::mul_add(L::splat(*input.add(ci)), wv, *acc);
                    }
                }
            }
        }
        if let Some((lo, hi)) = self.clamp {
            // SAFETY: the caller's contract: the CPU has the instructions of `L`.
            let (lo, hi) = unsafe { (L::splat(lo), L::splat(hi)) };
            for acc in &mut acc {
                // SAFETY: as above.
                *acc = unsafe { L::clamp(*acc, lo, hi) };
            }
        }
        // SAFETY: as above.
        let mask = unsafe { L::first(lanes) };
        for (p, acc) in acc.iter().enumerate().take(pixels) {
            // SAFETY: pixel `p < pixels` has `lanes` values at `y[p * cout + at..]` (checked
            // above), the lanes the mask stores (all `LANES` when `lanes == w_len`).
            unsafe { L::store_part(y.as_mut_ptr().add(p * cout + at), mask, lanes == w_len, *acc) };
        }
    }

    /// The sums of [`Tile::sums`] one lane at a time, with the same fused multiply-adds in
    /// the same order (the same bits): for CPUs without the vector instructions.
    fn sums_portable<const W: usize>(&self, pixels: usize, out: TileOut<'_>) {
        let cin_g = self.cin_g;
        let bias: &[f32; W] = self.bias.try_into().expect("W biases");
        let mut acc = [*bias; PIXELS];
        for (t, pixel_inputs) in self.inputs.iter().enumerate() {
            let inputs = pixel_inputs.map(|v| &v[self.channel0..][..cin_g]);
            let weights = &self.weight[t * cin_g * W..][..cin_g * W];
            for (ci, w) in weights.chunks_exact(W).enumerate() {
                for (acc, input) in acc.iter_mut().zip(&inputs) {
                    let v = input[ci];
                    for (a, &w) in acc.iter_mut().zip(w) {
                        *a = v.mul_add(w, *a);
                    }
                }
            }
        }
        let TileOut { y, at, lanes, cout } = out;
        for (p, acc) in acc.iter().enumerate().take(pixels) {
            let dst = &mut y[p * cout + at..][..lanes];
            dst.copy_from_slice(&acc[..lanes]);
            if let Some((lo, hi)) = self.clamp {
                dst.iter_mut().for_each(|v| *v = clamp1(*v, lo, hi));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector kernels of this CPU and the portable loops give the same bits, on both
    /// widths, clamped or not, with runs whose pixels read the padding, cross a row, or end
    /// the image.
    #[test]
    fn every_instruction_set_gives_the_portable_bits() {
        let mut rng = fastrand::Rng::with_seed(0x61);
        for (cin_g, cout_g, width) in [(8, 8, 8), (4, 13, 16), (6, 16, 16)] {
            let groups = 3;
            let g = Conv2dGeometry {
                in_channels: groups * cin_g,
                out_channels: groups * cout_g,
                padding: [1, 1],
                groups,
                ..Conv2dGeometry::new(groups * cin_g, [6, 11], groups * cout_g, [3, 3])
            };
            let w: Vec<f32> = (0..g.out_channels * cin_g * 9).map(|_| rng.f32() - 0.5).collect();
            let b: Vec<f32> = (0..g.out_channels).map(|_| rng.f32() - 0.5).collect();
            let k = Grouped::new(&g, 11, &w, Some(&b)).unwrap();
            assert_eq!(k.width, width);
            let x: Vec<f32> = (0..6 * 11 * g.in_channels).map(|_| rng.f32() - 0.5).collect();
            let mut inputs: Vec<[&[f32]; PIXELS]> = vec![[&[]; PIXELS]; 9];
            // A run from the corner, one crossing into the next row, a short last one.
            for p0 in [0, 7, 60] {
                let pixels = PIXELS.min(66 - p0);
                k.window_inputs(&x, p0, pixels, &mut inputs);
                for gi in 0..groups {
                    let at = gi * k.chunks * 9 * cin_g * width;
                    let tile = Tile {
                        inputs: &inputs,
                        channel0: gi * cin_g,
                        cin_g,
                        weight: &k.weight[at..][..9 * cin_g * width],
                        bias: &k.bias[gi * k.chunks * width..][..width],
                        // Every other group clamped, as a fused relu6 would be.
                        clamp: (gi % 2 == 1).then_some((-0.1, 0.2)),
                    };
                    let lanes = cout_g.min(width);
                    let mut fast = vec![f32::NAN; pixels * g.out_channels];
                    let mut slow = fast.clone();
                    for (y, portable) in [(&mut fast, false), (&mut slow, true)] {
                        let at = gi * cout_g;
                        let out = TileOut { y, at, lanes, cout: g.out_channels };
                        match (width, portable) {
                            (8, false) => tile.run::<8>(pixels, out),
                            (8, true) => tile.sums_portable::<8>(pixels, out),
                            (_, false) => tile.run::<16>(pixels, out),
                            (_, true) => tile.sums_portable::<16>(pixels, out),
                        }
                    }
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&fast), bits(&slow), "{g:?} group {gi} from pixel {p0}");
                }
            }
        }
    }
}
