//! What the pooling kernels share: the pooling window ([`Window`], PyTorch's output size) and
//! the reading of its arguments.

use crate::error::KernelError;
use crate::kernel::KernelContext;
use crate::ops::args::Args;
use crate::ops::planes::pair;

/// What a pooling kernel returns.
pub(super) type KResult = Result<(), KernelError>;

/// The window arguments `max_pool2d_with_indices` and `avg_pool2d` share at positions 1-3:
/// kernel size, stride (the kernel size when empty) and padding, which PyTorch allows up to
/// half the kernel.
pub(super) fn kernel_stride_padding(
    ctx: &KernelContext,
    a: &Args,
) -> Result<[[usize; 2]; 3], KernelError> {
    let k = pair(ctx, a.int_list(1, "kernel_size")?, "kernel_size", None, 1)?;
    let s = pair(ctx, a.int_list(2, "stride")?, "stride", Some(k), 1)?;
    let p = pair(ctx, a.int_list(3, "padding")?, "padding", Some([0, 0]), 0)?;
    if p[0] * 2 > k[0] || p[1] * 2 > k[1] {
        return Err(ctx.invalid("padding", "padding must be at most half the kernel size"));
    }
    Ok([k, s, p])
}

/// PyTorch's `pooling_output_shape`: the output length of an axis of `input` elements, or
/// `None` when the kernel span exceeds the padded input, the stride is zero, or a size
/// overflows.
fn pool_len(
    input: usize,
    k: usize,
    pad: usize,
    stride: usize,
    dil: usize,
    ceil: bool,
) -> Option<usize> {
    let span = dil.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    let padded = input.checked_add(pad.checked_mul(2)?)?;
    let num = padded.checked_sub(span)?;
    if stride == 0 {
        return None;
    }
    let mut out = num / stride + 1;
    if ceil && num % stride != 0 {
        out += 1;
        if (out - 1) * stride >= input + pad {
            out -= 1;
        }
    }
    Some(out)
}

/// A pooling window over planes of `h x w`: kernel, stride, padding and dilation as (rows,
/// columns), and the output size.
#[derive(Clone, Debug)]
pub(crate) struct Window {
    pub(crate) k: [usize; 2],
    pub(crate) s: [usize; 2],
    pub(crate) p: [usize; 2],
    pub(crate) d: [usize; 2],
    pub(crate) oh: usize,
    pub(crate) ow: usize,
}

impl Window {
    /// The window of `[k, s, p, d]` over planes of `hw`, its output size by [`pool_len`];
    /// `Err(axis)` (0 for rows, 1 for columns) where [`pool_len`] has none.
    pub(crate) fn new(hw: [usize; 2], ks: [[usize; 2]; 4], ceil: bool) -> Result<Self, usize> {
        let [k, s, p, d] = ks;
        let len = |a: usize| pool_len(hw[a], k[a], p[a], s[a], d[a], ceil).ok_or(a);
        Ok(Window { k, s, p, d, oh: len(0)?, ow: len(1)? })
    }
}

/// [`Window::new`] with the error PyTorch raises.
pub(super) fn window(
    ctx: &KernelContext,
    hw: [usize; 2],
    ks: [[usize; 2]; 4],
    ceil: bool,
) -> Result<Window, KernelError> {
    Window::new(hw, ks, ceil).map_err(|a| {
        let [k, _, p, d] = ks;
        let span = d[a].saturating_mul(k[a].saturating_sub(1)).saturating_add(1);
        let padded = hw[a].saturating_add(p[a].saturating_mul(2));
        ctx.invalid("kernel_size", format!("kernel span {span} exceeds padded input {padded}"))
    })
}
