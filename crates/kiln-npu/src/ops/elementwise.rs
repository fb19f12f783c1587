//! Elementwise float32 operators: [`Add`] and [`Mul`] (ONNX arguments `a, b, out`, the inputs
//! broadcast to the output) and the unary [`Sigmoid`], [`Clamp`], [`Gelu`], [`MulScalar`]
//! (`x, out`, of one shape).

use kiln_format::txn::LaunchKernel;

use super::launch::{broadcast, check_inputs, npu_op, unsupported, Launches, Plan};
use crate::error::Result;
use crate::op::TensorDesc;

/// `out = a + b`, float32, `a` and `b` broadcast to `out` by PyTorch's rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Add;

/// `out = a * b`, float32, `a` and `b` broadcast to `out` by PyTorch's rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mul;

/// `out = 1 / (1 + exp(-x))`, elementwise, float32, `x` and `out` of one shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sigmoid;

/// `out = min(max(x, min), max)`, elementwise (`aten::clamp`); an infinite bound is no bound.
/// ReLU is [`Clamp::relu`]; ReLU6 and hardtanh are `Clamp { min, max }`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Clamp {
    /// The lower bound; `f64::NEG_INFINITY` for none.
    pub min: f64,
    /// The upper bound; `f64::INFINITY` for none.
    pub max: f64,
}

impl Clamp {
    /// ReLU: `max(x, 0)` (min 0, no upper bound).
    pub fn relu() -> Clamp {
        Clamp { min: 0.0, max: f64::INFINITY }
    }
}

/// GELU, elementwise: `x · Φ(x)`, or with `tanh` PyTorch's tanh approximation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gelu {
    /// Whether to use the tanh approximation (`approximate = "tanh"`).
    pub tanh: bool,
}

/// `out = x · value`, elementwise (`aten::mul.Scalar`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MulScalar {
    /// The factor.
    pub value: f64,
}

/// Plans a binary operator: two inputs that broadcast to the output's shape.
fn binary(
    op: &'static str,
    kernel: LaunchKernel,
    inputs: &[TensorDesc],
    output: &TensorDesc,
) -> Result<Plan> {
    check_inputs(op, inputs, output, 2)?;
    let shape = inputs.first().zip(inputs.get(1)).and_then(|(a, b)| broadcast(&a.shape, &b.shape));
    if shape.as_ref() != Some(&output.shape) {
        let reason = match shape {
            Some(s) => format!("the inputs broadcast to {s:?}, not the output's shape"),
            None => "the inputs do not broadcast (each dimension equal or 1)".into(),
        };
        return Err(unsupported(op, inputs, std::slice::from_ref(output), reason));
    }
    Ok(Plan::new(kernel, Vec::new()))
}

/// Plans a unary operator: one input of the output's shape.
fn unary(
    op: &'static str,
    kernel: LaunchKernel,
    inputs: &[TensorDesc],
    output: &TensorDesc,
    params: Vec<u64>,
) -> Result<Plan> {
    check_inputs(op, inputs, output, 1)?;
    if inputs.iter().any(|t| t.shape != output.shape) {
        let reason = "the input and the output must have one shape";
        return Err(unsupported(op, inputs, std::slice::from_ref(output), reason));
    }
    Ok(Plan::new(kernel, params))
}

impl Launches for Add {
    const NAME: &'static str = "add";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        binary(Self::NAME, LaunchKernel::Add, inputs, output)
    }
}

impl Launches for Mul {
    const NAME: &'static str = "mul";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        binary(Self::NAME, LaunchKernel::Mul, inputs, output)
    }
}

impl Launches for Sigmoid {
    const NAME: &'static str = "sigmoid";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        unary(Self::NAME, LaunchKernel::Sigmoid, inputs, output, Vec::new())
    }
}

impl Launches for Clamp {
    const NAME: &'static str = "clamp";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        let params = vec![self.min.to_bits(), self.max.to_bits()];
        unary(Self::NAME, LaunchKernel::Clamp, inputs, output, params)
    }
}

impl Launches for Gelu {
    const NAME: &'static str = "gelu";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        unary(Self::NAME, LaunchKernel::Gelu, inputs, output, vec![u64::from(self.tanh)])
    }
}

impl Launches for MulScalar {
    const NAME: &'static str = "mul_scalar";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        let params = vec![self.value.to_bits()];
        unary(Self::NAME, LaunchKernel::MulScalar, inputs, output, params)
    }
}

npu_op!(Add);
npu_op!(Mul);
npu_op!(Sigmoid);
npu_op!(Clamp);
npu_op!(Gelu);
npu_op!(MulScalar);
