//! XNNPACK's quantized integer arithmetic on plain slices, reproduced for the native runner of
//! ExecuTorch's XNNPACK delegate (the XNNPACK sources the delegate builds; XNNPACK
//! at 92a7ad50, the commit ExecuTorch 1.5.1 pins). Every function follows the scalar
//! micro-kernel of the named XNNPACK source operation by operation, so the results are bit
//! for bit XNNPACK's wherever its scalar kernels are (SIMD variants may fuse a multiply-add).
//!
//! Conventions:
//! - Rounding is round-half-to-even. XNNPACK's "fmagic" form adds `12582912.0f` (1.5·2^23)
//!   and reinterprets the bits ([`fmagic`]); it is exact for the clamped values it is used on.
//! - Scales and bounds are `f32` (XNNPACK stores `float`); zero points are `i32`.
//! - A clamp `max(v, lo)` then `min(v, hi)` sends NaN to `lo`, as XNNPACK's
//!   `math_max_f32(v, lo)` does (`lo < v ? v : lo`).
//! - Integer accumulators are `i32` with wrapping arithmetic, as XNNPACK's (UBSan-disabled)
//!   kernels.
//!
//! Parameter setup (multipliers, shifts, requantization scales) is done once by small pure
//! functions ([`qs8_add_params`], [`q8_cvt_params`], [`qd8_params`], [`qs8_requant_scales`],
//! [`qs8_mean_params`]); the loops take their results.
//!
//! The slice functions document their length preconditions and panic when they are violated;
//! the kernels of `ops::xnnpack` check every length before calling them.
//!
//! The GEMM-like layers ([`qs8_convolution`], [`qs8_fully_connected`],
//! [`qd8_fully_connected`]) run the vectorized, threaded integer loops of `xnn_qgemm`; their
//! `*_scalar` twins keep the literal loops as the reference. The integer sums are exact (only
//! wrapping, which is associative), so both give the same bits.

use super::threads::Threads;
use super::xnn_qconv::PackedQs8Conv;
use super::xnn_qd8 as qd;
use super::xnn_qgemm as qg;
use super::xnn_qmath::{clamp_f32, lrintf};
pub use super::xnn_qmath::{
    fmagic, qs8_output_range, qs8_quantize_bound, qs8_requantize, qu8_quantize_bound,
    quantize_scaled, ConvGeometry, Qs8Filter, Qs8Out, MAGIC_BIAS, MAGIC_BIAS_BITS,
};

/// f32 → qs8 (X `f32-qs8-vcvt`): `inv = 1.0f / scale` in f32, then
/// `q = rne(clamp(x * inv, -128 - zp, 127 - zp)) + zp`.
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn f32_to_qs8(x: &[f32], scale: f32, zero_point: i32, out: &mut [i8]) {
    assert_eq!(x.len(), out.len());
    let inv = 1.0f32 / scale;
    each(x, out, |v| quantize_scaled(v * inv, zero_point, -128, 127) as i8);
}

/// f32 → qu8 (X `f32-qu8-vcvt`): as [`f32_to_qs8`] with the range `[0, 255]`.
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn f32_to_qu8(x: &[f32], scale: f32, zero_point: i32, out: &mut [u8]) {
    assert_eq!(x.len(), out.len());
    let inv = 1.0f32 / scale;
    each(x, out, |v| quantize_scaled(v * inv, zero_point, 0, 255) as u8);
}

/// ExecuTorch's portable `quantize_per_tensor` of float32 into int8 or uint8:
/// `clamp(zp + (int64)rne(x * inv), lo, hi)` with NaN taken as 0 (Rust's saturating cast),
/// in loops built for the CPU's vectors. The rounded value is clamped to `±2^30` first, which
/// keeps every result (`|zp| <= 2^24`, `[lo, hi]` inside the dtype's range) and lets the sum
/// be an `i32`.
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn quantize_per_tensor<T: Copy + Send + TryFrom<i32>>(
    x: &[f32],
    inv: f32,
    zp: i32,
    lo: i32,
    hi: i32,
    out: &mut [T],
) {
    assert_eq!(x.len(), out.len());
    const BOUND: f32 = (1 << 30) as f32;
    each(x, out, |v| {
        let r = (v * inv).round_ties_even();
        let r = if r.is_nan() { 0 } else { r.clamp(-BOUND, BOUND) as i32 };
        let q = (r + zp).clamp(lo, hi);
        T::try_from(q).ok().expect("the range lies inside the dtype's")
    });
}

/// ExecuTorch's portable `dequantize_per_tensor` of int8 or uint8 into float32:
/// `(float)(q - zp) * scale` (exact in `i32`: `|zp| <= 2^24`).
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn dequantize_per_tensor<T: Copy + Sync + Into<i32>>(
    x: &[T],
    zp: i32,
    scale: f32,
    out: &mut [f32],
) {
    assert_eq!(x.len(), out.len());
    each(x, out, |q| (q.into() - zp) as f32 * scale);
}

/// qs8 → f32 (X `qs8-f32-vcvt`): `(float)(q - zp) * scale`.
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn qs8_to_f32(x: &[i8], scale: f32, zero_point: i32, out: &mut [f32]) {
    assert_eq!(x.len(), out.len());
    each(x, out, |q| (q as i32 - zero_point) as f32 * scale);
}

/// qu8 → f32 (X `qu8-f32-vcvt`): `(float)(q - zp) * scale`.
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn qu8_to_f32(x: &[u8], scale: f32, zero_point: i32, out: &mut [f32]) {
    assert_eq!(x.len(), out.len());
    each(x, out, |q| (q as i32 - zero_point) as f32 * scale);
}

/// Parameters of an 8-bit requantizing conversion (X `qs8-vcvt` / `qu8-vcvt` scalar).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CvtParams {
    /// `lrintf(256.0f * (in_scale / out_scale))`, in `[1, 32768]`.
    pub multiplier: i32,
    /// `(out_zp << 8) - multiplier * in_zp + 0x80`.
    pub bias: i32,
}

/// `xnn_init_qs8_cvt_scalar_params` (same for qu8): `ratio = in_scale / out_scale` in f32,
/// `multiplier = lrintf(256.0f * ratio)`, `bias = (out_zp << 8) - multiplier * in_zp + 0x80`.
/// `None` when the ratio is outside XNNPACK's asserted range `[2^-8, 2^7]` (or not finite).
pub fn q8_cvt_params(in_scale: f32, in_zp: i32, out_scale: f32, out_zp: i32) -> Option<CvtParams> {
    let ratio = in_scale / out_scale;
    if !(1.0 / 256.0..=128.0).contains(&ratio) {
        return None;
    }
    let multiplier = lrintf(256.0f32 * ratio);
    let bias = (((out_zp as u32) << 8) as i32)
        .wrapping_sub(multiplier.wrapping_mul(in_zp))
        .wrapping_add(0x80);
    Some(CvtParams { multiplier, bias })
}

/// One requantizing conversion: `clamp((bias + q * multiplier) >> 8, lo, hi)` (arithmetic
/// shift, so ties round up).
#[inline]
pub fn q8_cvt(q: i32, p: &CvtParams, lo: i32, hi: i32) -> i32 {
    (p.bias.wrapping_add(q.wrapping_mul(p.multiplier)) >> 8).clamp(lo, hi)
}

/// qs8 → qs8 requantization (X `qs8-vcvt/gen/qs8-vcvt-scalar-u1.c`), with [`q8_cvt_params`].
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn qs8_cvt(x: &[i8], p: &CvtParams, out: &mut [i8]) {
    assert_eq!(x.len(), out.len());
    each(x, out, |q| q8_cvt(q as i32, p, -128, 127) as i8);
}

/// qu8 → qu8 requantization (X `qu8-vcvt/gen/qu8-vcvt-scalar-u1.c`), with [`q8_cvt_params`].
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn qu8_cvt(x: &[u8], p: &CvtParams, out: &mut [u8]) {
    assert_eq!(x.len(), out.len());
    each(x, out, |q| q8_cvt(q as i32, p, 0, 255) as u8);
}

/// Dynamic (qd8) quantization parameters of one row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qd8Params {
    /// The nudged zero point, in `[-128, 127]`.
    pub zero_point: i32,
    /// The quantize multiplier `255 / (rmax - rmin)` (1 for an all-zero row).
    pub multiplier: f32,
    /// The dequantize scale the GEMM uses, `1.0f / multiplier`.
    pub scale: f32,
}

/// `xnn_f32_qd8_asymmetric_quantization_params(min, max)` (X `src/xnnpack/quantization.h`),
/// in f32 throughout:
/// ```text
/// rmin = min(0, min); rmax = max(0, max)
/// m    = rmin == rmax ? 1 : 255 / (rmax - rmin)
/// zp   = (-128 + rmin*m) + (127 + rmax*m) > 0 ? -128 - rmin*m : 127 - rmax*m
/// zp   = lrintf(clamp(zp, -128, 127));   scale = 1 / m
/// ```
pub fn qd8_params(min: f32, max: f32) -> Qd8Params {
    let (qmin, qmax) = (-128.0f32, 127.0f32);
    let rmin = if min < 0.0 { min } else { 0.0 };
    let rmax = if max < 0.0 { 0.0 } else { max };
    let m = if rmin == rmax { 1.0 } else { (qmax - qmin) / (rmax - rmin) };
    let dmin = rmin * m;
    let dmax = rmax * m;
    let zp = if (qmin + dmin) + (qmax + dmax) > 0.0 { qmin - dmin } else { qmax - dmax };
    let zp = clamp_f32(zp, qmin, qmax);
    Qd8Params { zero_point: lrintf(zp), multiplier: m, scale: 1.0 / m }
}

/// Quantizes one row dynamically (X `operator-run.c::xnn_compute_f32_qx8_convert`): the row's
/// min and max (starting from `+inf` / `-inf`), [`qd8_params`], then the f32-qs8 fmagic
/// conversion with the multiplier as its scale: `q = rne(clamp(x*m, -128-zp, 127-zp)) + zp`.
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn qd8_quantize_row(x: &[f32], out: &mut [i8]) -> Qd8Params {
    assert_eq!(x.len(), out.len());
    let mut bounds = [f32::INFINITY, f32::NEG_INFINITY];
    qg::best_isa().run(&MinMax(x), 0..x.len(), &mut bounds);
    let p = qd8_params(bounds[0], bounds[1]);
    each(x, out, |v| quantize_scaled(v * p.multiplier, p.zero_point, -128, 127) as i8);
    p
}

/// The smallest and the largest of a row, NaNs skipped (`v < lo` and `hi < v` are false for
/// them), in 16 lanes the compiler vectorizes. Any order gives the same values: only the sign
/// of a zero bound could differ, and [`qd8_params`] clamps both bounds through zero, which
/// makes `-0.0` and `0.0` alike.
struct MinMax<'a>(&'a [f32]);

impl qg::IsaTask for MinMax<'_> {
    /// `[min, max]`, starting from `[+inf, -inf]`.
    type Out = [f32; 2];

    #[inline(always)]
    fn run(&self, run: std::ops::Range<usize>, out: &mut [f32; 2]) {
        const L: usize = 16;
        let (mut lo, mut hi) = ([out[0]; L], [out[1]; L]);
        let x = &self.0[run];
        let mut chunks = x.chunks_exact(L);
        for c in &mut chunks {
            for ((l, h), &v) in lo.iter_mut().zip(hi.iter_mut()).zip(c) {
                *l = if v < *l { v } else { *l };
                *h = if *h < v { v } else { *h };
            }
        }
        for &v in chunks.remainder() {
            lo[0] = if v < lo[0] { v } else { lo[0] };
            hi[0] = if hi[0] < v { v } else { hi[0] };
        }
        for (&l, &h) in lo.iter().zip(&hi) {
            out[0] = if l < out[0] { l } else { out[0] };
            out[1] = if out[1] < h { h } else { out[1] };
        }
    }
}

/// The signed 4-bit weight `k` of a packed row: low nibble for even `k`, high nibble for odd
/// `k`, stored as value + 8.
#[inline]
pub fn nibble(row: &[u8], k: usize) -> i32 {
    let b = row[k / 2];
    let n = if k.is_multiple_of(2) { b & 0x0F } else { b >> 4 };
    n as i32 - 8
}

/// The weights of a dynamically quantized fully connected layer, `n` output channels of `k`
/// inputs.
#[derive(Clone, Copy, Debug)]
pub enum Qd8Weights<'a> {
    /// qc8w: int8 `[n, k]`, one f32 scale per output channel (`[n]`).
    Qc8w {
        /// `n * k` weights, row-major.
        w: &'a [i8],
        /// `n` scales.
        scales: &'a [f32],
    },
    /// qc4w: packed nibbles `[n, ceil(k/2)]` (zero point 8), one f32 scale per output channel.
    Qc4w {
        /// `n * ceil(k/2)` bytes.
        w: &'a [u8],
        /// `n` scales.
        scales: &'a [f32],
    },
    /// qb4w: packed nibbles `[n, k/2]` (zero point 8), f32 scales `[n, k / block_size]`.
    Qb4w {
        /// `n * k/2` bytes.
        w: &'a [u8],
        /// `n * (k / block_size)` scales (bf16 values widened to f32).
        scales: &'a [f32],
        /// Inputs per block (divides `k`).
        block_size: usize,
    },
    /// Any of the above laid out once for the fast loops ([`Qd8Weights::to_panels`]): panels
    /// of [`QD8_PANEL`] output channels `[ceil(n / QD8_PANEL), blocks, segment]`, each block
    /// of inputs a segment of its `QD8_PANEL` column sums (little-endian `i32`) then its
    /// weights, `[inputs / 4][QD8_PANEL][4]` bytes ([`Qd8PanelForm::Int8`]) or 4-bit weights
    /// two a byte ([`Qd8PanelForm::Int4`]) ([`qd8_panel_shapes`]), and f32 scales
    /// `[ceil(n / QD8_PANEL), blocks, QD8_PANEL]` (channels past `n` and inputs past `k` zero):
    /// one block of `k` rounded up to a multiple of 4 with the per-channel scales of
    /// qc8w/qc4w (`block_size` 0), or `k / block_size` blocks with those of qb4w.
    Panels {
        /// The panels, [`qd8_panel_shapes`]`.0` of bytes.
        w: &'a [i8],
        /// `ceil(n / QD8_PANEL) * blocks * QD8_PANEL` scales.
        scales: &'a [f32],
        /// Inputs per block, or 0 for per-channel scales.
        block_size: usize,
        /// How the weights are stored.
        form: Qd8PanelForm,
    },
}

/// Output channels per panel of [`Qd8Weights::Panels`].
pub const QD8_PANEL: usize = qd::PANEL;

/// How [`Qd8Weights::Panels`] store their weights.
pub use qd::PanelForm as Qd8PanelForm;

/// The shapes of [`Qd8Weights::Panels`]' weights and scales for `n` output channels of `k`
/// inputs in blocks of `block_size` (0: one block, per-channel scales) stored in `form`, or
/// `None` when the block size is not 0 or a multiple of 4 dividing `k`, the blocks do not
/// fit the form (Int4: multiples of 8), or a size overflows.
pub fn qd8_panel_shapes(
    n: usize,
    k: usize,
    block_size: usize,
    form: Qd8PanelForm,
) -> Option<([usize; 3], [usize; 3])> {
    let panels = n.div_ceil(QD8_PANEL);
    let (bk, nb) = match block_size {
        0 => (k.checked_next_multiple_of(4)?, 1),
        b if b.is_multiple_of(4) && k.is_multiple_of(b) => (b, k / b),
        _ => return None,
    };
    if !form.holds_block(bk) {
        return None;
    }
    // The int8 segment is the larger: a size that fits it fits either form's.
    bk.checked_mul(QD8_PANEL)?.checked_add(4 * QD8_PANEL)?;
    let seg = form.segment_len(bk);
    panels.checked_mul(nb)?.checked_mul(seg)?;
    Some(([panels, nb, seg], [panels, nb, QD8_PANEL]))
}

/// The segment of [`Qd8Weights::Panels`] that holds channel `j`'s weights of input `kk` (of
/// `k` inputs, blocks of `block_size` or 0), and the input's place in the block.
fn panel_place(j: usize, kk: usize, k: usize, block_size: usize) -> (usize, usize) {
    let (nb, b, i) = match block_size {
        0 => (1, 0, kk),
        bs => (k / bs, kk / bs, kk % bs),
    };
    ((j / QD8_PANEL) * nb + b, i)
}

impl Qd8Weights<'_> {
    /// Weight `kk` of output channel `j` as an integer.
    #[inline]
    fn at(&self, j: usize, kk: usize, k: usize) -> i32 {
        match *self {
            Qd8Weights::Qc8w { w, .. } => w[j * k + kk] as i32,
            Qd8Weights::Qc4w { w, .. } => nibble(&w[j * k.div_ceil(2)..], kk),
            Qd8Weights::Qb4w { w, .. } => nibble(&w[j * (k / 2)..], kk),
            Qd8Weights::Panels { w, block_size, form, .. } => {
                let (segment, i) = panel_place(j, kk, k, block_size);
                let bk = if block_size == 0 { k.next_multiple_of(4) } else { block_size };
                let len = form.segment_len(bk);
                form.weight(&w[segment * len..][..len], j % QD8_PANEL, i) as i32
            }
        }
    }

    /// Inputs per block of scales, or 0 for per-channel scales.
    fn block_size(&self) -> usize {
        match *self {
            Qd8Weights::Qb4w { block_size, .. } | Qd8Weights::Panels { block_size, .. } => {
                block_size
            }
            Qd8Weights::Qc8w { .. } | Qd8Weights::Qc4w { .. } => 0,
        }
    }

    /// Scale of output channel `j` for block `b` (block 0 for per-channel scales).
    #[inline]
    fn scale(&self, j: usize, b: usize, k: usize) -> f32 {
        match *self {
            Qd8Weights::Qc8w { scales, .. } | Qd8Weights::Qc4w { scales, .. } => scales[j],
            Qd8Weights::Qb4w { scales, block_size, .. } => scales[j * (k / block_size) + b],
            Qd8Weights::Panels { scales, block_size, .. } => {
                let nb = k.checked_div(block_size).unwrap_or(1);
                scales[((j / QD8_PANEL) * nb + b) * QD8_PANEL + j % QD8_PANEL]
            }
        }
    }

    /// Any of these weights laid out as [`Qd8Weights::Panels`] in `form` (once, when a graph
    /// is lowered): the panels, the scales and the block size (0: per-channel scales); `None`
    /// when the block size does not fit the form (a multiple of 4, of 8 for Int4: XNNPACK's
    /// are multiples of 32), Int4 is asked of 8-bit weights, or the weights do not
    /// [fit](Qd8Weights::fits) `[n, k]`.
    pub fn to_panels(
        &self,
        n: usize,
        k: usize,
        form: Qd8PanelForm,
    ) -> Option<(Vec<i8>, Vec<f32>, usize)> {
        let block = self.block_size();
        let (wshape, sshape) = qd8_panel_shapes(n, k, block, form)?;
        let four_bit = match *self {
            Qd8Weights::Qc8w { .. } => false,
            Qd8Weights::Qc4w { .. } | Qd8Weights::Qb4w { .. } => true,
            Qd8Weights::Panels { form, .. } => form == Qd8PanelForm::Int4,
        };
        if !self.fits(n, k) || (form == Qd8PanelForm::Int4 && !four_bit) {
            return None;
        }
        let (nb, seg) = (sshape[1], wshape[2]);
        let bk = if block == 0 { k.next_multiple_of(4) } else { block };
        // Padding weights are 0 (a nibble of 8 in Int4).
        let mut w = vec![0i8; wshape.iter().product()];
        let mut scales = vec![0f32; sshape.iter().product()];
        // qb4w nibbles into Int4 panels: the stored form is the same, so an LLM's weights (all
        // of them pass here at load) move a byte pair at a time.
        let nibbles = match (*self, form) {
            (Qd8Weights::Qb4w { w: src, .. }, Qd8PanelForm::Int4) => Some(src),
            _ => None,
        };
        for (s, segment) in w.chunks_exact_mut(seg).enumerate() {
            let (p, b) = (s / nb, s % nb);
            for c in 0..QD8_PANEL {
                let j = p * QD8_PANEL + c;
                if j < n {
                    scales[s * QD8_PANEL + c] = self.scale(j, b, k);
                }
                match nibbles {
                    Some(src) if j < n => {
                        qd::move_nibbles(&src[j * (k / 2) + b * bk / 2..][..bk / 2], segment, c)
                    }
                    _ => {
                        for i in 0..bk {
                            let kk = b * bk + i;
                            let v = if j < n && kk < k { self.at(j, kk, k) as i8 } else { 0 };
                            form.set_weight(segment, c, i, v);
                        }
                    }
                }
            }
            qd::write_column_sums(segment, form, bk);
        }
        Some((w, scales, block))
    }

    /// Whether the slices have the lengths an `[n, k]` layer needs (and, for qb4w, the block
    /// size is non-zero and divides `k`).
    pub fn fits(&self, n: usize, k: usize) -> bool {
        match *self {
            Qd8Weights::Panels { w, scales, block_size, form } => {
                qd8_panel_shapes(n, k, block_size, form).is_some_and(|(ws, ss)| {
                    ws.iter().product::<usize>() == w.len()
                        && ss.iter().product::<usize>() == scales.len()
                })
            }
            Qd8Weights::Qc8w { w, scales } => {
                n.checked_mul(k) == Some(w.len()) && scales.len() == n
            }
            Qd8Weights::Qc4w { w, scales } => {
                n.checked_mul(k.div_ceil(2)) == Some(w.len()) && scales.len() == n
            }
            Qd8Weights::Qb4w { w, scales, block_size } => {
                block_size > 0
                    && k.is_multiple_of(2)
                    && k.is_multiple_of(block_size)
                    && n.checked_mul(k / 2) == Some(w.len())
                    && n.checked_mul(k / block_size) == Some(scales.len())
            }
        }
    }
}

/// Dynamically quantized fully connected (X `qd8-f32-qc8w-gemm`, `qd8-f32-qc4w-gemm`,
/// `qd8-f32-qb4w-gemm` scalar kernels): `x` is `m` rows of `k` floats, `out` `m` rows of `n`.
/// Each row is quantized by [`qd8_quantize_row`] (zero point `zp`, scale `s`), then for
/// output channel `j`:
/// - qc8w / qc4w: `acc = Σ (q - zp) * w` in i32; `out = ((float)acc * s) * scale[j] + bias[j]`;
/// - qb4w: per block `b`, `acc_b = Σ_{k∈b} (q - zp) * w` in i32; `sum = Σ_b (float)acc_b *
///   scale[j][b]` accumulated in f32 from 0, in block order; `out = sum * s + bias[j]`;
///
/// then `max(out, output_min)` and `min(out, output_max)`. A missing bias adds `0.0`, as the
/// packed zero bias does.
///
/// # Panics
/// If the lengths disagree (`x.len() == m*k`, `out.len() == m*n`, weights fitting
/// [`Qd8Weights::fits`], bias of length `n`) or `k == 0`.
#[allow(clippy::too_many_arguments)]
pub fn qd8_fully_connected(
    x: &[f32],
    k: usize,
    weights: &Qd8Weights<'_>,
    n: usize,
    bias: Option<&[f32]>,
    output_min: f32,
    output_max: f32,
    out: &mut [f32],
    threads: &Threads,
) {
    qd8_fully_connected_isa(
        qg::best_isa(),
        x,
        k,
        weights,
        n,
        bias,
        output_min,
        output_max,
        out,
        threads,
    )
}

/// The rows of `x` (`k` values each) quantized by [`qd8_quantize_row`], each value `q` stored
/// as `form(q, zero_point)` in rows `stride` apart (the values past `k` zero), and each row's
/// parameters.
fn quantize_rows<T: Copy + Default>(
    x: &[f32],
    k: usize,
    stride: usize,
    form: impl Fn(i8, i32) -> T,
) -> (Vec<T>, Vec<Qd8Params>) {
    let m = x.len() / k;
    let mut q = vec![0i8; k];
    let mut a = vec![T::default(); m * stride];
    let mut params = Vec::with_capacity(m);
    for (xr, ar) in x.chunks_exact(k).zip(a.chunks_exact_mut(stride)) {
        let p = qd8_quantize_row(xr, &mut q);
        for (d, &v) in ar.iter_mut().zip(&q) {
            *d = form(v, p.zero_point);
        }
        params.push(p);
    }
    (a, params)
}

/// `q - zp`, exact in `i16` (both in `[-128, 127]`).
fn centered(q: i8, zp: i32) -> i16 {
    i16::from(q) - zp as i16
}

/// [`qd8_fully_connected`] on the loops of `isa`: the integer sums by [`qg::dot_rows`] (qc4w and
/// qb4w nibbles unpacked to `i8` first), then the scalar kernel's float formulas.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qd8_fully_connected_isa(
    isa: qg::Isa,
    x: &[f32],
    k: usize,
    weights: &Qd8Weights<'_>,
    n: usize,
    bias: Option<&[f32]>,
    output_min: f32,
    output_max: f32,
    out: &mut [f32],
    threads: &Threads,
) {
    assert!(k > 0 && x.len().is_multiple_of(k));
    let m = x.len() / k;
    assert_eq!(out.len(), m * n);
    assert!(weights.fits(n, k));
    if let Some(b) = bias {
        assert_eq!(b.len(), n);
    }
    if out.is_empty() {
        return;
    }
    if let Qd8Weights::Panels { w, scales, block_size, form } = *weights {
        // Rows of `kq` activations (the padding's weights are zero).
        let kq = k.next_multiple_of(4);
        let scales = if block_size == 0 {
            qd::PanelScales::PerChannel(scales)
        } else {
            qd::PanelScales::Blocks { scales, block: block_size }
        };
        let run = |a: qd::QuadRows<'_>, params: &[Qd8Params], out: &mut [f32]| {
            let row_scale: Vec<f32> = params.iter().map(|p| p.scale).collect();
            let bounds = (output_min, output_max);
            let row_scale = &row_scale;
            let gemm = qd::PanelGemm { isa, a, row_scale, m, kq, n, w, form, scales, bias, bounds };
            gemm.run_on(out, threads);
        };
        if qd::QuadRows::unsigned_for(isa) {
            // `q + 128`: the sign bit flipped.
            let (a, params) = quantize_rows(x, k, kq, |q, _| q as u8 ^ 0x80);
            let zero_points: Vec<i32> = params.iter().map(|p| p.zero_point).collect();
            // Int4 panels' loops sum the stored nibbles; the block sums correct them.
            let bk = if block_size == 0 { kq } else { block_size };
            let block_sums: Vec<i32> = match form {
                Qd8PanelForm::Int4 => {
                    a.chunks_exact(bk).map(|b| b.iter().map(|&u| i32::from(u)).sum()).collect()
                }
                Qd8PanelForm::Int8 => Vec::new(),
            };
            let zero_points = &zero_points;
            let a = qd::QuadRows::Unsigned { a: &a, zero_points, block_sums: &block_sums };
            run(a, &params, out);
        } else {
            let (a, params) = quantize_rows(x, k, kq, centered);
            run(qd::QuadRows::Centered(&a), &params, out);
        }
        return;
    }
    let (a, params) = quantize_rows(x, k, k, centered);
    let unpack = |w: &[u8], kb: usize| -> Vec<i8> {
        let mut u = vec![0i8; n * k];
        for (ur, wr) in u.chunks_exact_mut(k).zip(w.chunks_exact(kb)) {
            // Byte pairs first (a branch-free loop the compiler vectorizes), then an odd tail.
            let (pairs, tail) = ur.split_at_mut(k & !1);
            for (d, &b) in pairs.chunks_exact_mut(2).zip(wr) {
                d[0] = (b & 0x0F) as i8 - 8;
                d[1] = (b >> 4) as i8 - 8;
            }
            if let Some(t) = tail.first_mut() {
                *t = nibble(wr, k - 1) as i8;
            }
        }
        u
    };
    let (w, seg): (std::borrow::Cow<'_, [i8]>, usize) = match *weights {
        Qd8Weights::Qc8w { w, .. } => (w.into(), k),
        Qd8Weights::Qc4w { w, .. } => (unpack(w, k.div_ceil(2)).into(), k),
        Qd8Weights::Qb4w { w, block_size, .. } => (unpack(w, k / 2).into(), block_size),
        Qd8Weights::Panels { .. } => unreachable!("handled above"),
    };
    let nb = k / seg;
    let mut acc = vec![0i32; n * m * nb];
    qg::dot_rows(isa, &a, m, k, &w, n, seg, &mut acc, threads);
    for (r, (or, p)) in out.chunks_exact_mut(n).zip(&params).enumerate() {
        for (j, o) in or.iter_mut().enumerate() {
            let b = bias.map_or(0.0, |b| b[j]);
            let sums = &acc[(j * m + r) * nb..][..nb];
            let v = match *weights {
                Qd8Weights::Qc8w { scales, .. } | Qd8Weights::Qc4w { scales, .. } => {
                    ((sums[0] as f32) * p.scale) * scales[j] + b
                }
                Qd8Weights::Qb4w { scales, .. } => {
                    let mut sum = 0.0f32;
                    for (blk, &s) in sums.iter().enumerate() {
                        sum += (s as f32) * scales[j * nb + blk];
                    }
                    sum * p.scale + b
                }
                Qd8Weights::Panels { .. } => unreachable!("handled above"),
            };
            *o = clamp_f32(v, output_min, output_max);
        }
    }
}

/// The scalar loop of [`qd8_fully_connected`], XNNPACK's scalar micro-kernel operation by
/// operation (the reference the fast loops are tested against), on any weight layout.
#[allow(clippy::too_many_arguments)]
pub fn qd8_fully_connected_scalar(
    x: &[f32],
    k: usize,
    weights: &Qd8Weights<'_>,
    n: usize,
    bias: Option<&[f32]>,
    output_min: f32,
    output_max: f32,
    out: &mut [f32],
) {
    assert!(k > 0 && x.len().is_multiple_of(k));
    let m = x.len() / k;
    assert_eq!(out.len(), m * n);
    assert!(weights.fits(n, k));
    if let Some(b) = bias {
        assert_eq!(b.len(), n);
    }
    let mut q = vec![0i8; k];
    let mut qz = vec![0i32; k];
    for (xr, or) in x.chunks_exact(k).zip(out.chunks_exact_mut(n.max(1))) {
        let p = qd8_quantize_row(xr, &mut q);
        for (d, &v) in qz.iter_mut().zip(&q) {
            *d = v as i32 - p.zero_point;
        }
        for (j, o) in or.iter_mut().enumerate().take(n) {
            let b = bias.map_or(0.0, |b| b[j]);
            let v = match weights.block_size() {
                // qc8w, qc4w: one sum per channel.
                0 => {
                    let mut acc = 0i32;
                    for (i, &a) in qz.iter().enumerate() {
                        acc = acc.wrapping_add(a.wrapping_mul(weights.at(j, i, k)));
                    }
                    ((acc as f32) * p.scale) * weights.scale(j, 0, k) + b
                }
                // qb4w: one sum per block, scaled and added up in block order.
                block => {
                    let mut sum = 0.0f32;
                    for blk in 0..k / block {
                        let mut acc = 0i32;
                        for i in blk * block..(blk + 1) * block {
                            acc = acc.wrapping_add(qz[i].wrapping_mul(weights.at(j, i, k)));
                        }
                        sum += (acc as f32) * weights.scale(j, blk, k);
                    }
                    sum * p.scale + b
                }
            };
            *o = clamp_f32(v, output_min, output_max);
        }
    }
}

/// The per-channel requantization scales of a QS8 convolution or fully connected layer
/// (X `src/operators/fully-connected-nc.c`): `(in_scale * w_scale[c]) / out_scale`, in f32 and
/// in that order.
pub fn qs8_requant_scales(in_scale: f32, w_scales: &[f32], out_scale: f32) -> Vec<f32> {
    w_scales.iter().map(|&s| in_scale * s / out_scale).collect()
}

/// QS8 fully connected: `x` is `m` rows of `k`, `w` is `[n, k]`, `out` `m` rows of `n`;
/// `acc = bias[j] + Σ (x - x_zp) * w` in i32, then [`qs8_requantize`] with `scales[j]`
/// (from [`qs8_requant_scales`]).
///
/// # Panics
/// If the lengths disagree or `k == 0`.
pub fn qs8_fully_connected(
    x: &[i8],
    k: usize,
    x_zp: i32,
    f: &Qs8Filter,
    out: &mut [i8],
    threads: &Threads,
) {
    qs8_fully_connected_isa(qg::best_isa(), x, k, x_zp, f, out, threads)
}

/// [`qs8_fully_connected`] on the loops of `isa`: from [`qg::MR`] rows on, the packed
/// convolution product (a 1x1 convolution over an `m x 1` image), below it one dot product
/// per row and output channel ([`qg::dot_rows`]). A zero point outside `[-128, 127]` takes
/// the scalar loop.
pub(crate) fn qs8_fully_connected_isa(
    isa: qg::Isa,
    x: &[i8],
    k: usize,
    x_zp: i32,
    f: &Qs8Filter,
    out: &mut [i8],
    threads: &Threads,
) {
    let (m, n) = check_fully_connected(x, k, f, out);
    if out.is_empty() {
        return;
    }
    if !(-128..=127).contains(&x_zp) {
        return qs8_fully_connected_scalar(x, k, x_zp, f, out);
    }
    let Qs8Filter { w, bias, scales, o } = *f;
    if m >= qg::MR {
        let g = ConvGeometry {
            n: 1,
            h: m,
            w: 1,
            c: k,
            kh: 1,
            kw: 1,
            oh: m,
            ow: 1,
            o: n,
            stride: [1, 1],
            dilation: [1, 1],
            pad_top: 0,
            pad_left: 0,
            groups: 1,
            depthwise: false,
        };
        let packed = PackedQs8Conv::new_isa(isa, g, x_zp, f).expect("the filter was checked");
        return packed.run(x, out, threads);
    }
    let mut acc = vec![0i32; n * m];
    #[cfg(target_arch = "x86_64")]
    let unsigned = super::xnn_qgemv::runs_on(isa);
    #[cfg(not(target_arch = "x86_64"))]
    let unsigned = false;
    if unsigned {
        // `x + 128`: the sign bit flipped.
        let a: Vec<u8> = x.iter().map(|&v| v as u8 ^ 0x80).collect();
        #[cfg(target_arch = "x86_64")]
        super::xnn_qgemv::dot_rows_u8(isa, &a, m, k, x_zp, w, n, &mut acc, threads);
    } else {
        let a: Vec<i16> = x.iter().map(|&v| v as i16 - x_zp as i16).collect();
        qg::dot_rows(isa, &a, m, k, w, n, k, &mut acc, threads);
    }
    for (r, or) in out.chunks_exact_mut(n).enumerate() {
        for (j, d) in or.iter_mut().enumerate() {
            let s = acc[j * m + r];
            let v = bias.map_or(s, |b| b[j].wrapping_add(s));
            *d = qs8_requantize(v, scales[j], o);
        }
    }
}

/// The scalar loop of [`qs8_fully_connected`] (the reference the fast loops are tested
/// against).
pub fn qs8_fully_connected_scalar(x: &[i8], k: usize, x_zp: i32, f: &Qs8Filter, out: &mut [i8]) {
    let (_, n) = check_fully_connected(x, k, f, out);
    let Qs8Filter { w, bias, scales, o } = *f;
    let mut xz = vec![0i32; k];
    for (xr, or) in x.chunks_exact(k).zip(out.chunks_exact_mut(n.max(1))) {
        for (d, &v) in xz.iter_mut().zip(xr) {
            *d = v as i32 - x_zp;
        }
        for (j, (dst, wr)) in or.iter_mut().zip(w.chunks_exact(k)).enumerate() {
            let mut acc = bias.map_or(0, |b| b[j]);
            for (&a, &wv) in xz.iter().zip(wr) {
                acc = acc.wrapping_add(a.wrapping_mul(wv as i32));
            }
            *dst = qs8_requantize(acc, scales[j], o);
        }
    }
}

/// The length preconditions of [`qs8_fully_connected`]; the rows and output channels.
fn check_fully_connected(x: &[i8], k: usize, f: &Qs8Filter, out: &[i8]) -> (usize, usize) {
    assert!(k > 0 && x.len().is_multiple_of(k));
    let (m, n) = (x.len() / k, f.scales.len());
    assert_eq!(out.len(), m * n);
    assert_eq!(f.w.len(), n * k);
    if let Some(b) = f.bias {
        assert_eq!(b.len(), n);
    }
    (m, n)
}

/// QS8 convolution on NHWC data (X `qs8-qc8w-gemm` / `qs8-qc8w-dwconv` fp32 scalar
/// arithmetic): `x` is `[n, h, w, c]`, `wt` is OHWI `[o, kh, kw, c/groups]` (or `[1, kh, kw, o]`
/// when depthwise), `out` is `[n, oh, ow, o]`.
/// `acc = bias[j] + Σ_{taps inside the input} (x - x_zp) * w` in i32 (padded cells equal
/// `x_zp` and contribute 0), then [`qs8_requantize`] with `scales[j]`.
///
/// Runs vectorized loops for the CPU, split over `threads` when the layer is large; the
/// results are those of [`qs8_convolution_scalar`] bit for bit, for every thread count.
///
/// # Panics
/// If `!g.is_valid()` or a length disagrees with `g`.
pub fn qs8_convolution(
    g: &ConvGeometry,
    x: &[i8],
    x_zp: i32,
    f: &Qs8Filter,
    out: &mut [i8],
    threads: &Threads,
) {
    qs8_convolution_isa(qg::best_isa(), g, x, x_zp, f, out, threads)
}

/// [`qs8_convolution`] on the loops of `isa` (a zero point outside `[-128, 127]` takes the
/// scalar loop).
pub(crate) fn qs8_convolution_isa(
    isa: qg::Isa,
    g: &ConvGeometry,
    x: &[i8],
    x_zp: i32,
    f: &Qs8Filter,
    out: &mut [i8],
    threads: &Threads,
) {
    check_conv(g, x, f, out);
    if !(-128..=127).contains(&x_zp) {
        return qs8_convolution_scalar(g, x, x_zp, f, out);
    }
    let packed = PackedQs8Conv::new_isa(isa, *g, x_zp, f).expect("the filter was checked");
    packed.run(x, out, threads)
}

/// The length preconditions of [`qs8_convolution`].
fn check_conv(g: &ConvGeometry, x: &[i8], f: &Qs8Filter, out: &[i8]) {
    assert!(g.is_valid());
    assert_eq!(x.len(), g.n * g.h * g.w * g.c);
    assert_eq!(Some(f.w.len()), g.weight_len());
    assert_eq!(out.len(), g.n * g.oh * g.ow * g.o);
    assert_eq!(f.scales.len(), g.o);
    if let Some(b) = f.bias {
        assert_eq!(b.len(), g.o);
    }
}

/// The scalar loop of [`qs8_convolution`] (the reference the fast loops are tested against).
///
/// # Panics
/// As [`qs8_convolution`].
pub fn qs8_convolution_scalar(
    g: &ConvGeometry,
    x: &[i8],
    x_zp: i32,
    f: &Qs8Filter,
    out: &mut [i8],
) {
    check_conv(g, x, f, out);
    let Qs8Filter { w: wt, bias, scales, o } = *f;
    if out.is_empty() {
        return;
    }
    let mut acc = vec![0i32; g.o];
    let mut xz = vec![0i32; g.c];
    let cg = if g.depthwise { 1 } else { g.c / g.groups };
    let og = if g.depthwise { 1 } else { g.o / g.groups };
    let dm = if g.depthwise { g.o / g.c } else { 1 };
    let mut outs = out.chunks_exact_mut(g.o);
    for b in 0..g.n {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                match bias {
                    Some(bv) => acc.copy_from_slice(bv),
                    None => acc.fill(0),
                }
                for ty in 0..g.kh {
                    let Some(iy) =
                        ConvGeometry::src(oy, ty, g.stride[0], g.dilation[0], g.pad_top, g.h)
                    else {
                        continue;
                    };
                    for tx in 0..g.kw {
                        let Some(ix) =
                            ConvGeometry::src(ox, tx, g.stride[1], g.dilation[1], g.pad_left, g.w)
                        else {
                            continue;
                        };
                        let base = ((b * g.h + iy) * g.w + ix) * g.c;
                        for (d, &v) in xz.iter_mut().zip(&x[base..base + g.c]) {
                            *d = v as i32 - x_zp;
                        }
                        let tap = ty * g.kw + tx;
                        if g.depthwise {
                            let wr = &wt[tap * g.o..(tap + 1) * g.o];
                            for (j, (a, &wv)) in acc.iter_mut().zip(wr).enumerate() {
                                *a = a.wrapping_add(xz[j / dm].wrapping_mul(wv as i32));
                            }
                        } else {
                            let taps = g.kh * g.kw;
                            for (j, a) in acc.iter_mut().enumerate() {
                                let wbase = (j * taps + tap) * cg;
                                let wr = &wt[wbase..wbase + cg];
                                let grp = j / og;
                                let xr = &xz[grp * cg..(grp + 1) * cg];
                                let mut s = 0i32;
                                for (&xv, &wv) in xr.iter().zip(wr) {
                                    s = s.wrapping_add(xv.wrapping_mul(wv as i32));
                                }
                                *a = a.wrapping_add(s);
                            }
                        }
                    }
                }
                let dst = outs.next().expect("output length checked above");
                for ((d, &a), &s) in dst.iter_mut().zip(&acc).zip(scales) {
                    *d = qs8_requantize(a, s, o);
                }
            }
        }
    }
}

/// Parameters of QS8 add / subtract (X `microparams-init.c::xnn_init_qs8_add_minmax_scalar_params`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddParams {
    /// Multiplier of `a` (sign kept).
    pub a_multiplier: i32,
    /// Multiplier of `b` (negative for subtract).
    pub b_multiplier: i32,
    /// `(1 << (shift - 1)) - a_multiplier * a_zp - b_multiplier * b_zp`.
    pub bias: i32,
    /// Right shift, in `[12, 30]`.
    pub shift: u32,
}

/// QS8 add (or, with `subtract`, subtract: XNNPACK negates `b`'s scale,
/// `operators/binary-elementwise-nd.c`) parameters, all in f32:
/// ```text
/// a_os = a_scale / out_scale;  b_os = ±b_scale / out_scale
/// shift = 20 - (exponent(max(|a_os|, |b_os|)) - 127)
/// mult  = lrintf(|os| * 2^shift) (by adding shift to the exponent bits), sign of os
/// bias  = (1 << (shift - 1)) - a_mult * a_zp - b_mult * b_zp
/// ```
/// `None` when `max(|a_os|, |b_os|)` is outside `[2^-10, 2^8)` (XNNPACK's asserted range,
/// `shift` in `[12, 30]`) or not finite.
pub fn qs8_add_params(
    a_scale: f32,
    a_zp: i32,
    b_scale: f32,
    b_zp: i32,
    out_scale: f32,
    subtract: bool,
) -> Option<AddParams> {
    let b_scale = if subtract { -b_scale } else { b_scale };
    let a_os = a_scale / out_scale;
    let b_os = b_scale / out_scale;
    let (abs_a, abs_b) = (a_os.abs(), b_os.abs());
    let max_abs = if abs_b > abs_a { abs_b } else { abs_a };
    if !(1.0 / 1024.0..256.0).contains(&max_abs) {
        return None;
    }
    let exponent = (max_abs.to_bits() >> 23) as i32 - 127;
    let shift = (20 - exponent) as u32;
    let mult = |abs: f32, signed: f32| {
        let m = lrintf(f32::from_bits(abs.to_bits().wrapping_add(shift << 23)));
        if signed.is_sign_negative() {
            -m
        } else {
            m
        }
    };
    let a_multiplier = mult(abs_a, a_os);
    let b_multiplier = mult(abs_b, b_os);
    let rounding = 1i32 << (shift - 1);
    let bias = rounding
        .wrapping_sub(a_multiplier.wrapping_mul(a_zp))
        .wrapping_sub(b_multiplier.wrapping_mul(b_zp));
    Some(AddParams { a_multiplier, b_multiplier, bias, shift })
}

/// One QS8 add (X `qs8-vadd/gen/qs8-vadd-minmax-scalar-u1.c`):
/// `clamp(((bias + a*a_mult + b*b_mult) >> shift) + out_zp, -128, 127)` (arithmetic shift),
/// then the fused clamp `[o.qmin, o.qmax]`.
#[inline]
pub fn qs8_add(a: i8, b: i8, p: &AddParams, o: &Qs8Out) -> i8 {
    let acc = p
        .bias
        .wrapping_add((a as i32).wrapping_mul(p.a_multiplier))
        .wrapping_add((b as i32).wrapping_mul(p.b_multiplier));
    let v = (acc >> p.shift).wrapping_add(o.zero_point).clamp(-128, 127);
    v.clamp(o.qmin, o.qmax) as i8
}

/// The QS8 multiply scale (X `xnn_init_qs8_mul_minmax_scalar_params`):
/// `(a_scale * b_scale) / out_scale` in f32.
pub fn qs8_mul_scale(a_scale: f32, b_scale: f32, out_scale: f32) -> f32 {
    a_scale * b_scale / out_scale
}

/// One QS8 multiply (X `qs8-vmul/gen/qs8-vmul-minmax-fp32-scalar-u1.c`):
/// `rne(clamp((float)((a - a_zp) * (b - b_zp)) * scale, -128 - zp, 127 - zp)) + zp`, then the
/// fused clamp `[o.qmin, o.qmax]`.
#[inline]
pub fn qs8_mul(a: i8, b: i8, a_zp: i32, b_zp: i32, scale: f32, o: &Qs8Out) -> i8 {
    let acc = (a as i32 - a_zp).wrapping_mul(b as i32 - b_zp);
    let v = quantize_scaled(acc as f32 * scale, o.zero_point, -128, 127);
    v.clamp(o.qmin, o.qmax) as i8
}

/// `out[i] = f(x[i])` in a loop compiled for the CPU's vectors (the conversions' float and
/// integer steps vectorize there; the baseline build would leave them scalar).
fn each<A: Copy + Sync, B: Send>(x: &[A], out: &mut [B], f: impl Fn(A) -> B + Sync) {
    qg::best_isa().run(&Each { x, f }, 0..x.len(), out);
}

/// The loop of [`each`].
struct Each<'a, A, F> {
    x: &'a [A],
    f: F,
}

impl<A: Copy, B, F: Fn(A) -> B> qg::IsaTask for Each<'_, A, F> {
    type Out = [B];

    #[inline(always)]
    fn run(&self, run: std::ops::Range<usize>, out: &mut [B]) {
        for (o, &v) in out.iter_mut().zip(&self.x[run]) {
            *o = (self.f)(v);
        }
    }
}

/// Elements from which [`qs8_rows`] splits its work over the threads.
const PARALLEL_ELEMENTS: usize = 1 << 16;

/// `out[i] = f(a[i], b[i % b.len()])`: an elementwise QS8 operator ([`qs8_add`],
/// [`qs8_mul`]) over `a` and a `b` of the same length or one row repeated (a squeeze-excite
/// scale `[1, 1, 1, C]` over `[N, H, W, C]`), in loops compiled for the CPU's vectors (the
/// baseline build has no 32-bit vector multiply) and split over `threads` by whole rows.
///
/// # Panics
/// If `b` is empty or does not divide `a`, or `out` and `a` differ in length.
pub fn qs8_rows(
    a: &[i8],
    b: &[i8],
    out: &mut [i8],
    threads: &Threads,
    f: impl Fn(i8, i8) -> i8 + Sync,
) {
    assert!(!b.is_empty() && a.len().is_multiple_of(b.len()) && out.len() == a.len());
    let row = if b.len() == a.len() { 1 } else { b.len() };
    let units = a.len() / row;
    let parts = match a.len() >= PARALLEL_ELEMENTS {
        true => threads.tasks_for(super::threads::TASKS_PER_THREAD, units),
        false => 1,
    };
    let tasks = super::threads::with_pieces(super::threads::split(units, 1, parts), out, row);
    let isa = qg::best_isa();
    let t = Rows { a, b, row, same: b.len() == a.len(), f };
    threads.for_each(tasks, |(run, out)| isa.run(&t, run, out));
}

/// The tasks of [`qs8_rows`], each over a run of rows (of one element when `b` is as long as
/// `a`).
struct Rows<'a, F> {
    a: &'a [i8],
    b: &'a [i8],
    /// Elements per unit of work: 1 when `b` is as long as `a`, else `b.len()`.
    row: usize,
    same: bool,
    f: F,
}

impl<F: Fn(i8, i8) -> i8 + Sync> qg::IsaTask for Rows<'_, F> {
    type Out = [i8];

    #[inline(always)]
    fn run(&self, run: std::ops::Range<usize>, out: &mut [i8]) {
        let a = &self.a[run.start * self.row..run.end * self.row];
        if self.same {
            let b = &self.b[run];
            for ((d, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *d = (self.f)(x, y);
            }
        } else {
            for (o, a) in out.chunks_exact_mut(self.row).zip(a.chunks_exact(self.row)) {
                for ((d, &x), &y) in o.iter_mut().zip(a).zip(self.b) {
                    *d = (self.f)(x, y);
                }
            }
        }
    }
}

/// Parameters of the QS8 mean (global average pooling) conversion.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeanParams {
    /// `(in_scale / out_scale) * (1.0f / count)`.
    pub scale: f32,
    /// `(float)out_zp - ((float)count * (float)in_zp) * scale`.
    pub zero_point: f32,
}

/// The QS8 mean parameters of XNNPACK's reduce-based global average pooling
/// (X `operators/reduce-nd.c`, `microparams-init.c::xnn_init_qs8_reduce_scalar_params` and
/// `xnn_update_qs8_reduce_scalar_params`), all in f32:
/// `scale = (in_scale / out_scale) * (1.0f / count)`,
/// `zero_point = out_zp - (count * in_zp) * scale`.
pub fn qs8_mean_params(
    in_scale: f32,
    in_zp: i32,
    out_scale: f32,
    out_zp: i32,
    count: usize,
) -> MeanParams {
    let scale = (in_scale / out_scale) * (1.0f32 / count as f32);
    let zero_point = out_zp as f32 - (count as i32 as f32 * in_zp as f32) * scale;
    MeanParams { scale, zero_point }
}

/// One mean output from the raw int32 sum of the inputs (X `reference/unary-elementwise.cc`
/// int32 → qint8 convert, `reference-utils.h::quantize`):
/// `clamp(nearbyint((float)sum * scale + zero_point), -128, 127)` (NaN gives 0), then the
/// fused clamp `[o.qmin, o.qmax]` (`o.zero_point` is unused).
#[inline]
pub fn qs8_mean(sum: i32, p: &MeanParams, o: &Qs8Out) -> i8 {
    let v = sum as f32 * p.scale + p.zero_point;
    let v = if v.is_nan() { 0.0 } else { v.round_ties_even() };
    let v = v.clamp(-128.0, 127.0) as i32;
    v.clamp(o.qmin, o.qmax) as i8
}

/// QS8 global average pooling over NHWC `[n, hw, c]` (the `hw` spatial cells of each image):
/// per image and channel, the int32 sum of the raw inputs, then [`qs8_mean`]. `out` is
/// `[n, c]`. Blocks of [`POOL_CHANNELS`] channels are summed down the pixels in a loop
/// compiled for the CPU's vectors, split over `threads` when the input is large.
///
/// # Panics
/// If `x.len() != n*hw*c` or `out.len() != n*c`.
#[allow(clippy::too_many_arguments)]
pub fn qs8_global_avg_pool(
    x: &[i8],
    n: usize,
    hw: usize,
    c: usize,
    p: &MeanParams,
    o: &Qs8Out,
    out: &mut [i8],
    threads: &Threads,
) {
    assert_eq!(x.len(), n * hw * c);
    assert_eq!(out.len(), n * c);
    if c == 0 {
        return;
    }
    let isa = qg::best_isa();
    for (img, dst) in out.chunks_exact_mut(c).enumerate() {
        let t = PoolSums { x: &x[img * hw * c..][..hw * c], c, p, o };
        let parts = threads.tasks_for_elements(hw * c, c.div_ceil(POOL_CHANNELS));
        let tasks = super::threads::split(c, POOL_CHANNELS, parts);
        threads
            .for_each(super::threads::with_pieces(tasks, dst, 1), |(run, d)| isa.run(&t, run, d));
    }
}

/// Channels [`qs8_global_avg_pool`] sums at once: four 512-bit vectors of `i32` sums.
const POOL_CHANNELS: usize = 64;

/// The tasks of [`qs8_global_avg_pool`] over one image, each over a run of channels.
struct PoolSums<'a> {
    x: &'a [i8],
    c: usize,
    p: &'a MeanParams,
    o: &'a Qs8Out,
}

impl qg::IsaTask for PoolSums<'_> {
    type Out = [i8];

    /// The means of channels `run` into `out`, [`POOL_CHANNELS`] at a time.
    #[inline(always)]
    fn run(&self, run: std::ops::Range<usize>, out: &mut [i8]) {
        for (b, dst) in out.chunks_mut(POOL_CHANNELS).enumerate() {
            let c0 = run.start + b * POOL_CHANNELS;
            let mut sums = [0i32; POOL_CHANNELS];
            match dst.len() {
                // A whole block as arrays, so that the compiler keeps the sums in registers.
                POOL_CHANNELS => {
                    for px in self.x.chunks_exact(self.c) {
                        let v: &[i8; POOL_CHANNELS] =
                            px[c0..].first_chunk().expect("a whole block of channels");
                        for (s, &v) in sums.iter_mut().zip(v) {
                            *s = s.wrapping_add(i32::from(v));
                        }
                    }
                }
                len => {
                    for px in self.x.chunks_exact(self.c) {
                        for (s, &v) in sums.iter_mut().zip(&px[c0..c0 + len]) {
                            *s = s.wrapping_add(i32::from(v));
                        }
                    }
                }
            }
            for (d, &s) in dst.iter_mut().zip(&sums) {
                *d = qs8_mean(s, self.p, self.o);
            }
        }
    }
}

/// A QS8 transposed convolution (XNNPACK's deconvolution) on NHWC data: `x` is
/// `[n, h, w, c]`, `wt` is `[o, kh, kw, c/groups]` (output channel `j` in group `j / (o/groups)`
/// reads that group's input channels), `out` is `[n, oh, ow, o]` with
/// `oh = stride*(h-1) + adjustment + dil*(kh-1) + 1 - pad_top - pad_bottom`. Input pixel `iy`
/// tap `t` lands on output row `iy*stride + t*dil - pad_top`; each output gathers
/// `acc = bias[j] + Σ (x - x_zp) * w` over the (pixel, tap) pairs landing on it, in i32, then
/// [`qs8_requantize`] as a convolution does.
///
/// # Panics
/// If `!g.is_valid()` or a length disagrees with `g` (`g.oh`/`g.ow` are the output sizes).
pub fn qs8_deconvolution(g: &ConvGeometry, x: &[i8], x_zp: i32, f: &Qs8Filter, out: &mut [i8]) {
    assert!(!g.depthwise);
    check_conv(g, x, f, out);
    let Qs8Filter { w: wt, bias, scales, o } = *f;
    let (cg, og) = (g.c / g.groups, g.o / g.groups);
    // The input index whose tap `t` lands on output index `out`, if any.
    let src = |out: usize, t: usize, stride: usize, dil: usize, pad: usize, len: usize| {
        let at = (out + pad).checked_sub(t * dil)?;
        (at % stride == 0 && at / stride < len).then_some(at / stride)
    };
    let mut outs = out.chunks_exact_mut(g.o.max(1));
    for b in 0..g.n {
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let Some(dst) = outs.next() else { return };
                for (j, d) in dst.iter_mut().enumerate() {
                    let grp = j / og;
                    let mut acc = bias.map_or(0, |bv| bv[j]);
                    for ty in 0..g.kh {
                        let Some(iy) = src(oy, ty, g.stride[0], g.dilation[0], g.pad_top, g.h)
                        else {
                            continue;
                        };
                        for tx in 0..g.kw {
                            let Some(ix) = src(ox, tx, g.stride[1], g.dilation[1], g.pad_left, g.w)
                            else {
                                continue;
                            };
                            let xb = ((b * g.h + iy) * g.w + ix) * g.c + grp * cg;
                            let wb = ((j * g.kh + ty) * g.kw + tx) * cg;
                            for (&xv, &wv) in x[xb..xb + cg].iter().zip(&wt[wb..wb + cg]) {
                                acc = acc.wrapping_add((xv as i32 - x_zp).wrapping_mul(wv as i32));
                            }
                        }
                    }
                    *d = qs8_requantize(acc, scales[j], o);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// fmagic rounds half to even: 2.5 -> 2, -2.5 -> -2, 3.5 -> 4, ±0.5 -> 0.
    #[test]
    fn fmagic_rounds_half_to_even() {
        assert_eq!(fmagic(2.5), 2);
        assert_eq!(fmagic(-2.5), -2);
        assert_eq!(fmagic(3.5), 4);
        assert_eq!(fmagic(-3.5), -4);
        assert_eq!(fmagic(0.5), 0);
        assert_eq!(fmagic(-0.5), 0);
        assert_eq!(fmagic(1.4999999), 1);
        assert_eq!(fmagic(-255.0), -255);
    }

    /// scale 0.5 (inv 2), zp 3: 1.25*2 = 2.5 -> 2, +3 = 5; -1.25 -> -2.5 -> -2 -> 1;
    /// 100 -> 200 clamps to 127-3 = 124 -> 127; -100 -> -128; NaN -> the low bound -> -128.
    /// Back: (5 - 3) * 0.5 = 1.0.
    /// A row's dynamic quantization (bounds in vector lanes) equals XNNPACK's sequential scan
    /// on rows of every length around the lane count, NaN, infinities and signed zeros
    /// included.
    #[test]
    fn dynamic_row_quantization_equals_the_sequential_scan() {
        let mut rng = fastrand::Rng::with_seed(17);
        let special = [f32::NAN, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, 1e-30];
        for case in 0..300 {
            let len = rng.usize(1..70);
            let x: Vec<f32> = (0..len)
                .map(|_| match rng.usize(0..10) {
                    0 if case % 3 == 0 => special[rng.usize(0..special.len())],
                    1 => [0.0, -0.0][rng.usize(0..2)],
                    _ => (rng.f32() - 0.5) * [1e-3, 1.0, 300.0][case % 3],
                })
                .collect();
            let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
            for &v in &x {
                lo = if v < lo { v } else { lo };
                hi = if hi < v { v } else { hi };
            }
            let want_p = qd8_params(lo, hi);
            let want: Vec<i8> = x
                .iter()
                .map(|&v| {
                    quantize_scaled(v * want_p.multiplier, want_p.zero_point, -128, 127) as i8
                })
                .collect();
            let mut got = vec![0i8; len];
            let p = qd8_quantize_row(&x, &mut got);
            assert_eq!(
                (p.zero_point, p.multiplier.to_bits()),
                (want_p.zero_point, want_p.multiplier.to_bits()),
                "case {case}"
            );
            assert_eq!(got, want, "case {case}");
        }
    }

    /// The conversions, run in vector loops, give each element what the scalar formula gives,
    /// NaN, infinities, huge values and ties included.
    #[test]
    fn vector_conversions_equal_the_scalar_formulas() {
        let mut rng = fastrand::Rng::with_seed(5);
        let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1e30, -1e30, 0.5, -0.5, 2.5];
        let x: Vec<f32> = (0..1000)
            .map(|i| if i % 7 == 0 { special[i / 7 % 8] } else { (rng.f32() - 0.5) * 600.0 })
            .collect();
        let (scale, zp) = (0.7f32, -3);
        let mut q = vec![0i8; x.len()];
        f32_to_qs8(&x, scale, zp, &mut q);
        let mut u = vec![0u8; x.len()];
        f32_to_qu8(&x, scale, 100, &mut u);
        for (i, &v) in x.iter().enumerate() {
            assert_eq!(i32::from(q[i]), quantize_scaled(v * (1.0 / scale), zp, -128, 127), "{v}");
            assert_eq!(i32::from(u[i]), quantize_scaled(v * (1.0 / scale), 100, 0, 255), "{v}");
        }
        let mut f = vec![0f32; q.len()];
        qs8_to_f32(&q, scale, zp, &mut f);
        for (&a, &b) in f.iter().zip(&q) {
            assert_eq!(a.to_bits(), ((i32::from(b) - zp) as f32 * scale).to_bits());
        }
        let p = q8_cvt_params(0.5, 3, 0.3, -7).unwrap();
        let mut r = vec![0i8; q.len()];
        qs8_cvt(&q, &p, &mut r);
        for (&a, &b) in r.iter().zip(&q) {
            assert_eq!(i32::from(a), q8_cvt(i32::from(b), &p, -128, 127));
        }
    }

    #[test]
    fn f32_qs8_round_trip_by_hand() {
        let x = [1.25f32, -1.25, 100.0, -100.0, f32::NAN, 0.0];
        let mut q = [0i8; 6];
        f32_to_qs8(&x, 0.5, 3, &mut q);
        assert_eq!(q, [5, 1, 127, -128, -128, 3]);
        let mut u = [0u8; 6];
        // quint8 zp 128: 2.5 -> 2 -> 130; -2.5 -> -2 -> 126; 200 -> 255; -200 -> 0.
        f32_to_qu8(&x, 0.5, 128, &mut u);
        assert_eq!(u, [130, 126, 255, 0, 0, 128]);
        let mut f = [0f32; 2];
        qs8_to_f32(&[5, -128], 0.5, 3, &mut f);
        assert_eq!(f, [1.0, -65.5]);
        qu8_to_f32(&[130, 0], 0.5, 128, &mut f);
        assert_eq!(f, [1.0, -64.0]);
    }

    /// ±inf saturate; ReLU's 0 bound quantizes to the zero point; 0.75/0.5 + 1 = 2.5 -> 2.
    #[test]
    fn fused_bounds_by_hand() {
        assert_eq!(qs8_output_range(f32::NEG_INFINITY, f32::INFINITY, 0.1, 5), (-128, 127));
        assert_eq!(qs8_quantize_bound(0.0, 0.1, -7), -7);
        assert_eq!(qs8_quantize_bound(0.75, 0.5, 1), 2);
        assert_eq!(qs8_quantize_bound(1000.0, 0.5, 1), 127);
        assert_eq!(qu8_quantize_bound(-1.0, 0.5, 1), 0);
    }

    /// ratio 1/2: multiplier 128, bias 0x80. q = 3: (128 + 384) >> 8 = 2 (1.5 rounds up);
    /// q = -3: -256 >> 8 = -1 (-1.5 rounds up); q = 1: 256 >> 8 = 1 (0.5 -> 1).
    /// With in_zp 2, out_zp -1: bias = -256 - 256 + 128 = -384; q = 5: (-384 + 640) >> 8 = 1.
    #[test]
    fn qs8_requantizing_convert_by_hand() {
        let p = q8_cvt_params(1.0, 0, 2.0, 0).unwrap();
        assert_eq!(p, CvtParams { multiplier: 128, bias: 128 });
        let mut out = [0i8; 4];
        qs8_cvt(&[3, -3, 1, -128], &p, &mut out);
        assert_eq!(out, [2, -1, 1, -64]);
        let p = q8_cvt_params(1.0, 2, 2.0, -1).unwrap();
        assert_eq!(p.bias, -384);
        qs8_cvt(&[5, 5, 5, 5], &p, &mut out);
        assert_eq!(out[0], 1);
        // Ratio 4 saturates: 100 * 4 = 400 -> 127.
        let p = q8_cvt_params(4.0, 0, 1.0, 0).unwrap();
        qs8_cvt(&[100, -100, 1, 0], &p, &mut out);
        assert_eq!(out, [127, -128, 4, 0]);
        assert_eq!(q8_cvt_params(1000.0, 0, 1.0, 0), None);
        assert_eq!(q8_cvt_params(1.0, 0, 1000.0, 0), None);
        let mut u = [0u8; 2];
        qu8_cvt(&[130, 0], &q8_cvt_params(1.0, 128, 1.0, 100).unwrap(), &mut u);
        assert_eq!(u, [102, 0]);
    }

    /// Row [-1, 3]: m = 255/4 = 63.75, dmin = -63.75, dmax = 191.25; (-128-63.75) +
    /// (127+191.25) = 126.5 > 0 so zp = -128 + 63.75 = -64.25 -> -64.
    /// q(-1) = rne(-63.75) - 64 = -128; q(3) = rne(191.25) - 64 = 127.
    /// Row [0, 2]: m = 127.5, zp = -128; q(1) = rne(127.5) = 128 -> 0; q(2) = 255 - 128 = 127.
    /// All zeros: m = 1, (-128) + 127 < 0 so zp = 127, q = 127.
    #[test]
    fn qd8_params_by_hand() {
        let mut q = [0i8; 2];
        let p = qd8_quantize_row(&[-1.0, 3.0], &mut q);
        assert_eq!((p.zero_point, p.multiplier, p.scale), (-64, 63.75, 1.0 / 63.75));
        assert_eq!(q, [-128, 127]);
        let mut q = [0i8; 3];
        let p = qd8_quantize_row(&[0.0, 1.0, 2.0], &mut q);
        assert_eq!((p.zero_point, p.multiplier), (-128, 127.5));
        assert_eq!(q, [-128, 0, 127]);
        let p = qd8_quantize_row(&[0.0; 3], &mut q);
        assert_eq!((p.zero_point, p.multiplier, p.scale), (127, 1.0, 1.0));
        assert_eq!(q, [127; 3]);
    }

    /// Byte 0x3A: low nibble 0xA (10 - 8 = 2) is the even index, high nibble 3 (-5) the odd.
    #[test]
    fn nibble_order() {
        assert_eq!(nibble(&[0x3A, 0xF0], 0), 2);
        assert_eq!(nibble(&[0x3A, 0xF0], 1), -5);
        assert_eq!(nibble(&[0x3A, 0xF0], 2), -8);
        assert_eq!(nibble(&[0x3A, 0xF0], 3), 7);
    }

    /// Row [1, -1]: m = 127.5, zp = lrintf(127 - 127.5 = -0.5) = 0; q = [127, -128]
    /// (127.5 clamps to 127; -127.5 rounds to the even -128). qc8w weights [1, 1], [2, -1]:
    /// acc = -1 and 382. qc4w: the same values packed (1+8 = 9, 1+8 = 9 -> 0x99;
    /// 2+8 = 10, -1+8 = 7 -> 0x7A). Output ((acc * (1/127.5)) * s_w) + bias.
    #[test]
    fn qd8_fully_connected_by_hand() {
        let x = [1.0f32, -1.0];
        let scales = [2.0f32, 0.5];
        let bias = [0.5f32, -1.0];
        let s = 1.0f32 / 127.5;
        let want = [(-s) * 2.0 + 0.5, (382.0f32 * s) * 0.5 - 1.0];
        let mut out = [0f32; 2];
        let w8 = Qd8Weights::Qc8w { w: &[1, 1, 2, -1], scales: &scales };
        qd8_fully_connected(
            &x,
            2,
            &w8,
            2,
            Some(&bias),
            f32::NEG_INFINITY,
            f32::INFINITY,
            &mut out,
            &Threads::default(),
        );
        assert_eq!(out, want);
        let w4 = Qd8Weights::Qc4w { w: &[0x99, 0x7A], scales: &scales };
        qd8_fully_connected(
            &x,
            2,
            &w4,
            2,
            Some(&bias),
            f32::NEG_INFINITY,
            f32::INFINITY,
            &mut out,
            &Threads::default(),
        );
        assert_eq!(out, want);
        // The outputs are 0.4843... and 0.4980...; the bounds [0.49, 0.495] clamp both.
        qd8_fully_connected(&x, 2, &w4, 2, Some(&bias), 0.49, 0.495, &mut out, &Threads::default());
        assert_eq!(out, [0.49, 0.495]);
        // No bias adds +0.0: acc 0 gives +0.0 (not -0.0) even through a negative scale.
        let w0 = Qd8Weights::Qc8w { w: &[1, 1, 0, 0], scales: &[-1.0, -1.0] };
        qd8_fully_connected(
            &x,
            2,
            &w0,
            2,
            None,
            f32::NEG_INFINITY,
            f32::INFINITY,
            &mut out,
            &Threads::default(),
        );
        assert_eq!(out[1].to_bits(), 0.0f32.to_bits());
    }

    /// a_os = 0.5 (exponent -1) so shift = 21; a_mult = 2^20, b_mult = 2^19 (b_os 0.25),
    /// bias = 2^20. a=3, b=2: (2^20 + 3*2^20 + 2*2^19) >> 21 = 5*2^20 >> 21 = 2 (exact 2.0).
    /// a=1, b=0: 2^21 >> 21 = 1 (0.5 rounds up); a=-1, b=0: 0 (-0.5 rounds up to 0);
    /// a=-3, b=0: -2^21 >> 21 = -1 (-1.5 -> -1). Subtract: b_mult = -2^19; a=1, b=2:
    /// (2^20 + 2^20 - 2^20) >> 21 = 0 (0.5 - 0.5).
    #[test]
    fn qs8_add_by_hand() {
        let p = qs8_add_params(0.5, 0, 0.25, 0, 1.0, false).unwrap();
        assert_eq!(
            p,
            AddParams { a_multiplier: 1 << 20, b_multiplier: 1 << 19, bias: 1 << 20, shift: 21 }
        );
        let o = Qs8Out { zero_point: 0, qmin: -128, qmax: 127 };
        assert_eq!(qs8_add(3, 2, &p, &o), 2);
        assert_eq!(qs8_add(1, 0, &p, &o), 1);
        assert_eq!(qs8_add(-1, 0, &p, &o), 0);
        assert_eq!(qs8_add(-3, 0, &p, &o), -1);
        assert_eq!(qs8_add(127, 127, &p, &o), 95); // 63.5 + 31.75 = 95.25
        let ps = qs8_add_params(0.5, 0, 0.25, 0, 1.0, true).unwrap();
        assert_eq!(ps.b_multiplier, -(1 << 19));
        assert_eq!(qs8_add(1, 2, &ps, &o), 0);
        // Zero points: a_zp 1, b_zp -2, out zp 10: a=3 (2 -> 1.0), b=-2 (0): 1 + 10 = 11.
        let p = qs8_add_params(0.5, 1, 0.25, -2, 1.0, false).unwrap();
        let oz = Qs8Out { zero_point: 10, qmin: -128, qmax: 127 };
        assert_eq!(qs8_add(3, -2, &p, &oz), 11);
        // Saturation, then the fused bounds.
        let big = qs8_add_params(4.0, 0, 4.0, 0, 1.0, false).unwrap();
        assert_eq!(qs8_add(100, 100, &big, &o), 127);
        assert_eq!(qs8_add(3, 0, &p, &Qs8Out { zero_point: 0, qmin: -5, qmax: 0 }), 0);
        assert_eq!(qs8_add_params(1.0, 0, 1.0, 0, 1e-3, false), None);
        assert_eq!(qs8_add_params(1e-4, 0, 1e-4, 0, 1.0, false), None);
    }

    /// scale = 0.5 * 1.25 / 1 = 0.625; (3 - 1) * (1 - -1) = 4; 4 * 0.625 = 2.5 -> 2 (even);
    /// (4 - 1) * 2 = 6 -> 3.75 -> 4; out zp 5 adds 5; saturation at 127.
    #[test]
    fn qs8_mul_by_hand() {
        let s = qs8_mul_scale(0.5, 1.25, 1.0);
        assert_eq!(s, 0.625);
        let o = Qs8Out { zero_point: 0, qmin: -128, qmax: 127 };
        assert_eq!(qs8_mul(3, 1, 1, -1, s, &o), 2);
        assert_eq!(qs8_mul(4, 1, 1, -1, s, &o), 4);
        assert_eq!(qs8_mul(3, 1, 1, -1, s, &Qs8Out { zero_point: 5, ..o }), 7);
        assert_eq!(qs8_mul(127, 127, 0, 0, s, &o), 127);
        assert_eq!(qs8_mul(127, -128, 0, 0, s, &o), -128);
        assert_eq!(qs8_mul(127, 127, 0, 0, s, &Qs8Out { qmax: 50, ..o }), 50);
    }

    /// count 4, scales 1: scale 0.25. Sums 5 -> 1.25 -> 1; 6 -> 1.5 -> 2; 10 -> 2.5 -> 2
    /// (half to even). x_zp 1: zero_point = 0 - 4 * 0.25 = -1; sum 9 -> 2.25 - 1 = 1.25 -> 1.
    #[test]
    fn qs8_global_avg_pool_by_hand() {
        let o = Qs8Out { zero_point: 0, qmin: -128, qmax: 127 };
        let p = qs8_mean_params(1.0, 0, 1.0, 0, 4);
        assert_eq!(p, MeanParams { scale: 0.25, zero_point: 0.0 });
        // [n=1, hw=4, c=3], channels: (1,1,1,2), (1,2,1,2), (2,3,2,3).
        let x = [1, 1, 2, 1, 2, 3, 1, 1, 2, 2, 2, 3];
        let mut out = [0i8; 3];
        qs8_global_avg_pool(&x, 1, 4, 3, &p, &o, &mut out, &Threads::default());
        assert_eq!(out, [1, 2, 2]);
        let p = qs8_mean_params(1.0, 1, 1.0, 0, 4);
        assert_eq!(p.zero_point, -1.0);
        let mut out = [0i8; 1];
        qs8_global_avg_pool(&[2, 2, 2, 3], 1, 4, 1, &p, &o, &mut out, &Threads::default());
        assert_eq!(out, [1]);
        let p = qs8_mean_params(1.0, 0, 0.01, 0, 1);
        qs8_global_avg_pool(&[100], 1, 1, 1, &p, &o, &mut out, &Threads::default());
        assert_eq!(out, [127]);
    }

    /// The portable per-tensor quantization's vector loop equals ExecuTorch's formula as the
    /// general kernel writes it (`zp + (int64)rne(x * inv)`, saturating, NaN as 0, then the
    /// clamp) over ordinary, huge, infinite and NaN inputs, zero points and narrowed ranges;
    /// dequantization equals `(q - zp) * scale`.
    #[test]
    fn portable_per_tensor_loops_equal_the_formula() {
        let mut rng = fastrand::Rng::with_seed(73);
        for case in 0..200 {
            let inv = 1.0 / (rng.f32() * 0.5 + 1e-3);
            let zp = rng.i32(-128..128);
            let (lo, hi) = if case % 3 == 0 { (-100, 90) } else { (-128, 127) };
            let x: Vec<f32> = (0..97)
                .map(|i| match i % 11 {
                    0 => f32::NAN,
                    1 => f32::INFINITY,
                    2 => -f32::INFINITY,
                    3 => 3e38 * (rng.f32() - 0.5),
                    4 => (rng.i32(-200..200) as f32 + 0.5) / inv,
                    _ => (rng.f32() - 0.5) * 300.0 / inv,
                })
                .collect();
            let mut got = vec![0i8; x.len()];
            quantize_per_tensor(&x, inv, zp, lo, hi, &mut got);
            for (&v, &g) in x.iter().zip(&got) {
                let want = i64::from(zp)
                    .saturating_add((v * inv).round_ties_even() as i64)
                    .clamp(lo.into(), hi.into());
                assert_eq!(i64::from(g), want, "case {case}: x {v}");
            }
            let q: Vec<u8> = (0..=255).collect();
            let mut f = vec![0f32; 256];
            let scale = 1.0 / inv;
            dequantize_per_tensor(&q, zp, scale, &mut f);
            for (&q, &f) in q.iter().zip(&f) {
                assert_eq!(f.to_bits(), ((i64::from(q) - i64::from(zp)) as f32 * scale).to_bits());
            }
        }
    }

    /// The vector loops over whole and partial blocks of channels, split over threads or not,
    /// equal the mean of each channel's plain sum, over random images, pixel counts (up to
    /// sums far past `i16`), channel counts and parameters.
    #[test]
    fn qs8_global_avg_pool_blocks_equal_plain_sums() {
        let mut rng = fastrand::Rng::with_seed(67);
        let pool = Threads::new(3).unwrap();
        for case in 0..60 {
            let (n, hw, c) = (rng.usize(1..3), rng.usize(1..400), rng.usize(1..260));
            let x: Vec<i8> = (0..n * hw * c).map(|_| rng.i8(..)).collect();
            let p = qs8_mean_params(rng.f32() * 0.2 + 0.01, rng.i32(-128..128), 0.05, 3, hw);
            let o =
                Qs8Out { zero_point: 3, qmin: -128, qmax: if case % 3 == 0 { 90 } else { 127 } };
            let want: Vec<i8> = (0..n * c)
                .map(|i| {
                    let (img, ch) = (i / c, i % c);
                    let s: i64 = (0..hw).map(|px| i64::from(x[(img * hw + px) * c + ch])).sum();
                    qs8_mean(s as i32, &p, &o)
                })
                .collect();
            for threads in [&Threads::default(), &pool] {
                let mut got = vec![0i8; n * c];
                qs8_global_avg_pool(&x, n, hw, c, &p, &o, &mut got, threads);
                assert_eq!(got, want, "case {case}: n {n} hw {hw} c {c}");
            }
        }
    }

    /// A 1x1 input, 3x3 kernel, padding 1: only the centre tap is inside; padded cells add 0.
    /// x = 5 (zp 1 -> 4), centre weight 3, bias 2: acc = 14; scale 0.25 -> 3.5 -> 4.
    #[test]
    fn qs8_convolution_padding_by_hand() {
        let g = ConvGeometry {
            n: 1,
            h: 1,
            w: 1,
            c: 1,
            kh: 3,
            kw: 3,
            oh: 1,
            ow: 1,
            o: 1,
            stride: [1, 1],
            dilation: [1, 1],
            pad_top: 1,
            pad_left: 1,
            groups: 1,
            depthwise: false,
        };
        let w = [100, 100, 100, 100, 3, 100, 100, 100, 100];
        let o = Qs8Out { zero_point: 0, qmin: -128, qmax: 127 };
        let f = Qs8Filter { w: &w, bias: Some(&[2]), scales: &[0.25], o: &o };
        let mut out = [0i8];
        qs8_convolution(&g, &[5], 1, &f, &mut out, &Threads::default());
        let mut s = [0i8];
        qs8_convolution_scalar(&g, &[5], 1, &f, &mut s);
        assert_eq!(s, [4]);
        assert_eq!(out, [4]);
        let dw = ConvGeometry { depthwise: true, o: 2, ..g };
        let w2 = [0, 0, 0, 0, 0, 0, 0, 0, 3, -1, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut out2 = [0i8; 2];
        // Depth multiplier 2: both outputs read channel 0: 4*3 = 12 -> 3; 4*-1 = -4 -> -1.
        qs8_convolution(
            &dw,
            &[5],
            1,
            &Qs8Filter { w: &w2, bias: None, scales: &[0.25, 0.25], o: &o },
            &mut out2,
            &Threads::default(),
        );
        assert_eq!(out2, [3, -1]);
    }

    /// A 1x1-channel transposed convolution worked by hand: x = [1, 2] (1x1x2x1, zero point 0),
    /// kernel 1x2 w = [1, 10], stride 2, no padding: output width 2*(2-1) + 2 = 4, and input
    /// pixel i writes w[t] * x[i] at 2i + t: [1*1, 10*1, 1*2, 10*2] = [1, 10, 2, 20]; with
    /// scale 1 the requantized outputs are those integers. With stride 1 the taps overlap:
    /// width 3, [1, 10 + 2, 20] = [1, 12, 20].
    #[test]
    fn qs8_deconvolution_scatters_taps_by_stride() {
        let o = Qs8Out { zero_point: 0, qmin: -128, qmax: 127 };
        for (stride, want) in [(2usize, vec![1i8, 10, 2, 20]), (1, vec![1, 12, 20])] {
            let ow = stride + 2; // stride * (w - 1) + kw
            let g = ConvGeometry {
                n: 1,
                h: 1,
                w: 2,
                c: 1,
                kh: 1,
                kw: 2,
                oh: 1,
                ow,
                o: 1,
                stride: [1, stride],
                dilation: [1, 1],
                pad_top: 0,
                pad_left: 0,
                groups: 1,
                depthwise: false,
            };
            let mut out = vec![0i8; ow];
            let f = Qs8Filter { w: &[1, 10], bias: None, scales: &[1.0], o: &o };
            qs8_deconvolution(&g, &[1, 2], 0, &f, &mut out);
            assert_eq!(out, want, "stride {stride}");
        }
    }

    fn rand_i8(rng: &mut fastrand::Rng, len: usize) -> Vec<i8> {
        (0..len).map(|_| rng.i8(..)).collect()
    }

    /// Random convolutions (odd channel counts, groups, depthwise multipliers 1-3, padding,
    /// stride, dilation, 1x1, batch 2, sizes around the 8-pixel and 16-channel blocks): every
    /// ISA the CPU has, on 1 and 2 threads, equals the scalar loop bit for bit.
    #[test]
    fn xnn_fast_convolution_equals_scalar() {
        let two = Threads::new(2).unwrap();
        let one = Threads::default();
        let mut rng = fastrand::Rng::with_seed(7);
        let mut checked = 0;
        for case in 0..300 {
            let dw = case % 4 == 0;
            let groups = if dw { 1 } else { [1, 1, 1, 2, 3, 4][rng.usize(0..6)] };
            let c = if dw { rng.usize(1..40) } else { groups * rng.usize(1..20) };
            let oc = if dw { c * rng.usize(1..4) } else { groups * rng.usize(1..40) };
            let (n, h, w) = (rng.usize(1..3), rng.usize(1..12), rng.usize(1..12));
            let one_by_one = case % 5 == 1;
            let (kh, kw) = if one_by_one { (1, 1) } else { (rng.usize(1..4), rng.usize(1..4)) };
            let stride = [rng.usize(1..3), rng.usize(1..3)];
            let dilation = if one_by_one { [1, 1] } else { [rng.usize(1..3), rng.usize(1..3)] };
            let pad = if one_by_one { [0; 4] } else { [0; 4].map(|_| rng.usize(0..3)) };
            let oh = ConvGeometry::out_size(h, pad[0], pad[2], kh, stride[0], dilation[0]);
            let ow = ConvGeometry::out_size(w, pad[1], pad[3], kw, stride[1], dilation[1]);
            let (Some(oh), Some(ow)) = (oh, ow) else { continue };
            let g = ConvGeometry {
                n,
                h,
                w,
                c,
                kh,
                kw,
                oh,
                ow,
                o: oc,
                stride,
                dilation,
                pad_top: pad[0],
                pad_left: pad[1],
                groups: if dw { c } else { groups },
                depthwise: dw,
            };
            assert!(g.is_valid());
            let x = rand_i8(&mut rng, n * h * w * c);
            let wt = rand_i8(&mut rng, g.weight_len().unwrap());
            let bias: Vec<i32> = (0..oc).map(|_| rng.i32(-20000..20000)).collect();
            let bias = (case % 3 != 2).then_some(bias.as_slice());
            let scales: Vec<f32> = (0..oc).map(|_| rng.f32() * 0.002 + 1e-5).collect();
            let zp = [-128, 127, 0, rng.i32(-128..128)][case % 4];
            let o = Qs8Out { zero_point: rng.i32(-20..20), qmin: -128, qmax: 127 };
            let f = Qs8Filter { w: &wt, bias, scales: &scales, o: &o };
            let mut want = vec![0i8; n * oh * ow * oc];
            qs8_convolution_scalar(&g, &x, zp, &f, &mut want);
            for isa in qg::isas() {
                for th in [&one, &two] {
                    let mut got = vec![0i8; want.len()];
                    qs8_convolution_isa(isa, &g, &x, zp, &f, &mut got, th);
                    assert_eq!(got, want, "case {case} {isa:?} {g:?}");
                }
            }
            checked += 1;
        }
        assert!(checked > 200);
    }

    /// Large enough to split over two threads (and to wrap no sum): every ISA equals the
    /// scalar loop. The 7x7 images of one batch split their output channels instead of their
    /// pixels (the quad loops): a 3x3 layer of 512 channels whose windows are read in place
    /// (each panel pair over every block) and a last panel of 8 channels, a 1x1 layer of rows
    /// of 31 KB (every panel over each block) and a last panel of 4 channels, and 1x1 layers
    /// of rows of 50 KB, of stride 1 and 2, read in place (all checked in `xnn_qconv`'s tests
    /// to take that split).
    #[test]
    fn xnn_fast_convolution_split_over_threads() {
        let two = Threads::new(2).unwrap();
        let mut rng = fastrand::Rng::with_seed(9);
        // Each case has over 2^20 multiply-adds (the split threshold).
        for (n, h, w, c, oc, k, s, dw) in [
            (2, 20, 19, 24, 40, 3, 1, false),
            (2, 20, 19, 560, 1120, 3, 1, true),
            (2, 20, 19, 333, 317, 1, 1, false),
            (1, 7, 7, 512, 120, 3, 1, false),
            (1, 7, 7, 640, 820, 1, 1, false),
            (1, 7, 7, 1024, 520, 1, 1, false),
            (1, 13, 13, 1024, 520, 1, 2, false),
        ] {
            let (oh, ow) = ((h - 1) / s + 1, (w - 1) / s + 1);
            let g = ConvGeometry {
                n,
                h,
                w,
                c,
                kh: k,
                kw: k,
                oh,
                ow,
                o: oc,
                stride: [s, s],
                dilation: [1, 1],
                pad_top: k / 2,
                pad_left: k / 2,
                groups: if dw { c } else { 1 },
                depthwise: dw,
            };
            let x = rand_i8(&mut rng, n * h * w * c);
            let wt = rand_i8(&mut rng, g.weight_len().unwrap());
            let bias: Vec<i32> = (0..oc).map(|_| rng.i32(-20000..20000)).collect();
            let scales: Vec<f32> = (0..oc).map(|_| rng.f32() * 0.001 + 1e-5).collect();
            let o = Qs8Out { zero_point: 3, qmin: -100, qmax: 120 };
            let f = Qs8Filter { w: &wt, bias: Some(&bias), scales: &scales, o: &o };
            let mut want = vec![0i8; n * oh * ow * oc];
            qs8_convolution_scalar(&g, &x, -5, &f, &mut want);
            for isa in qg::isas() {
                let mut got = vec![0i8; want.len()];
                qs8_convolution_isa(isa, &g, &x, -5, &f, &mut got, &two);
                assert_eq!(got, want, "{isa:?} {g:?}");
            }
        }
    }

    /// Fully connected layers over 2^22 multiply-adds, split over two threads by output
    /// channels (the dot-product path, 3 rows) and by pixels (the packed path, 9 rows).
    #[test]
    fn xnn_fast_fully_connected_split_over_threads() {
        let two = Threads::new(2).unwrap();
        let mut rng = fastrand::Rng::with_seed(13);
        for (m, k, n) in [(3, 1500, 1001), (9, 700, 701)] {
            let x = rand_i8(&mut rng, m * k);
            let w = rand_i8(&mut rng, n * k);
            let bias: Vec<i32> = (0..n).map(|_| rng.i32(-20000..20000)).collect();
            let scales: Vec<f32> = (0..n).map(|_| rng.f32() * 0.0005 + 1e-5).collect();
            let o = Qs8Out { zero_point: -7, qmin: -128, qmax: 127 };
            let f = Qs8Filter { w: &w, bias: Some(&bias), scales: &scales, o: &o };
            let mut want = vec![0i8; m * n];
            qs8_fully_connected_scalar(&x, k, 9, &f, &mut want);
            let xf: Vec<f32> = (0..m * k).map(|_| rng.f32() * 4.0 - 1.0).collect();
            let wq = Qd8Weights::Qc8w { w: &w, scales: &scales };
            let (lo, hi) = (f32::NEG_INFINITY, f32::INFINITY);
            let mut wantf = vec![0f32; m * n];
            qd8_fully_connected_scalar(&xf, k, &wq, n, None, lo, hi, &mut wantf);
            for isa in qg::isas() {
                let mut got = vec![0i8; m * n];
                qs8_fully_connected_isa(isa, &x, k, 9, &f, &mut got, &two);
                assert_eq!(got, want, "{isa:?} {m} {k} {n}");
                let mut gotf = vec![0f32; m * n];
                qd8_fully_connected_isa(isa, &xf, k, &wq, n, None, lo, hi, &mut gotf, &two);
                assert!(gotf.iter().zip(&wantf).all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }

    /// Random QS8 and QD8 (qc8w, qc4w, qb4w) fully connected layers, 1 to 20 rows (both the
    /// dot-product and the packed paths): every ISA, 1 and 2 threads, equal the scalar loops.
    #[test]
    fn xnn_fast_fully_connected_equals_scalar() {
        let two = Threads::new(2).unwrap();
        let one = Threads::default();
        let mut rng = fastrand::Rng::with_seed(11);
        for case in 0..120 {
            let m = [1, 2, 7, 8, 9, 20][case % 6];
            let k = if case % 7 == 0 { 64 * rng.usize(1..40) } else { rng.usize(1..70) };
            let n = rng.usize(1..50);
            let x = rand_i8(&mut rng, m * k);
            let w = rand_i8(&mut rng, n * k);
            let bias: Vec<i32> = (0..n).map(|_| rng.i32(-20000..20000)).collect();
            let bias = (case % 3 != 2).then_some(bias.as_slice());
            let scales: Vec<f32> = (0..n).map(|_| rng.f32() * 0.002 + 1e-5).collect();
            let zp = [-128, 127, rng.i32(-128..128)][case % 3];
            let o = Qs8Out { zero_point: rng.i32(-20..20), qmin: -128, qmax: 127 };
            let f = Qs8Filter { w: &w, bias, scales: &scales, o: &o };
            let mut want = vec![0i8; m * n];
            qs8_fully_connected_scalar(&x, k, zp, &f, &mut want);
            let xf: Vec<f32> = (0..m * k).map(|_| rng.f32() * 8.0 - 3.0).collect();
            let fbias: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let fbias = (case % 3 != 1).then_some(fbias.as_slice());
            let fs: Vec<f32> = (0..n).map(|_| rng.f32() * 0.1 + 1e-3).collect();
            let w4: Vec<u8> = (0..n * k.div_ceil(2)).map(|_| rng.u8(..)).collect();
            let block = 32;
            let kb = k.next_multiple_of(block);
            let xb: Vec<f32> = (0..m * kb).map(|_| rng.f32() * 8.0 - 3.0).collect();
            let wb: Vec<u8> = (0..n * kb / 2).map(|_| rng.u8(..)).collect();
            let bs: Vec<f32> = (0..n * kb / block).map(|_| rng.f32() * 0.1 + 1e-3).collect();
            let qd8 = [
                (&xf, k, Qd8Weights::Qc8w { w: &w, scales: &fs }),
                (&xf, k, Qd8Weights::Qc4w { w: &w4, scales: &fs }),
                (&xb, kb, Qd8Weights::Qb4w { w: &wb, scales: &bs, block_size: block }),
            ];
            let (lo, hi) =
                if case % 2 == 0 { (-1.0, 2.0) } else { (f32::NEG_INFINITY, f32::INFINITY) };
            for isa in qg::isas() {
                for th in [&one, &two] {
                    let mut got = vec![0i8; m * n];
                    qs8_fully_connected_isa(isa, &x, k, zp, &f, &mut got, th);
                    assert_eq!(got, want, "case {case} {isa:?} m {m} k {k} n {n}");
                    for (xq, kq, wq) in &qd8 {
                        let mut want = vec![0f32; m * n];
                        qd8_fully_connected_scalar(xq, *kq, wq, n, fbias, lo, hi, &mut want);
                        let mut got = vec![0f32; m * n];
                        qd8_fully_connected_isa(isa, xq, *kq, wq, n, fbias, lo, hi, &mut got, th);
                        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got), bits(&want), "case {case} {isa:?} {wq:?}");
                        // The same weights laid out in panels of each form that holds them,
                        // fast and scalar.
                        for form in [Qd8PanelForm::Int8, Qd8PanelForm::Int4] {
                            let Some((pw, ps, block_size)) = wq.to_panels(n, *kq, form) else {
                                let four = !matches!(wq, Qd8Weights::Qc8w { .. });
                                let bk = kq.next_multiple_of(4);
                                assert!(form == Qd8PanelForm::Int4 && !(four && bk % 8 == 0));
                                continue;
                            };
                            let panels =
                                Qd8Weights::Panels { w: &pw, scales: &ps, block_size, form };
                            assert!(panels.fits(n, *kq));
                            qd8_fully_connected_isa(
                                isa, xq, *kq, &panels, n, fbias, lo, hi, &mut got, th,
                            );
                            let what = format!("case {case} {isa:?} {form:?} panels of {wq:?}");
                            assert_eq!(bits(&got), bits(&want), "{what}");
                            qd8_fully_connected_scalar(
                                xq, *kq, &panels, n, fbias, lo, hi, &mut got,
                            );
                            assert_eq!(bits(&got), bits(&want), "scalar {what}");
                        }
                    }
                }
            }
        }
    }

    /// A QD8 layer large enough to be split over two threads by panels equals the scalar loop.
    #[test]
    fn qd8_panels_split_over_threads_equal_scalar() {
        let mut rng = fastrand::Rng::with_seed(5);
        let (m, k, n, block) = (40, 1024, 120, 32);
        let x: Vec<f32> = (0..m * k).map(|_| rng.f32() * 4.0 - 2.0).collect();
        let w: Vec<u8> = (0..n * k / 2).map(|_| rng.u8(..)).collect();
        let s: Vec<f32> = (0..n * k / block).map(|_| rng.f32() * 0.1 + 1e-3).collect();
        let b: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
        let qb = Qd8Weights::Qb4w { w: &w, scales: &s, block_size: block };
        let mut want = vec![0f32; m * n];
        qd8_fully_connected_scalar(&x, k, &qb, n, Some(&b), -3.0, 3.0, &mut want);
        let two = Threads::new(2).unwrap();
        for form in [Qd8PanelForm::Int8, Qd8PanelForm::Int4] {
            let (pw, ps, block_size) = qb.to_panels(n, k, form).unwrap();
            let panels = Qd8Weights::Panels { w: &pw, scales: &ps, block_size, form };
            for isa in qg::isas() {
                let mut got = vec![0f32; m * n];
                let (lo, hi) = (-3.0, 3.0);
                qd8_fully_connected_isa(isa, &x, k, &panels, n, Some(&b), lo, hi, &mut got, &two);
                let same = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
                assert!(same, "{isa:?} {form:?}");
            }
        }
    }

    /// Micro-timing of the fast loops against the scalar ones (run with `--ignored
    /// --nocapture`, in release).
    #[test]
    #[ignore]
    fn xnn_quant_timing() {
        use std::time::Instant;
        fn best(reps: usize, mut f: impl FnMut()) -> f64 {
            let mut b = f64::INFINITY;
            for _ in 0..reps {
                let t = Instant::now();
                f();
                b = b.min(t.elapsed().as_secs_f64() * 1e3);
            }
            b
        }
        let mut rng = fastrand::Rng::with_seed(1);
        let two = Threads::new(2).unwrap();
        let one = Threads::default();
        let o = Qs8Out { zero_point: 1, qmin: -128, qmax: 127 };
        let conv = |h: usize, c: usize, oc: usize, k: usize, dw: bool| ConvGeometry {
            n: 1,
            h,
            w: h,
            c,
            kh: k,
            kw: k,
            oh: h,
            ow: h,
            o: oc,
            stride: [1, 1],
            dilation: [1, 1],
            pad_top: k / 2,
            pad_left: k / 2,
            groups: if dw { c } else { 1 },
            depthwise: dw,
        };
        let cases = [
            ("conv 1x56x56x64 -> 64 3x3", conv(56, 64, 64, 3, false)),
            ("conv 1x28x28x192 -> 32 1x1", conv(28, 192, 32, 1, false)),
            ("conv 1x56x56x24 -> 144 1x1", conv(56, 24, 144, 1, false)),
            ("depthwise 1x56x56x144 3x3", conv(56, 144, 144, 3, true)),
        ];
        for (name, g) in cases {
            let x = rand_i8(&mut rng, g.n * g.h * g.w * g.c);
            let wt = rand_i8(&mut rng, g.weight_len().unwrap());
            let bias: Vec<i32> = (0..g.o).map(|_| rng.i32(-2000..2000)).collect();
            let scales = vec![0.001f32; g.o];
            let f = Qs8Filter { w: &wt, bias: Some(&bias), scales: &scales, o: &o };
            let mut out = vec![0i8; g.n * g.oh * g.ow * g.o];
            let s = best(3, || qs8_convolution_scalar(&g, &x, 3, &f, &mut out));
            let want = out.clone();
            for isa in qg::isas() {
                for (tn, th) in [(1, &one), (2, &two)] {
                    let f = best(20, || qs8_convolution_isa(isa, &g, &x, 3, &f, &mut out, th));
                    assert_eq!(out, want);
                    println!("{name}: scalar {s:.3} ms, {isa:?} x{tn} {f:.3} ms ({:.1}x)", s / f);
                }
            }
        }
        let (m, k, n) = (1, 1280, 1000);
        let x = rand_i8(&mut rng, m * k);
        let w = rand_i8(&mut rng, n * k);
        let scales = vec![0.001f32; n];
        let f = Qs8Filter { w: &w, bias: None, scales: &scales, o: &o };
        let mut out = vec![0i8; m * n];
        let s = best(5, || qs8_fully_connected_scalar(&x, k, 3, &f, &mut out));
        let want = out.clone();
        for isa in qg::isas() {
            for (tn, th) in [(1, &one), (2, &two)] {
                let f = best(50, || qs8_fully_connected_isa(isa, &x, k, 3, &f, &mut out, th));
                assert_eq!(out, want);
                println!(
                    "qs8 fc 1x1280 -> 1000: scalar {s:.3} ms, {isa:?} x{tn} {f:.3} ms ({:.1}x)",
                    s / f
                );
            }
        }
        let xf: Vec<f32> = (0..m * k).map(|_| rng.f32() - 0.5).collect();
        let wq = Qd8Weights::Qc8w { w: &w, scales: &scales };
        let mut outf = vec![0f32; m * n];
        let (lo, hi) = (f32::NEG_INFINITY, f32::INFINITY);
        let s = best(5, || qd8_fully_connected_scalar(&xf, k, &wq, n, None, lo, hi, &mut outf));
        for isa in qg::isas() {
            for (tn, th) in [(1, &one), (2, &two)] {
                let f = best(50, || {
                    qd8_fully_connected_isa(isa, &xf, k, &wq, n, None, lo, hi, &mut outf, th)
                });
                println!("qd8 qc8w fc 1x1280 -> 1000: scalar {s:.3} ms, {isa:?} x{tn} {f:.3} ms ({:.1}x)", s / f);
            }
        }
    }
}
