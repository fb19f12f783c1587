//! A convolution's shape ([`Conv2dGeometry`]), the memory layouts of its activations, and
//! the size checks every plan shares.

use crate::compute::conv::Geometry;
use crate::compute::sgemm::{need, GemmError};

/// Shape parameters of a convolution (PyTorch `conv2d` arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dGeometry {
    /// Input channels.
    pub in_channels: usize,
    /// Input height.
    pub in_h: usize,
    /// Input width.
    pub in_w: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Stride (height, width).
    pub stride: [usize; 2],
    /// Zero padding on both sides (height, width).
    pub padding: [usize; 2],
    /// Dilation (height, width).
    pub dilation: [usize; 2],
    /// Groups; divides both channel counts.
    pub groups: usize,
}

impl Conv2dGeometry {
    /// `in_channels` planes of `in_h x in_w` to `out_channels` through a `kh x kw` kernel, one
    /// group, unit stride and dilation, no padding; struct update syntax sets the rest.
    pub fn new(
        in_channels: usize,
        [in_h, in_w]: [usize; 2],
        out_channels: usize,
        [kh, kw]: [usize; 2],
    ) -> Self {
        Conv2dGeometry {
            in_channels,
            in_h,
            in_w,
            out_channels,
            kh,
            kw,
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }

    /// The geometry of one group's im2col for output size `oh x ow`.
    pub(super) fn per_group(&self, oh: usize, ow: usize) -> Geometry {
        Geometry {
            c: self.in_channels / self.groups,
            h: self.in_h,
            w: self.in_w,
            kh: self.kh,
            kw: self.kw,
            oh,
            ow,
            stride: self.stride,
            pad: self.padding,
            dil: self.dilation,
        }
    }
}

/// How the values of an `[N, C, H, W]` activation lie in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// Channel planes (PyTorch's contiguous layout).
    #[default]
    Nchw,
    /// Channels-last: the channels of each pixel together.
    Nhwc,
}

/// The layouts a convolution reads its input and writes its output (and residual) in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layouts {
    /// The input's layout.
    pub input: Layout,
    /// The output's (and the residual's) layout.
    pub output: Layout,
}

/// A 1x1 convolution whose product's right operand is the input itself.
pub(super) fn is_pointwise(g: &Conv2dGeometry) -> bool {
    g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && g.padding == [0, 0]
}

/// One input and one output channel per group.
pub(super) fn is_depthwise(g: &Conv2dGeometry) -> bool {
    g.groups > 1 && g.in_channels == g.groups && g.out_channels == g.groups
}

/// `a * b`, an error on overflow.
pub(super) fn mul(a: usize, b: usize) -> Result<usize, GemmError> {
    a.checked_mul(b).ok_or(GemmError::Overflow("conv2d"))
}

/// Whether `input` holds `batch` images of `in_img` values, and `out` (and the residual) of
/// `out_img`: an error naming the short one.
pub(super) fn check_images(
    batch: usize,
    [in_img, out_img]: [usize; 2],
    input: &[f32],
    residual: Option<&[f32]>,
    out: &[f32],
) -> Result<(), GemmError> {
    let need_out = mul(batch, out_img)?;
    need("conv2d input", mul(batch, in_img)?, input.len())?;
    need("conv2d output", need_out, out.len())?;
    if let Some(r) = residual {
        need("conv2d residual", need_out, r.len())?;
    }
    Ok(())
}
