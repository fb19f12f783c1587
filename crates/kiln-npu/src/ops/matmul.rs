//! [`MatMul`]: `y[m, n] = x[m, k] · w[k, n]`, float32, the weight a constant input that
//! `initialize_const_params` lays out row-major `[k, n]` for the kernel (transposing it when it
//! comes as a linear layer's `[n, k]`). A bias is a following [`super::Add`] of an `[m, n]`
//! tensor.

use kiln_format::txn::LaunchKernel;

use super::{check_dtype, check_tensors, elements, f32_bytes, launch_txn, shapes};
use crate::arg_map::{OpArgMap, OpArgType};
use crate::error::{Error, Result};
use crate::op::{ConstBufferIo, ConstTensor, NpuOp, TensorDesc};

/// The operator's name in errors.
const NAME: &str = "matmul";

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

/// `y[m, n] = x[m, k] · w`, with `w` the node's one constant input in `weight` layout.
///
/// ONNX arguments: `x` 0, `w` 1, `y` 2. Kernel arguments: `y` 0, `x` 1, `w` 2 (the const
/// buffer, `k·n` floats row-major `[k, n]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatMul {
    /// The weight's layout.
    pub weight: WeightLayout,
}

impl MatMul {
    /// `(m, k, n)` of a node with input `[m, k]` and output `[m, n]`, checked: one float32
    /// input and output, both two-dimensional, of one `m`, no dimension zero.
    fn dims(inputs: &[TensorDesc], outputs: &[TensorDesc]) -> Result<(u64, u64, u64)> {
        check_tensors(NAME, inputs, outputs, 1, 1)?;
        let unsupported = |reason: &str| Error::UnsupportedShape {
            op: NAME,
            shapes: shapes(inputs, outputs),
            reason: reason.into(),
        };
        let (m, k, n) = match (inputs[0].shape.as_slice(), outputs[0].shape.as_slice()) {
            (&[m, k], &[m2, n]) if m == m2 => (m as u64, k as u64, n as u64),
            (&[_, _], &[_, _]) => {
                return Err(unsupported("input [m, k] and output [m, n] differ in m"))
            }
            _ => return Err(unsupported("takes a two-dimensional input [m, k] and output [m, n]")),
        };
        if m == 0 || k == 0 || n == 0 {
            return Err(unsupported("a dimension is zero"));
        }
        Ok((m, k, n))
    }

    /// The arg map for `(m, k, n)`, in the kernel's argument order `x, w, y`.
    fn arg_map(m: u64, k: u64, n: u64) -> Result<Vec<OpArgMap>> {
        let bytes = |a: u64, b: u64| {
            a.checked_mul(b)
                .ok_or_else(|| Error::SizeOverflow { op: NAME.into() })
                .and_then(|e| f32_bytes(NAME, e))
        };
        let arg = |arg_type, xrt_arg_idx, onnx_arg_idx, size| OpArgMap {
            arg_type,
            xrt_arg_idx,
            onnx_arg_idx,
            offset: 0,
            size,
        };
        Ok(vec![
            arg(OpArgType::Input, 1, 0, bytes(m, k)?),
            arg(OpArgType::ConstInput, 2, 1, bytes(k, n)?),
            arg(OpArgType::Output, 0, 2, bytes(m, n)?),
        ])
    }
}

impl NpuOp for MatMul {
    fn buffer_reqs(&self, inputs: &[TensorDesc], outputs: &[TensorDesc]) -> Result<Vec<OpArgMap>> {
        let (m, k, n) = Self::dims(inputs, outputs)?;
        Self::arg_map(m, k, n)
    }

    fn transaction_bin(&self, inputs: &[TensorDesc], outputs: &[TensorDesc]) -> Result<Vec<u8>> {
        let (m, k, n) = Self::dims(inputs, outputs)?;
        let maps = Self::arg_map(m, k, n)?;
        let args: Vec<&OpArgMap> = maps.iter().collect();
        launch_txn(NAME, LaunchKernel::MatMul, vec![m, k, n], &args)
    }

    fn super_kernel_params(&self, _: &[TensorDesc], _: &[TensorDesc]) -> Result<Vec<u8>> {
        Ok(Vec::new())
    }

    /// Writes the weight row-major `[k, n]` into the slice, transposing an `[n, k]` weight.
    /// The weight must be float32, two-dimensional, hold its shape's bytes, and fill the slice
    /// (`k·n` floats, as [`NpuOp::buffer_reqs`] requests).
    fn initialize_const_params(
        &self,
        io: &mut ConstBufferIo<'_>,
        consts: &[ConstTensor],
    ) -> Result<()> {
        let shape_err = |reason: String| Error::UnsupportedShape {
            op: NAME,
            shapes: consts.iter().map(|c| c.desc.shape.clone()).collect(),
            reason,
        };
        let w = match consts {
            [w] => w,
            _ => {
                return Err(shape_err(format!(
                    "takes one constant (the weight), not {}",
                    consts.len()
                )))
            }
        };
        check_dtype(NAME, [&w.desc])?;
        let (rows, cols) = match w.desc.shape.as_slice() {
            &[rows, cols] => (rows, cols),
            _ => return Err(shape_err("the weight must be two-dimensional".into())),
        };
        let bytes = elements(&w.desc.shape).and_then(|e| f32_bytes(NAME, e).ok());
        if bytes != Some(w.data.len() as u64) || w.data.len() != io.len() {
            return Err(shape_err(format!(
                "the weight holds {} bytes; its shape needs {} and the kernel {}",
                w.data.len(),
                bytes.map_or("more than 2^64".into(), |b| b.to_string()),
                io.len()
            )));
        }
        match self.weight {
            WeightLayout::KN => io.write(0, &w.data),
            WeightLayout::NK => {
                // w is [n, k] = [rows, cols]; element (j, p) goes to (p, j) of [k, n].
                let mut kn = vec![0u8; w.data.len()];
                for (i, word) in w.data.chunks_exact(4).enumerate() {
                    let (j, p) = (i / cols, i % cols);
                    let at = 4 * (p * rows + j);
                    kn[at..at + 4].copy_from_slice(word);
                }
                io.write(0, &kn)
            }
        }
    }
}
