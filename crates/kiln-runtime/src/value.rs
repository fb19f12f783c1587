//! The run-time value table: what each value holds while a method runs.

use std::sync::Arc;

use kiln_kernels::{Capacity, DType, Shape};

/// Where a tensor's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Storage {
    /// Method memory: buffer `buf` (planned arenas first, then owned buffers) of an
    /// execution state at `offset`.
    Buf { buf: u32, offset: usize },
    /// A constant made at load (an aligned copy, a delegate's converted weights): buffer
    /// `buf` of the method's constants, which its execution states share, at `offset`.
    Const { buf: u32, offset: usize },
    /// The mapped program file at `offset` (constants, zero-copy).
    File { offset: usize },
    /// External data source `source` at `offset` (zero-copy).
    Ext { source: u32, offset: usize },
    /// Method input `index` where the caller gave it to the run (or the state's aligned copy
    /// of it), at `offset`: an input no step writes ([`crate::compile::inputs_in_place`]).
    Input { index: u32, offset: usize },
    /// No data (released by a FreeCall).
    Empty,
}

/// A tensor value: its current shape and where its data is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TensorSlot {
    pub dtype: DType,
    /// Current sizes and dim order.
    pub shape: Shape,
    /// Resize rule (static or dynamic-bound).
    pub capacity: Capacity,
    /// Bytes reserved at `storage` (the bound's size).
    pub cap_bytes: usize,
    pub storage: Storage,
    /// Whether kernels may write it (constants may not).
    pub writable: bool,
}

impl TensorSlot {
    /// Bytes at the current shape.
    pub fn nbytes(&self) -> usize {
        self.shape.numel() * self.dtype.size()
    }
}

/// One value.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    None,
    Int(i64),
    Double(f64),
    Bool(bool),
    String(Arc<str>),
    Tensor(TensorSlot),
    IntList(Arc<[u32]>),
    DoubleList(Arc<[f64]>),
    BoolList(Arc<[bool]>),
    TensorList(Arc<[u32]>),
    OptionalTensorList(Arc<[Option<u32>]>),
}

impl Val {
    /// The EValue tag name.
    pub fn tag(&self) -> &'static str {
        match self {
            Val::None => "None",
            Val::Int(_) => "Int",
            Val::Double(_) => "Double",
            Val::Bool(_) => "Bool",
            Val::String(_) => "String",
            Val::Tensor(_) => "Tensor",
            Val::IntList(_) => "IntList",
            Val::DoubleList(_) => "DoubleList",
            Val::BoolList(_) => "BoolList",
            Val::TensorList(_) => "TensorList",
            Val::OptionalTensorList(_) => "OptionalTensorList",
        }
    }
}
