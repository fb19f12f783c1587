//! Kernel argument values, mirroring ExecuTorch's `EValue`.

use crate::tensor::{TensorMut, TensorRef};

/// A scalar argument or result (`Scalar` in operator schemas: an Int, Double or Bool EValue).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// An integer (also SymInt).
    Int(i64),
    /// A double (also SymFloat).
    Double(f64),
    /// A bool (also SymBool).
    Bool(bool),
}

impl Scalar {
    /// The value as `f64`.
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Int(v) => v as f64,
            Scalar::Double(v) => v,
            Scalar::Bool(v) => v as u8 as f64,
        }
    }

    /// The value as `i64` (doubles truncate toward zero).
    pub fn to_i64(self) -> i64 {
        match self {
            Scalar::Int(v) => v,
            Scalar::Double(v) => v as i64,
            Scalar::Bool(v) => v as i64,
        }
    }

    /// Whether it is a floating scalar.
    pub fn is_float(self) -> bool {
        matches!(self, Scalar::Double(_))
    }

    /// The EValue tag name (`Int`, `Double`, `Bool`).
    pub fn tag(self) -> &'static str {
        match self {
            Scalar::Int(_) => "Int",
            Scalar::Double(_) => "Double",
            Scalar::Bool(_) => "Bool",
        }
    }
}

/// One read-only kernel argument, at its operator-schema position.
///
/// The runtime resolves values at call time: `IntList` items are the *current* Int values (sym
/// ints written by earlier instructions included), tensors borrow their current data.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    /// `None` (an absent optional).
    None,
    /// An integer, SymInt, `ScalarType` or `MemoryFormat`.
    Int(i64),
    /// A double.
    Double(f64),
    /// A bool.
    Bool(bool),
    /// A string (e.g. gelu's `approximate`, div's `rounding_mode`).
    String(&'a str),
    /// A tensor.
    Tensor(TensorRef<'a>),
    /// A list of ints (resolved).
    IntList(&'a [i64]),
    /// A list of doubles.
    DoubleList(&'a [f64]),
    /// A list of bools.
    BoolList(&'a [bool]),
    /// A list of tensors.
    TensorList(&'a [TensorRef<'a>]),
    /// A list of optional tensors (`Tensor?[]`).
    OptionalTensorList(&'a [Option<TensorRef<'a>>]),
    /// This position is written by the kernel (it is in [`KernelDef::outs`](crate::KernelDef))
    /// or is the trailing return value; the kernel does not read it.
    Output,
}

impl Arg<'_> {
    /// The EValue tag name, for error messages.
    pub fn tag(&self) -> &'static str {
        match self {
            Arg::None => "None",
            Arg::Int(_) => "Int",
            Arg::Double(_) => "Double",
            Arg::Bool(_) => "Bool",
            Arg::String(_) => "String",
            Arg::Tensor(_) => "Tensor",
            Arg::IntList(_) => "IntList",
            Arg::DoubleList(_) => "DoubleList",
            Arg::BoolList(_) => "BoolList",
            Arg::TensorList(_) => "TensorList",
            Arg::OptionalTensorList(_) => "OptionalTensorList",
            Arg::Output => "Output",
        }
    }
}

/// One value a kernel writes, in the order of [`KernelDef::outs`](crate::KernelDef).
#[derive(Debug)]
pub enum Out<'b, 'a> {
    /// An output tensor (kernels resize it, then write its data).
    Tensor(TensorMut<'a>),
    /// An output tensor list (`Tensor(a!)[] out`, e.g. `split_with_sizes_copy`).
    TensorList(&'b mut [TensorMut<'a>]),
    /// A scalar result (`sym_size.int`, `executorch_prim::*`): the kernel stores it here and the
    /// runtime writes it into the value table. The runtime initialises it with the value's
    /// current content (or `Int(0)`).
    Scalar(Scalar),
    /// A view result (`et_view`): the kernel sets its shape; the runtime then points the output
    /// value's storage at the input named by [`OutKind::View`](crate::OutKind).
    View(ViewOut),
}

/// The output of a view kernel: only metadata; see [`Out::View`].
#[derive(Clone, Copy, Debug)]
pub struct ViewOut {
    /// Dtype of the output value.
    pub dtype: crate::DType,
    /// Shape of the output value (the kernel writes the new sizes here).
    pub shape: crate::Shape,
    /// The output value's capacity rule, checked by the kernel on resize.
    pub capacity: crate::Capacity,
}
