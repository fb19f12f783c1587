//! Winograd F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural
//! Networks", 2016) for channels-last 3x3 convolutions of stride 1 and one group: each 2x2
//! block of output pixels (a "tile") comes from the 4x4 input pixels under it with 16 products
//! per input/output channel pair instead of 36.
//!
//! Per block of whole tile rows: the input transform `V = Bt d B` of every tile, vectorized
//! over the channels (contiguous in NHWC), into 16 matrices `V[xi]` (tiles x Cin); 16 GEMMs
//! `M[xi] = V[xi] * U[xi]` with `U = G g Gt` transformed and packed once at load (Cin x Cout);
//! the output transform `Y = At M A` with the bias, the residual and the activation on the way
//! out. A block's V and M stay in a core's L2 cache.
//!
//! Numerics: the transforms' coefficients are 0, +-1 and +-1/2, exact in binary, but each
//! output sums `16 * Cin` products of transformed values instead of `9 * Cin` products of the
//! original ones, so it rounds differently from the direct convolution (and from PyTorch):
//! the test bounds the difference by `1e-5` of the sum of the products' magnitudes, and on
//! resnet18 the outputs stay within the 1e-4 of ExecuTorch that every fixture is held to.
//! Every output is computed by the same code whatever the split over threads: the same bits
//! for any thread count.
#![allow(unsafe_code)]

use super::geometry::{mul, Conv2dGeometry};
use super::scratch::{window, PartScratch};
use crate::compute::cpu::has_avx512;
use crate::compute::sgemm::{
    activate_tile, gemm_packed_b, Activation, Epilogue, GemmError, MatRef, PackedB,
};
use crate::compute::threads::{split, Threads};

/// Positions of a 4x4 input tile: one GEMM each.
const XI: usize = 16;

/// Bytes of one block's transformed input and products (V and M): within a core's L2 cache.
const BLOCK_BYTES: usize = 512 << 10;

/// Fewest tiles per block: two register-tile row panels (fewer, and the GEMMs run on short
/// panels, each pass over `U` doing little work).
const MIN_BLOCK_TILES: usize = 28;

/// Fewest tiles (2x2 output blocks) per image for which a convolution runs as Winograd
/// (resnet18 at 96x96: its 6x6 outputs of 256 channels, 9 tiles, ran 20% faster than the
/// direct convolution).
const MIN_TILES: usize = 9;

/// Most eighths of the tiles' outputs that may lie outside the image (odd sizes): those are
/// computed and dropped (resnet18 at 224x224: 7x7 outputs of 512 channels, 16 tiles of which
/// 15 of 64 outputs fall outside, ran no faster than the direct convolution).
const MAX_WASTE_EIGHTHS: usize = 1;

/// Fewest input and output channels: below, the transforms cost more than the products save.
const MIN_CHANNELS: usize = 16;

/// A 3x3 stride-1 convolution prepared for Winograd F(2x2, 3x3), channels-last in and out.
#[derive(Debug)]
pub(super) struct Winograd {
    /// `U[xi]`, `Cin x Cout`, packed as GEMM right operands.
    u: Vec<PackedB>,
    cin: usize,
    cout: usize,
    in_h: usize,
    in_w: usize,
    pad: [usize; 2],
    oh: usize,
    ow: usize,
    tiles_h: usize,
    tiles_w: usize,
    /// Tile rows per block (fewer when the blocks would not go round the threads).
    block_rows: usize,
    /// `cin` zeros: the padding's pixels.
    zeros: Vec<f32>,
}

/// `(tiles_h, tiles_w)` of an `oh x ow` output.
fn tiles(oh: usize, ow: usize) -> (usize, usize) {
    (oh.div_ceil(2), ow.div_ceil(2))
}

impl Winograd {
    /// Bytes of transformed weights (and padding zeros) it holds.
    pub(super) fn heap_bytes(&self) -> usize {
        self.u.iter().map(PackedB::heap_bytes).sum::<usize>() + self.zeros.capacity() * 4
    }

    /// Whether a convolution of geometry `g` (output `oh x ow`), channels-last in and out,
    /// runs as Winograd: 3x3, stride 1, no dilation, one group, at least [`MIN_CHANNELS`]
    /// channels in and out, [`MIN_TILES`] tiles wasting at most [`MAX_WASTE_EIGHTHS`] of
    /// their outputs, on a CPU with AVX-512F (the transforms
    /// are written for it; elsewhere the direct convolution runs).
    pub(super) fn supports(g: &Conv2dGeometry, oh: usize, ow: usize) -> bool {
        let (th, tw) = tiles(oh, ow);
        (g.kh, g.kw) == (3, 3)
            && g.stride == [1, 1]
            && g.dilation == [1, 1]
            && g.groups == 1
            && g.in_channels >= MIN_CHANNELS
            && g.out_channels >= MIN_CHANNELS
            && th.checked_mul(tw).and_then(|t| t.checked_mul(4)).is_some_and(|computed| {
                // Outputs computed: 4 per tile, of which oh * ow inside the image.
                let waste = computed - oh * ow;
                computed >= 4 * MIN_TILES
                    && waste.saturating_mul(8) <= computed.saturating_mul(MAX_WASTE_EIGHTHS)
            })
            && has_avx512()
    }

    /// Transforms and packs `weight` (`[Cout, Cin, 3, 3]`, PyTorch layout; its length checked
    /// by the caller). An error when the geometry is not [supported](Winograd::supports).
    pub(super) fn new(
        g: &Conv2dGeometry,
        oh: usize,
        ow: usize,
        weight: &[f32],
    ) -> Result<Winograd, GemmError> {
        if !Self::supports(g, oh, ow) {
            return Err(GemmError::Invalid("conv2d: not a Winograd convolution"));
        }
        let (cin, cout) = (g.in_channels, g.out_channels);
        let plane = mul(cin, cout)?;
        crate::compute::sgemm::need("conv2d weight", mul(plane, 9)?, weight.len())?;
        // One packed `Cin x Cout` operand per point `xi`, filled a panel of output channels
        // at a time straight from the transformed filters (a transformed copy of every
        // plane first held the packed weights twice at the peak of the load). A panel's
        // filters are transformed together, each store beside the last.
        let mut u = (0..XI).map(|_| PackedB::zeroed(cin, cout)).collect::<Result<Vec<_>, _>>()?;
        let nr = u.first().map_or(1, PackedB::panel_cols);
        let mut panels: Vec<_> = u.iter_mut().map(|p| p.panels_mut()).collect();
        for o0 in (0..cout).step_by(nr) {
            let mut targets: Vec<&mut [f32]> =
                panels.iter_mut().filter_map(|p| p.next().map(|(_, panel)| panel)).collect();
            for (j, o) in (o0..(o0 + nr).min(cout)).enumerate() {
                for c in 0..cin {
                    let taps = &weight[(o * cin + c) * 9..][..9];
                    for (panel, v) in targets.iter_mut().zip(transform_filter(taps)) {
                        panel[c * nr + j] = v;
                    }
                }
            }
        }
        drop(panels);
        let (tiles_h, tiles_w) = tiles(oh, ow);
        // Whole tile rows per block, as many as fit BLOCK_BYTES, at least MIN_BLOCK_TILES.
        let row_bytes = mul(mul(tiles_w, XI)?, mul(cin + cout, 4)?)?;
        let by_bytes = BLOCK_BYTES / row_bytes.max(1);
        let block_rows = by_bytes.max(MIN_BLOCK_TILES.div_ceil(tiles_w)).clamp(1, tiles_h);
        Ok(Winograd {
            u,
            cin,
            cout,
            in_h: g.in_h,
            in_w: g.in_w,
            pad: g.padding,
            oh,
            ow,
            tiles_h,
            tiles_w,
            block_rows,
            zeros: vec![0.0; cin],
        })
    }

    /// Rows of output tiles (each two output rows).
    pub(super) fn tile_rows(&self) -> usize {
        self.tiles_h
    }

    /// One image: `x` `[H, W, Cin]`, `y` and the residual `[OH, OW, Cout]`; the blocks split
    /// into `parts` tasks of whole blocks, each thread on its own scratch.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        x: &[f32],
        residual: Option<&[f32]>,
        y: &mut [f32],
        bias: Option<&[f32]>,
        act: Activation,
        parts: usize,
        scratch: &mut Vec<PartScratch>,
        threads: &Threads,
    ) {
        // Smaller blocks when there are too few for the tasks (every task gets one at least;
        // the bits do not depend on the blocks).
        let parts = parts.max(1);
        let block_rows = self.block_rows.min(self.tiles_h.div_ceil(parts));
        let blocks = self.tiles_h.div_ceil(block_rows);
        let row = self.ow * self.cout;
        // Each run of blocks with its output rows.
        let runs = split(blocks, 1, parts).scan(y, |rest, r| {
            let rows = self.out_rows(r.start * block_rows..r.end * block_rows);
            let (piece, tail) = std::mem::take(rest).split_at_mut(rows.len() * row);
            *rest = tail;
            Some((r, piece))
        });
        threads.for_each_with(runs, scratch, |part, (blocks, y)| {
            let y0 = blocks.start * block_rows * 2;
            for b in blocks {
                let ty = b * block_rows..((b + 1) * block_rows).min(self.tiles_h);
                let result = self.block(x, residual, y, y0, ty, bias, act, part);
                if result.is_err() {
                    return part.note(result);
                }
            }
        });
    }

    /// Output rows of tile rows `ty` (clipped to the output).
    fn out_rows(&self, ty: std::ops::Range<usize>) -> std::ops::Range<usize> {
        (ty.start * 2).min(self.oh)..(ty.end * 2).min(self.oh)
    }

    /// Tile rows `ty` into `y`, which holds output rows from `y0`.
    #[allow(clippy::too_many_arguments)]
    fn block(
        &self,
        x: &[f32],
        residual: Option<&[f32]>,
        y: &mut [f32],
        y0: usize,
        ty: std::ops::Range<usize>,
        bias: Option<&[f32]>,
        act: Activation,
        part: &mut PartScratch,
    ) -> Result<(), GemmError> {
        let (cin, cout) = (self.cin, self.cout);
        let n = ty.len() * self.tiles_w;
        let (vs, ms) = (n * cin, n * cout);
        let (v, m) = (window(&mut part.row, XI * vs), window(&mut part.out, XI * ms));
        for (t, (ty, tx)) in
            ty.clone().flat_map(|a| (0..self.tiles_w).map(move |b| (a, b))).enumerate()
        {
            let d: [&[f32]; XI] = std::array::from_fn(|p| self.pixel(x, ty, tx, p / 4, p % 4));
            let mut dst = v.chunks_exact_mut(vs).map(|c| &mut c[t * cin..][..cin]);
            let mut vt: [&mut [f32]; XI] = std::array::from_fn(|_| dst.next().unwrap_or_default());
            input_tile(&d, &mut vt, cin);
        }
        for (xi, (v, m)) in v.chunks_exact(vs).zip(m.chunks_exact_mut(ms)).enumerate() {
            let a = MatRef::new(v, n, cin, cin, 1)?;
            gemm_packed_b(a, &self.u[xi], m, cout, &Epilogue::NONE, &mut part.gemm)?;
        }
        let m = &*m;
        for (t, (ty, tx)) in ty.flat_map(|a| (0..self.tiles_w).map(move |b| (a, b))).enumerate() {
            let mt: [&[f32]; XI] = std::array::from_fn(|xi| &m[xi * ms + t * cout..][..cout]);
            // The tile's output pixels inside the image: (dy, dx) -> offset from row y0.
            let at: [Option<usize>; 4] = std::array::from_fn(|p| {
                let (oy, ox) = (2 * ty + p / 2, 2 * tx + p % 2);
                (oy < self.oh && ox < self.ow).then(|| ((oy - y0) * self.ow + ox) * cout)
            });
            let res =
                at.map(|a| a.zip(residual).map(|(a, r)| &r[y0 * self.ow * cout + a..][..cout]));
            let out = Out { at, res, bias, clamp: act.clamp() };
            output_tile(&mt, &out, y, cout);
            if act.is_pointwise_pass() {
                for a in at.into_iter().flatten() {
                    activate_tile(y, a, cout, 1, cout, act);
                }
            }
        }
        Ok(())
    }

    /// The `cin` values of input pixel `(r, c)` of tile `(ty, tx)`, or zeros in the padding.
    fn pixel<'a>(&'a self, x: &'a [f32], ty: usize, tx: usize, r: usize, c: usize) -> &'a [f32] {
        let iy = (2 * ty + r).checked_sub(self.pad[0]).filter(|&v| v < self.in_h);
        let ix = (2 * tx + c).checked_sub(self.pad[1]).filter(|&v| v < self.in_w);
        match iy.zip(ix) {
            Some((iy, ix)) => &x[(iy * self.in_w + ix) * self.cin..][..self.cin],
            None => &self.zeros,
        }
    }
}

/// `G g Gt` of one 3x3 filter (row-major), its 16 values by position `4 * r + c`; computed in
/// f64 and rounded once.
fn transform_filter(g: &[f32]) -> [f32; XI] {
    let g = |r: usize, c: usize| f64::from(g[3 * r + c]);
    // G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]].
    let gm = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]];
    let mut t = [[0f64; 3]; 4];
    for (i, row) in t.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            *v = (0..3).map(|k| gm[i][k] * g(k, j)).sum();
        }
    }
    std::array::from_fn(|p| {
        let (i, j) = (p / 4, p % 4);
        (0..3).map(|k| t[i][k] * gm[j][k]).sum::<f64>() as f32
    })
}

/// Where the output transform writes one tile.
struct Out<'a> {
    /// Offset in `y` of each of the 2x2 output pixels (`2 * dy + dx`), `None` outside.
    at: [Option<usize>; 4],
    /// Each pixel's residual.
    res: [Option<&'a [f32]>; 4],
    bias: Option<&'a [f32]>,
    clamp: Option<(f32, f32)>,
}

/// `Bt d B` of one tile: `d[4 * r + c]` are the `n` channels of its input pixel `(r, c)`,
/// `v[xi]` receives position `xi`'s.
fn input_tile(d: &[&[f32]; XI], v: &mut [&mut [f32]; XI], n: usize) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512F, the only feature the function is built for.
        return unsafe { avx512::input_tile(d, v, n) };
    }
    unreachable!("Winograd::supports requires AVX-512F")
}

/// `At m A` of one tile (`m[xi]` the `n` output channels of position `xi`) plus the bias and
/// the residual, clamped, written to the tile's output pixels inside the image.
fn output_tile(m: &[&[f32]; XI], out: &Out<'_>, y: &mut [f32], n: usize) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512F, the only feature the function is built for.
        return unsafe { avx512::output_tile(m, out, y, n) };
    }
    unreachable!("Winograd::supports requires AVX-512F")
}

/// The transforms on 16 channels at a time (the last step masked).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Out, XI};

    /// Lanes `0..w` of a 16-lane mask (`w <= 16`).
    #[inline(always)]
    fn mask(w: usize) -> __mmask16 {
        ((1u32 << w) - 1) as __mmask16
    }

    /// `(r0 - r2, r1 + r2, r2 - r1, r1 - r3)`: `Bt` applied to four vectors.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn bt(r: [__m512; 4]) -> [__m512; 4] {
        [
            _mm512_sub_ps(r[0], r[2]),
            _mm512_add_ps(r[1], r[2]),
            _mm512_sub_ps(r[2], r[1]),
            _mm512_sub_ps(r[1], r[3]),
        ]
    }

    /// `(r0 + r1 + r2, r1 - r2 - r3)`: `At` applied to four vectors.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn at(r: [__m512; 4]) -> [__m512; 2] {
        [
            _mm512_add_ps(_mm512_add_ps(r[0], r[1]), r[2]),
            _mm512_sub_ps(_mm512_sub_ps(r[1], r[2]), r[3]),
        ]
    }

    /// See [`super::input_tile`].
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn input_tile(d: &[&[f32]; XI], v: &mut [&mut [f32]; XI], n: usize) {
        for c in (0..n).step_by(16) {
            let w = (n - c).min(16);
            let k = mask(w);
            let mut x = [_mm512_setzero_ps(); XI];
            for (x, d) in x.iter_mut().zip(d) {
                let s = &d[c..c + w];
                // SAFETY: the masked load reads lanes below `w`, all inside `s`.
                *x = unsafe { _mm512_maskz_loadu_ps(k, s.as_ptr()) };
            }
            // Bt d: each column of four pixels.
            let mut t = [_mm512_setzero_ps(); XI];
            for j in 0..4 {
                let col = bt([x[j], x[4 + j], x[8 + j], x[12 + j]]);
                for (r, v) in col.into_iter().enumerate() {
                    t[4 * r + j] = v;
                }
            }
            // (Bt d) B: each row.
            for r in 0..4 {
                let row = bt([t[4 * r], t[4 * r + 1], t[4 * r + 2], t[4 * r + 3]]);
                x[4 * r..4 * r + 4].copy_from_slice(&row);
            }
            for (v, x) in v.iter_mut().zip(x) {
                let s = &mut v[c..c + w];
                // SAFETY: the masked store writes lanes below `w`, all inside `s`.
                unsafe { _mm512_mask_storeu_ps(s.as_mut_ptr(), k, x) };
            }
        }
    }

    /// See [`super::output_tile`].
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn output_tile(m: &[&[f32]; XI], out: &Out<'_>, y: &mut [f32], n: usize) {
        for c in (0..n).step_by(16) {
            let w = (n - c).min(16);
            let k = mask(w);
            let mut x = [_mm512_setzero_ps(); XI];
            for (x, m) in x.iter_mut().zip(m) {
                let s = &m[c..c + w];
                // SAFETY: the masked load reads lanes below `w`, all inside `s`.
                *x = unsafe { _mm512_maskz_loadu_ps(k, s.as_ptr()) };
            }
            // At m: each column of four positions, two rows out.
            let mut s = [_mm512_setzero_ps(); 8];
            for j in 0..4 {
                let [s0, s1] = at([x[j], x[4 + j], x[8 + j], x[12 + j]]);
                (s[j], s[4 + j]) = (s0, s1);
            }
            let bias = match out.bias {
                Some(b) => {
                    let b = &b[c..c + w];
                    // SAFETY: the masked load reads lanes below `w`, all inside `b`.
                    unsafe { _mm512_maskz_loadu_ps(k, b.as_ptr()) }
                }
                None => _mm512_setzero_ps(),
            };
            for dy in 0..2 {
                let row = at([s[4 * dy], s[4 * dy + 1], s[4 * dy + 2], s[4 * dy + 3]]);
                for (dx, mut v) in row.into_iter().enumerate() {
                    let p = 2 * dy + dx;
                    let Some(at) = out.at[p] else { continue };
                    // Bias, residual, clamp: the order of the GEMM epilogue.
                    if out.bias.is_some() {
                        v = _mm512_add_ps(v, bias);
                    }
                    if let Some(r) = out.res[p] {
                        let r = &r[c..c + w];
                        // SAFETY: the masked load reads lanes below `w`, all inside `r`.
                        v = _mm512_add_ps(v, unsafe { _mm512_maskz_loadu_ps(k, r.as_ptr()) });
                    }
                    if let Some((lo, hi)) = out.clamp {
                        // max/min return their second operand when one is NaN: NaN propagates.
                        let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
                        v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
                    }
                    let dst = &mut y[at + c..at + c + w];
                    // SAFETY: the masked store writes lanes below `w`, all inside `dst`.
                    unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), k, v) };
                }
            }
        }
    }
}
