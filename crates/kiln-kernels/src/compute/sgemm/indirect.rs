//! The left operand of a convolution over a channels-last image, read where it lies through
//! an indirection buffer (XNNPACK's IGEMM): no im2col matrix, packed or not.
//!
//! Row `p` of the product is output pixel `p`; its depth is the kernel's taps in row-major
//! order, each tap the `channels` values of one input pixel (contiguous in NHWC), or zeros
//! where the tap falls in the padding. The weights are packed in the same depth order
//! (`(ky, kx, c)`), so the microkernel runs over the taps with one pointer per row.

use super::error::GemmError;
use super::kernel::{Indirect, ZERO_ROW};
use crate::compute::conv::Geometry;

/// The indirection buffer of a convolution on `NHWC` images, built once for its geometry:
/// for each panel of `mr` output pixels and each tap, `mr` offsets into the image (or
/// `ZERO_ROW`).
#[derive(Debug)]
pub struct Indirection {
    offsets: Vec<usize>,
    mr: usize,
    taps: usize,
    channels: usize,
    rows: usize,
    image_len: usize,
    /// The end of the farthest run any offset reads: `o + channels <= reach` for every `o`
    /// but [`ZERO_ROW`].
    reach: usize,
    zeros: Vec<f32>,
}

/// At most this many offsets in one buffer (512 MiB): output pixels times taps, which the
/// file's sizes decide. [`fits`] tells beforehand whether a convolution stays under it.
pub const MAX_OFFSETS: usize = 1 << 26;

/// Whether the indirection buffer of a convolution with `pixels` output pixels and `taps`
/// kernel taps (an upper bound for either kind of buffer) stays within [`MAX_OFFSETS`].
pub fn fits(pixels: usize, taps: usize) -> bool {
    // Panels round the pixels up to at most 64 rows more.
    pixels.checked_add(64).and_then(|p| p.checked_mul(taps)).is_some_and(|n| n <= MAX_OFFSETS)
}

impl Indirection {
    /// Bytes of offsets it holds.
    pub fn heap_bytes(&self) -> usize {
        self.offsets.capacity() * size_of::<usize>()
    }

    /// The buffer of convolution `g` (one group, `g.c` channels per pixel) for panels of `mr`
    /// rows; an error when a size is zero or overflows. A tap is one input pixel.
    pub fn new(g: &Geometry, mr: usize) -> Result<Self, GemmError> {
        // The input coordinate of output `o`, tap `k` on an axis, if inside the image.
        let at = |o: usize, k: usize, axis: usize, size: usize| {
            (o * g.stride[axis] + k * g.dil[axis]).checked_sub(g.pad[axis]).filter(|&v| v < size)
        };
        let offset = |oy: usize, ox: usize, t: usize| match (
            at(oy, t / g.kw, 0, g.h),
            at(ox, t % g.kw, 1, g.w),
        ) {
            (Some(y), Some(x)) => (y * g.w + x) * g.c,
            _ => ZERO_ROW,
        };
        Self::build(g, mr, [g.h, g.w], g.kh * g.kw, g.c, offset)
    }

    /// The buffer of convolution `g` (one group, dilation 1 across) over its input already
    /// padded: `h + 2 * pad[0]` rows of `w + 2 * pad[1]` pixels of `g.c` channels, the
    /// padding zeros. A tap is a kernel row, whose `kw` pixels lie side by side, so each
    /// step of the microkernel's depth loop reads `kw * c` values from one pointer (few
    /// channels, as in a network's first layer, would otherwise switch pointers every few
    /// values). An error when a size is zero or overflows, or the dilation across is not 1.
    pub fn padded(g: &Geometry, mr: usize) -> Result<Self, GemmError> {
        if g.dil[1] != 1 {
            return Err(GemmError::Invalid("conv2d indirection: padded rows need dilation 1"));
        }
        let overflow = || GemmError::Overflow("conv2d indirection");
        let h = g.pad[0].checked_mul(2).and_then(|p| p.checked_add(g.h)).ok_or_else(overflow)?;
        let w = g.pad[1].checked_mul(2).and_then(|p| p.checked_add(g.w)).ok_or_else(overflow)?;
        let run = g.kw.checked_mul(g.c).ok_or_else(overflow)?;
        let offset = |oy: usize, ox: usize, ky: usize| {
            ((oy * g.stride[0] + ky * g.dil[0]) * w + ox * g.stride[1]) * g.c
        };
        Self::build(g, mr, [h, w], g.kh, run, offset)
    }

    /// The buffer of `taps` runs of `channels` values per output pixel of `g`, run `t` of
    /// pixel `(oy, ox)` at `offset(oy, ox, t)` in an image of `hw` pixels of `g.c` values.
    fn build(
        g: &Geometry,
        mr: usize,
        [h, w]: [usize; 2],
        taps: usize,
        channels: usize,
        offset: impl Fn(usize, usize, usize) -> usize,
    ) -> Result<Self, GemmError> {
        let overflow = || GemmError::Overflow("conv2d indirection");
        let rows = g.oh.checked_mul(g.ow).ok_or_else(overflow)?;
        let image_len = h.checked_mul(w).and_then(|v| v.checked_mul(g.c)).ok_or_else(overflow)?;
        if mr == 0 || channels == 0 || rows == 0 || taps == 0 {
            return Err(GemmError::Invalid("conv2d indirection: zero size"));
        }
        let len = rows
            .div_ceil(mr)
            .checked_mul(mr)
            .and_then(|v| v.checked_mul(taps))
            .ok_or_else(overflow)?;
        if len > MAX_OFFSETS {
            return Err(GemmError::Invalid("conv2d indirection: more than 2^26 offsets"));
        }
        let mut offsets = Vec::new();
        offsets
            .try_reserve_exact(len)
            .map_err(|_| GemmError::Invalid("conv2d indirection: out of memory"))?;
        // The last panel's rows past the last pixel repeat its offsets (no tile reads them).
        for panel in 0..rows.div_ceil(mr) {
            for t in 0..taps {
                for i in 0..mr {
                    let p = (panel * mr + i).min(rows - 1);
                    offsets.push(offset(p / g.ow, p % g.ow, t));
                }
            }
        }
        let mut ends = offsets.iter().filter(|&&o| o != ZERO_ROW).map(|&o| o.checked_add(channels));
        let reach = ends.try_fold(0, |m, e| Some(m.max(e?))).ok_or_else(overflow)?;
        if reach > image_len {
            return Err(GemmError::Invalid("conv2d indirection: a tap reads past the image"));
        }
        let zeros = vec![0.0; channels];
        Ok(Indirection { offsets, mr, taps, channels, rows, image_len, reach, zeros })
    }

    /// Output pixels (rows of the product).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Depth of the product: taps times channels.
    pub fn depth(&self) -> usize {
        self.taps * self.channels
    }

    /// Rows per panel.
    pub fn panel_rows(&self) -> usize {
        self.mr
    }

    /// Values of the image it reads.
    pub fn image_len(&self) -> usize {
        self.image_len
    }

    /// The tile reader of the panel holding row `row` (a multiple of the panel rows) and
    /// the `count - 1` panels after it (a stack of strips), as many as there are.
    pub(crate) fn panels(&self, row: usize, count: usize) -> Indirect<'_> {
        let per_panel = self.taps * self.mr;
        let from = &self.offsets[(row / self.mr) * per_panel..];
        Indirect {
            offsets: &from[..per_panel.saturating_mul(count).min(from.len())],
            stride: self.mr,
            channels: self.channels,
            reach: self.reach,
            zeros: &self.zeros,
        }
    }
}
