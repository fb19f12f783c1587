//! Matrix products: [`MatMul`] (`y[m, n] = x[m, k] · w (+ bias)`, the weight and the bias
//! constant inputs) and [`BatchMatMul`] (`out[b, m, n] = a[b, m, k] · c[b, k, n]`, two tensor
//! inputs).

use kiln_format::txn::LaunchKernel;

use super::launch::{check_consts, check_inputs, const_error, npu_op, unsupported, Launches, Plan};
use crate::error::Result;
use crate::op::{ConstBufferIo, ConstTensor, TensorDesc};

/// How the weight constant is laid out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightLayout {
    /// `[k, n]`, row-major: `y = x · w` (ONNX `MatMul` with a constant `B`).
    #[default]
    KN,
    /// `[n, k]`, row-major: `y = x · wᵀ` (a linear layer's `weight`, ONNX `Gemm` with
    /// `transB = 1`).
    NK,
}

/// `y[m, n] = x[m, k] · w (+ bias)`, with `w` the node's first constant input in `weight`
/// layout and, when `bias`, `bias [n]` its second (`aten::addmm` with beta = alpha = 1).
///
/// ONNX arguments: `x` 0, `w` 1, (`bias` 2,) `y` last. Kernel arguments: `y` 0, `x` 1, the
/// constants in 2: `w` row-major `[k, n]` (`initialize_const_params` transposes an `[n, k]`
/// weight), then the bias.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatMul {
    /// The weight's layout.
    pub weight: WeightLayout,
    /// Whether a bias `[n]` follows the weight.
    pub bias: bool,
}

/// `out[b, m, n] = a[b, m, k] · c[b, k, n]` (`aten::bmm`), both tensor inputs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchMatMul;

impl Launches for MatMul {
    const NAME: &'static str = "matmul";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        check_inputs(Self::NAME, inputs, output, 1)?;
        let err =
            |reason: &str| unsupported(Self::NAME, inputs, std::slice::from_ref(output), reason);
        let (k, n) = match (inputs.first().map(|t| t.shape.as_slice()), output.shape.as_slice()) {
            (Some(&[m, k]), &[m2, n]) if m == m2 => (k, n),
            (Some(&[_, _]), &[_, _]) => {
                return Err(err("input [m, k] and output [m, n] differ in m"))
            }
            _ => return Err(err("takes a two-dimensional input [m, k] and output [m, n]")),
        };
        let mut consts = vec![vec![k, n]];
        if self.bias {
            consts.push(vec![n]);
        }
        Ok(Plan { kernel: LaunchKernel::MatMul, consts, params: Vec::new() })
    }

    /// Writes the weight row-major `[k, n]` into the slice, transposing an `[n, k]` weight,
    /// then the bias. The constants must be float32, the weight two-dimensional and the bias
    /// one-dimensional, hold their shapes' bytes, and fill the slice as
    /// [`crate::NpuOp::buffer_reqs`] requests it.
    fn write_consts(&self, io: &mut ConstBufferIo<'_>, consts: &[ConstTensor]) -> Result<()> {
        let ranks: &[usize] = if self.bias { &[2, 1] } else { &[2] };
        check_consts(Self::NAME, consts, ranks)?;
        let (w, bias) = match consts {
            [w] => (w, None),
            [w, b] => (w, Some(b)),
            _ => return Err(const_error(Self::NAME, consts, "takes a weight and a bias".into())),
        };
        let (rows, cols) = match w.desc.shape.as_slice() {
            &[rows, cols] => (rows, cols),
            _ => return Err(const_error(Self::NAME, consts, "the weight is not 2-D".into())),
        };
        let n = if self.weight == WeightLayout::NK { rows } else { cols };
        if let Some(b) = bias {
            if b.desc.shape != [n] {
                return Err(const_error(Self::NAME, consts, format!("the bias must be [{n}]")));
            }
        }
        let total = w.data.len() + bias.map_or(0, |b| b.data.len());
        if total != io.len() {
            return Err(const_error(
                Self::NAME,
                consts,
                format!(
                    "the constants take {total} bytes, but the node's tensors imply {}",
                    io.len()
                ),
            ));
        }
        match self.weight {
            WeightLayout::KN => io.write(0, &w.data)?,
            WeightLayout::NK => {
                // w is [n, k] = [rows, cols]; element (j, p) goes to (p, j) of [k, n].
                let mut kn = vec![0u8; w.data.len()];
                for (i, word) in w.data.chunks_exact(4).enumerate() {
                    let (j, p) = (i / cols, i % cols);
                    let at = 4 * (p * rows + j);
                    if let Some(dst) = kn.get_mut(at..at + 4) {
                        dst.copy_from_slice(word);
                    }
                }
                io.write(0, &kn)?;
            }
        }
        match bias {
            Some(b) => io.write(w.data.len(), &b.data),
            None => Ok(()),
        }
    }
}

impl Launches for BatchMatMul {
    const NAME: &'static str = "batch_matmul";

    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan> {
        check_inputs(Self::NAME, inputs, output, 2)?;
        let shapes = (
            inputs.first().map(|t| t.shape.as_slice()),
            inputs.get(1).map(|t| t.shape.as_slice()),
            output.shape.as_slice(),
        );
        match shapes {
            (Some(&[b, m, k]), Some(&[b2, k2, n]), &[b3, m2, n2])
                if b == b2 && b == b3 && k == k2 && m == m2 && n == n2 =>
            {
                Ok(Plan::new(LaunchKernel::Bmm, Vec::new()))
            }
            _ => Err(unsupported(
                Self::NAME,
                inputs,
                std::slice::from_ref(output),
                "takes inputs [b, m, k] and [b, k, n] and the output [b, m, n]",
            )),
        }
    }
}

npu_op!(MatMul);
npu_op!(BatchMatMul);
