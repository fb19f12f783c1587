//! The kernel error type.

use crate::dtype::DType;
use crate::tensor::TensorError;

/// A kernel failure: the operator (`name.overload`) and what went wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{op}: {kind}")]
pub struct KernelError {
    /// The operator, e.g. `aten::add.out`.
    pub op: &'static str,
    /// What went wrong (boxed: errors are rare, results stay small).
    pub kind: Box<ErrorKind>,
}

/// What went wrong in a kernel. Argument names are the operator schema's (`self`, `other`,
/// `out`, ...), positions are schema positions.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The call has a different number of values than the schema (plus the return value).
    #[error("expected {expected} argument values, got {actual}")]
    Arity {
        /// Expected count.
        expected: usize,
        /// Actual count.
        actual: usize,
    },
    /// An argument has the wrong EValue kind.
    #[error("argument {arg} (position {position}): expected {expected}, got {actual}")]
    ArgType {
        /// Schema name.
        arg: &'static str,
        /// Schema position.
        position: usize,
        /// Expected kind(s).
        expected: &'static str,
        /// Actual EValue tag.
        actual: &'static str,
    },
    /// A tensor has a dtype the operator does not accept here.
    #[error("argument {arg}: expected dtype {expected}, got {actual}")]
    DType {
        /// Schema name.
        arg: &'static str,
        /// What was expected (a dtype or a description such as "a floating dtype").
        expected: String,
        /// The dtype found.
        actual: DType,
    },
    /// A tensor has a shape the operator does not accept here.
    #[error("argument {arg}: expected shape {expected}, got {actual:?}")]
    Shape {
        /// Schema name.
        arg: &'static str,
        /// What was expected.
        expected: String,
        /// The sizes found.
        actual: Vec<usize>,
    },
    /// An argument value is out of range or inconsistent with the others.
    #[error("argument {arg}: {reason}")]
    Invalid {
        /// Schema name.
        arg: &'static str,
        /// Why.
        reason: String,
    },
    /// A tensor view could not be built or resized.
    #[error("argument {arg}: {source}")]
    Tensor {
        /// Schema name.
        arg: &'static str,
        /// The tensor error.
        source: TensorError,
    },
}

impl KernelError {
    /// A new error for operator `op`.
    pub fn new(op: &'static str, kind: ErrorKind) -> KernelError {
        KernelError { op, kind: Box::new(kind) }
    }
}
