//! XNNPACK's QS8 convolution (NHWC, per-channel int8 weights, fp32 requantization) with its
//! weights laid out once, when the operator is prepared: at load for a compiled step, per call
//! for the plain kernel. [`PackedQs8Conv::new`] picks the loops for the CPU and the geometry,
//! and [`PackedQs8Conv::run`] gives the very bits of `xnn_quant::qs8_convolution_scalar`, for
//! every loop and thread count (the sums are `i32` with wrapping addition, which any order
//! gives alike; see `xnn_qgemm.rs`).
//!
//! The loops ([`PackedQs8Conv::algorithm`]):
//! - `quads` / `quads-direct` / `quads-taps` (AVX-512 VNNI): weights in panels of [`NR`]
//!   output channels, `[k / 4][NR][4]` `i8`; `vpdpbusd` multiplies four activations, made
//!   unsigned by adding 128 (a flipped sign bit), by four weights per lane. The bias absorbs
//!   `-(x_zp + 128) * Σ_k w`, so padded taps hold `x_zp` and need no care. A 1x1 convolution
//!   of stride 1 without padding or groups copies its input rows, flipped, into rows of
//!   [`MR`] output pixels (`quads-direct`); a larger window of one group and a multiple of 4
//!   channels is read in place, tap by tap through offsets into the input flipped once a
//!   call, two panels a pass (`quads-taps`, XNNPACK's indirection: resnet50's 3x3 layers
//!   read 7x7x512 inputs, not nine times as many gathered bytes); the others gather each
//!   pixel's window.
//! - `pairs` (AVX-512BW, AVX2, portable): panels `[k / 2][NR][2]` of `i16`, the gathered
//!   windows minus the zero point in `i16`, `vpmaddwd`.
//! - `depthwise`: per output pixel, every channel side by side. On AVX-512 (multiplier 1) the
//!   taps are read in pairs through pointers (a padded tap points at a row of zero points, whose
//!   share the bias absorbs) and multiplied by `vpdpwssd` (`vpmaddwd` without VNNI) against
//!   weights laid out once in the unpack order ([`pack_tap_pairs`]; up to 16 channels in
//!   256-bit vectors, [`dw16_pixel`]); elsewhere, per tap inside the input, the weights widened to
//!   `i16` once.
//!
//! Threads split the output pixels, in blocks of up to [`MR`] as even as they go; a quad-loop
//! layer of few pixels (fewer blocks than four a thread, resnet50's 7x7 layers) splits its
//! output channels instead ([`PackedQs8Conv::run_channels`]; there 1x1 rows over 32 KB are
//! read in place too, [`PackedQs8Conv::channels_in_place`]). Each output pixel's sums are
//! requantized (with the output range, which a following clamp may have narrowed) as soon as
//! its panel is done.
#![allow(unsafe_code)]

use std::ops::Range;

use super::sgemm::GemmError;
use super::threads::{split, with_pieces, Threads};
#[cfg(target_arch = "x86_64")]
use super::xnn_qgemm::requantize16;
use super::xnn_qgemm::{
    panel_product, parts, quad_product, tap_product, Isa, IsaTask, Requant, TapRows, MR, NR, PADDED,
};
use super::xnn_qmath::{qs8_requantize, ConvGeometry, Qs8Filter, Qs8Out};

/// Multiply-adds from which a convolution splits its output pixels over the threads: a few
/// microseconds of work at the loops' speed (the depthwise loops do ~10x fewer per second).
const PARALLEL_GEMM_MACS: usize = 1 << 20;
const PARALLEL_DEPTHWISE_MACS: usize = 1 << 17;
/// Gathered activations (output pixels x `k4` bytes) up to which a quad-loop convolution of
/// few pixels splits its output channels ([`PackedQs8Conv::run_channels`]): they stay in a
/// core's L2 cache while the panels pass over them.
const CHANNEL_SPLIT_ROWS: usize = 1 << 19;
/// Packed weights from which a quad-loop convolution of few pixels splits its output
/// channels: below half an L2 cache, streaming them once a block of pixels costs less than
/// the split's gathering and placing (mobilenet_v2's 7x7 layers, 150-410 KB, ran 16-36%
/// slower split; resnet50's, 1-2.4 MB, 9-23% faster).
const CHANNEL_SPLIT_WEIGHTS: usize = 1 << 19;
/// Gathered activations from which a channel-split task passes every pixel under one panel
/// before the next, rather than every panel over a block of pixels: on resnet50's 7x7
/// layers (Zen 4), rows of 50-225 KB ran 9-21% faster so, rows of 25 KB (a 1x1 layer of
/// 512 inputs) 20% slower.
const PANEL_OUTER_ROWS: usize = 32 << 10;

/// A QS8 convolution with its weights laid out for the loops of one CPU.
#[derive(Clone, Debug)]
pub struct PackedQs8Conv {
    g: ConvGeometry,
    isa: Isa,
    /// The requantization scale per output channel.
    scales: Vec<f32>,
    o: Qs8Out,
    weights: Weights,
}

/// How the quad loops read an output pixel's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QuadInputs {
    /// A 1x1 convolution of stride 1 without padding or groups: the input row itself, copied
    /// flipped into a row.
    Direct,
    /// One group, a multiple of 4 channels, a window larger than 1x1: the window read in
    /// place, tap by tap, through offsets (XNNPACK's indirection) into a copy of the input
    /// flipped once a call.
    Taps,
    /// The window gathered, flipped, into a row.
    Gathered,
}

/// The weights in the layout of the chosen loops.
#[derive(Clone, Debug)]
enum Weights {
    /// `[groups][panels][k4 / 4][NR][4]` `i8`, `k4` the group's `kh * kw * c / groups` rounded
    /// up to a multiple of 4; the bias with `-(x_zp + 128) * Σ_k w` folded in.
    /// `zp_row` holds `c` copies of the input zero point plus 128: the padded taps of windows
    /// read in place.
    Quads {
        k4: usize,
        panels: usize,
        w: Vec<i8>,
        bias: Vec<i32>,
        zp: i8,
        inputs: QuadInputs,
        zp_row: Vec<u8>,
    },
    /// `[groups][panels][kp / 2][NR][2]` `i16`, `kp` rounded up to even.
    Pairs { kp: usize, panels: usize, w: Vec<i16>, bias: Option<Vec<i32>>, zp: i16 },
    /// `[kh, kw, o]` widened to `i16`. The AVX-512 loop (multiplier 1) reads padded taps from
    /// `zp_row` (`c` copies of `x_zp`) and sums `x * w` onto `folded`, the bias minus
    /// `x_zp * Σ_taps w`; the others subtract the zero point and skip padded taps.
    Depthwise {
        w: Vec<i16>,
        bias: Option<Vec<i32>>,
        zp: i16,
        folded: Vec<i32>,
        zp_row: Vec<i8>,
        /// The weights for the AVX-512 loop: taps in pairs, see [`pack_tap_pairs`].
        pairs: Vec<i16>,
    },
}

impl PackedQs8Conv {
    /// Checks the filter against `g` (whole weight, a scale per output channel, an optional
    /// bias per output channel, an input zero point in `[-128, 127]`) and lays the weights
    /// out for the best loops of this CPU.
    pub fn new(g: ConvGeometry, x_zp: i32, f: &Qs8Filter) -> Result<Self, GemmError> {
        Self::new_isa(super::xnn_qgemm::best_isa(), g, x_zp, f)
    }

    /// [`PackedQs8Conv::new`] for the loops of `isa`.
    pub(crate) fn new_isa(
        isa: Isa,
        g: ConvGeometry,
        x_zp: i32,
        f: &Qs8Filter,
    ) -> Result<Self, GemmError> {
        if !g.is_valid() {
            return Err(GemmError::Invalid(
                "qs8 convolution: inconsistent or overflowing geometry",
            ));
        }
        let count = |what, len: usize, want: usize| match len == want {
            true => Ok(()),
            false => {
                let expected = format!("of {want} values");
                Err(GemmError::Sizes { what, actual: vec![len], expected })
            }
        };
        count("weight", f.w.len(), g.weight_len().unwrap_or(0))?;
        count("scales", f.scales.len(), g.o)?;
        if let Some(b) = f.bias {
            count("bias", b.len(), g.o)?;
        }
        if !(-128..=127).contains(&x_zp) {
            return Err(GemmError::Invalid(
                "qs8 convolution: input zero point outside [-128, 127]",
            ));
        }
        let bias = f.bias.map(<[i32]>::to_vec);
        let weights = if g.depthwise {
            let w: Vec<i16> = f.w.iter().map(|&v| v.into()).collect();
            let mut folded = bias.clone().unwrap_or_else(|| vec![0; g.o]);
            for taps in w.chunks_exact(g.o) {
                for (b, &v) in folded.iter_mut().zip(taps) {
                    *b = b.wrapping_sub(x_zp.wrapping_mul(v.into()));
                }
            }
            let zp_row = vec![x_zp as i8; g.c];
            // Only the AVX-512 loop of multiplier 1 reads the pairs.
            let pairs = match g.o == g.c {
                true => pack_tap_pairs(&w, g.kh * g.kw, g.c),
                false => Vec::new(),
            };
            Weights::Depthwise { w, bias, zp: x_zp as i16, folded, zp_row, pairs }
        } else if isa.has_quads() {
            let direct = g.kh == 1
                && g.kw == 1
                && g.stride == [1, 1]
                && g.pad_top == 0
                && g.pad_left == 0
                && g.oh == g.h
                && g.ow == g.w
                && g.groups == 1;
            let inputs = match direct {
                true => QuadInputs::Direct,
                // A strided 1x1 layer's one tap gathers faster (one panel a pass).
                false if g.groups == 1 && g.c.is_multiple_of(4) && g.kh * g.kw > 1 => {
                    QuadInputs::Taps
                }
                false => QuadInputs::Gathered,
            };
            let zp_row = vec![(x_zp + 128) as u8; g.c];
            let (k4, panels, w, bias) = pack_quads(&g, f.w, f.bias, x_zp);
            Weights::Quads { k4, panels, w, bias, zp: x_zp as i8, inputs, zp_row }
        } else {
            let (kp, panels, w) = pack_pairs(&g, f.w);
            Weights::Pairs { kp, panels, w, bias, zp: x_zp as i16 }
        };
        Ok(PackedQs8Conv { g, isa, scales: f.scales.to_vec(), o: *f.o, weights })
    }

    /// The geometry it was prepared for.
    pub fn geometry(&self) -> &ConvGeometry {
        &self.g
    }

    /// The output's zero point and range.
    pub fn output(&self) -> &Qs8Out {
        &self.o
    }

    /// Narrows the output range to `[lo, hi]` (a clamp of the output fused into the
    /// convolution: the same bits, as requantization clamps before rounding to integers).
    /// `None`, and no change, when the ranges do not meet.
    pub fn clamp_output(&mut self, lo: i32, hi: i32) -> Option<()> {
        let (qmin, qmax) = (self.o.qmin.max(lo), self.o.qmax.min(hi));
        (qmin <= qmax).then(|| {
            self.o.qmin = qmin;
            self.o.qmax = qmax;
        })
    }

    /// Which loops run: `quads-direct`, `quads-taps`, `quads`, `pairs` or `depthwise`.
    pub fn algorithm(&self) -> &'static str {
        match self.weights {
            Weights::Quads { inputs: QuadInputs::Direct, .. } => "quads-direct",
            Weights::Quads { inputs: QuadInputs::Taps, .. } => "quads-taps",
            Weights::Quads { .. } => "quads",
            Weights::Pairs { .. } => "pairs",
            Weights::Depthwise { .. } => "depthwise",
        }
    }

    /// Bytes of the packed weights, biases and scales.
    pub fn heap_bytes(&self) -> usize {
        let b = |v: &Option<Vec<i32>>| v.as_ref().map_or(0, |v| v.len() * 4);
        self.scales.len() * 4
            + match &self.weights {
                Weights::Quads { w, bias, zp_row, .. } => w.len() + bias.len() * 4 + zp_row.len(),
                Weights::Pairs { w, bias, .. } => w.len() * 2 + b(bias),
                Weights::Depthwise { w, bias, folded, zp_row, pairs, .. } => {
                    (w.len() + pairs.len()) * 2 + b(bias) + folded.len() * 4 + zp_row.len()
                }
            }
    }

    /// Convolves `x` (`[n, h, w, c]`) into `out` (`[n, oh, ow, o]`), split over `threads`
    /// when the layer is large.
    ///
    /// # Panics
    /// If a length disagrees with the geometry.
    pub fn run(&self, x: &[i8], out: &mut [i8], threads: &Threads) {
        let g = &self.g;
        assert_eq!(x.len(), g.n * g.h * g.w * g.c, "input length");
        assert_eq!(out.len(), g.n * g.oh * g.ow * g.o, "output length");
        if out.is_empty() {
            return;
        }
        let pixels = g.n * g.oh * g.ow;
        let macs = pixels * g.weight_len().unwrap_or(0);
        let isa = self.isa;
        match &self.weights {
            Weights::Depthwise { w, bias, zp, folded, zp_row, pairs } => {
                let parts = parts(threads, macs, PARALLEL_DEPTHWISE_MACS, pixels);
                let tasks = with_pieces(split(pixels, 1, parts), out, g.o);
                #[cfg(target_arch = "x86_64")]
                if isa >= Isa::Avx512 && g.o == g.c {
                    let t = DwVec { c: self, x, pairs, folded, zp_row };
                    threads.for_each(tasks, |(run, out)| isa.run(&t, run, out));
                    return;
                }
                let t = DwRun { c: self, x, zp: *zp, w, bias: bias.as_deref() };
                threads.for_each(tasks, |(run, out)| isa.run(&t, run, out));
            }
            weights => self.run_gemm(x, weights, out, threads),
        }
    }

    /// [`PackedQs8Conv::run`] of a layer of quad or pair weights: split by pixels or, for few
    /// pixels, by channels; windows read in place read the input plus 128, made once here in a
    /// buffer this thread keeps (no allocation, no fresh pages per call).
    fn run_gemm(&self, x: &[i8], weights: &Weights, out: &mut [i8], threads: &Threads) {
        let g = &self.g;
        let pixels = g.n * g.oh * g.ow;
        let macs = pixels * g.weight_len().unwrap_or(0);
        let chunks = pixels.div_ceil(MR);
        let parts = parts(threads, macs, PARALLEL_GEMM_MACS, chunks);
        let count = threads.available();
        let by_channels = parts > 1 && chunks < 4 * count && self.splits_channels(pixels);
        let in_place = match by_channels {
            true => self.channels_in_place(pixels),
            false => matches!(weights, Weights::Quads { inputs: QuadInputs::Taps, .. }),
        };
        let mut run = |flipped: &[u8]| match by_channels {
            true => self.run_channels(x, flipped, out, threads, count),
            false => {
                let tasks = with_pieces(split(pixels, MR, parts), out, g.o);
                let t = GemmRun { c: self, x, flipped, weights };
                threads.for_each(tasks, |(run, out)| self.isa.run(&t, run, out));
            }
        };
        match in_place {
            true => FLIPPED.with_borrow_mut(|flipped| {
                flipped.clear();
                flipped.extend(x.iter().map(|&v| v as u8 ^ 0x80));
                run(flipped)
            }),
            false => run(&[]),
        }
    }

    /// Whether a layer of `pixels` output pixels, when they are few, takes
    /// [`PackedQs8Conv::run_channels`]: quad weights of one group, of
    /// [`CHANNEL_SPLIT_WEIGHTS`] bytes or more, and rows (gathered, or read in place) of
    /// [`CHANNEL_SPLIT_ROWS`] at most.
    fn splits_channels(&self, pixels: usize) -> bool {
        matches!(&self.weights, Weights::Quads { k4, w, .. }
            if self.g.groups == 1
                && pixels * k4 <= CHANNEL_SPLIT_ROWS
                && w.len() >= CHANNEL_SPLIT_WEIGHTS)
    }

    /// Whether [`PackedQs8Conv::run_channels`] reads the windows of its `pixels` output pixels
    /// in place, two panels a broadcast: for [`QuadInputs::Taps`], and for the other quad
    /// layers whose every tap starts a quad and whose rows are too large to stay in L1 under
    /// every panel (they pass under each panel in turn): resnet50_q8's 7x7 1x1 layers of
    /// 1024-2048 inputs 10-23% faster; of 512 inputs, rows of 25 KB, 13% slower.
    fn channels_in_place(&self, pixels: usize) -> bool {
        matches!(self.weights, Weights::Quads { inputs, k4, .. }
            if inputs == QuadInputs::Taps
                || (self.g.c.is_multiple_of(4) && pixels * k4 > PANEL_OUTER_ROWS))
    }

    /// A quad-loop convolution of few output pixels (fewer row blocks than four a thread) and
    /// large weights: split by pixels, every task would stream all the weights and the last
    /// blocks would leave threads idle. Instead every pixel's row is gathered (or its window's
    /// offsets found) once, then `parts` tasks each multiply them by their run of panels (each
    /// task reads its share of the weights) into their own block of columns, and the blocks
    /// are copied into place. `flipped` is the input plus 128 when the windows are read in
    /// place ([`PackedQs8Conv::channels_in_place`]).
    fn run_channels(
        &self,
        x: &[i8],
        flipped: &[u8],
        out: &mut [i8],
        threads: &Threads,
        parts: usize,
    ) {
        let Weights::Quads { k4, panels, ref w, ref bias, zp, inputs, ref zp_row } = self.weights
        else {
            unreachable!("run_channels takes quad weights")
        };
        let g = &self.g;
        let (pixels, oc) = (g.n * g.oh * g.ow, g.o);
        let block = balanced_rows(pixels);
        let (mut rows, mut offsets): (Vec<u8>, Vec<usize>);
        let inputs = match self.channels_in_place(pixels) {
            true => {
                offsets = vec![0; pixels * g.kh * g.kw];
                let taps = g.kh * g.kw;
                for (b, offs) in offsets.chunks_mut(block * taps).enumerate() {
                    window_offsets(g, b * block, offs.len() / taps, offs);
                }
                BlockInputs::Taps { x: flipped, zp_row, offsets: &offsets }
            }
            false => {
                rows = vec![0u8; pixels * k4];
                let mut at = Pixel::of(g, 0);
                for (p, row) in rows.chunks_exact_mut(k4).enumerate() {
                    quad_row(g, x, zp, inputs, at, p, k4, row);
                    at.advance(g);
                }
                BlockInputs::Rows(&rows)
            }
        };
        // Each task's columns (whole panels; the last task ends at `oc`), pixel-major.
        let runs: Vec<Range<usize>> =
            split(panels, 1, parts).map(|r| r.start * NR..(r.end * NR).min(oc)).collect();
        let mut blocks = vec![0i8; pixels * oc];
        let mut rest = &mut blocks[..];
        let mut tasks = Vec::with_capacity(runs.len());
        for cols in &runs {
            let (block, tail) = std::mem::take(&mut rest).split_at_mut(pixels * cols.len());
            rest = tail;
            tasks.push((cols.clone(), block));
        }
        let t = ChannelRun { c: self, inputs, pixels, block, k4, w, bias };
        let isa = self.isa;
        threads.for_each(tasks, |(cols, block)| isa.run(&t, cols, block));
        let mut at = 0;
        for cols in &runs {
            let (width, block) = (cols.len(), &blocks[at..][..pixels * cols.len()]);
            for (dst, src) in out.chunks_exact_mut(oc).zip(block.chunks_exact(width)) {
                dst[cols.clone()].copy_from_slice(src);
            }
            at += pixels * width;
        }
    }
}

thread_local! {
    /// The input plus 128 of the last layer this thread ran whose windows are read in place.
    static FLIPPED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Packs OHWI weights (`groups * og` rows of `kg` values) into per-group panels of [`NR`]
/// channels, `[kp / 2][NR][2]` each. Returns `kp`, the panels per group and the packed values.
fn pack_pairs(g: &ConvGeometry, wt: &[i8]) -> (usize, usize, Vec<i16>) {
    let (og, kg) = (g.o / g.groups, g.kh * g.kw * (g.c / g.groups));
    let kp = kg.next_multiple_of(2);
    let panels = og.div_ceil(NR);
    let mut w = vec![0i16; g.groups * panels * kp * NR];
    for (ch, row) in wt.chunks_exact(kg).enumerate() {
        let (grp, j) = (ch / og, ch % og);
        let base = (grp * panels + j / NR) * kp * NR + (j % NR) * 2;
        for (k, &v) in row.iter().enumerate() {
            w[base + (k / 2) * NR * 2 + k % 2] = v.into();
        }
    }
    (kp, panels, w)
}

/// Packs OHWI weights into per-group panels of [`NR`] channels, `[k4 / 4][NR][4]` each, and
/// folds `-(x_zp + 128) * Σ_k w` into each channel's bias (wrapping, as the sums).
fn pack_quads(
    g: &ConvGeometry,
    wt: &[i8],
    bias: Option<&[i32]>,
    x_zp: i32,
) -> (usize, usize, Vec<i8>, Vec<i32>) {
    let (og, kg) = (g.o / g.groups, g.kh * g.kw * (g.c / g.groups));
    let k4 = kg.next_multiple_of(4);
    let panels = og.div_ceil(NR);
    let mut w = vec![0i8; g.groups * panels * k4 * NR];
    let mut folded = vec![0i32; g.o];
    for (ch, row) in wt.chunks_exact(kg).enumerate() {
        let (grp, j) = (ch / og, ch % og);
        let base = (grp * panels + j / NR) * k4 * NR + (j % NR) * 4;
        // A quad (4 bytes of depth) at a time, as one 4-byte store: value by value this
        // was a quarter of an int8 resnet50's load.
        let quads = row.chunks_exact(4);
        let tail = quads.remainder();
        let mut dsts = w[base..].chunks_mut(NR * 4);
        // The quads first: a zip that ends takes no destination past the last.
        for (quad, dst) in quads.zip(dsts.by_ref()) {
            let quad: [i8; 4] = [quad[0], quad[1], quad[2], quad[3]];
            if let Some(d) = dst.first_chunk_mut::<4>() {
                *d = quad;
            }
        }
        if let Some(dst) = dsts.next() {
            dst[..tail.len()].copy_from_slice(tail);
        }
        let sum = row.iter().fold(0i32, |s, &v| s.wrapping_add(v.into()));
        let b = bias.map_or(0, |b| b[ch]);
        folded[ch] = b.wrapping_sub((x_zp + 128).wrapping_mul(sum));
    }
    (k4, panels, w, folded)
}

/// The tasks of a grouped (not depthwise) convolution, each over its run of output pixels.
struct GemmRun<'a> {
    c: &'a PackedQs8Conv,
    x: &'a [i8],
    /// `x + 128`, for [`QuadInputs::Taps`] (else empty: see [`PackedQs8Conv::run_gemm`]).
    flipped: &'a [u8],
    weights: &'a Weights,
}

impl IsaTask for GemmRun<'_> {
    type Out = [i8];

    /// Output pixels `run` into `out` (`run.len() * o`), [`MR`] at a time.
    #[inline(always)]
    fn run(&self, run: Range<usize>, out: &mut [i8]) {
        let PackedQs8Conv { g, isa, scales, o, .. } = self.c;
        let (groups, og, oc) = (g.groups, g.o / g.groups, g.o);
        match *self.weights {
            Weights::Quads {
                panels,
                ref w,
                ref bias,
                inputs: QuadInputs::Taps,
                ref zp_row,
                ..
            } => {
                let taps = g.kh * g.kw;
                let rq = Requant { bias, scales, o };
                let mut offsets = vec![0usize; MR * taps];
                let block = balanced_rows(run.len());
                for p0 in run.clone().step_by(block) {
                    let rows = (run.end - p0).min(block);
                    let offs = &mut offsets[..rows * taps];
                    window_offsets(g, p0, rows, offs);
                    let t = TapRows { x: self.flipped, zp_row, offsets: offs, c: g.c };
                    let dst = &mut out[(p0 - run.start) * oc..][..rows * oc];
                    tap_product(*isa, &t, rows, &w[..panels * taps * g.c * NR], &rq, dst, oc);
                }
            }
            Weights::Quads { k4, panels, ref w, ref bias, zp, inputs, .. } => {
                // Rows of `k4` unsigned activations (`x + 128`: the sign bit flipped) per
                // group; the padding past a group's inputs meets zero weights.
                let lda = groups * k4;
                let mut a = vec![0u8; MR * lda];
                let mut at = Pixel::of(g, run.start);
                let block = balanced_rows(run.len());
                for p0 in run.clone().step_by(block) {
                    let rows = (run.end - p0).min(block);
                    for (r, row) in a.chunks_exact_mut(lda).take(rows).enumerate() {
                        quad_row(g, self.x, zp, inputs, at, p0 + r, k4, row);
                        at.advance(g);
                    }
                    let dst = &mut out[(p0 - run.start) * oc..][..rows * oc];
                    for grp in 0..groups {
                        let wg = &w[grp * panels * k4 * NR..][..panels * k4 * NR];
                        let ch = grp * og..grp * og + og;
                        let rq =
                            Requant { bias: &bias[ch.clone()], scales: &scales[ch.clone()], o };
                        let (a, d) = (&a[grp * k4..], &mut dst[ch.start..]);
                        quad_product(*isa, a, lda, rows, k4, wg, &rq, d, oc);
                    }
                }
            }
            Weights::Pairs { kp, panels, ref w, ref bias, zp } => {
                let lda = groups * kp;
                let mut a = vec![0i16; MR * lda];
                let mut acc = [0i32; MR * NR];
                for p0 in run.clone().step_by(MR) {
                    let rows = (run.end - p0).min(MR);
                    for (r, row) in a.chunks_exact_mut(lda).take(rows).enumerate() {
                        gather(g, self.x, |v| i16::from(v) - zp, 0, p0 + r, kp, row);
                    }
                    let dst = &mut out[(p0 - run.start) * oc..][..rows * oc];
                    for grp in 0..groups {
                        for p in 0..panels {
                            let wp = &w[(grp * panels + p) * kp * NR..][..kp * NR];
                            panel_product(*isa, &a[grp * kp..], lda, rows, wp, kp, &mut acc);
                            let ch = grp * og + p * NR..grp * og + (p * NR + NR).min(og);
                            requantize_rows(dst, oc, &mut acc, ch, bias.as_deref(), scales, o);
                        }
                    }
                }
            }
            Weights::Depthwise { .. } => unreachable!("depthwise runs DwRun"),
        }
    }
}

/// Every output pixel's inputs for [`ChannelRun`].
enum BlockInputs<'a> {
    /// Each pixel's `k4` unsigned activations, gathered.
    Rows(&'a [u8]),
    /// Each block's window offsets (`[tap][row]`, see [`TapRows`]), block after block.
    Taps { x: &'a [u8], zp_row: &'a [u8], offsets: &'a [usize] },
}

/// The tasks of [`PackedQs8Conv::run_channels`], each over a run of output channels (whole
/// panels) of every pixel.
struct ChannelRun<'a> {
    c: &'a PackedQs8Conv,
    inputs: BlockInputs<'a>,
    pixels: usize,
    /// The pixels of a block (the last may have fewer).
    block: usize,
    k4: usize,
    w: &'a [i8],
    bias: &'a [i32],
}

impl IsaTask for ChannelRun<'_> {
    type Out = [i8];

    /// Channels `cols` of every pixel into `out` (pixel-major, `cols.len()` a pixel), the
    /// pixels in blocks: each panel's weights (two panels' for windows read in place) pass
    /// under every block in turn (read once) when the blocks read windows in place or
    /// gathered rows of more than [`PANEL_OUTER_ROWS`] bytes; smaller rows go a block at a
    /// time through every panel of the run.
    #[inline(always)]
    fn run(&self, cols: Range<usize>, out: &mut [i8]) {
        let PackedQs8Conv { g, isa, scales, o, .. } = self.c;
        let (k4, width, block) = (self.k4, cols.len(), self.block);
        let blocks = self.pixels.div_ceil(block);
        // Channels `ch` (whole panels from a panel's start) of block `b`.
        let product = |ch: Range<usize>, b: usize, out: &mut [i8]| {
            let p0 = b * block;
            let rows = (self.pixels - p0).min(block);
            let wp = &self.w[(ch.start / NR) * k4 * NR..];
            let rq = Requant { bias: &self.bias[ch.clone()], scales: &scales[ch.clone()], o };
            let d = &mut out[p0 * width + ch.start - cols.start..];
            match self.inputs {
                BlockInputs::Rows(all) => {
                    let a = &all[p0 * k4..][..rows * k4];
                    quad_product(*isa, a, k4, rows, k4, wp, &rq, d, width);
                }
                BlockInputs::Taps { x, zp_row, offsets } => {
                    let taps = g.kh * g.kw;
                    let offsets = &offsets[p0 * taps..][..rows * taps];
                    let t = TapRows { x, zp_row, offsets, c: g.c };
                    tap_product(*isa, &t, rows, wp, &rq, d, width);
                }
            }
        };
        // The panels that pass together under the blocks (windows read in place take two).
        let panel_outer = match self.inputs {
            BlockInputs::Rows(all) => (all.len() > PANEL_OUTER_ROWS).then_some(NR),
            BlockInputs::Taps { .. } => Some(2 * NR),
        };
        if let Some(step) = panel_outer {
            for c0 in cols.clone().step_by(step) {
                for b in 0..blocks {
                    product(c0..(c0 + step).min(cols.end), b, out);
                }
            }
        } else {
            for b in 0..blocks {
                product(cols.clone(), b, out);
            }
        }
    }
}

/// Fills `offsets` (`[tap][row]`, `rows` a tap) with where each tap of output pixels `p0..p0
/// + rows` starts in the input, or [`PADDED`] for a tap outside it.
fn window_offsets(g: &ConvGeometry, p0: usize, rows: usize, offsets: &mut [usize]) {
    let mut at = Pixel::of(g, p0);
    for r in 0..rows {
        let Pixel { b, oy, ox } = at;
        for ty in 0..g.kh {
            let iy = ConvGeometry::src(oy, ty, g.stride[0], g.dilation[0], g.pad_top, g.h);
            for tx in 0..g.kw {
                let ix = ConvGeometry::src(ox, tx, g.stride[1], g.dilation[1], g.pad_left, g.w);
                offsets[(ty * g.kw + tx) * rows + r] = match (iy, ix) {
                    (Some(iy), Some(ix)) => ((b * g.h + iy) * g.w + ix) * g.c,
                    _ => PADDED,
                };
            }
        }
        at.advance(g);
    }
}

/// The rows of the blocks `rows` output pixels are multiplied in: as even as [`MR`] allows
/// (49 pixels: seven blocks of 7, not six of 8 and one of 1, whose one accumulator chain
/// takes most of a whole block's time).
fn balanced_rows(rows: usize) -> usize {
    rows.div_ceil(rows.div_ceil(MR).max(1)).max(1)
}

/// Fills `row` with output pixel `p`'s (`pixel`'s) `k4` unsigned activations for the quad
/// loops (`x + 128`: the sign bit flipped): the input row itself for a direct (1x1)
/// convolution, else the window, padded taps at `zp`. The padding past the window meets zero
/// weights.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn quad_row(
    g: &ConvGeometry,
    x: &[i8],
    zp: i8,
    inputs: QuadInputs,
    pixel: Pixel,
    p: usize,
    k4: usize,
    row: &mut [u8],
) {
    let flip = |v: i8| (v as u8) ^ 0x80;
    if inputs == QuadInputs::Direct {
        flip_copy(&mut row[..g.c], &x[p * g.c..][..g.c]);
    } else if let Some(base) = inner_window(g, pixel) {
        // Whole window rows are contiguous: `kw * c` values per row.
        let (span, step) = (g.kw * g.c, g.dilation[0] * g.w * g.c);
        for ty in 0..g.kh {
            flip_copy(&mut row[ty * span..][..span], &x[base + ty * step..][..span]);
        }
    } else {
        gather(g, x, flip, flip(zp), p, k4, row);
    }
}

/// Requantizes channels `ch` of each output pixel of `dst` (rows of `oc` values) from the
/// panel sums `acc` (rows of [`NR`]).
#[inline(always)]
fn requantize_rows(
    dst: &mut [i8],
    oc: usize,
    acc: &mut [i32; MR * NR],
    ch: Range<usize>,
    bias: Option<&[i32]>,
    scales: &[f32],
    o: &Qs8Out,
) {
    let (scales, bias) = (&scales[ch.clone()], bias.map(|b| &b[ch.clone()]));
    for (d, sums) in dst.chunks_exact_mut(oc).zip(acc.chunks_exact_mut(NR)) {
        requantize(&mut d[ch.clone()], &mut sums[..ch.len()], bias, scales, o);
    }
}

/// `dst[j] = qs8_requantize(bias[j] + sums[j], scales[j])` (the bias added to `sums` in place,
/// wrapping), in loops the compiler vectorizes: the same operations in the same order per
/// element as the scalar kernel.
#[inline(always)]
fn requantize(dst: &mut [i8], sums: &mut [i32], bias: Option<&[i32]>, scales: &[f32], o: &Qs8Out) {
    if let Some(b) = bias {
        for (s, &b) in sums.iter_mut().zip(b) {
            *s = b.wrapping_add(*s);
        }
    }
    for ((d, &s), &sc) in dst.iter_mut().zip(sums.iter()).zip(scales) {
        *d = qs8_requantize(s, sc, o);
    }
}

/// An output pixel's batch, row and column, stepped along a run of pixels without dividing.
#[derive(Clone, Copy)]
struct Pixel {
    b: usize,
    oy: usize,
    ox: usize,
}

impl Pixel {
    /// Output pixel `p` (row-major over `[n, oh, ow]`).
    fn of(g: &ConvGeometry, p: usize) -> Pixel {
        Pixel { b: p / (g.oh * g.ow), oy: p / g.ow % g.oh, ox: p % g.ow }
    }

    /// The next pixel.
    #[inline(always)]
    fn advance(&mut self, g: &ConvGeometry) {
        self.ox += 1;
        if self.ox == g.ow {
            self.ox = 0;
            self.oy += 1;
            if self.oy == g.oh {
                self.oy = 0;
                self.b += 1;
            }
        }
    }
}

/// Where an output pixel's window starts in the input, when the window lies inside it and
/// each of its rows is contiguous (one group, column dilation 1).
#[inline(always)]
fn inner_window(g: &ConvGeometry, Pixel { b, oy, ox }: Pixel) -> Option<usize> {
    if g.groups != 1 || g.dilation[1] != 1 {
        return None;
    }
    let iy = (oy * g.stride[0]).checked_sub(g.pad_top)?;
    let ix = (ox * g.stride[1]).checked_sub(g.pad_left)?;
    let inside = iy + (g.kh - 1) * g.dilation[0] < g.h && ix + g.kw <= g.w;
    inside.then_some(((b * g.h + iy) * g.w + ix) * g.c)
}

/// `dst[i] = src[i] + 128` (the sign bit flipped) for slices of one length: a short window
/// row (`kw * c`, 9 bytes for a 3x3 convolution of an RGB image) as two overlapping words
/// flipped by one integer XOR each (the byte loop compiled to a byte at a time: 74% of a
/// first convolution's time), a long one by the compiler's vector loop.
#[inline(always)]
fn flip_copy(dst: &mut [u8], src: &[i8]) {
    /// Flips the sign bits of the 8 bytes of `src` at `at` into `dst`.
    #[inline(always)]
    fn word8(dst: &mut [u8], src: &[i8], at: usize) {
        let s: &[i8; 8] = src[at..].first_chunk().expect("a whole word");
        let v = u64::from_le_bytes(s.map(|b| b as u8)) ^ 0x8080_8080_8080_8080;
        dst[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
    let n = src.len().min(dst.len());
    match n {
        8..16 => {
            word8(dst, src, 0);
            word8(dst, src, n - 8);
        }
        _ => {
            for (d, &v) in dst.iter_mut().zip(src) {
                *d = v as u8 ^ 0x80;
            }
        }
    }
}

/// Gathers output pixel `p`'s window into `dst` (`groups` rows of `kp`, each `[tap][cg]`):
/// `map(x)` inside the input, `pad` for padded taps and the tail.
#[inline(always)]
fn gather<T: Copy>(
    g: &ConvGeometry,
    x: &[i8],
    map: impl Fn(i8) -> T,
    pad: T,
    p: usize,
    kp: usize,
    dst: &mut [T],
) {
    let (cg, groups) = (g.c / g.groups, g.groups);
    let (b, oy, ox) = (p / (g.oh * g.ow), p / g.ow % g.oh, p % g.ow);
    dst.fill(pad);
    for ty in 0..g.kh {
        let Some(iy) = ConvGeometry::src(oy, ty, g.stride[0], g.dilation[0], g.pad_top, g.h) else {
            continue;
        };
        for tx in 0..g.kw {
            let Some(ix) = ConvGeometry::src(ox, tx, g.stride[1], g.dilation[1], g.pad_left, g.w)
            else {
                continue;
            };
            let base = ((b * g.h + iy) * g.w + ix) * g.c;
            let tap = ty * g.kw + tx;
            for grp in 0..groups {
                let s = &x[base + grp * cg..][..cg];
                let d = &mut dst[grp * kp + tap * cg..][..cg];
                for (d, &v) in d.iter_mut().zip(s) {
                    *d = map(v);
                }
            }
        }
    }
}

/// The tasks of a depthwise convolution, each over its run of output pixels.
struct DwRun<'a> {
    c: &'a PackedQs8Conv,
    x: &'a [i8],
    zp: i16,
    /// The weights `[kh, kw, o]` widened.
    w: &'a [i16],
    bias: Option<&'a [i32]>,
}

impl IsaTask for DwRun<'_> {
    type Out = [i8];

    /// Output pixels `run` into `out` (`run.len() * o`): per pixel, the taps inside the input
    /// found once, then per block of [`DW_BLOCK`] channels every tap summed in registers.
    #[inline(always)]
    fn run(&self, run: Range<usize>, out: &mut [i8]) {
        let PackedQs8Conv { g, scales, o, .. } = self.c;
        let (c, oc) = (g.c, g.o);
        let dm = oc / c;
        let mut acc = vec![0i32; oc];
        // (input offset, weight offset) of each tap inside the input.
        let mut taps: Vec<(usize, usize)> = Vec::with_capacity(g.kh * g.kw);
        for (p, dst) in run.zip(out.chunks_exact_mut(oc)) {
            let (b, oy, ox) = (p / (g.oh * g.ow), p / g.ow % g.oh, p % g.ow);
            taps.clear();
            for ty in 0..g.kh {
                let Some(iy) =
                    ConvGeometry::src(oy, ty, g.stride[0], g.dilation[0], g.pad_top, g.h)
                else {
                    continue;
                };
                for tx in 0..g.kw {
                    if let Some(ix) =
                        ConvGeometry::src(ox, tx, g.stride[1], g.dilation[1], g.pad_left, g.w)
                    {
                        taps.push((((b * g.h + iy) * g.w + ix) * c, (ty * g.kw + tx) * oc));
                    }
                }
            }
            if dm == 1 {
                for (blk, a) in acc.chunks_mut(DW_BLOCK).enumerate() {
                    let c0 = blk * DW_BLOCK;
                    match <&mut [i32; DW_BLOCK]>::try_from(&mut *a) {
                        Ok(a) => *a = self.block::<DW_BLOCK>(&taps, c0),
                        Err(_) => {
                            a.fill(0);
                            for &(xo, wo) in &taps {
                                let (xr, wr) = (&self.x[xo + c0..], &self.w[wo + c0..]);
                                for ((s, &xv), &wv) in a.iter_mut().zip(xr).zip(wr) {
                                    *s = s.wrapping_add(((xv as i16 - self.zp) * wv) as i32);
                                }
                            }
                        }
                    }
                }
            } else {
                acc.fill(0);
                for &(xo, wo) in &taps {
                    let (xr, wr) = (&self.x[xo..xo + c], &self.w[wo..wo + oc]);
                    for ((ac, &xv), wc) in acc.chunks_exact_mut(dm).zip(xr).zip(wr.chunks_exact(dm))
                    {
                        let xv = xv as i16 - self.zp;
                        for (a, &wv) in ac.iter_mut().zip(wc) {
                            *a = a.wrapping_add((xv * wv) as i32);
                        }
                    }
                }
            }
            requantize(dst, &mut acc, self.bias, scales, o);
        }
    }
}

/// Channels a depthwise block sums in registers.
const DW_BLOCK: usize = 32;

impl DwRun<'_> {
    /// The sums of channels `c0..c0 + B` over `taps` (multiplier 1): `(x - zp) * w` is exact in
    /// `i16` (`[-255, 255] x [-128, 127]`), widened to `i32` for the sum.
    #[inline(always)]
    fn block<const B: usize>(&self, taps: &[(usize, usize)], c0: usize) -> [i32; B] {
        let mut a = [0i32; B];
        for &(xo, wo) in taps {
            let xr: &[i8; B] = self.x[xo + c0..].first_chunk().expect("inside the input");
            let wr: &[i16; B] = self.w[wo + c0..].first_chunk().expect("inside the weights");
            for ((s, &xv), &wv) in a.iter_mut().zip(xr).zip(wr) {
                *s = s.wrapping_add(((xv as i16 - self.zp) * wv) as i32);
            }
        }
        a
    }
}

/// The tasks of a depthwise convolution of multiplier 1 on AVX-512, each over its run of
/// output pixels: per pixel, one pointer per tap (into the input, or at `zp_row` for a padded
/// tap; an interior pixel's taps are fixed offsets from its window's corner), then
/// [`dw_avx512`].
#[cfg(target_arch = "x86_64")]
struct DwVec<'a> {
    c: &'a PackedQs8Conv,
    x: &'a [i8],
    pairs: &'a [i16],
    folded: &'a [i32],
    zp_row: &'a [i8],
}

#[cfg(target_arch = "x86_64")]
impl IsaTask for DwVec<'_> {
    type Out = [i8];

    #[inline(always)]
    fn run(&self, run: Range<usize>, out: &mut [i8]) {
        let g = &self.c.g;
        let c = g.c;
        let [s0, s1] = g.stride;
        let [d0, d1] = g.dilation;
        // Each tap's offset from its window's top left input pixel.
        let mut rel = Vec::with_capacity(g.kh * g.kw);
        for ty in 0..g.kh {
            for tx in 0..g.kw {
                rel.push((ty * d0 * g.w + tx * d1) * c);
            }
        }
        let span = [(g.kh - 1) * d0, (g.kw - 1) * d1];
        // An odd tap count gets a last tap at the zero point row (its weights are zero).
        let mut ptrs = vec![self.zp_row.as_ptr(); rel.len().next_multiple_of(2)];
        let layer =
            DwLayer { w: self.pairs, bias: self.folded, scales: &self.c.scales, o: &self.c.o };
        let pixel: DwPixelFn = match (c <= 16, self.c.isa == Isa::Vnni) {
            (true, true) => dw16_vnni,
            (true, false) => dw16_avx512,
            (false, true) => dw_vnni,
            (false, false) => dw_avx512,
        };
        let mut at = Pixel::of(g, run.start);
        for dst in out.chunks_exact_mut(c).take(run.len()) {
            let Pixel { b, oy, ox } = at;
            at.advance(g);
            let corner = (oy * s0).checked_sub(g.pad_top).zip((ox * s1).checked_sub(g.pad_left));
            match corner {
                Some((iy, ix)) if iy + span[0] < g.h && ix + span[1] < g.w => {
                    let base = ((b * g.h + iy) * g.w + ix) * c;
                    for (pt, &r) in ptrs.iter_mut().zip(&rel) {
                        *pt = self.x[base + r..][..c].as_ptr();
                    }
                }
                _ => {
                    for (t, pt) in ptrs.iter_mut().enumerate().take(rel.len()) {
                        let (ty, tx) = (t / g.kw, t % g.kw);
                        let iy = ConvGeometry::src(oy, ty, s0, d0, g.pad_top, g.h);
                        let ix = ConvGeometry::src(ox, tx, s1, d1, g.pad_left, g.w);
                        *pt = match iy.zip(ix) {
                            Some((iy, ix)) => {
                                self.x[((b * g.h + iy) * g.w + ix) * c..][..c].as_ptr()
                            }
                            None => self.zp_row.as_ptr(),
                        };
                    }
                }
            }
            // SAFETY: `Isa::Vnni` is only chosen when the CPU has AVX-512F, AVX-512BW (with
            // VL) and AVX-512 VNNI, `Isa::Avx512` when it has the first two; each pointer
            // starts `c` readable values (sliced just above, or the zero point row of `c`),
            // there is an even number of them, the weights hold the pairs of `ptrs.len()` taps
            // for `c` channels, the biases and scales `c` (and `dw16_*` take at most 16).
            unsafe { pixel(&ptrs, &layer, dst) };
        }
    }
}

/// What a depthwise layer's AVX-512 pixels share: the tap-pair weights
/// ([`pack_tap_pairs`]), the biases (the zero point's share folded in), the requantization.
#[cfg(target_arch = "x86_64")]
struct DwLayer<'a> {
    w: &'a [i16],
    bias: &'a [i32],
    scales: &'a [f32],
    o: &'a Qs8Out,
}

/// One output pixel of a depthwise layer from its taps' pointers.
#[cfg(target_arch = "x86_64")]
type DwPixelFn = unsafe fn(&[*const i8], &DwLayer<'_>, &mut [i8]);

/// Depthwise weights `[kh * kw, c]` laid out for [`dw_avx512`]: per block of 32 channels, per
/// pair of taps, two halves of 16 lanes, each lane the pair `(w[2q][ch], w[2q + 1][ch])` of
/// the channel `ch` that `unpacklo_epi16` (first half) or `unpackhi_epi16` (second) of two taps'
/// 32 channels puts there: lane `j` of half `h` is channel `(j / 4) * 8 + h * 4 + j % 4`.
/// Missing taps and channels are zero.
fn pack_tap_pairs(w: &[i16], taps: usize, c: usize) -> Vec<i16> {
    let pairs = taps.div_ceil(2);
    let blocks = c.div_ceil(32);
    let mut out = vec![0i16; blocks * pairs * 2 * 16 * 2];
    for (i, v) in out.iter_mut().enumerate() {
        let (e, j, h) = (i % 2, i / 2 % 16, i / 32 % 2);
        let (q, b) = (i / 64 % pairs, i / (64 * pairs));
        let (t, ch) = (2 * q + e, 32 * b + (j / 4) * 8 + h * 4 + j % 4);
        if t < taps && ch < c {
            *v = w[t * c + ch];
        }
    }
    out
}

/// Natural channel order from the two accumulators of [`pack_tap_pairs`]'s halves: for
/// channels `16 * k + i`, the lane of the first half (below 16) or of the second (16 + lane).
#[cfg(target_arch = "x86_64")]
const fn unpermute(k: usize) -> [i32; 16] {
    let mut idx = [0i32; 16];
    let mut i = 0;
    while i < 16 {
        let ch = 16 * k + i;
        let (grp, within) = (ch / 8, ch % 8);
        idx[i] = if within < 4 { grp * 4 + within } else { 16 + grp * 4 + within - 4 } as i32;
        i += 1;
    }
    idx
}

/// [`dw_pixel`] with AVX-512 VNNI `vpdpwssd`.
///
/// # Safety
/// As [`dw_pixel`], and the CPU has AVX-512 VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dw_vnni(taps: &[*const i8], l: &DwLayer<'_>, dst: &mut [i8]) {
    use std::arch::x86_64::_mm512_dpwssd_epi32;
    // SAFETY: the caller's contract.
    unsafe { dw_pixel(taps, l, dst, |c, a, b| _mm512_dpwssd_epi32(c, a, b)) }
}

/// [`dw_pixel`] with AVX-512BW `vpmaddwd` and an add.
///
/// # Safety
/// As [`dw_pixel`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn dw_avx512(taps: &[*const i8], l: &DwLayer<'_>, dst: &mut [i8]) {
    use std::arch::x86_64::{_mm512_add_epi32, _mm512_madd_epi16};
    // SAFETY: the caller's contract.
    unsafe { dw_pixel(taps, l, dst, |c, a, b| _mm512_add_epi32(c, _mm512_madd_epi16(a, b))) }
}

/// One output pixel of a depthwise convolution of multiplier 1 in AVX-512 registers: per block
/// of 32 channels, per pair of taps, the two taps' values (`i16`) interleaved and multiplied by
/// [`pack_tap_pairs`]'s weights, two products summed into each `i32` lane by `madd` (exact:
/// `2 * 128 * 128` fits), the lanes put back in channel order, then the bias (the zero point's
/// share folded in) added and the sums requantized as [`requantize`] does; the last block
/// masked.
///
/// # Safety
/// The CPU has AVX-512F and AVX-512BW (and what `madd` uses); `taps` is an even number of
/// pointers each at `dst.len()` readable values; `w` holds the pairs of `taps.len()` taps for
/// `dst.len()` channels, `bias` and `scales` `dst.len()` values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dw_pixel(
    taps: &[*const i8],
    l: &DwLayer<'_>,
    dst: &mut [i8],
    madd: impl Fn(
        std::arch::x86_64::__m512i,
        std::arch::x86_64::__m512i,
        std::arch::x86_64::__m512i,
    ) -> std::arch::x86_64::__m512i,
) {
    use std::arch::x86_64::*;
    let c = dst.len();
    let pairs = taps.len() / 2;
    // SAFETY (whole body): the CPU has the features the callers enable; every load and store
    // is inside the buffers by the caller's contract (masked to the block's channels).
    unsafe {
        let order = [unpermute(0), unpermute(1)].map(|i| _mm512_loadu_si512(i.as_ptr().cast()));
        for (blk, c0) in (0..c).step_by(32).enumerate() {
            let n = (c - c0).min(32);
            let m32 = (u64::MAX >> (64 - n)) as u32;
            let (mut a0, mut a1) = (_mm512_setzero_si512(), _mm512_setzero_si512());
            let mut wp = l.w.as_ptr().wrapping_add(blk * pairs * 64);
            for pair in taps.chunks_exact(2) {
                // A whole block takes a plain load, which the widening folds in (masked loads
                // made mobilenet_v2_q8's depthwise layers 8-18% slower on Zen 4).
                let load = |x: *const i8| match n {
                    32 => _mm512_cvtepi8_epi16(_mm256_loadu_si256(x.wrapping_add(c0).cast())),
                    _ => {
                        let v = _mm512_maskz_loadu_epi8(u64::from(m32), x.wrapping_add(c0));
                        _mm512_cvtepi8_epi16(_mm512_castsi512_si256(v))
                    }
                };
                let (x0, x1) = (load(pair[0]), load(pair[1]));
                let w0 = _mm512_loadu_si512(wp.cast());
                let w1 = _mm512_loadu_si512(wp.wrapping_add(32).cast());
                a0 = madd(a0, _mm512_unpacklo_epi16(x0, x1), w0);
                a1 = madd(a1, _mm512_unpackhi_epi16(x0, x1), w1);
                wp = wp.wrapping_add(64);
            }
            for (h, idx) in order.iter().enumerate().take(n.div_ceil(16)) {
                let acc = _mm512_permutex2var_epi32(a0, *idx, a1);
                let ch = c0 + 16 * h;
                let mask = (m32 >> (16 * h)) as u16;
                let b = _mm512_maskz_loadu_epi32(mask, l.bias.as_ptr().wrapping_add(ch));
                let s = _mm512_maskz_loadu_ps(mask, l.scales.as_ptr().wrapping_add(ch));
                let r = requantize16(_mm512_add_epi32(b, acc), s, l.o);
                _mm512_mask_cvtepi32_storeu_epi8(dst.as_mut_ptr().wrapping_add(ch).cast(), mask, r);
            }
        }
    }
}

/// [`dw16_pixel`] with `vpdpwssd`.
///
/// # Safety
/// As [`dw16_pixel`], and the CPU has AVX-512 VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2")]
unsafe fn dw16_vnni(taps: &[*const i8], l: &DwLayer<'_>, dst: &mut [i8]) {
    use std::arch::x86_64::_mm256_dpwssd_epi32;
    // SAFETY: the caller's contract.
    unsafe { dw16_pixel(taps, l, dst, |c, a, b| _mm256_dpwssd_epi32(c, a, b)) }
}

/// [`dw16_pixel`] with `vpmaddwd` and an add.
///
/// # Safety
/// As [`dw16_pixel`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
unsafe fn dw16_avx512(taps: &[*const i8], l: &DwLayer<'_>, dst: &mut [i8]) {
    use std::arch::x86_64::{_mm256_add_epi32, _mm256_madd_epi16};
    // SAFETY: the caller's contract.
    unsafe { dw16_pixel(taps, l, dst, |c, a, b| _mm256_add_epi32(c, _mm256_madd_epi16(a, b))) }
}

/// [`dw_pixel`] for at most 16 channels in 256-bit vectors (AVX-512VL): half the work of a
/// 32-channel block, on cores that split 512-bit operations in two (mobilenet_v3_large's
/// first depthwise layer, 16 channels at 112x112). The weights are [`pack_tap_pairs`]'s:
/// lanes 0-7 of each half hold channels 0-3 and 8-11 (first half), 4-7 and 12-15 (second),
/// which is what 256-bit `unpacklo` / `unpackhi` of two taps give. Per pair of taps, 16
/// channels of each widened to `i16`, interleaved and multiplied into two accumulators of 8
/// lanes, put back in channel order in one 512-bit vector, the bias added and the sums
/// requantized.
///
/// # Safety
/// As [`dw_pixel`] with `dst.len() <= 16`, and the CPU has AVX-512VL.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dw16_pixel(
    taps: &[*const i8],
    l: &DwLayer<'_>,
    dst: &mut [i8],
    madd: impl Fn(
        std::arch::x86_64::__m256i,
        std::arch::x86_64::__m256i,
        std::arch::x86_64::__m256i,
    ) -> std::arch::x86_64::__m256i,
) {
    use std::arch::x86_64::*;
    let mask = ((1u32 << dst.len()) - 1) as u16;
    // SAFETY (whole body): the CPU has the features the callers enable; every load and store
    // is inside the buffers by the caller's contract (masked to the live channels; the
    // weights of a pair of taps are 64 values, of which the first 16 of each half are read).
    unsafe {
        let (mut a0, mut a1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let mut wp = l.w.as_ptr();
        for pair in taps.chunks_exact(2) {
            let load = |x: *const i8| match mask {
                u16::MAX => _mm256_cvtepi8_epi16(_mm_loadu_si128(x.cast())),
                _ => _mm256_cvtepi8_epi16(_mm_maskz_loadu_epi8(mask, x)),
            };
            let (x0, x1) = (load(pair[0]), load(pair[1]));
            let w0 = _mm256_loadu_si256(wp.cast());
            let w1 = _mm256_loadu_si256(wp.wrapping_add(32).cast());
            a0 = madd(a0, _mm256_unpacklo_epi16(x0, x1), w0);
            a1 = madd(a1, _mm256_unpackhi_epi16(x0, x1), w1);
            wp = wp.wrapping_add(64);
        }
        // Lanes 0-7: channels 0-3, 8-11; lanes 8-15: channels 4-7, 12-15.
        let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a0), a1);
        let order = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
        let acc = _mm512_permutexvar_epi32(order, both);
        let b = _mm512_maskz_loadu_epi32(mask, l.bias.as_ptr());
        let s = _mm512_maskz_loadu_ps(mask, l.scales.as_ptr());
        let r = requantize16(_mm512_add_epi32(b, acc), s, l.o);
        _mm512_mask_cvtepi32_storeu_epi8(dst.as_mut_ptr().cast(), mask, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer of one image of `h`x`h` pixels and `c` inputs, `o` outputs, `k`x`k` taps of
    /// stride `s`.
    fn square(h: usize, c: usize, o: usize, k: usize, s: usize) -> ConvGeometry {
        ConvGeometry {
            n: 1,
            h,
            w: h,
            c,
            kh: k,
            kw: k,
            oh: (h - 1) / s + 1,
            ow: (h - 1) / s + 1,
            o,
            stride: [s, s],
            dilation: [1, 1],
            pad_top: k / 2,
            pad_left: k / 2,
            groups: 1,
            depthwise: false,
        }
    }

    /// The layers `xnn_quant`'s split test counts on take the loops and the channel split it
    /// names (on a CPU with the quad loops): 3x3 windows read in place, 1x1 layers' rows
    /// copied, gathered or (over 32 KB of rows, in the split) read in place.
    #[test]
    fn split_test_layers_take_their_loops() {
        if super::super::xnn_qgemm::best_isa() != Isa::Vnni {
            println!("SKIPPED: no AVX-512 VNNI");
            return;
        }
        let o = Qs8Out { zero_point: 0, qmin: -128, qmax: 127 };
        for (h, c, oc, k, s, algorithm, in_place) in [
            (7, 512, 120, 3, 1, "quads-taps", true),
            (7, 640, 820, 1, 1, "quads-direct", false),
            (7, 1024, 520, 1, 1, "quads-direct", true),
            (13, 1024, 520, 1, 2, "quads", true),
        ] {
            let g = square(h, c, oc, k, s);
            let w = vec![1i8; g.weight_len().unwrap()];
            let scales = vec![1e-3f32; oc];
            let f = Qs8Filter { w: &w, bias: None, scales: &scales, o: &o };
            let conv = PackedQs8Conv::new_isa(Isa::Vnni, g, -5, &f).unwrap();
            assert_eq!(conv.algorithm(), algorithm);
            assert!(conv.splits_channels(49), "{c} -> {oc}, {k}x{k}");
            assert_eq!(conv.channels_in_place(49), in_place, "{c} -> {oc}, {k}x{k}");
        }
    }
}
