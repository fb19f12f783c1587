//! Reductions over dimensions: [`Mean`] and [`Softmax`].

use kiln_format::txn::LaunchKernel;

use super::launch::{check_dim, check_inputs, npu_op, unsupported, Launches, Plan};
use crate::error::Result;
use crate::op::TensorDesc;

/// The mean over `dims` (`aten::mean.dim`; no dims: every dim), the reduced dimensions kept
/// as size 1 when `keepdim`, dropped otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mean {
    /// The dimensions to reduce (distinct).
    pub dims: Vec<usize>,
    /// Whether reduced dimensions stay as size 1.
    pub keepdim: bool,
}

/// Softmax along `dim` (`aten::_softmax`): `exp(x − max) / Σ exp(x − max)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Softmax {
    /// The dimension normalized.
    pub dim: usize,
}

impl Launches for Mean {
    const NAME: &'static str = "mean";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        check_inputs(Self::NAME, inputs, output, 1)?;
        let err =
            |reason: String| unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason);
        let shape = inputs.first().map_or(&[][..], |t| t.shape.as_slice());
        let mut reduced = vec![self.dims.is_empty(); shape.len()];
        for &d in &self.dims {
            match reduced.get_mut(d) {
                Some(r) if !*r => *r = true,
                _ => return Err(err(format!("dims {:?} are not distinct dims", self.dims))),
            }
        }
        let want: Vec<usize> = shape
            .iter()
            .zip(&reduced)
            .filter_map(|(&s, &r)| match (r, self.keepdim) {
                (false, _) => Some(s),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        if output.shape != want {
            return Err(err(format!("the mean's shape is {want:?}, not the output's")));
        }
        let words = std::iter::once(u64::from(self.keepdim));
        Ok(Plan::new(
            LaunchKernel::Mean,
            words.chain(self.dims.iter().map(|&d| d as u64)).collect(),
        ))
    }
}

impl Launches for Softmax {
    const NAME: &'static str = "softmax";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        check_inputs(Self::NAME, inputs, output, 1)?;
        let err =
            |reason: String| unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason);
        if inputs.iter().any(|t| t.shape != output.shape) {
            return Err(err("the input and the output must have one shape".into()));
        }
        let dim = check_dim(self.dim, output.shape.len()).map_err(err)?;
        Ok(Plan::new(LaunchKernel::Softmax, vec![dim]))
    }
}

npu_op!(Mean);
npu_op!(Softmax);
