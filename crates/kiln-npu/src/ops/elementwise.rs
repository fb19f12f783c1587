//! Elementwise float32 operators over tensors of one shape: [`Add`], [`Mul`] (ONNX arguments
//! `a, b, out`) and [`Sigmoid`] (`x, out`). No broadcasting: every tensor has the same shape.

use kiln_format::txn::LaunchKernel;

use super::{check_tensors, elements, f32_bytes, launch_txn, shapes, F32_BYTES};
use crate::arg_map::{OpArgMap, OpArgType};
use crate::error::{Error, Result};
use crate::op::{ConstBufferIo, ConstTensor, NpuOp, TensorDesc};

/// `out = a + b`, elementwise, float32, `a`, `b` and `out` of one shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Add;

/// `out = a * b`, elementwise, float32, `a`, `b` and `out` of one shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mul;

/// `out = 1 / (1 + exp(-x))`, elementwise, float32, `x` and `out` of one shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sigmoid;

/// The byte size of each tensor of an elementwise node with `n_in` inputs and one output, after
/// checking that they are float32, of one shape, and not empty.
fn tensor_bytes(
    op: &'static str,
    inputs: &[TensorDesc],
    outputs: &[TensorDesc],
    n_in: usize,
) -> Result<u64> {
    check_tensors(op, inputs, outputs, n_in, 1)?;
    let unsupported = |reason: &str| Error::UnsupportedShape {
        op,
        shapes: shapes(inputs, outputs),
        reason: reason.into(),
    };
    let shape = &outputs[0].shape;
    if inputs.iter().any(|t| t.shape != *shape) {
        return Err(unsupported("the inputs and the output must have one shape (no broadcasting)"));
    }
    match elements(shape) {
        Some(0) => Err(unsupported("the tensors have no elements")),
        Some(n) => f32_bytes(op, n),
        None => Err(Error::SizeOverflow { op: op.into() }),
    }
}

/// The arg map of an elementwise node with `n_in` inputs of `size` bytes each, all in kernel
/// argument 1 one after the other, and its output in kernel argument 0 (DD's elementwise
/// layout). ONNX indices: the inputs, then the output.
fn arg_map(n_in: usize, size: u64) -> Vec<OpArgMap> {
    let mut maps: Vec<OpArgMap> = (0..n_in)
        .map(|i| OpArgMap {
            arg_type: OpArgType::Input,
            xrt_arg_idx: 1,
            onnx_arg_idx: i,
            offset: i as u64 * size,
            size,
        })
        .collect();
    maps.push(OpArgMap {
        arg_type: OpArgType::Output,
        xrt_arg_idx: 0,
        onnx_arg_idx: n_in,
        offset: 0,
        size,
    });
    maps
}

/// Checks that an operator without constant inputs was given none.
fn no_consts(op: &'static str, consts: &[ConstTensor]) -> Result<()> {
    if consts.is_empty() {
        return Ok(());
    }
    Err(Error::UnsupportedShape {
        op,
        shapes: consts.iter().map(|c| c.desc.shape.clone()).collect(),
        reason: format!("takes no constant inputs, but was given {}", consts.len()),
    })
}

/// Implements [`NpuOp`] for an elementwise operator named `$name` with `$n_in` inputs that
/// launches `$kernel`.
macro_rules! elementwise_op {
    ($ty:ty, $name:literal, $n_in:literal, $kernel:expr) => {
        impl NpuOp for $ty {
            fn buffer_reqs(
                &self,
                inputs: &[TensorDesc],
                outputs: &[TensorDesc],
            ) -> Result<Vec<OpArgMap>> {
                Ok(arg_map($n_in, tensor_bytes($name, inputs, outputs, $n_in)?))
            }

            fn transaction_bin(
                &self,
                inputs: &[TensorDesc],
                outputs: &[TensorDesc],
            ) -> Result<Vec<u8>> {
                let size = tensor_bytes($name, inputs, outputs, $n_in)?;
                let maps = arg_map($n_in, size);
                let args: Vec<&OpArgMap> = maps.iter().collect();
                launch_txn($name, $kernel, vec![size / F32_BYTES], &args)
            }

            fn super_kernel_params(&self, _: &[TensorDesc], _: &[TensorDesc]) -> Result<Vec<u8>> {
                Ok(Vec::new())
            }

            fn initialize_const_params(
                &self,
                _: &mut ConstBufferIo<'_>,
                consts: &[ConstTensor],
            ) -> Result<()> {
                no_consts($name, consts)
            }
        }
    };
}

elementwise_op!(Add, "add", 2, LaunchKernel::Add);
elementwise_op!(Mul, "mul", 2, LaunchKernel::Mul);
elementwise_op!(Sigmoid, "sigmoid", 1, LaunchKernel::Sigmoid);
