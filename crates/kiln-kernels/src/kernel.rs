//! The kernel calling convention: [`KernelFn`], [`KernelDef`] and [`KernelContext`].

use crate::compute::threads::Threads;
use crate::dtype::DType;
use crate::error::{ErrorKind, KernelError};
use crate::tensor::TensorError;
use crate::value::{Arg, Out};

/// A kernel: reads `args` (indexed by schema position), writes `outs` (in [`KernelDef::outs`]
/// order).
pub type KernelFn =
    for<'x> fn(&mut KernelContext, &[Arg<'x>], &mut [Out<'_, 'x>]) -> Result<(), KernelError>;

/// The kind of a value a kernel writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutKind {
    /// A tensor: the runtime passes [`Out::Tensor`].
    Tensor,
    /// A tensor list: the runtime passes [`Out::TensorList`].
    TensorList,
    /// A scalar (Int/Double/Bool EValue): the runtime passes [`Out::Scalar`].
    Scalar,
    /// A view of the input at this schema position: the runtime passes [`Out::View`] and, after
    /// the call, makes the output value share that input's storage.
    View(u8),
}

/// A written argument: its schema position and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutSlot {
    /// Position in the instruction's argument list.
    pub position: u8,
    /// What is written there.
    pub kind: OutKind,
}

/// One kernel of the static table returned by [`kernels`](crate::kernels).
#[derive(Clone, Copy, Debug)]
pub struct KernelDef {
    /// `name.overload` as the runtime looks it up, e.g. `aten::add.out`.
    pub name: &'static str,
    /// Number of values in a `KernelCall`'s argument list: every schema argument plus the
    /// trailing return value (§3.9 of the ExecuTorch reference).
    pub arity: u8,
    /// The positions the kernel writes, in the order it receives them in `outs`.
    pub outs: &'static [OutSlot],
    /// Whether the kernel updates its written tensors in place, keeping what it does not
    /// write (`copy_`, `index_put_`, `llama::update_cache`): their contents before the call
    /// matter, as a KV cache's do.
    pub in_place: bool,
    /// The kernel.
    pub run: KernelFn,
}

impl KernelDef {
    /// Whether schema position `p` is written by the kernel.
    pub fn is_out(&self, p: usize) -> bool {
        self.outs.iter().any(|o| o.position as usize == p)
    }

    /// Whether position `p` is a read-only input (not an out and not the trailing return).
    pub fn is_input(&self, p: usize) -> bool {
        p + 1 < self.arity as usize && !self.is_out(p)
    }
}

/// Per-call context: the operator name (for errors), reusable scratch memory and the threads
/// kernels may split their work over.
///
/// The runtime keeps one context per executing method and sets [`KernelContext::op`] before
/// each call; scratch buffers grow to the largest need and are then reused, so steady-state
/// execution does not allocate for kernels that use them (convolution's im2col, matmul
/// packing).
#[derive(Debug, Default)]
pub struct KernelContext {
    /// The operator being run, `name.overload`.
    pub op: &'static str,
    pub(crate) scratch_f32: Vec<f32>,
    pub(crate) scratch_f64: Vec<f64>,
    /// When set, kernels skip their fast paths (tests compare fast and general paths).
    pub(crate) general_only: bool,
    /// The worker threads of the executing method (none by default).
    pub threads: Threads,
}

impl KernelContext {
    /// A context for operator `op`, without worker threads.
    pub fn new(op: &'static str) -> KernelContext {
        KernelContext {
            op,
            scratch_f32: Vec::new(),
            scratch_f64: Vec::new(),
            general_only: false,
            threads: Threads::default(),
        }
    }

    /// This context with `threads` as its worker threads.
    pub fn with_threads(self, threads: Threads) -> KernelContext {
        KernelContext { threads, ..self }
    }

    /// An error for this operator.
    pub fn err(&self, kind: ErrorKind) -> KernelError {
        KernelError::new(self.op, kind)
    }

    /// An [`ErrorKind::Invalid`] error.
    pub fn invalid(&self, arg: &'static str, reason: impl Into<String>) -> KernelError {
        self.err(ErrorKind::Invalid { arg, reason: reason.into() })
    }

    /// An [`ErrorKind::DType`] error.
    pub fn dtype_err(
        &self,
        arg: &'static str,
        expected: impl Into<String>,
        actual: DType,
    ) -> KernelError {
        self.err(ErrorKind::DType { arg, expected: expected.into(), actual })
    }

    /// An [`ErrorKind::Shape`] error.
    pub fn shape_err(
        &self,
        arg: &'static str,
        expected: impl Into<String>,
        actual: &[usize],
    ) -> KernelError {
        self.err(ErrorKind::Shape { arg, expected: expected.into(), actual: actual.to_vec() })
    }

    /// An [`ErrorKind::Tensor`] error.
    pub fn tensor_err(&self, arg: &'static str, source: TensorError) -> KernelError {
        self.err(ErrorKind::Tensor { arg, source })
    }

    /// Checks the argument count against a definition.
    pub fn check_arity(&self, def: &KernelDef, args: usize) -> Result<(), KernelError> {
        if args == def.arity as usize {
            Ok(())
        } else {
            Err(self.err(ErrorKind::Arity { expected: def.arity as usize, actual: args }))
        }
    }
}

/// Whether two byte slices overlap in memory (an input aliasing an output). Runtimes use it on
/// the regions they are about to hand out; kernels never see overlapping input and output
/// slices because Rust borrows forbid it.
pub fn regions_overlap(a: std::ops::Range<usize>, b: std::ops::Range<usize>) -> bool {
    a.start < b.end && b.start < a.end && !a.is_empty() && !b.is_empty()
}
