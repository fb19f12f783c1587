//! kiln's runtime: loads ExecuTorch programs and runs them on the CPU with kiln's kernels.
//!
//! ```no_run
//! use kiln_runtime::{Input, Program, TensorInput};
//! use kiln_kernels::DType;
//!
//! let program = Program::load("model.pte")?;          // mmap + full verification
//! let mut forward = program.method("forward")?;       // memory plan, kernels resolved
//! let x = vec![0u8; 4 * 3 * 16 * 16];
//! let outputs = forward.execute(&[Input::Tensor(TensorInput {
//!     dtype: DType::Float,
//!     sizes: &[1, 3, 16, 16],
//!     data: &x,
//! })])?;
//! # Ok::<(), kiln_runtime::Error>(())
//! ```
//!
//! - [`Program`]: the mapped, verified file with every method decoded; `Send + Sync` and
//!   cheap to clone, so threads share one and each loads its own [`Method`].
//! - [`Method`]: one execution state of a method: planned arenas sized by
//!   `non_const_buffer_sizes`, tensors placed by `allocation_info`, constants borrowed from the
//!   map, external constants from [`NamedDataSource`]s (`.ptd`). The compiled steps (every
//!   instruction resolved at load, fused, weights packed) are made once and shared by the
//!   states of the method that are alive at the same time ([`Method::another`]), so threads
//!   running one method at once each hold only their own memory.
//! - [`default_thread_count`]: the threads kernels split over unless told otherwise, and
//!   why ([`cores`]).
//! - [`KernelRegistry`] (`name.overload` -> kernel) and [`BackendRegistry`] ([`Backend`]s
//!   for delegates). Loading a method that uses an operator without a kernel or a delegate
//!   without a backend fails with [`Error::Missing`] listing all of them.
//! - [`Artifact`]: a file of any kind kiln reads (not only programs), mapped and recognised,
//!   with its summary and its verdict: what `kiln inspect` and `kiln verify` (and the Python
//!   package's `kiln.inspect` and `kiln.verify`) say of it.

mod arena;
#[cfg(feature = "all-formats")]
pub mod artifact;
mod compile;
mod compiled;
pub mod cores;
pub mod data;
mod decoded;
pub mod delegate;
pub mod error;
mod exec;
pub mod footprint;
pub mod io;
pub mod irpa_data;
mod layout;
pub mod llm;
mod load;
pub mod load_times;
pub mod mapped;
mod method;
pub mod options;
mod plan;
pub mod profile;
pub mod program;
pub mod registry;
mod step;
mod value;
pub mod xnnpack;

#[cfg(feature = "all-formats")]
pub use artifact::Artifact;
pub use compile::CompiledNode;
pub use cores::{default_thread_count, ThreadCount};
pub use data::{NamedDataMap, NamedDataSource, NamedEntry, PtdFile};
pub use delegate::{Backend, BackendError, BackendRegistry, DelegateHandle, DelegateInit};
pub use error::{Error, MemoryReason, Result};
pub use footprint::Footprint;
pub use io::{Input, Output, OutputTensor, TensorInput, TensorMeta, ValueMeta};
pub use irpa_data::{irpa_sources, ExpandedSplats, IrpaFile};
pub use kiln_kernels::compute::threads::{Threads, ThreadsError, WorkerSpan};
pub use load_times::LoadTimes;
pub use mapped::MappedFile;
pub use method::Method;
pub use options::{default_memory_limit, LoadOptions, MAX_DEFAULT_MEMORY_LIMIT};
pub use profile::{InstructionTime, StepEvent, Timeline};
pub use program::{Program, ProgramBuilder};
pub use registry::KernelRegistry;
