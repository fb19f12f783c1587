//! ExecuTorch external tensor data (`.ptd`, "FlatTensor"): the `FH01` header, a verified
//! zero-copy reader with name lookup and layout checks, and a writer.
//!
//! A `.pte` whose tensors have `EXTERNAL` location names them by fully qualified name; their
//! bytes and layout come from a `.ptd` ([`FlatTensor::get`], [`TensorLayout::check_matches`]).
//! [`summary`] is what `kiln inspect` shows of one.

pub mod header;
mod reader;
pub mod summary;
pub mod writer;

pub use header::Header;
pub use reader::{Entry, FlatTensor, TensorLayout};
pub use writer::{FlatTensorModel, NamedDataModel};
