//! [`Conv2d`]: two-dimensional convolution (`aten::convolution`, not transposed), the weight
//! and the bias constant inputs.

use kiln_format::txn::LaunchKernel;

use super::launch::{check_inputs, npu_op, unsupported, write_packed, Launches, Plan};
use crate::error::Result;
use crate::op::{ConstBufferIo, ConstTensor, TensorDesc};

/// `out[n, oc, oh, ow]` = the convolution of `x[n, c, h, w]` with the constant `weight [oc,
/// c/groups, kh, kw]` (plus the constant `bias [oc]` when `bias`); depthwise when `groups ==
/// c`.
///
/// ONNX arguments: `x` 0, `weight` 1, (`bias` 2,) `out` last. The operator interface gives
/// [`crate::NpuOp::buffer_reqs`] only the tensors, so the kernel size is an attribute: the
/// output must be `oh = (h + 2·padding − dilation·(kh − 1) − 1) / stride + 1` (likewise
/// `ow`). A weight of another size is refused by `initialize_const_params` (it does not fill
/// the slice the arg map sized).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    /// The kernel size, `[kh, kw]` (the weight's last two dimensions).
    pub kernel: [usize; 2],
    /// The stride, `[h, w]`.
    pub stride: [usize; 2],
    /// The zero padding on each side, `[h, w]`.
    pub padding: [usize; 2],
    /// The dilation, `[h, w]`.
    pub dilation: [usize; 2],
    /// The number of groups (divides the input and output channels).
    pub groups: usize,
    /// Whether a bias `[oc]` follows the weight.
    pub bias: bool,
}

/// The output extent along one axis of a convolution or pooling window of `kernel` over
/// `input` (PyTorch's floor rule), or `None` when the window does not fit or a value overflows.
fn output_size(
    input: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    dil: usize,
) -> Option<usize> {
    let span = dil.checked_mul(kernel.checked_sub(1)?)?.checked_add(1)?;
    let padded = input.checked_add(pad.checked_mul(2)?)?;
    Some(padded.checked_sub(span)? / stride + 1)
}

impl Launches for Conv2d {
    const NAME: &'static str = "conv2d";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        check_inputs(Self::NAME, inputs, output, 1)?;
        let err =
            |reason: String| unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason);
        let ([n, c, h, w], [n2, oc, oh, ow]) =
            match (inputs.first().map(|t| t.shape.as_slice()), output.shape.as_slice()) {
                (Some(&[n, c, h, w]), &[n2, oc, oh, ow]) => ([n, c, h, w], [n2, oc, oh, ow]),
                _ => {
                    return Err(err(
                        "takes an input [n, c, h, w] and an output [n, oc, oh, ow]".into()
                    ))
                }
            };
        let [sh, sw] = self.stride;
        let [ph, pw] = self.padding;
        let [dh, dw] = self.dilation;
        let g = self.groups;
        if n != n2 {
            return Err(err("the input and the output differ in the batch".into()));
        }
        if sh == 0 || sw == 0 || dh == 0 || dw == 0 || g == 0 {
            return Err(err("the stride, dilation and groups must be positive".into()));
        }
        if !c.is_multiple_of(g) || !oc.is_multiple_of(g) {
            return Err(err(format!("groups {g} does not divide the channels {c} and {oc}")));
        }
        let [kh, kw] = self.kernel;
        let want = (output_size(h, kh, sh, ph, dh), output_size(w, kw, sw, pw, dw));
        if want != (Some(oh), Some(ow)) {
            return Err(err(format!(
                "a {kh}x{kw} kernel with stride {:?}, padding {:?} and dilation {:?} does not \
                 map [{h}, {w}] to [{oh}, {ow}]",
                self.stride, self.padding, self.dilation
            )));
        }
        let mut consts = vec![vec![oc, c / g, kh, kw]];
        if self.bias {
            consts.push(vec![oc]);
        }
        let ints = [sh, sw, ph, pw, dh, dw, g].map(|v| v as u64);
        Ok(Plan { kernel: LaunchKernel::Conv2d, consts, params: ints.to_vec() })
    }

    fn write_consts(&self, io: &mut ConstBufferIo<'_>, consts: &[ConstTensor]) -> Result<()> {
        let ranks: &[usize] = if self.bias { &[4, 1] } else { &[4] };
        write_packed(Self::NAME, io, consts, ranks)
    }
}

npu_op!(Conv2d);
