//! Two-dimensional pooling of `x[n, c, h, w]` (or `[c, h, w]`): [`MaxPool2d`] and
//! [`AvgPool2d`]. The output shape is the one PyTorch computes; another is refused.

use kiln_format::txn::LaunchKernel;

use super::launch::{check_inputs, npu_op, unsupported, Launches, Plan};
use crate::error::Result;
use crate::op::TensorDesc;

/// Max pooling (`aten::max_pool2d`): the output holds the values (no indices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2d {
    /// The window, `[h, w]`.
    pub kernel: [usize; 2],
    /// The stride, `[h, w]`.
    pub stride: [usize; 2],
    /// The implicit negative-infinity padding on each side, `[h, w]` (at most half the window).
    pub padding: [usize; 2],
    /// The dilation, `[h, w]`.
    pub dilation: [usize; 2],
    /// Whether the output size rounds up (windows starting in the padding excepted).
    pub ceil_mode: bool,
}

/// Average pooling (`aten::avg_pool2d`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool2d {
    /// The window, `[h, w]`.
    pub kernel: [usize; 2],
    /// The stride, `[h, w]`.
    pub stride: [usize; 2],
    /// The zero padding on each side, `[h, w]` (at most half the window).
    pub padding: [usize; 2],
    /// Whether the output size rounds up.
    pub ceil_mode: bool,
    /// Whether the padding counts in the divisor.
    pub count_include_pad: bool,
    /// A divisor to use instead of the window's size (nonzero).
    pub divisor_override: Option<i64>,
}

/// PyTorch's pooled size of `input` (`pooling_output_shape`), or `None` if there is none.
fn pooled(input: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> Option<usize> {
    let span = d.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    let room = input.checked_add(p.checked_mul(2)?)?.checked_sub(span)?;
    let round = if ceil { s - 1 } else { 0 };
    let mut out = room.checked_add(round)? / s + 1;
    // The last window must start inside the input or its left padding.
    if ceil && (out - 1).checked_mul(s)? >= input.checked_add(p)? {
        out -= 1;
    }
    Some(out)
}

/// Checks a pooling node and returns nothing when its output has the pooled shape.
#[allow(clippy::too_many_arguments)]
fn check_pool(
    op: &'static str,
    inputs: &[TensorDesc],
    output: &TensorDesc,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil: bool,
) -> Result<()> {
    check_inputs(op, inputs, output, 1)?;
    let err = |reason: String| unsupported(op, inputs, std::slice::from_ref(output), reason);
    let shape = inputs.first().map_or(&[][..], |t| t.shape.as_slice());
    let (lead, h, w) = match shape {
        [lead @ .., h, w] if lead.len() == 1 || lead.len() == 2 => (lead, *h, *w),
        _ => return Err(err("takes an input [n, c, h, w] or [c, h, w]".into())),
    };
    if kernel.contains(&0) || stride.contains(&0) || dilation.contains(&0) {
        return Err(err("the window, stride and dilation must be positive".into()));
    }
    if padding[0].saturating_mul(2) > kernel[0] || padding[1].saturating_mul(2) > kernel[1] {
        return Err(err("the padding must be at most half the window".into()));
    }
    let oh = pooled(h, kernel[0], stride[0], padding[0], dilation[0], ceil);
    let ow = pooled(w, kernel[1], stride[1], padding[1], dilation[1], ceil);
    let want = match (oh, ow) {
        (Some(oh), Some(ow)) if oh > 0 && ow > 0 => [lead, &[oh, ow]].concat(),
        _ => return Err(err("the window does not fit the padded input".into())),
    };
    if output.shape != want {
        return Err(err(format!("the pooled shape is {want:?}, not the output's")));
    }
    Ok(())
}

/// `[a, b]` as parameter words.
fn pair(v: [usize; 2]) -> [u64; 2] {
    v.map(|x| x as u64)
}

impl Launches for MaxPool2d {
    const NAME: &'static str = "max_pool2d";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        let (k, s, p, d) = (self.kernel, self.stride, self.padding, self.dilation);
        check_pool(Self::NAME, inputs, output, k, s, p, d, self.ceil_mode)?;
        let params = [pair(k), pair(s), pair(p), pair(d)].concat();
        let params = [params, vec![u64::from(self.ceil_mode)]].concat();
        Ok(Plan::new(LaunchKernel::MaxPool2d, params))
    }
}

impl Launches for AvgPool2d {
    const NAME: &'static str = "avg_pool2d";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        let (k, s, p) = (self.kernel, self.stride, self.padding);
        check_pool(Self::NAME, inputs, output, k, s, p, [1, 1], self.ceil_mode)?;
        let divisor = match self.divisor_override {
            None => kiln_format::txn::launch::ABSENT,
            Some(v) if v != 0 && v as u64 != kiln_format::txn::launch::ABSENT => v as u64,
            Some(v) => {
                let reason = format!("divisor_override {v} is not a nonzero divisor");
                return Err(unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason));
            }
        };
        let flags = [self.ceil_mode, self.count_include_pad].map(u64::from);
        let params = [&pair(k)[..], &pair(s), &pair(p), &flags, &[divisor]].concat();
        Ok(Plan::new(LaunchKernel::AvgPool2d, params))
    }
}

npu_op!(MaxPool2d);
npu_op!(AvgPool2d);
