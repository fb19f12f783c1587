//! Data movement, copying elements without arithmetic: [`Transpose`] (a permutation of the
//! dimensions), [`Concat`], [`Reshape`] and [`Expand`] (a broadcast).

use kiln_format::txn::LaunchKernel;

use super::launch::{
    broadcast, check_dim, check_inputs, elements, npu_op, unsupported, Launches, Plan,
};
use crate::error::Result;
use crate::op::TensorDesc;

/// `out = x.permute(perm)` (`aten::permute_copy`): output dimension `i` is input dimension
/// `perm[i]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transpose {
    /// The permutation, one entry per dimension.
    pub perm: Vec<usize>,
}

/// The inputs (one or more) concatenated along `dim` (`aten::cat`): every other dimension
/// equal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Concat {
    /// The dimension to concatenate along.
    pub dim: usize,
}

/// The input's elements in order, in the output's shape (`view_copy`, `clone`, `squeeze`,
/// `unsqueeze`, `flatten`): the element counts must match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reshape;

/// The input broadcast to the output's shape (`aten::expand_copy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expand;

impl Launches for Transpose {
    const NAME: &'static str = "transpose";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        check_inputs(Self::NAME, inputs, output, 1)?;
        let err =
            |reason: String| unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason);
        let shape = inputs.first().map_or(&[][..], |t| t.shape.as_slice());
        let mut seen = vec![false; shape.len()];
        let mut want = Vec::with_capacity(shape.len());
        if self.perm.len() != shape.len() {
            return Err(err(format!("perm {:?} does not have one entry per dim", self.perm)));
        }
        for &p in &self.perm {
            match (seen.get_mut(p), shape.get(p)) {
                (Some(s), Some(&d)) if !*s => {
                    *s = true;
                    want.push(d);
                }
                _ => return Err(err(format!("perm {:?} is not a permutation", self.perm))),
            }
        }
        if output.shape != want {
            return Err(err(format!("the permuted shape is {want:?}, not the output's")));
        }
        Ok(Plan::new(LaunchKernel::Transpose, self.perm.iter().map(|&p| p as u64).collect()))
    }
}

impl Launches for Concat {
    const NAME: &'static str = "concat";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        let err =
            |reason: String| unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason);
        if inputs.is_empty() {
            return Err(err("takes one or more inputs".into()));
        }
        let rank = output.shape.len();
        let dim = check_dim(self.dim, rank).map_err(err)? as usize;
        let mut total = 0usize;
        for t in inputs {
            let same = t.shape.len() == rank
                && t.shape
                    .iter()
                    .zip(&output.shape)
                    .enumerate()
                    .all(|(i, (a, b))| i == dim || a == b);
            if !same {
                return Err(err(format!(
                    "every input must have the output's shape except along dim {dim}"
                )));
            }
            total = total.saturating_add(t.shape.get(dim).copied().unwrap_or(0));
        }
        if output.shape.get(dim) != Some(&total) {
            return Err(err(format!("the inputs add up to {total} along dim {dim}")));
        }
        Ok(Plan::new(LaunchKernel::Concat, vec![dim as u64]))
    }
}

impl Launches for Reshape {
    const NAME: &'static str = "reshape";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        check_inputs(Self::NAME, inputs, output, 1)?;
        if inputs.iter().any(|t| elements(&t.shape) != elements(&output.shape)) {
            let reason = "the input and the output must have as many elements";
            return Err(unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason));
        }
        Ok(Plan::new(LaunchKernel::Copy, Vec::new()))
    }
}

impl Launches for Expand {
    const NAME: &'static str = "expand";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        check_inputs(Self::NAME, inputs, output, 1)?;
        let ok = inputs.iter().all(|t| {
            t.shape.len() <= output.shape.len()
                && broadcast(&t.shape, &output.shape).as_ref() == Some(&output.shape)
        });
        if !ok {
            let reason = "the input does not broadcast to the output's shape";
            return Err(unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason));
        }
        Ok(Plan::new(LaunchKernel::Expand, Vec::new()))
    }
}

npu_op!(Transpose);
npu_op!(Concat);
npu_op!(Reshape);
npu_op!(Expand);
