//! The operator interface: what every NPU operator provides so that a chain of operators can
//! run as one fused transaction.

use crate::arg_map::{arg_for_patch, OpArgMap};
use crate::error::{Error, Result};

/// A tensor of a node, by name, shape and element type (DD's `Tensor` without its data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    /// The tensor's name in the graph; tensors of a chain connect by name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its element type as DD spells it (`"uint16"`, `"bfloat16"`, ...).
    pub dtype: String,
}

/// A constant input of a node (weights, quantization parameters, LUTs) with its row-major data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConstTensor {
    /// Name, shape and element type.
    pub desc: TensorDesc,
    /// The data, row-major.
    pub data: Vec<u8>,
}

/// An operator's slice of the fused const buffer, which `initialize_const_params` fills (DD's
/// `ConstBufferIO`). Offsets are relative to the slice: the operator's `ConstInput` args stand
/// in it in arg-map order, each at the next multiple of [`crate::ARG_ALIGN`].
#[derive(Debug)]
pub struct ConstBufferIo<'a> {
    op: &'a str,
    slice: &'a mut [u8],
}

impl<'a> ConstBufferIo<'a> {
    /// The slice `slice` of the const buffer, for node `op` (named in errors).
    pub fn new(op: &'a str, slice: &'a mut [u8]) -> Self {
        ConstBufferIo { op, slice }
    }

    /// The slice's size in bytes.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Whether the slice is empty.
    pub fn is_empty(&self) -> bool {
        self.slice.is_empty()
    }

    /// Copies `src` to `offset` in the slice; an error if it does not fit.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        let size = self.slice.len() as u64;
        let dst = offset
            .checked_add(src.len())
            .and_then(|end| self.slice.get_mut(offset..end))
            .ok_or_else(|| Error::ConstWrite {
                op: self.op.into(),
                offset: offset as u64,
                len: src.len() as u64,
                size,
            })?;
        dst.copy_from_slice(src);
        Ok(())
    }
}

/// An NPU operator (DD's `OpInterface`): everything fusion asks of it, for the tensors of one
/// node. Attributes are the implementing type's own fields. Every query is pure.
pub trait NpuOp {
    /// The buffers the operator needs for these tensors: one [`OpArgMap`] per input, output,
    /// scratch pad, constant input and super-kernel parameter buffer.
    fn buffer_reqs(&self, inputs: &[TensorDesc], outputs: &[TensorDesc]) -> Result<Vec<OpArgMap>>;

    /// The ONNX argument that kernel argument `xrt_arg_idx`, `offset` bytes in, holds, from
    /// [`NpuOp::buffer_reqs`]; `None` where no arg covers it.
    fn onnx_arg(
        &self,
        inputs: &[TensorDesc],
        outputs: &[TensorDesc],
        xrt_arg_idx: usize,
        offset: u64,
    ) -> Result<Option<usize>> {
        let maps = self.buffer_reqs(inputs, outputs)?;
        Ok(arg_for_patch(&maps, xrt_arg_idx as u64, offset)
            .filter(|(_, m)| m.end().is_some_and(|end| offset < end))
            .map(|(_, m)| m.onnx_arg_idx))
    }

    /// The transaction binary that runs the operator on these tensors; its DDR_PATCH ops name
    /// the operator's own kernel arguments (`xrt_arg_idx`).
    fn transaction_bin(&self, inputs: &[TensorDesc], outputs: &[TensorDesc]) -> Result<Vec<u8>>;

    /// The runtime parameters for the AIE cores, at most the size of the operator's
    /// `ConstKernelParamInput` arg; may be empty.
    fn super_kernel_params(&self, inputs: &[TensorDesc], outputs: &[TensorDesc])
        -> Result<Vec<u8>>;

    /// Formats the constant inputs into the operator's slice of the const buffer: a copy, or
    /// whatever layout the kernel reads (tiled weights, LUTs).
    fn initialize_const_params(
        &self,
        io: &mut ConstBufferIo<'_>,
        consts: &[ConstTensor],
    ) -> Result<()>;
}
