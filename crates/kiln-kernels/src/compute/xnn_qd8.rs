//! The fast loops of the dynamically quantized fully connected layer
//! ([`super::xnn_quant::qd8_fully_connected`]): int8 weights laid out once in panels of
//! [`PANEL`] output channels, four inputs per channel together, each block of inputs headed by
//! its column sums; activations quantized per row and multiplied four at a time.
//!
//! # Panel layout
//! A panel holds `nb` blocks (the qb4w blocks, or one block of all `kq` inputs, `kq` the input
//! count rounded up to a multiple of 4); block `b` of `bk` inputs is a segment of
//! [`segment_len`]`(bk)` bytes:
//! - the `PANEL` column sums `Σ_{i∈b} w[j][i]` as little-endian `i32` (`4 * PANEL` bytes),
//! - the weights `[bk / 4][PANEL][4]` `i8` (channels past `n` and inputs past `k` zero),
//!
//! so one 512-bit load holds four inputs of 16 channels, and a sum per lane runs down the
//! inputs (no horizontal sums, as in XNNPACK's `c4` panels).
//!
//! qb4w weights may stay 4-bit ([`PanelForm::Int4`]): the same segments with two weights a
//! byte, `[bk / 8][PANEL][4]` bytes whose low nibbles are the first quad of each eight inputs
//! and whose high nibbles the second, each nibble `w + 8`. A decode step reads every weight of
//! the model once, so half the bytes is nearly half its time; the AVX-512 VNNI loop takes the
//! nibbles apart in registers, the others unpack a segment at a time.
//!
//! # Two forms of the activations
//! - AVX-512 VNNI: `u = q + 128` (`u8`, the sign bit flipped) for `vpdpbusd` (four `u8 x i8`
//!   products into each `i32` lane); `Σ (q - zp) w = Σ u w - (zp + 128) Σ w`, the correction
//!   taken from the segment's column sums.
//! - Every other ISA: `q - zp` as `i16` for `vpmaddwd` (AVX-512BW, AVX2) on the weights widened
//!   in registers: each `i32` lane sums an input pair of one channel, and the two pair sums of
//!   a channel are added once, after the block.
//!
//! Both are exact in wrapping `i32` arithmetic (the identity above holds modulo 2^32, and
//! wrapping addition is associative), so every ISA gives the scalar kernel's sums bit for bit.
//! The AVX-512 VNNI loop over nibbles sums `u (w + 8)`; `8 Σ u` over the block (each row's
//! [`QuadRows::Unsigned`] `block_sums`) comes off before the correction, exactly.
#![allow(unsafe_code)]

use super::threads::{split, with_pieces, Threads};
use super::xnn_qgemm::{parts, Isa, IsaTask, MR, PARALLEL_MACS};
use super::xnn_qmath::clamp_f32;

/// Output channels per panel (one 512-bit vector of `i32`).
pub(crate) const PANEL: usize = 16;
/// Bytes of panels from which a layer is split over the threads, whatever its rows.
const PARALLEL_WEIGHT_BYTES: usize = 1 << 17;
/// Bytes of a segment's column sums.
const SUMS: usize = 4 * PANEL;

/// The bytes of one block of `bk` inputs (a multiple of 4) in a panel: the column sums, then
/// the weights.
pub(crate) const fn segment_len(bk: usize) -> usize {
    SUMS + bk * PANEL
}

/// Where weight `i` of panel channel `c` lies in the weights of a segment.
pub(crate) const fn quad_index(c: usize, i: usize) -> usize {
    SUMS + (i / 4) * 4 * PANEL + c * 4 + i % 4
}

/// How a panel stores its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PanelForm {
    /// One `i8` a weight, `[bk / 4][PANEL][4]`.
    Int8,
    /// Two a byte (4-bit weights in `[-8, 7]`, stored `w + 8`), `[bk / 8][PANEL][4]`: the low
    /// nibbles the first four inputs of each eight, the high nibbles the next four. Blocks
    /// of a multiple of 8 inputs.
    Int4,
}

impl PanelForm {
    /// The bytes of one block of `bk` inputs in a panel: the column sums, then the weights.
    pub(crate) const fn segment_len(self, bk: usize) -> usize {
        match self {
            PanelForm::Int8 => segment_len(bk),
            PanelForm::Int4 => SUMS + bk * PANEL / 2,
        }
    }

    /// Whether a block of `bk` inputs can take this form.
    pub(crate) const fn holds_block(self, bk: usize) -> bool {
        match self {
            PanelForm::Int8 => bk.is_multiple_of(4),
            PanelForm::Int4 => bk.is_multiple_of(8),
        }
    }

    /// Weight `i` of panel channel `c` of a segment.
    pub(crate) fn weight(self, segment: &[i8], c: usize, i: usize) -> i8 {
        match self {
            PanelForm::Int8 => segment[quad_index(c, i)],
            PanelForm::Int4 => {
                let b = segment[nibble_index(c, i)] as u8;
                let v = if i % 8 < 4 { b & 0x0F } else { b >> 4 };
                v as i8 - 8
            }
        }
    }

    /// Sets weight `i` of panel channel `c` of a segment (in `[-8, 7]` for
    /// [`PanelForm::Int4`]).
    pub(crate) fn set_weight(self, segment: &mut [i8], c: usize, i: usize, v: i8) {
        match self {
            PanelForm::Int8 => segment[quad_index(c, i)] = v,
            PanelForm::Int4 => {
                let at = &mut segment[nibble_index(c, i)];
                let nib = v.wrapping_add(8) as u8 & 0x0F;
                let b = *at as u8;
                *at = if i % 8 < 4 { (b & 0xF0) | nib } else { (b & 0x0F) | (nib << 4) } as i8;
            }
        }
    }
}

/// Channel `c`'s weights of a [`PanelForm::Int4`] segment from one row of a block of qb4w
/// nibbles (input `2i` in the low nibble of byte `i`, `2i + 1` in its high one, each `w + 8`:
/// the stored form is the same, so the nibbles only move).
pub(crate) fn move_nibbles(row: &[u8], segment: &mut [i8], c: usize) {
    // Eight inputs are four bytes of the row: inputs 0-3 are bytes 0-1, 4-7 bytes 2-3.
    for (pair, src) in row.chunks_exact(4).enumerate() {
        let at = SUMS + pair * 4 * PANEL + c * 4;
        let dst = &mut segment[at..at + 4];
        for t in 0..4 {
            let low = (src[t / 2] >> (4 * (t % 2))) & 0x0F;
            let high = (src[2 + t / 2] >> (4 * (t % 2))) & 0x0F;
            dst[t] = (low | (high << 4)) as i8;
        }
    }
}

/// The byte of a [`PanelForm::Int4`] segment that holds weight `i` of panel channel `c`.
const fn nibble_index(c: usize, i: usize) -> usize {
    SUMS + (i / 8) * 4 * PANEL + c * 4 + i % 4
}

/// Writes the column sums of a segment of `bk` inputs whose weights are in place.
pub(crate) fn write_column_sums(segment: &mut [i8], form: PanelForm, bk: usize) {
    let mut sums = [0i32; PANEL];
    let weights = &segment[SUMS..form.segment_len(bk)];
    for row in weights.chunks_exact(4 * PANEL) {
        for (s, q) in sums.iter_mut().zip(row.chunks_exact(4)) {
            *s = q.iter().fold(*s, |s, &v| match form {
                PanelForm::Int8 => s.wrapping_add(i32::from(v)),
                PanelForm::Int4 => s + i32::from(v as u8 & 0x0F) + i32::from(v as u8 >> 4) - 16,
            });
        }
    }
    let head = &mut segment[..SUMS];
    for (d, s) in head.chunks_exact_mut(4).zip(sums) {
        for (d, b) in d.iter_mut().zip(s.to_le_bytes()) {
            *d = b as i8;
        }
    }
}

/// The column sums at the head of a segment.
fn column_sums(segment: &[i8]) -> [i32; PANEL] {
    std::array::from_fn(|c| {
        let b = &segment[4 * c..4 * c + 4];
        i32::from_le_bytes([b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8])
    })
}

/// How [`PanelGemm`] turns a panel's integer sums into floats (XNNPACK's qd8 formulas).
#[derive(Clone, Copy)]
pub(crate) enum PanelScales<'a> {
    /// qc8w / qc4w: `((acc as f32) * row_scale) * scale[j]`; scales `[panels, 1, PANEL]`.
    PerChannel(&'a [f32]),
    /// qb4w: `(Σ_b (acc_b as f32) * scale[j][b]) * row_scale`, blocks summed in order from 0;
    /// scales `[panels, k / block, PANEL]`.
    Blocks { scales: &'a [f32], block: usize },
}

/// The quantized activations, `m` rows of `kq` (the values past `k` zero).
#[derive(Clone, Copy)]
pub(crate) enum QuadRows<'a> {
    /// `q + 128` for the `vpdpbusd` loops (AVX-512 VNNI, AVX-VNNI), with each row's zero
    /// point and, for [`PanelForm::Int4`] panels, each row's sums of `u` over each block
    /// (`[m][blocks]`; empty otherwise).
    Unsigned { a: &'a [u8], zero_points: &'a [i32], block_sums: &'a [i32] },
    /// `q - zp` for the other ISAs.
    Centered(&'a [i16]),
}

impl QuadRows<'_> {
    /// The form `isa`'s loops read.
    pub(crate) fn unsigned_for(isa: Isa) -> bool {
        isa.has_quads()
    }
}

/// A dynamically quantized fully connected layer over weights in the [panel
/// layout](self#panel-layout): `out[r * n + j]` (`m` rows of `n`) is each channel's float
/// result plus `bias[j]` (0 without one), clamped to `bounds` (XNNPACK's order).
pub(crate) struct PanelGemm<'a> {
    pub isa: Isa,
    pub a: QuadRows<'a>,
    pub row_scale: &'a [f32],
    pub m: usize,
    /// Inputs per row, a multiple of 4.
    pub kq: usize,
    pub n: usize,
    pub w: &'a [i8],
    pub form: PanelForm,
    pub scales: PanelScales<'a>,
    pub bias: Option<&'a [f32]>,
    pub bounds: (f32, f32),
}

/// A run of [`PanelGemm`]'s panels, and where their finished rows go.
struct PanelTask<'g, 'a> {
    gemm: &'g PanelGemm<'a>,
    /// Into the output rows (`n` wide), or else into a panel-major block `[panels][m][PANEL]`
    /// of the task's panels.
    into_rows: bool,
}

impl PanelGemm<'_> {
    /// Writes the layer into `out`. One task writes straight into `out`; several (a large
    /// layer over the threads, split by panels) each fill a panel-major block, whose panel
    /// rows are then copied into place.
    ///
    /// # Panics
    /// If the lengths disagree with `m`, `kq`, `n` and the block size, or the activations'
    /// form is not the one the ISA reads.
    pub(crate) fn run_on(&self, out: &mut [f32], threads: &Threads) {
        let (m, n, kq, isa) = (self.m, self.n, self.kq, self.isa);
        let panels = n.div_ceil(PANEL);
        let (bk, nb) = self.blocks();
        let rows_fit = match self.a {
            QuadRows::Unsigned { a, zero_points, block_sums } => {
                let sums = if self.form == PanelForm::Int4 { m * nb } else { 0 };
                QuadRows::unsigned_for(isa)
                    && a.len() == m * kq
                    && zero_points.len() == m
                    && block_sums.len() == sums
            }
            QuadRows::Centered(a) => !QuadRows::unsigned_for(isa) && a.len() == m * kq,
        };
        assert!(kq.is_multiple_of(4) && rows_fit && self.row_scale.len() == m);
        assert!(out.len() == m * n && self.bias.is_none_or(|b| b.len() == n));
        assert!(self.form.holds_block(bk) && nb * bk == kq);
        assert!(self.w.len() == panels * nb * self.form.segment_len(bk));
        let scales_len = match self.scales {
            PanelScales::PerChannel(s) => s.len(),
            PanelScales::Blocks { scales, .. } => scales.len(),
        };
        assert!(scales_len == panels * nb * PANEL);
        // A layer of few rows (a decode step) is a read of its weights, which two cores do
        // faster: split from PARALLEL_WEIGHT_BYTES whatever the multiply-adds.
        let macs = match self.w.len() >= PARALLEL_WEIGHT_BYTES {
            true => (m * n * kq).max(PARALLEL_MACS),
            false => m * n * kq,
        };
        let parts = parts(threads, macs, PARALLEL_MACS, panels);
        if parts == 1 {
            isa.run(&PanelTask { gemm: self, into_rows: true }, 0..panels, out);
            return;
        }
        let mut tmp = vec![0f32; panels * m * PANEL];
        let tasks = with_pieces(split(panels, 1, parts), &mut tmp, m * PANEL);
        let task = PanelTask { gemm: self, into_rows: false };
        threads.for_each(tasks, |(run, block)| isa.run(&task, run, block));
        for (p, block) in tmp.chunks_exact(m * PANEL).enumerate() {
            let lanes = (n - p * PANEL).min(PANEL);
            for (r, src) in block.chunks_exact(PANEL).enumerate() {
                copy_lanes(&mut out[r * n + p * PANEL..][..lanes], panel_of(src));
            }
        }
    }

    /// Inputs per block and blocks per panel.
    fn blocks(&self) -> (usize, usize) {
        match self.scales {
            PanelScales::PerChannel(_) => (self.kq, 1),
            PanelScales::Blocks { block, .. } => (block, self.kq.checked_div(block).unwrap_or(0)),
        }
    }
}

impl IsaTask for PanelTask<'_, '_> {
    type Out = [f32];
    const VNNI: bool = true;

    /// Panels `panels` into `out` (the rows, or the run's block), up to [`MR`] rows at a time
    /// and, where `xnn_qgemm`'s `two_panels` says so, two panels at a time.
    #[inline(always)]
    fn run(&self, panels: std::ops::Range<usize>, out: &mut [f32]) {
        let g = self.gemm;
        let (m, isa) = (g.m, g.isa);
        #[cfg(target_arch = "x86_64")]
        let pairs = isa == Isa::Vnni && super::xnn_qgemm::two_panels();
        #[cfg(not(target_arch = "x86_64"))]
        let pairs = false;
        // Int4 segments unpacked for the loops that read bytes (not AVX-512 VNNI's).
        let mut unpacked = match g.form == PanelForm::Int4 && isa != Isa::Vnni {
            true => vec![0i8; g.blocks().0 * PANEL],
            false => Vec::new(),
        };
        let mut p = panels.start;
        while p < panels.end {
            let two = pairs && p + 1 < panels.end;
            for r0 in (0..m).step_by(MR) {
                match two {
                    true => self.rows::<2>(p, r0, panels.start, out, &mut unpacked),
                    false => self.rows::<1>(p, r0, panels.start, out, &mut unpacked),
                }
            }
            p += if two { 2 } else { 1 };
        }
    }
}

impl PanelTask<'_, '_> {
    /// The block sums of rows `r0..r0 + rows` of panels `p..p + P` into `sums` in one call of
    /// [`u4_blocks`], when that kernel serves them: Int4 panels with block scales read in
    /// registers (`in_registers`, AVX-512 VNNI), one or two rows (a decode step). Whether it
    /// did.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn nibble_blocks_fused<const P: usize>(
        &self,
        p: usize,
        r0: usize,
        rows: usize,
        in_registers: bool,
        sums: &mut [[[f32; PANEL]; MR]; P],
    ) -> bool {
        let g = self.gemm;
        let (QuadRows::Unsigned { a, zero_points, block_sums }, PanelScales::Blocks { scales, .. }) =
            (g.a, g.scales)
        else {
            return false;
        };
        if !(g.form == PanelForm::Int4 && in_registers && rows <= 2) {
            return false;
        }
        let (bk, nb) = g.blocks();
        let seg = g.form.segment_len(bk);
        assert!(g.isa == Isa::Vnni && bk.is_multiple_of(8) && P <= 2);
        assert!(g.w.len() >= ((p + P - 1) * nb + nb) * seg);
        assert!(scales.len() >= (p + P) * nb * PANEL && block_sums.len() >= (r0 + rows) * nb);
        assert!(a.len() >= (r0 + rows - 1) * g.kq + nb * bk);
        let z: [i32; 2] = std::array::from_fn(|r| {
            zero_points.get(r0 + r.min(rows - 1)).map_or(0, |z| z.wrapping_add(128))
        });
        let blocks = NibbleBlocks {
            a: a[r0 * g.kq..].as_ptr(),
            lda: g.kq,
            w: g.w[p * nb * seg..].as_ptr().cast(),
            seg,
            nb,
            bk,
            zero: z,
            block_sums: block_sums[r0 * nb..].as_ptr(),
            scales: scales[p * nb * PANEL..].as_ptr(),
        };
        let mut out = [[[0f32; PANEL]; 2]; 2];
        // SAFETY: `Isa::Vnni` is only chosen when the CPU has AVX-512F, AVX-512BW and AVX-512
        // VNNI; the asserts bound every read: `P` panels of `nb` segments from panel `p`,
        // their `nb * PANEL` scales each, `rows` rows of `nb * bk` activations `kq` apart and
        // their `nb` block sums.
        unsafe {
            match (rows, P) {
                (1, 1) => u4_blocks::<1, 1>(&blocks, &mut out),
                (1, _) => u4_blocks::<1, 2>(&blocks, &mut out),
                (_, 1) => u4_blocks::<2, 1>(&blocks, &mut out),
                _ => u4_blocks::<2, 2>(&blocks, &mut out),
            }
        }
        for (sums, out) in sums.iter_mut().zip(out) {
            sums[..rows].copy_from_slice(&out[..rows]);
        }
        true
    }

    /// Rows `r0..` (up to [`MR`]) of panels `p..p + P` into `out` (see [`IsaTask::run`];
    /// `first` is the run's first panel). `P` is 2 only on [`Isa::Vnni`]. `unpacked` holds
    /// a block's int8 weights when Int4 segments are unpacked for the ISA's loops.
    #[inline(always)]
    fn rows<const P: usize>(
        &self,
        p: usize,
        r0: usize,
        first: usize,
        out: &mut [f32],
        unpacked: &mut [i8],
    ) {
        let g = self.gemm;
        let (kq, m, n, isa) = (g.kq, g.m, g.n, g.isa);
        let (bk, nb) = g.blocks();
        let seg = g.form.segment_len(bk);
        let (lo, hi) = g.bounds;
        let rows = (m - r0).min(MR);
        let nibbles = g.form == PanelForm::Int4;
        // Int4 weights read as stored, in registers (AVX-512 VNNI): summed as `w + 8`.
        let in_registers = nibbles && unpacked.is_empty();
        let mut acc = [[0i32; MR * PANEL]; 2];
        let mut sums = [[[0f32; PANEL]; MR]; P];
        #[cfg(target_arch = "x86_64")]
        let fused = self.nibble_blocks_fused::<P>(p, r0, rows, in_registers, &mut sums);
        #[cfg(not(target_arch = "x86_64"))]
        let fused = false;
        for b in (0..nb).filter(|_| !fused) {
            let segment = |q: usize| &g.w[((p + q) * nb + b) * seg..][..seg];
            let start = r0 * kq + b * bk;
            // The block's weights as the byte loops read them.
            let bytes = match nibbles && !in_registers {
                true => {
                    unpack_nibbles(&segment(0)[SUMS..], unpacked);
                    &*unpacked
                }
                false => &segment(0)[SUMS..],
            };
            match g.a {
                QuadRows::Unsigned { a, zero_points, block_sums } => {
                    #[cfg(target_arch = "x86_64")]
                    if in_registers {
                        let w = (&g.w[(p * nb + b) * seg + SUMS..], nb * seg);
                        quad_sums_u4::<P>(isa, &a[start..], kq, rows, w, bk, &mut acc);
                    }
                    #[cfg(target_arch = "x86_64")]
                    if P == 2 && !nibbles {
                        let w = (&g.w[(p * nb + b) * seg + SUMS..], nb * seg);
                        quad_sums_u8_pair(isa, &a[start..], kq, rows, w, bk, &mut acc);
                    }
                    if P == 1 && !in_registers {
                        quad_sums_u8(isa, &a[start..], kq, rows, bytes, bk, &mut acc[0]);
                    }
                    for (q, acc) in acc.iter_mut().enumerate().take(P) {
                        let col = column_sums(segment(q));
                        for (r, acc) in acc.chunks_exact_mut(PANEL).take(rows).enumerate() {
                            let z = zero_points[r0 + r].wrapping_add(128);
                            let offset = match in_registers {
                                true => block_sums[(r0 + r) * nb + b].wrapping_mul(8),
                                false => 0,
                            };
                            for (s, &c) in acc.iter_mut().zip(&col) {
                                *s = s.wrapping_sub(z.wrapping_mul(c)).wrapping_sub(offset);
                            }
                        }
                    }
                }
                QuadRows::Centered(a) => {
                    quad_sums_i16(isa, &a[start..], kq, rows, bytes, bk, &mut acc[0])
                }
            }
            // Whole panels as arrays, built with `from_fn`: LLVM vectorizes that (the indexed
            // loops it left scalar, 10% of a decode step); the same operations per lane in the
            // same order, so the results stay bit-identical.
            for (q, (sums, acc)) in sums.iter_mut().zip(&acc).enumerate() {
                let pq = p + q;
                for (r, sum) in sums.iter_mut().enumerate().take(rows) {
                    let acc: &[i32; PANEL] = panel_of(&acc[r * PANEL..]);
                    let rs = g.row_scale[r0 + r];
                    match g.scales {
                        PanelScales::PerChannel(s) => {
                            let s: &[f32; PANEL] = panel_of(&s[pq * PANEL..]);
                            *sum = std::array::from_fn(|c| ((acc[c] as f32) * rs) * s[c]);
                        }
                        PanelScales::Blocks { scales, .. } => {
                            let s: &[f32; PANEL] = panel_of(&scales[(pq * nb + b) * PANEL..]);
                            *sum = std::array::from_fn(|c| sum[c] + (acc[c] as f32) * s[c]);
                        }
                    }
                }
            }
        }
        for (q, sums) in sums.iter().enumerate() {
            let pq = p + q;
            let lanes = (n - pq * PANEL).min(PANEL);
            let mut bias = [0f32; PANEL];
            if let Some(b) = g.bias {
                bias[..lanes].copy_from_slice(&b[pq * PANEL..][..lanes]);
            }
            for (r, sum) in sums.iter().enumerate().take(rows) {
                // Blocks take the row scale last; per-channel sums have it already.
                let rs = match g.scales {
                    PanelScales::Blocks { .. } => Some(g.row_scale[r0 + r]),
                    PanelScales::PerChannel(_) => None,
                };
                let mut done = [0f32; PANEL];
                for ((d, &v), &b) in done.iter_mut().zip(sum).zip(&bias) {
                    *d = clamp_f32(rs.map_or(v, |rs| v * rs) + b, lo, hi);
                }
                let dst = match self.into_rows {
                    true => &mut out[(r0 + r) * n + pq * PANEL..][..lanes],
                    false => &mut out[((pq - first) * m + r0 + r) * PANEL..][..lanes],
                };
                copy_lanes(dst, &done);
            }
        }
    }
}

/// The first `dst.len()` values of a panel row into `dst`: a whole row as a fixed-size copy
/// (vector moves; a call to `memmove` per row cost as much as the row's arithmetic).
#[inline(always)]
fn copy_lanes(dst: &mut [f32], src: &[f32; PANEL]) {
    match dst.first_chunk_mut::<PANEL>() {
        Some(d) => *d = *src,
        None => {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = s;
            }
        }
    }
}

/// The first [`PANEL`] values of `v` as an array (the callers' slices hold whole panels).
fn panel_of<T>(v: &[T]) -> &[T; PANEL] {
    v.first_chunk::<PANEL>().expect("a whole panel")
}

/// The weights of an Int4 segment (after its column sums) as the int8 weights
/// `[bk / 4][PANEL][4]` of an Int8 one, into `out` (`bk * PANEL` values).
fn unpack_nibbles(nibbles: &[i8], out: &mut [i8]) {
    let nibbles = &nibbles[..out.len() / 2];
    for (pair, eight) in nibbles.chunks_exact(4 * PANEL).zip(out.chunks_exact_mut(8 * PANEL)) {
        let (low, high) = eight.split_at_mut(4 * PANEL);
        for ((&b, l), h) in pair.iter().zip(low).zip(high) {
            let b = b as u8;
            *l = (b & 0x0F) as i8 - 8;
            *h = (b >> 4) as i8 - 8;
        }
    }
}

/// Checks the shared contract of the quad sums: `rows` in `1..=MR`, `k` a multiple of 4, `w`
/// holding `k * PANEL` weights and `a` the rows.
fn check_quads(a_len: usize, lda: usize, rows: usize, w: &[i8], k: usize) {
    assert!((1..=MR).contains(&rows) && k.is_multiple_of(4) && w.len() >= k * PANEL);
    assert!(a_len >= (rows - 1) * lda + k);
}

/// `acc[r * PANEL + c] = Σ_i a[r * lda + i] * w[i][c]` (wrapping `i32`) for rows `r < rows`,
/// of unsigned activations and the weights `[k / 4][PANEL][4]` of a segment: `vpdpbusd` for
/// [`Isa::Vnni`] (AVX-512) and [`Isa::AvxVnni`] (256-bit), else a portable loop.
///
/// # Panics
/// If `rows` is not in `1..=MR`, `k` is not a multiple of 4, `w` holds fewer than
/// `k * PANEL` weights or `a` fewer than `(rows - 1) * lda + k` values.
pub(crate) fn quad_sums_u8(
    isa: Isa,
    a: &[u8],
    lda: usize,
    rows: usize,
    w: &[i8],
    k: usize,
    acc: &mut [i32; MR * PANEL],
) {
    check_quads(a.len(), lda, rows, w, k);
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Vnni {
        // SAFETY: `Isa::Vnni` is only chosen (by `best_isa`, or in tests among `isas`) when
        // the CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `check_quads` bounds every read
        // (rows of `k` values `lda` apart, `k * PANEL` weights) and `acc` holds `MR * PANEL`
        // sums.
        unsafe { U8_VNNI[rows - 1](a.as_ptr(), lda, w.as_ptr(), k, acc.as_mut_ptr()) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::AvxVnni {
        for (r0, r) in super::xnn_avxvnni::row_calls(rows) {
            let (ar, cr) = (a[r0 * lda..].as_ptr(), acc[r0 * PANEL..].as_mut_ptr());
            // SAFETY: `Isa::AvxVnni` is only chosen (by `best_isa`, or in tests among `isas`)
            // when the CPU has AVX2 and AVX-VNNI; rows `r0..r0 + r` are among the rows
            // `check_quads` bounds, with the weights, and `acc` holds their sums.
            unsafe { super::xnn_avxvnni::SUMS[r - 1](ar, lda, w.as_ptr(), k, cr) };
        }
        return;
    }
    quads_portable(rows, k, w, acc, |r, i| i32::from(a[r * lda + i]));
}

/// [`quad_sums_u8`] of activations minus their zero point (`i16`), on the loops of `isa`
/// (AVX-512BW or AVX2 `vpmaddwd`, or portable).
///
/// # Panics
/// As [`quad_sums_u8`].
pub(crate) fn quad_sums_i16(
    isa: Isa,
    a: &[i16],
    lda: usize,
    rows: usize,
    w: &[i8],
    k: usize,
    acc: &mut [i32; MR * PANEL],
) {
    check_quads(a.len(), lda, rows, w, k);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` and above are only chosen (by `best_isa`, or in tests among
        // `isas`) when the CPU has AVX-512F and AVX-512BW; `check_quads` bounds every read and
        // `acc` holds `MR * PANEL` sums.
        Isa::Avx512 | Isa::Vnni => unsafe {
            I16_AVX512[rows - 1](a.as_ptr(), lda, w.as_ptr(), k, acc.as_mut_ptr())
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            for r0 in (0..rows).step_by(2) {
                let r = (rows - r0).min(2);
                let (ap, cp) = (a[r0 * lda..].as_ptr(), acc[r0 * PANEL..].as_mut_ptr());
                // SAFETY: `Isa::Avx2` is only chosen when the CPU has AVX2; rows `r0..r0 + r`
                // are inside the checked rows.
                unsafe { I16_AVX2[r - 1](ap, lda, w.as_ptr(), k, cp) }
            }
        }
        _ => quads_portable(rows, k, w, acc, |r, i| i32::from(a[r * lda + i])),
    }
}

/// The portable quad sums, activation `i` of row `r` read by `x(r, i)`.
fn quads_portable(
    rows: usize,
    k: usize,
    w: &[i8],
    acc: &mut [i32; MR * PANEL],
    x: impl Fn(usize, usize) -> i32,
) {
    for (r, sums) in acc.chunks_exact_mut(PANEL).take(rows).enumerate() {
        sums.fill(0);
        for (q, wq) in w.chunks_exact(4 * PANEL).take(k / 4).enumerate() {
            let xs: [i32; 4] = std::array::from_fn(|t| x(r, 4 * q + t));
            for (s, wc) in sums.iter_mut().zip(wq.chunks_exact(4)) {
                for (&xv, &wv) in xs.iter().zip(wc) {
                    *s = s.wrapping_add(xv.wrapping_mul(i32::from(wv)));
                }
            }
        }
    }
}

/// A vector quad-sum kernel: `(a, lda, w, k, acc)` as [`quad_sums_u8`]'s, for the row count
/// it was built for.
///
/// # Safety (of calling one)
/// The CPU has the kernel's features; `a` holds the kernel's rows of `k` (a multiple of 4)
/// values `lda` apart, `w` holds `k * PANEL` weights and `acc` `rows * PANEL` sums.
#[cfg(target_arch = "x86_64")]
type QuadFn<A> = unsafe fn(*const A, usize, *const i8, usize, *mut i32);

/// The AVX-512 VNNI kernels of unsigned activations, by row count minus one.
#[cfg(target_arch = "x86_64")]
const U8_VNNI: [QuadFn<u8>; MR] = [
    u8_vnni::<1>,
    u8_vnni::<2>,
    u8_vnni::<3>,
    u8_vnni::<4>,
    u8_vnni::<5>,
    u8_vnni::<6>,
    u8_vnni::<7>,
    u8_vnni::<8>,
];

/// The AVX-512BW kernels of `i16` activations, by row count minus one.
#[cfg(target_arch = "x86_64")]
const I16_AVX512: [QuadFn<i16>; MR] = [
    i16_avx512::<1>,
    i16_avx512::<2>,
    i16_avx512::<3>,
    i16_avx512::<4>,
    i16_avx512::<5>,
    i16_avx512::<6>,
    i16_avx512::<7>,
    i16_avx512::<8>,
];

/// The AVX2 kernels of `i16` activations, 1 or 2 rows (four accumulators a row, the four
/// widened weight vectors and a broadcast fill 13 of the 16 registers).
#[cfg(target_arch = "x86_64")]
const I16_AVX2: [QuadFn<i16>; 2] = [i16_avx2::<1>, i16_avx2::<2>];

/// The AVX-512 VNNI quad sums of `R` rows of unsigned activations.
///
/// # Safety
/// See [`QuadFn`]; the CPU has AVX-512F, AVX-512BW and AVX-512 VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn u8_vnni<const R: usize>(a: *const u8, lda: usize, w: *const i8, k: usize, acc: *mut i32) {
    use std::arch::x86_64::*;
    // SAFETY: the caller's contract is `quad_loop`'s.
    let [c] =
        unsafe { super::xnn_qgemm::quad_loop::<R, 1>(a, lda, k, w, 0, [_mm512_setzero_si512()]) };
    for (r, cr) in c.iter().enumerate() {
        // SAFETY: `acc` holds `R * PANEL` sums.
        unsafe { _mm512_storeu_si512(acc.wrapping_add(r * PANEL).cast(), *cr) };
    }
}

/// The AVX-512 VNNI quad sums of `R` rows of unsigned activations by two panels' segments,
/// `stride` bytes apart: one broadcast serves both (see `xnn_qgemm`'s `two_panels`).
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `a` holds `R` rows of `k` (a multiple of
/// 4) values `lda` apart, `w` holds `k * PANEL` weights at 0 and at `stride`, and `acc` and
/// `acc2` `R * PANEL` sums each.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn u8_vnni2<const R: usize>(
    a: *const u8,
    lda: usize,
    w: *const i8,
    stride: usize,
    k: usize,
    acc: [*mut i32; 2],
) {
    use std::arch::x86_64::*;
    let zero = [_mm512_setzero_si512(); 2];
    // SAFETY: the caller's contract is `quad_loop`'s.
    let c = unsafe { super::xnn_qgemm::quad_loop::<R, 2>(a, lda, k, w, stride, zero) };
    for (cp, accp) in c.iter().zip(acc) {
        for (r, cr) in cp.iter().enumerate() {
            // SAFETY: each `acc` holds `R * PANEL` sums.
            unsafe { _mm512_storeu_si512(accp.wrapping_add(r * PANEL).cast(), *cr) };
        }
    }
}

/// [`u8_vnni2`] by row count minus one.
#[cfg(target_arch = "x86_64")]
type PairFn = unsafe fn(*const u8, usize, *const i8, usize, usize, [*mut i32; 2]);
#[cfg(target_arch = "x86_64")]
const U8_VNNI2: [PairFn; MR] = [
    u8_vnni2::<1>,
    u8_vnni2::<2>,
    u8_vnni2::<3>,
    u8_vnni2::<4>,
    u8_vnni2::<5>,
    u8_vnni2::<6>,
    u8_vnni2::<7>,
    u8_vnni2::<8>,
];

/// [`quad_sums_u8`] of two panels at once, their segments `stride` bytes apart in `w`, into
/// `acc[0]` and `acc[1]`: the same sums, one broadcast serving both panels.
///
/// # Panics
/// If `isa` is not [`Isa::Vnni`], or as [`quad_sums_u8`] for either panel.
#[cfg(target_arch = "x86_64")]
pub(crate) fn quad_sums_u8_pair(
    isa: Isa,
    a: &[u8],
    lda: usize,
    rows: usize,
    (w, stride): (&[i8], usize),
    k: usize,
    acc: &mut [[i32; MR * PANEL]; 2],
) {
    assert!(isa == Isa::Vnni && w.len() >= stride);
    check_quads(a.len(), lda, rows, &w[stride..], k);
    check_quads(a.len(), lda, rows, w, k);
    let [a0, a1] = acc;
    // SAFETY: `Isa::Vnni` is only chosen (by `best_isa`, or in tests among `isas`) when the
    // CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `check_quads` bounds every read of both
    // panels and each `acc` holds `MR * PANEL` sums.
    unsafe {
        let acc = [a0.as_mut_ptr(), a1.as_mut_ptr()];
        U8_VNNI2[rows - 1](a.as_ptr(), lda, w.as_ptr(), stride, k, acc)
    }
}

/// `Σ_i a[r * lda + i] * (w + 8)` of `P` panels of an Int4 block of `k` inputs (a multiple of
/// 8), their weights `stride` bytes apart in `w` (from the first panel's, after its column
/// sums), into `acc[p]`: the nibbles as stored, taken apart in registers (AVX-512 VNNI).
///
/// # Panics
/// If `isa` is not [`Isa::Vnni`], `k` not a multiple of 8, `rows` not in `1..=MR`, or the
/// buffers too short.
#[cfg(target_arch = "x86_64")]
fn quad_sums_u4<const P: usize>(
    isa: Isa,
    a: &[u8],
    lda: usize,
    rows: usize,
    (w, stride): (&[i8], usize),
    k: usize,
    acc: &mut [[i32; MR * PANEL]; 2],
) {
    assert!(isa == Isa::Vnni && (1..=MR).contains(&rows) && k.is_multiple_of(8) && P <= 2);
    assert!(a.len() >= (rows - 1) * lda + k && w.len() >= (P - 1) * stride + k * PANEL / 2);
    let [a0, a1] = acc;
    let acc = [a0.as_mut_ptr(), a1.as_mut_ptr()];
    let (ap, wp) = (a.as_ptr(), w.as_ptr().cast::<u8>());
    // SAFETY: `Isa::Vnni` is only chosen (by `best_isa`, or in tests among `isas`) when the
    // CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; the asserts bound every read (`rows` rows
    // of `k` activations, `k * PANEL / 2` bytes of each of the `P` panels) and each `acc`
    // holds `MR * PANEL` sums.
    unsafe {
        match P {
            1 => U4_VNNI[0][rows - 1](ap, lda, wp, stride, k, acc),
            _ => U4_VNNI[1][rows - 1](ap, lda, wp, stride, k, acc),
        }
    }
}

/// [`u4_vnni`] of one and of two panels, by row count minus one.
#[cfg(target_arch = "x86_64")]
type NibbleFn = unsafe fn(*const u8, usize, *const u8, usize, usize, [*mut i32; 2]);
#[cfg(target_arch = "x86_64")]
const U4_VNNI: [[NibbleFn; MR]; 2] = [
    [
        u4_vnni::<1, 1>,
        u4_vnni::<2, 1>,
        u4_vnni::<3, 1>,
        u4_vnni::<4, 1>,
        u4_vnni::<5, 1>,
        u4_vnni::<6, 1>,
        u4_vnni::<7, 1>,
        u4_vnni::<8, 1>,
    ],
    [
        u4_vnni::<1, 2>,
        u4_vnni::<2, 2>,
        u4_vnni::<3, 2>,
        u4_vnni::<4, 2>,
        u4_vnni::<5, 2>,
        u4_vnni::<6, 2>,
        u4_vnni::<7, 2>,
        u4_vnni::<8, 2>,
    ],
];

/// How far ahead of its loads [`nibble_steps`] asks for each panel's bytes. A decode step reads
/// every weight once, from short runs (a panel's blocks) in two streams, and the hardware
/// prefetchers lag: on the Intel host, stories110M-shaped 8da4w decode ran 200-216 tokens/s
/// without, 279-285 at 4 KiB ahead, 293-319 at 8 KiB (291-315 at 16 KiB).
#[cfg(target_arch = "x86_64")]
const PREFETCH: usize = 8192;

/// The AVX-512 VNNI sums of `R` rows of unsigned activations by `P` panels of Int4 weights
/// (`stride` bytes apart): per eight inputs one 64-byte load a panel, its low nibbles the
/// first quad's weights and its high nibbles the second's (`w + 8`, in `[0, 15]`: valid
/// signed operands of `vpdpbusd`). With few accumulators (`R * P <= 4`) the two quads sum
/// into separate ones, so that `vpdpbusd`'s latency is not one chain ([`nibble_steps`]).
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `a` holds `R` rows of `k` (a multiple of
/// 8) values `lda` apart, `w` holds `k * PANEL / 2` bytes at each `p * stride`, `p < P`, and
/// `acc[p]` `R * PANEL` sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn u4_vnni<const R: usize, const P: usize>(
    a: *const u8,
    lda: usize,
    w: *const u8,
    stride: usize,
    k: usize,
    acc: [*mut i32; 2],
) {
    use std::arch::x86_64::*;
    let mut first = [[_mm512_setzero_si512(); R]; P];
    let mut second = [[_mm512_setzero_si512(); R]; P];
    let rows: [*const u8; R] = std::array::from_fn(|r| a.wrapping_add(r.wrapping_mul(lda)));
    // SAFETY: the caller's contract is `nibble_steps`'.
    unsafe { nibble_steps(rows, k / 8, w, stride, R * P <= 4, &mut first, &mut second) };
    for p in 0..P {
        for r in 0..R {
            let s = _mm512_add_epi32(first[p][r], second[p][r]);
            // SAFETY: `acc[p]` holds `R * PANEL` sums.
            unsafe { _mm512_storeu_si512(acc[p].wrapping_add(r * PANEL).cast(), s) };
        }
    }
}

/// The loop of [`u4_vnni`] and [`u4_blocks`]: `steps` steps of eight unsigned activations of
/// each of the `R` rows (from `rows`) by the next 64 bytes of each of `P` Int4 panels
/// (`stride` bytes apart, from `w`), the first quad's products added to `first` and the
/// second's to `second`, or to `first` too unless `split` (`split` keeps two accumulator
/// chains a panel and row, for the few-accumulator shapes where `vpdpbusd`'s latency would
/// bind). Each panel's bytes are prefetched [`PREFETCH`] ahead.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; each row holds `8 * steps` values and
/// each panel `64 * steps` bytes.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn nibble_steps<const R: usize, const P: usize>(
    mut rows: [*const u8; R],
    steps: usize,
    w: *const u8,
    stride: usize,
    split: bool,
    first: &mut [[std::arch::x86_64::__m512i; R]; P],
    second: &mut [[std::arch::x86_64::__m512i; R]; P],
) {
    use std::arch::x86_64::*;
    let mask = _mm512_set1_epi8(0x0F);
    let mut wp = w;
    for _ in 0..steps {
        // SAFETY: the current eight inputs of each row and the current 64 bytes of each panel
        // are inside the buffers (the caller's contract); the pointers only advance with
        // `wrapping_add`, and a prefetch never faults, wherever it points.
        unsafe {
            for p in 0..P {
                _mm_prefetch::<_MM_HINT_T0>(wp.wrapping_add(p * stride + PREFETCH).cast());
            }
            let v: [__m512i; P] =
                std::array::from_fn(|p| _mm512_loadu_si512(wp.wrapping_add(p * stride).cast()));
            let lo: [__m512i; P] = std::array::from_fn(|p| _mm512_and_si512(v[p], mask));
            let hi: [__m512i; P] =
                std::array::from_fn(|p| _mm512_and_si512(_mm512_srli_epi16::<4>(v[p]), mask));
            for r in 0..R {
                let x0 = _mm512_set1_epi32(rows[r].cast::<i32>().read_unaligned());
                let x1 = _mm512_set1_epi32(rows[r].wrapping_add(4).cast::<i32>().read_unaligned());
                for p in 0..P {
                    first[p][r] = _mm512_dpbusd_epi32(first[p][r], x0, lo[p]);
                    match split {
                        true => second[p][r] = _mm512_dpbusd_epi32(second[p][r], x1, hi[p]),
                        false => first[p][r] = _mm512_dpbusd_epi32(first[p][r], x1, hi[p]),
                    }
                }
                rows[r] = rows[r].wrapping_add(8);
            }
        }
        wp = wp.wrapping_add(4 * PANEL);
    }
}

/// What [`u4_blocks`] reads: from the first of its panels and rows.
#[cfg(target_arch = "x86_64")]
struct NibbleBlocks {
    /// Unsigned activations of the first row, rows `lda` apart.
    a: *const u8,
    lda: usize,
    /// The first panel's first segment (column sums, then nibbles); panels `nb * seg` apart.
    w: *const u8,
    seg: usize,
    nb: usize,
    /// Inputs per block (a multiple of 8).
    bk: usize,
    /// Each row's zero point plus 128.
    zero: [i32; 2],
    /// The first row's sums of `u` per block; rows `nb` apart.
    block_sums: *const i32,
    /// The first panel's block scales; panels `nb * PANEL` apart.
    scales: *const f32,
}

/// [`u4_vnni`] over every block of `P` Int4 panels for `R` rows, each block's sums corrected
/// and scaled in registers: per block `acc - (zp + 128) Σ w - 8 Σ u` (wrapping `i32`), then
/// `sum + (acc as f32) * scale`, blocks in order from a sum of 0: the operations
/// [`PanelTask::rows`] does per block through memory, in the same order. Into `out[p][r]`.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `b` describes `P` panels of `nb`
/// segments, their scales, and `R` rows of `nb * bk` activations with their block sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn u4_blocks<const R: usize, const P: usize>(
    b: &NibbleBlocks,
    out: &mut [[[f32; PANEL]; 2]; 2],
) {
    use std::arch::x86_64::*;
    let mut sum = [[_mm512_setzero_ps(); R]; P];
    let pstride = b.nb * b.seg;
    for blk in 0..b.nb {
        let mut first = [[_mm512_setzero_si512(); R]; P];
        let mut second = [[_mm512_setzero_si512(); R]; P];
        let rows: [*const u8; R] =
            std::array::from_fn(|r| b.a.wrapping_add(r * b.lda + blk * b.bk));
        let head = b.w.wrapping_add(blk * b.seg);
        let wp = head.wrapping_add(SUMS);
        // SAFETY: the caller's contract bounds the block's activations and nibbles.
        unsafe { nibble_steps(rows, b.bk / 8, wp, pstride, true, &mut first, &mut second) };
        for p in 0..P {
            // SAFETY: the segment's column sums (its first 64 bytes) and the block's 16 scales
            // are inside the buffers (the caller's contract).
            let (col, scale) = unsafe {
                (
                    _mm512_loadu_si512(head.wrapping_add(p * pstride).cast()),
                    _mm512_loadu_ps(b.scales.wrapping_add((p * b.nb + blk) * PANEL)),
                )
            };
            for r in 0..R {
                // SAFETY: row `r`'s block sums hold `nb` values.
                let offset = unsafe { b.block_sums.wrapping_add(r * b.nb + blk).read() };
                let acc = _mm512_add_epi32(first[p][r], second[p][r]);
                let acc =
                    _mm512_sub_epi32(acc, _mm512_mullo_epi32(_mm512_set1_epi32(b.zero[r]), col));
                let acc = _mm512_sub_epi32(acc, _mm512_set1_epi32(offset.wrapping_mul(8)));
                sum[p][r] = _mm512_add_ps(sum[p][r], _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale));
            }
        }
    }
    for p in 0..P {
        for r in 0..R {
            // SAFETY: `out[p][r]` holds 16 floats.
            unsafe { _mm512_storeu_ps(out[p][r].as_mut_ptr(), sum[p][r]) };
        }
    }
}

/// The AVX-512BW quad sums of `R` rows of `i16` activations: per quad, the 64 weights widened
/// to two vectors of 8 channels x 4 inputs, and the row's 4 activations broadcast to every
/// 64-bit lane, so `vpmaddwd` leaves each channel's two pair sums side by side; they are
/// added once, after the loop.
///
/// # Safety
/// See [`QuadFn`]; the CPU has AVX-512F and AVX-512BW.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn i16_avx512<const R: usize>(
    a: *const i16,
    lda: usize,
    w: *const i8,
    k: usize,
    acc: *mut i32,
) {
    use std::arch::x86_64::*;
    let (mut lo, mut hi) = ([_mm512_setzero_si512(); R], [_mm512_setzero_si512(); R]);
    // Row pointers advanced four inputs at a time (`wrapping_add`: every pointer read is in
    // bounds by the caller's contract).
    let mut rows: [*const i16; R] = std::array::from_fn(|r| a.wrapping_add(r.wrapping_mul(lda)));
    let mut wp = w;
    for _ in 0..k / 4 {
        // SAFETY: the current quad of each row and the current 64 weights are inside the
        // buffers (the caller's contract).
        unsafe {
            let wl = _mm512_cvtepi8_epi16(_mm256_loadu_si256(wp.cast()));
            let wh = _mm512_cvtepi8_epi16(_mm256_loadu_si256(wp.wrapping_add(32).cast()));
            for ((l, h), ar) in lo.iter_mut().zip(hi.iter_mut()).zip(rows.iter_mut()) {
                let x = _mm512_set1_epi64(ar.cast::<i64>().read_unaligned());
                *l = _mm512_add_epi32(*l, _mm512_madd_epi16(wl, x));
                *h = _mm512_add_epi32(*h, _mm512_madd_epi16(wh, x));
                *ar = ar.wrapping_add(4);
            }
        }
        wp = wp.wrapping_add(4 * PANEL);
    }
    // Lanes 2c and 2c + 1 of `lo` are channel c's pair sums, those of `hi` channel 8 + c's.
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (r, (l, h)) in lo.iter().zip(&hi).enumerate() {
        let s = _mm512_add_epi32(
            _mm512_permutex2var_epi32(*l, even, *h),
            _mm512_permutex2var_epi32(*l, odd, *h),
        );
        // SAFETY: `acc` holds `R * PANEL` sums.
        unsafe { _mm512_storeu_si512(acc.wrapping_add(r * PANEL).cast(), s) };
    }
}

/// The AVX2 quad sums of `R` (1 or 2) rows of `i16` activations, as [`i16_avx512`] in four
/// vectors of 4 channels x 4 inputs.
///
/// # Safety
/// See [`QuadFn`]; the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn i16_avx2<const R: usize>(
    a: *const i16,
    lda: usize,
    w: *const i8,
    k: usize,
    acc: *mut i32,
) {
    use std::arch::x86_64::*;
    let mut c = [[_mm256_setzero_si256(); 4]; R];
    let mut rows: [*const i16; R] = std::array::from_fn(|r| a.wrapping_add(r.wrapping_mul(lda)));
    let mut wp = w;
    for _ in 0..k / 4 {
        // SAFETY: as in `i16_avx512`.
        unsafe {
            let wv: [__m256i; 4] = std::array::from_fn(|h| {
                _mm256_cvtepi8_epi16(_mm_loadu_si128(wp.wrapping_add(16 * h).cast()))
            });
            for (cr, ar) in c.iter_mut().zip(rows.iter_mut()) {
                let x = _mm256_set1_epi64x(ar.cast::<i64>().read_unaligned());
                for (s, &wh) in cr.iter_mut().zip(&wv) {
                    *s = _mm256_add_epi32(*s, _mm256_madd_epi16(wh, x));
                }
                *ar = ar.wrapping_add(4);
            }
        }
        wp = wp.wrapping_add(4 * PANEL);
    }
    for (r, cr) in c.iter().enumerate() {
        for half in 0..2 {
            // `hadd` of channels 0-3 and 4-7 gives [0, 1, 4, 5 | 2, 3, 6, 7]; the permute
            // puts them in order.
            let s = _mm256_hadd_epi32(cr[2 * half], cr[2 * half + 1]);
            let s = _mm256_permute4x64_epi64::<0b11_01_10_00>(s);
            // SAFETY: `acc` holds `R * PANEL` sums.
            unsafe { _mm256_storeu_si256(acc.wrapping_add(r * PANEL + 8 * half).cast(), s) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::xnn_qgemm::isas;
    use super::*;

    /// Quad sums of every form and ISA equal `i64` sums wrapped to `i32`, over random row
    /// counts, depths and strides, with the extreme values (`u8` 255 and 0, `i16` ±255,
    /// weights -128 and 127) that make the sums wrap.
    #[test]
    fn quad_sums_equal_reference() {
        let mut rng = fastrand::Rng::with_seed(77);
        for case in 0..300 {
            let (rows, k) = (rng.usize(1..=MR), 4 * rng.usize(1..64));
            let lda = k + 4 * rng.usize(0..3);
            let extreme = case % 4 == 0;
            let w: Vec<i8> = (0..k * PANEL)
                .map(|_| if extreme { [-128, 127][rng.usize(0..2)] } else { rng.i8(..) })
                .collect();
            let u: Vec<u8> = (0..(rows - 1) * lda + k)
                .map(|_| if extreme { [0, 255][rng.usize(0..2)] } else { rng.u8(..) })
                .collect();
            let c: Vec<i16> = u.iter().map(|&v| v as i16 - rng.i16(0..256)).collect();
            let want = |x: &dyn Fn(usize) -> i64| -> Vec<i32> {
                let mut out = vec![0i32; MR * PANEL];
                for r in 0..rows {
                    for ch in 0..PANEL {
                        let s: i64 = (0..k)
                            .map(|i| x(r * lda + i) * i64::from(w[quad_index(ch, i) - SUMS]))
                            .sum();
                        out[r * PANEL + ch] = s as i32;
                    }
                }
                out
            };
            let (wu, wc) = (want(&|i| i64::from(u[i])), want(&|i| i64::from(c[i])));
            for isa in isas() {
                let mut acc = [0i32; MR * PANEL];
                quad_sums_u8(isa, &u, lda, rows, &w, k, &mut acc);
                assert_eq!(acc[..rows * PANEL], wu[..rows * PANEL], "case {case} {isa:?} u8");
                let mut acc = [0i32; MR * PANEL];
                quad_sums_i16(isa, &c, lda, rows, &w, k, &mut acc);
                assert_eq!(acc[..rows * PANEL], wc[..rows * PANEL], "case {case} {isa:?}");
                // Two panels at once: the same panel twice, `stride` apart with other bytes
                // between them.
                #[cfg(target_arch = "x86_64")]
                if isa == Isa::Vnni {
                    let gap = 4 * rng.usize(0..9);
                    let mut ww: Vec<i8> = (0..2 * w.len() + gap).map(|_| rng.i8(..)).collect();
                    ww[..w.len()].copy_from_slice(&w);
                    ww[w.len() + gap..].copy_from_slice(&w);
                    let mut acc = [[0i32; MR * PANEL]; 2];
                    quad_sums_u8_pair(isa, &u, lda, rows, (&ww, w.len() + gap), k, &mut acc);
                    for a in acc {
                        assert_eq!(a[..rows * PANEL], wu[..rows * PANEL], "case {case} pair");
                    }
                }
            }
        }
    }

    /// The column sums of a segment are its weights' sums per channel, in both forms; an Int4
    /// segment holds what was set, and unpacks to the Int8 segment of the same weights.
    #[test]
    fn column_sums_are_the_weights_sums() {
        let mut rng = fastrand::Rng::with_seed(3);
        let bk = 40;
        let w: Vec<i8> = (0..bk * PANEL).map(|_| rng.i8(-8..8)).collect();
        let mut segments = Vec::new();
        for form in [PanelForm::Int8, PanelForm::Int4] {
            let mut seg = vec![0i8; form.segment_len(bk)];
            for (t, &v) in w.iter().enumerate() {
                form.set_weight(&mut seg, t % PANEL, t / PANEL, v);
            }
            write_column_sums(&mut seg, form, bk);
            let sums = column_sums(&seg);
            for (c, &s) in sums.iter().enumerate() {
                assert_eq!(form.weight(&seg, c, 7), w[7 * PANEL + c], "{form:?}");
                let want: i32 = (0..bk).map(|i| i32::from(w[i * PANEL + c])).sum();
                assert_eq!(s, want, "{form:?} channel {c}");
            }
            segments.push(seg);
        }
        let mut unpacked = vec![0i8; bk * PANEL];
        unpack_nibbles(&segments[1][SUMS..], &mut unpacked);
        assert_eq!(unpacked, segments[0][SUMS..]);
    }

    /// The AVX-512 VNNI sums over Int4 panels (one and two at once, split and single
    /// accumulators) equal `i64` sums of the stored nibbles (`w + 8`).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn nibble_sums_equal_reference() {
        if !isas().contains(&Isa::Vnni) {
            eprintln!("SKIPPED: no AVX-512 VNNI here");
            return;
        }
        let mut rng = fastrand::Rng::with_seed(78);
        for case in 0..200 {
            let (rows, k) = (rng.usize(1..=MR), 8 * rng.usize(1..40));
            let lda = k + 4 * rng.usize(0..3);
            let extreme = case % 4 == 0;
            let form = PanelForm::Int4;
            let seg_len = form.segment_len(k);
            let gap = 4 * rng.usize(0..5);
            let mut w = vec![0i8; 2 * seg_len + gap];
            let mut want = [[0i64; MR * PANEL]; 2];
            let u: Vec<u8> = (0..(rows - 1) * lda + k)
                .map(|_| if extreme { [0, 255][rng.usize(0..2)] } else { rng.u8(..) })
                .collect();
            for (q, at) in [0, seg_len + gap].into_iter().enumerate() {
                let seg = &mut w[at..at + seg_len];
                for c in 0..PANEL {
                    for i in 0..k {
                        let v = if extreme { [-8, 7][rng.usize(0..2)] } else { rng.i8(-8..8) };
                        form.set_weight(seg, c, i, v);
                        for r in 0..rows {
                            want[q][r * PANEL + c] += i64::from(u[r * lda + i]) * i64::from(v + 8);
                        }
                    }
                }
            }
            let stride = seg_len + gap;
            let mut acc = [[0i32; MR * PANEL]; 2];
            quad_sums_u4::<2>(Isa::Vnni, &u, lda, rows, (&w[SUMS..], stride), k, &mut acc);
            for q in 0..2 {
                for t in 0..rows * PANEL {
                    assert_eq!(acc[q][t], want[q][t] as i32, "case {case} panel {q} at {t}");
                }
            }
            let mut acc = [[0i32; MR * PANEL]; 2];
            quad_sums_u4::<1>(Isa::Vnni, &u, lda, rows, (&w[SUMS..], stride), k, &mut acc);
            for t in 0..rows * PANEL {
                assert_eq!(acc[0][t], want[0][t] as i32, "case {case} one panel at {t}");
            }
        }
    }
}
