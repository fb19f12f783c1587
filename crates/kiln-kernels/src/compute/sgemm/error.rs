//! The one error of the packed GEMM and the kernels built on it.

/// Why a GEMM was refused (nothing is written).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum GemmError {
    /// A size computation overflowed.
    #[error("{0}: size overflows")]
    Overflow(&'static str),
    /// A slice is shorter than its shape needs.
    #[error("{what} has {len} elements, needs {need}")]
    Short {
        /// Which operand.
        what: &'static str,
        /// Elements needed.
        need: usize,
        /// Elements present.
        len: usize,
    },
    /// Shapes or parameters that do not fit together.
    #[error("{0}")]
    Invalid(&'static str),
}
