//! XNNPACK's scalar quantization arithmetic (fmagic rounding, NaN-to-bound clamps, quantized
//! bounds, fp32 requantization) and the geometry of an NHWC convolution: what the quantized
//! operators ([`super::xnn_quant`]) and their integer GEMM loops (`xnn_qgemm.rs`)
//! share. The conventions are [`super::xnn_quant`]'s.

/// 1.5·2^23: adding it to a float of magnitude below 2^22 leaves the rounded integer in the
/// low mantissa bits.
pub const MAGIC_BIAS: f32 = 12582912.0;
/// The bit pattern of [`MAGIC_BIAS`].
pub const MAGIC_BIAS_BITS: i32 = 0x4B40_0000;

/// Round-half-to-even of `v` by XNNPACK's fmagic trick: `bits(v + 12582912.0f) - 0x4B400000`.
/// Exact for `|v| < 2^22` (all uses clamp `v` to a few hundred first).
#[inline]
pub fn fmagic(v: f32) -> i32 {
    ((v + MAGIC_BIAS).to_bits() as i32).wrapping_sub(MAGIC_BIAS_BITS)
}

/// `max(v, lo)` then `min(v, hi)` with XNNPACK's NaN behaviour (NaN becomes `lo`).
#[inline]
pub fn clamp_f32(v: f32, lo: f32, hi: f32) -> f32 {
    let v = if lo < v { v } else { lo };
    if hi < v {
        hi
    } else {
        v
    }
}

/// `lrintf` of a value already inside the `i32` range (NaN gives 0).
#[inline]
pub(crate) fn lrintf(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// `xnn_qs8_quantize(v, scale, zp)` (X `src/xnnpack/requantization.h`):
/// `lrintf(fminf(fmaxf(v / scale + zp, -128), 127))`. Quantizes a fused float bound (`±inf`
/// saturate to -128 / 127).
#[allow(clippy::manual_clamp)] // fmaxf / fminf: NaN goes to the bound, unlike clamp
pub fn qs8_quantize_bound(v: f32, scale: f32, zero_point: i32) -> i32 {
    let x = v / scale + zero_point as f32;
    lrintf(x.max(-128.0).min(127.0))
}

/// `xnn_qu8_quantize`: as [`qs8_quantize_bound`] with the range `[0, 255]`.
#[allow(clippy::manual_clamp)] // fmaxf / fminf: NaN goes to the bound, unlike clamp
pub fn qu8_quantize_bound(v: f32, scale: f32, zero_point: i32) -> i32 {
    let x = v / scale + zero_point as f32;
    lrintf(x.max(0.0).min(255.0))
}

/// The integer output range of a quantized node with fused float bounds `[min, max]`:
/// both bounds quantized with [`qs8_quantize_bound`].
pub fn qs8_output_range(min: f32, max: f32, scale: f32, zero_point: i32) -> (i32, i32) {
    (qs8_quantize_bound(min, scale, zero_point), qs8_quantize_bound(max, scale, zero_point))
}

/// One fmagic quantization (X `f32-qs8-vcvt/gen/*scalar-fmagic*`): `v` is already the value
/// times the inverse scale; `q = rne(clamp(v, qmin - zp, qmax - zp)) + zp`.
#[inline]
pub fn quantize_scaled(v: f32, zero_point: i32, qmin: i32, qmax: i32) -> i32 {
    let lo = (qmin - zero_point) as f32;
    let hi = (qmax - zero_point) as f32;
    fmagic(clamp_f32(v, lo, hi)).wrapping_add(zero_point)
}

/// The output side of a QS8 GEMM-like node: zero point and the integer range (from
/// [`qs8_output_range`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qs8Out {
    /// Output zero point.
    pub zero_point: i32,
    /// Lowest output value (at least -128).
    pub qmin: i32,
    /// Highest output value (at most 127).
    pub qmax: i32,
}

/// The filter side of a QS8 convolution or fully connected layer: its weights, the i32 bias
/// per output channel, the per-channel requantization scales (from
/// `xnn_quant::qs8_requant_scales`) and the output quantization. `scales.len()` is the number of
/// output channels.
#[derive(Clone, Copy, Debug)]
pub struct Qs8Filter<'a> {
    /// The weights (`[n, k]` for a fully connected layer; OHWI, or `[1, kh, kw, o]` when
    /// depthwise, for a convolution).
    pub w: &'a [i8],
    /// The bias per output channel, if any.
    pub bias: Option<&'a [i32]>,
    /// The requantization scale per output channel.
    pub scales: &'a [f32],
    /// The output's zero point and range.
    pub o: &'a Qs8Out,
}

/// fp32 requantization of one accumulator (X `qs8-qc8w-gemm/gen/*fp32-scalar-fmagic.c`):
/// `rne(clamp((float)acc * scale, qmin - zp, qmax - zp)) + zp`.
#[inline]
pub fn qs8_requantize(acc: i32, scale: f32, o: &Qs8Out) -> i8 {
    quantize_scaled(acc as f32 * scale, o.zero_point, o.qmin, o.qmax) as i8
}

/// The geometry of an NHWC convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Batch.
    pub n: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Input channels.
    pub c: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Output channels.
    pub o: usize,
    /// Stride (height, width), at least 1.
    pub stride: [usize; 2],
    /// Dilation (height, width), at least 1.
    pub dilation: [usize; 2],
    /// Padding above the input.
    pub pad_top: usize,
    /// Padding left of the input.
    pub pad_left: usize,
    /// Groups: `c` and `o` are multiples of it (ignored when `depthwise`).
    pub groups: usize,
    /// Depthwise layout: weight `[1, kh, kw, o]`, output channel `j` reads input channel
    /// `j / (o / c)`.
    pub depthwise: bool,
}

impl ConvGeometry {
    /// The output size of one spatial dim:
    /// `(in + pad_before + pad_after - dil*(k-1) - 1) / stride + 1`, or `None` when the
    /// window does not fit (or on overflow, or a zero stride / dilation / kernel).
    pub fn out_size(
        input: usize,
        pad_before: usize,
        pad_after: usize,
        kernel: usize,
        stride: usize,
        dilation: usize,
    ) -> Option<usize> {
        if kernel == 0 || stride == 0 || dilation == 0 {
            return None;
        }
        let padded = input.checked_add(pad_before)?.checked_add(pad_after)?;
        let span = dilation.checked_mul(kernel - 1)?.checked_add(1)?;
        Some(padded.checked_sub(span)? / stride + 1)
    }

    /// The weight element count this geometry needs.
    pub fn weight_len(&self) -> Option<usize> {
        let taps = self.kh.checked_mul(self.kw)?;
        if self.depthwise {
            taps.checked_mul(self.o)
        } else {
            taps.checked_mul(self.o)?.checked_mul(self.c.checked_div(self.groups)?)
        }
    }

    /// Whether the channel counts are consistent (groups divide both, depthwise `o` a
    /// multiple of `c`), and every size computes without overflow.
    pub fn is_valid(&self) -> bool {
        let channels = if self.depthwise {
            self.c > 0 && self.o.is_multiple_of(self.c)
        } else {
            self.groups > 0
                && self.c.is_multiple_of(self.groups)
                && self.o.is_multiple_of(self.groups)
        };
        channels
            && self.stride.iter().all(|&s| s > 0)
            && self.dilation.iter().all(|&d| d > 0)
            && self.weight_len().is_some()
            && [self.n, self.h, self.w, self.c]
                .iter()
                .try_fold(1usize, |a, &b| a.checked_mul(b))
                .is_some()
            && [self.n, self.oh, self.ow, self.o]
                .iter()
                .try_fold(1usize, |a, &b| a.checked_mul(b))
                .is_some()
    }

    /// The input row (or column) read by output index `out` at tap `t`, if inside the input.
    #[inline]
    pub(crate) fn src(
        out: usize,
        t: usize,
        stride: usize,
        dil: usize,
        pad: usize,
        len: usize,
    ) -> Option<usize> {
        (out * stride + t * dil).checked_sub(pad).filter(|&i| i < len)
    }
}
