//! A pointwise convolution feeding a depthwise one (MobileNet's expansion then its depthwise
//! filter), channels-last, run a few output rows at a time: the pointwise convolution computes
//! only the rows of its output the next depthwise rows read, into a small buffer that stays in
//! cache, and the depthwise convolution reads them there. The expanded activation, the largest
//! tensor of such a network (112x112x96 floats in mobilenet_v2, 4.8 MB), is never written to
//! memory and read back. Each value is computed by the same operations as when the two run one
//! after the other, so the bits are the same.

use std::ops::Range;

use super::geometry::{check_images, is_depthwise, is_pointwise, Conv2dGeometry, Layout, Layouts};
use super::packed::{PackedConv2d, Plan};
use super::scratch::{first_error, ConvScratch, PartScratch};
use crate::compute::conv2d::depthwise::rows::RowSpan;
use crate::compute::sgemm::{aligned_window, GemmError};
use crate::compute::threads::{split, with_pieces, Threads};

/// Bytes of the rows of the expanded activation one part keeps (the rows the depthwise
/// convolution reads for a few output rows): small enough to stay in a core's L2 cache beside
/// the input and output streams.
const BUFFER_BYTES: usize = 256 << 10;

/// Smallest expanded activation (bytes per image) for which the pair runs fused: below it the
/// activation stays in cache between the two convolutions anyway, and the rows the parts
/// compute twice at their borders would cost more than the fusion saves.
const FUSE_MIN_BYTES: usize = 1 << 20;

/// The two prepared convolutions of a fused pair.
#[derive(Debug)]
pub struct PointwiseDepthwise {
    pointwise: PackedConv2d,
    depthwise: PackedConv2d,
    /// Bytes of expanded rows a part keeps ([`BUFFER_BYTES`]; smaller in tests, to take many
    /// steps).
    buffer_bytes: usize,
}

impl PointwiseDepthwise {
    /// Bytes of prepared weights both convolutions hold.
    pub fn heap_bytes(&self) -> usize {
        self.pointwise.heap_bytes() + self.depthwise.heap_bytes()
    }

    /// Whether a pointwise convolution of geometry `pw` with input layout `input` feeding a
    /// depthwise one of geometry `dw` runs fused, and pays: the pointwise one writes the
    /// depthwise one's channels-last input (1x1, stride 1, no padding, one group), the
    /// depthwise one runs channels-last on blocks of 16 channels, and the expanded
    /// activation has at least `FUSE_MIN_BYTES`.
    pub fn supports(pw: &Conv2dGeometry, input: Layout, dw: &Conv2dGeometry) -> bool {
        let nhwc = Layouts { input: Layout::Nhwc, output: Layout::Nhwc };
        let bytes = (dw.in_channels * 4).checked_mul(dw.in_h * dw.in_w);
        is_pointwise(pw)
            && pw.groups == 1
            && PackedConv2d::supports(pw, Layouts { input, output: Layout::Nhwc })
            && is_depthwise(dw)
            && PackedConv2d::supports(dw, nhwc)
            && pw.out_channels == dw.in_channels
            && (pw.in_h, pw.in_w) == (dw.in_h, dw.in_w)
            && bytes.is_some_and(|b| b >= FUSE_MIN_BYTES)
    }

    /// The fused pair of `pointwise` (writing channels-last) and `depthwise` (channels-last
    /// to channels-last); an error when they are not a pair [`PointwiseDepthwise::supports`].
    pub fn new(
        pointwise: PackedConv2d,
        depthwise: PackedConv2d,
    ) -> Result<PointwiseDepthwise, GemmError> {
        let ok = Self::supports(&pointwise.g, pointwise.layouts.input, &depthwise.g)
            && pointwise.layouts.output == Layout::Nhwc
            && depthwise.layouts.input == Layout::Nhwc
            && matches!(pointwise.plan, Plan::PixelRows { .. })
            && matches!(depthwise.plan, Plan::Depthwise { blocks: Some(_), .. });
        if !ok {
            return Err(GemmError::Invalid(
                "conv2d: not a pointwise convolution feeding a channels-last depthwise one",
            ));
        }
        Ok(PointwiseDepthwise { pointwise, depthwise, buffer_bytes: BUFFER_BYTES })
    }

    /// How the pair computes, for reports (in the terms of [`PackedConv2d::algorithm`]): the
    /// pointwise product's rows feed the depthwise sums on channel blocks.
    pub fn algorithm(&self) -> &'static str {
        "gemm+depthwise-blocks"
    }

    /// Runs the pair: `input` is `[batch, Cin, H, W]` in the pointwise convolution's input
    /// layout, `out` `[batch, C, OH, OW]` channels-last, `residual` (if any) laid out as
    /// `out` and added before the depthwise activation. The output rows are split into tasks
    /// over `threads`, each computing the expanded rows its output rows read; a thread that
    /// goes on to the next run of rows keeps the ones both read, so only rows at the border
    /// of two threads' work are computed twice. The same bits for any thread count, and as
    /// [`PackedConv2d::run`] of one then the other. An error (nothing written) when a slice is
    /// short or a size overflows.
    pub fn run(
        &self,
        batch: usize,
        input: &[f32],
        residual: Option<&[f32]>,
        out: &mut [f32],
        scratch: &mut ConvScratch,
        threads: &Threads,
    ) -> Result<(), GemmError> {
        let (pw, dw) = (&self.pointwise, &self.depthwise);
        // Neither overflows: `PackedConv2d::with_layouts` checked both sizes.
        let in_img = pw.g.in_channels * pw.g.in_h * pw.g.in_w;
        let out_img = dw.g.out_channels * dw.oh * dw.ow;
        check_images(batch, [in_img, out_img], input, residual, out)?;
        let parts = threads.tasks_for(crate::compute::threads::TASKS_PER_THREAD, dw.oh);
        let row = dw.ow * dw.g.out_channels;
        for b in 0..batch {
            let x = &input[b * in_img..][..in_img];
            let y = &mut out[b * out_img..][..out_img];
            let r = residual.map(|r| &r[b * out_img..][..out_img]);
            let tasks = with_pieces(split(dw.oh, 1, parts), y, row);
            // What a thread held was another image's.
            scratch.parts.iter_mut().for_each(|p| p.held = 0..0);
            threads.for_each_with(tasks, &mut scratch.parts, |part, (rows, y)| {
                let result = self.rows(x, r, rows, y, part);
                part.note(result);
            });
            first_error(&mut scratch.parts)?;
        }
        Ok(())
    }

    /// Output rows `rows` of one image into `y` (those rows), a few at a time: the expanded
    /// rows they read computed into the thread's buffer, the ones the next rows read again
    /// kept (also from the thread's previous task of the image, and for its next).
    fn rows(
        &self,
        x: &[f32],
        residual: Option<&[f32]>,
        rows: Range<usize>,
        y: &mut [f32],
        part: &mut PartScratch,
    ) -> Result<(), GemmError> {
        let (pw, dw) = (&self.pointwise, &self.depthwise);
        let (Plan::PixelRows { weight }, Plan::Depthwise { phases, blocks: Some(blocks), .. }) =
            (&pw.plan, &dw.plan)
        else {
            unreachable!("PointwiseDepthwise::new checked the plans");
        };
        let (w, c) = (dw.g.in_w, dw.g.in_channels);
        let row_len = w * c;
        // Output rows per step: as many as the buffer holds the input rows of.
        let reach = (dw.g.kh - 1) * dw.g.dilation[0] + 1;
        let fit = (self.buffer_bytes / 4 / row_len).saturating_sub(reach) / dw.g.stride[0] + 1;
        let step = fit.clamp(1, rows.len().max(1));
        // The same window for every task, so that what one leaves held stays in place.
        let capacity = (fit.max(1) - 1) * dw.g.stride[0] + reach;
        let PartScratch { gemm, out: buffer, spans, held: left, .. } = part;
        let buffer = aligned_window(buffer, capacity * row_len);
        // Input rows held in `buffer`, from its start.
        let mut held = std::mem::take(left);
        let out_row = dw.ow * c;
        for oy0 in rows.clone().step_by(step) {
            let oy1 = (oy0 + step).min(rows.end);
            let needed = &phases.spans[oy0..oy1];
            let (lo, hi) = input_rows(needed, dw.g.dilation[0]);
            // Keep the held rows this step reads again; compute the rest after them.
            let from = if held.start <= lo && lo < held.end {
                let kept = held.end.min(hi);
                let at = |r: usize| (r - held.start) * row_len;
                buffer.copy_within(at(lo)..at(kept), 0);
                kept
            } else {
                lo
            };
            let fresh = &mut buffer[(from - lo) * row_len..(hi - lo) * row_len];
            pw.pointwise_pixels(weight, x, from * w..hi * w, fresh, gemm)?;
            held = lo..hi;
            spans.clear();
            spans
                .extend(needed.iter().map(|s| RowSpan { first: s.first.saturating_sub(lo), ..*s }));
            let y = &mut y[(oy0 - rows.start) * out_row..][..(oy1 - oy0) * out_row];
            let held_rows = &buffer[..(hi - lo) * row_len];
            dw.depthwise_rows(blocks, spans, held_rows, residual, oy0, y);
        }
        *left = held;
        Ok(())
    }
}

/// The input rows `lo..hi` output rows of `spans` read (empty at 0 when they read none).
fn input_rows(spans: &[RowSpan], dilation: usize) -> (usize, usize) {
    let read = spans.iter().filter(|s| s.ky1 > s.ky0);
    let lo = read.clone().map(|s| s.first).min();
    let hi = read.map(|s| s.first + (s.ky1 - s.ky0 - 1) * dilation + 1).max();
    match (lo, hi) {
        (Some(lo), Some(hi)) => (lo, hi),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::conv2d::depthwise::channels::BLOCK;
    use crate::compute::conv2d::Layouts;
    use crate::compute::sgemm::Activation;

    /// The fused pair gives the bits of the two convolutions run one after the other, for
    /// strides, paddings, dilations, residuals, activations and thread counts.
    #[test]
    fn fused_pair_gives_the_bits_of_the_two_convolutions() {
        let mut rng = fastrand::Rng::with_seed(0x9d);
        let mut fused = 0;
        while fused < 40 {
            let (h, w) = (rng.usize(4..40), rng.usize(1..48));
            // Sometimes deeper than a depth block of the unfused product's kernel.
            let cin = if rng.usize(0..4) == 0 { rng.usize(250..300) } else { rng.usize(1..20) };
            let blocks = rng.usize(1..4);
            // Whole blocks, or a tail block overlapping the last whole one.
            let c = blocks * BLOCK + if rng.bool() { rng.usize(1..BLOCK) } else { 0 };
            let (k, s, d) = (rng.usize(1..4) * 2 - 1, rng.usize(1..3), rng.usize(1..3));
            let p = rng.usize(0..k);
            let (pw_g, dw_g) = pair_geometry([h, w], cin, c, k, [s, p, d]);
            let input = if rng.bool() { Layout::Nhwc } else { Layout::Nchw };
            let random = |rng: &mut fastrand::Rng, n: usize| -> Vec<f32> {
                (0..n).map(|_| rng.f32() * 2.0 - 1.0).collect()
            };
            let (pw_w, pw_b) = (random(&mut rng, c * cin), random(&mut rng, c));
            let (dw_w, dw_b) = (random(&mut rng, c * k * k), random(&mut rng, c));
            let acts = [Activation::None, Activation::Clamp { min: 0.0, max: 6.0 }];
            let (pw_act, dw_act) = (acts[rng.usize(0..2)], acts[rng.usize(0..2)]);
            let pw_l = Layouts { input, output: Layout::Nhwc };
            let nhwc = Layouts { input: Layout::Nhwc, output: Layout::Nhwc };
            let pack = || -> Result<(PackedConv2d, PackedConv2d), GemmError> {
                let pw = PackedConv2d::with_layouts(pw_g, &pw_w, Some(&pw_b), pw_act, pw_l)?;
                let dw = PackedConv2d::with_layouts(dw_g, &dw_w, Some(&dw_b), dw_act, nhwc)?;
                Ok((pw, dw))
            };
            let Ok((pw, dw)) = pack() else { continue };
            let (oh, ow) = dw.out_hw();
            let batch = rng.usize(1..3);
            let x = random(&mut rng, batch * cin * h * w);
            let res = random(&mut rng, batch * c * oh * ow);
            let res = rng.bool().then_some(&res[..]);
            let mut mid = vec![0f32; batch * c * h * w];
            let mut want = vec![0f32; batch * c * oh * ow];
            let one = Threads::new(1).unwrap();
            let mut scratch = ConvScratch::default();
            pw.run(batch, &x, None, &mut mid, &mut scratch, &one).unwrap();
            dw.run(batch, &mid, res, &mut want, &mut scratch, &one).unwrap();
            // From one output row per step to all of them.
            let buffer_bytes = rng.usize(0..2 * c * h * w * 4);
            let pair = PointwiseDepthwise { pointwise: pw, depthwise: dw, buffer_bytes };
            // The last: three threads whose workers never get a core, so the caller runs
            // every task one after the other, keeping the rows each leaves to the next.
            for (n, held) in [(1, false), (2, false), (3, false), (4, false), (3, true)] {
                let threads = Threads::new(n).unwrap();
                let _gate = held.then(|| threads.hold_workers());
                let mut got = vec![f32::NAN; want.len()];
                pair.run(batch, &x, res, &mut got, &mut scratch, &threads).unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{pw_g:?} {dw_g:?} {n} threads {held}");
            }
            fused += 1;
        }
    }

    /// A pointwise convolution of `cin` to `c` channels on an `hw` image, and a depthwise
    /// `k x k` one on its output with `[stride, padding, dilation]`.
    fn pair_geometry(
        [h, w]: [usize; 2],
        cin: usize,
        c: usize,
        k: usize,
        [s, p, d]: [usize; 3],
    ) -> (Conv2dGeometry, Conv2dGeometry) {
        let pw = Conv2dGeometry::new(cin, [h, w], c, [1, 1]);
        let dw = Conv2dGeometry {
            in_channels: c,
            out_channels: c,
            kh: k,
            kw: k,
            stride: [s, s],
            padding: [p, p],
            dilation: [d, d],
            groups: c,
            ..pw
        };
        (pw, dw)
    }

    #[test]
    fn small_or_mismatched_pairs_are_refused() {
        let (pw, dw) = pair_geometry([112, 112], 16, 96, 3, [2, 1, 1]);
        assert!(PointwiseDepthwise::supports(&pw, Layout::Nhwc, &dw));
        let small = |g: Conv2dGeometry| Conv2dGeometry { in_h: 14, in_w: 14, ..g };
        assert!(!PointwiseDepthwise::supports(&small(pw), Layout::Nhwc, &small(dw)));
        let other = Conv2dGeometry { in_channels: 80, out_channels: 80, groups: 80, ..dw };
        assert!(!PointwiseDepthwise::supports(&pw, Layout::Nhwc, &other));
        let strided = Conv2dGeometry { stride: [2, 2], ..pw };
        assert!(!PointwiseDepthwise::supports(&strided, Layout::Nhwc, &dw));
    }
}
