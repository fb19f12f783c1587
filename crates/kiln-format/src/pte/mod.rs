//! ExecuTorch programs (`.pte`): the `eh00` extended header, a zero-copy verified reader, an
//! owned model and a writer that follows ExecuTorch's layout rules.
//!
//! Reading: [`Program::open`] over the whole file (a memory map or a byte slice) parses the
//! header, runs the flatbuffers verifier with explicit caps and then [`verify`]; afterwards the
//! typed accessors ([`Method`], [`Value`], [`Tensor`], [`Instruction`], [`Operator`],
//! [`Delegate`], [`Program::constant_data`], [`Program::segment_bytes`], ...) never panic.
//!
//! For `kiln inspect` and `kiln verify`: [`summary`] is what a program holds, [`payloads`]
//! checks its delegates' payloads and [`strict`] flags what is valid but suspect.

mod alignment;
pub mod dump;
pub mod header;
pub mod model;
pub mod payloads;
mod program;
mod scalar_type;
pub mod strict;
#[cfg(feature = "all-formats")]
pub mod summary;
pub mod verify;
pub mod writer;

pub use alignment::{misaligned_scalars, Misaligned};
pub use flatbuffers::Vector;
pub use header::{ExtendedHeader, Layout};
pub use kiln_schema::Unaligned;
pub use program::{
    Allocation, Chain, CompileSpec, Constants, Delegate, DelegateData, Instruction, Limits, Method,
    Operator, Program, Segment, ShapeDynamism, Tensor, TensorData, Value, ValueKind, MAX_RANK,
};
pub use scalar_type::ScalarType;
