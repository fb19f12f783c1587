//! The chain fusion takes ([`Node`]) and where it places each tensor ([`PackedTensor`]).

use crate::arg_type::OpArgType;
use crate::op::{ConstTensor, NpuOp, TensorDesc};

/// One operator instance of the chain: the operator and the tensors of its node.
pub struct Node<'a> {
    /// The node's name, used in errors.
    pub name: String,
    /// The operator.
    pub op: &'a dyn NpuOp,
    /// Its tensor inputs (ONNX arguments `0..inputs`).
    pub inputs: Vec<TensorDesc>,
    /// Its constant inputs (the next ONNX arguments), handed to `initialize_const_params`.
    pub consts: Vec<ConstTensor>,
    /// Its outputs (the last ONNX arguments).
    pub outputs: Vec<TensorDesc>,
}

/// A tensor placed in a fused buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedTensor {
    /// The tensor's name.
    pub name: String,
    /// The fused buffer: `Input` (graph inputs), `Output` (graph outputs) or `ScratchPad`
    /// (tensors one node produces and a later one consumes).
    pub buffer: OpArgType,
    /// Byte offset in that buffer.
    pub offset: u64,
    /// Size in bytes: the largest any node's arg map requests for it.
    pub size: u64,
}
