//! Normalizations: [`BatchNorm`] (inference, running statistics) and [`LayerNorm`], their
//! parameters constant inputs.

use kiln_format::txn::LaunchKernel;

use super::launch::{check_inputs, npu_op, unsupported, write_packed, Launches, Plan};
use crate::error::Result;
use crate::op::{ConstBufferIo, ConstTensor, TensorDesc};

/// Inference batch normalization of `x[n, c, ...]` (rank 2 or more) over channel dimension 1:
/// `(x − running_mean) / sqrt(running_var + eps) · weight + bias`, with the constants
/// `[weight [c], bias [c], running_mean [c], running_var [c]]`
/// (`aten::_native_batch_norm_legit_no_training`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNorm {
    /// Added to the variance.
    pub eps: f64,
}

/// Layer normalization over the last `normalized_dims` dimensions (`aten::native_layer_norm`),
/// with the constants `[weight, bias]` (each of the normalized dimensions' shape) when
/// `affine`, none otherwise.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNorm {
    /// How many trailing dimensions are normalized (at least 1, at most the rank).
    pub normalized_dims: usize,
    /// Added to the variance.
    pub eps: f64,
    /// Whether a weight and a bias follow.
    pub affine: bool,
}

/// Checks that the one input has the output's shape.
fn same_shape(op: &'static str, inputs: &[TensorDesc], output: &TensorDesc) -> Result<()> {
    check_inputs(op, inputs, output, 1)?;
    if inputs.iter().any(|t| t.shape != output.shape) {
        let reason = "the input and the output must have one shape";
        return Err(unsupported(op, inputs, std::slice::from_ref(output), reason));
    }
    Ok(())
}

impl Launches for BatchNorm {
    const NAME: &'static str = "batch_norm";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        same_shape(Self::NAME, inputs, output)?;
        let c = match output.shape.as_slice() {
            [_, c, ..] => *c,
            _ => {
                let reason = "takes an input [n, c, ...] of rank 2 or more";
                return Err(unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason));
            }
        };
        Ok(Plan {
            kernel: LaunchKernel::BatchNorm,
            consts: vec![vec![c]; 4],
            params: vec![self.eps.to_bits()],
        })
    }

    fn write_consts(&self, io: &mut ConstBufferIo<'_>, consts: &[ConstTensor]) -> Result<()> {
        write_packed(Self::NAME, io, consts, &[1; 4])
    }
}

impl Launches for LayerNorm {
    const NAME: &'static str = "layer_norm";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        same_shape(Self::NAME, inputs, output)?;
        let rank = output.shape.len();
        let d = self.normalized_dims;
        let lead = rank.checked_sub(d).filter(|_| d > 0).ok_or_else(|| {
            unsupported(
                Self::NAME,
                inputs,
                std::slice::from_ref(output),
                format!("normalizes {d} dims of a rank-{rank} input (1 to the rank)"),
            )
        })?;
        let normalized = output.shape.get(lead..).unwrap_or_default().to_vec();
        let consts = if self.affine { vec![normalized.clone(), normalized] } else { Vec::new() };
        Ok(Plan {
            kernel: LaunchKernel::LayerNorm,
            consts,
            params: vec![d as u64, self.eps.to_bits()],
        })
    }

    fn write_consts(&self, io: &mut ConstBufferIo<'_>, consts: &[ConstTensor]) -> Result<()> {
        let d = self.normalized_dims;
        let ranks: &[usize] = if self.affine { &[d, d] } else { &[] };
        write_packed(Self::NAME, io, consts, ranks)
    }
}

npu_op!(BatchNorm);
npu_op!(LayerNorm);
