//! The buffers a convolution reuses from run to run, one set per thread, and how the
//! threads' first error comes back.

use crate::compute::conv2d::depthwise::rows::RowSpan;
use crate::compute::linear::LinearScratch;
use crate::compute::sgemm::{GemmError, GemmScratch};
use crate::compute::threads;

/// Reusable buffers of [`PackedConv2d::run`](super::PackedConv2d::run): one set per thread, the im2col matrix of a
/// convolution with few output pixels (or the channels-last copy of an NCHW input), the
/// products of a split whose tasks compute apart and are placed after, and a one-pixel
/// convolution's linear layer's.
#[derive(Debug, Default)]
pub struct ConvScratch {
    pub(super) parts: Vec<PartScratch>,
    pub(super) col: Vec<f32>,
    pub(super) apart: Vec<f32>,
    /// A one-pixel convolution's, run as a linear layer.
    pub(super) linear: LinearScratch,
}

/// The buffers of one thread's tasks of a convolution, and the first error they met.
#[derive(Debug, Default)]
pub(super) struct PartScratch {
    pub(super) gemm: GemmScratch,
    /// A depthwise channel's phased rows.
    pub(super) row: Vec<f32>,
    /// A `Plan::FewPixels` task's transposed product, or the expanded rows of a
    /// [`PointwiseDepthwise`](super::PointwiseDepthwise) task.
    pub(super) out: Vec<f32>,
    /// The rows a [`PointwiseDepthwise`](super::PointwiseDepthwise) task's depthwise step reads, in its buffer.
    pub(super) spans: Vec<RowSpan>,
    /// The expanded input rows a [`PointwiseDepthwise`](super::PointwiseDepthwise) thread holds at the start of `out`,
    /// of the image being computed: its next task, when it is the following run of output
    /// rows, starts from them.
    pub(super) held: std::ops::Range<usize>,
    pub(super) error: Option<GemmError>,
}

impl PartScratch {
    /// Keeps the first error of this thread's tasks.
    pub(super) fn note(&mut self, result: Result<(), GemmError>) {
        if let Err(e) = result {
            self.error.get_or_insert(e);
        }
    }
}

impl ConvScratch {
    /// Bytes its buffers hold.
    pub fn heap_bytes(&self) -> usize {
        let part = |p: &PartScratch| {
            p.gemm.heap_bytes()
                + (p.row.capacity() + p.out.capacity()) * 4
                + p.spans.capacity() * std::mem::size_of::<RowSpan>()
        };
        self.parts.iter().map(part).sum::<usize>()
            + (self.col.capacity() + self.apart.capacity()) * 4
            + self.linear.heap_bytes()
    }

    /// The first error a thread met in the last split (clearing them all).
    pub(super) fn outcome(&mut self) -> Result<(), GemmError> {
        first_error(&mut self.parts)
    }
}

/// The first error one of `parts` met in the last split (clearing them all, so none is left
/// for the next).
pub(super) fn first_error(parts: &mut [PartScratch]) -> Result<(), GemmError> {
    threads::first_error(parts.iter_mut().filter_map(|p| p.error.take()))
}

/// `len` values of `buf`, grown if short.
pub(super) fn window(buf: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if buf.len() < len {
        buf.resize(len, 0.0);
    }
    &mut buf[..len]
}
