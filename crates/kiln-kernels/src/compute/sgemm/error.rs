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
    /// A tensor's sizes differ from those a prepared kernel computes.
    #[error("the {what} {actual:?} is not {expected}")]
    Sizes {
        /// Which tensor.
        what: &'static str,
        /// Its sizes.
        actual: Vec<usize>,
        /// The sizes it needs (`N` standing for any batch).
        expected: String,
    },
    /// A pooling window PyTorch refuses over its input: a zero size, stride or dilation,
    /// padding above half the kernel, or a kernel wider than the padded input.
    #[error("the window does not fit the input {0:?}")]
    Window(Vec<usize>),
    /// A per-channel constant of another length than the channels it scales.
    #[error("{what}: a per-channel constant does not hold {channels} values")]
    PerChannel {
        /// Which operator's constants.
        what: &'static str,
        /// The channel count.
        channels: usize,
    },
}
