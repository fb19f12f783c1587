//! Method inputs and outputs, and the declared metadata of each.

use kiln_kernels::DType;

/// A tensor given as input: dtype, sizes and data in contiguous (row-major) order.
#[derive(Clone, Copy, Debug)]
pub struct TensorInput<'a> {
    /// Element type.
    pub dtype: DType,
    /// Sizes.
    pub sizes: &'a [usize],
    /// `numel * dtype.size()` bytes, row-major, little-endian.
    pub data: &'a [u8],
}

/// One method input.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// A tensor.
    Tensor(TensorInput<'a>),
    /// An Int (must equal the traced value, as in ExecuTorch).
    Int(i64),
    /// A Double (must equal the traced value within 1e-4 absolute / 1e-5 relative).
    Double(f64),
    /// A Bool (must equal the traced value).
    Bool(bool),
    /// None.
    None,
}

/// An output tensor, copied out of the method's memory, in contiguous (row-major) order.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputTensor {
    /// Element type.
    pub dtype: DType,
    /// Sizes.
    pub sizes: Vec<usize>,
    /// `numel * dtype.size()` bytes, row-major, little-endian.
    pub data: Vec<u8>,
}

/// One method output.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// A tensor.
    Tensor(OutputTensor),
    /// An Int.
    Int(i64),
    /// A Double.
    Double(f64),
    /// A Bool.
    Bool(bool),
    /// A String.
    String(String),
    /// None (or a value kind kiln does not return, such as a list).
    None,
}

/// The declared kind of an input or output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueMeta {
    /// A tensor.
    Tensor(TensorMeta),
    /// An Int.
    Int,
    /// A Double.
    Double,
    /// A Bool.
    Bool,
    /// A String.
    String,
    /// None.
    None,
    /// A list (named by its kind).
    List(&'static str),
}

/// A declared tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorMeta {
    /// Element type.
    pub dtype: DType,
    /// Serialized sizes: the upper bounds for dynamic tensors.
    pub sizes: Vec<usize>,
    /// Dim order.
    pub dim_order: Vec<u8>,
    /// DYNAMIC_BOUND: any sizes of the same rank with at most as many elements.
    pub dynamic: bool,
}
