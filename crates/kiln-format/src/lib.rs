//! Every file format kiln reads and writes.
//!
//! Each artifact kind has its own module: a zero-copy reader over `&[u8]` whose opening
//! verifies the bytes before anything else touches them (flatbuffer formats run the generated
//! verifier of `kiln-schema` first), and a writer for the formats kiln edits or creates (pte,
//! ptd, irpa, circle, darwinn, etdump, npy, safetensors, txn, the NPU delegate payload).
//! tflite, gguf, flexbuffer and the XNNPACK payload are only read. [`detect`] names a file's
//! kind from its first bytes. Each format's `summary` module holds what `kiln inspect` shows of
//! a file of it, and [`summary::summarize`] picks the one for a file's kind; [`verdict`] is
//! what `kiln verify` checks in a file of any kind.
//!
//! Nothing in this crate may panic, abort or allocate more than the input's size implies,
//! whatever bytes it is given: every offset, index and size read from a file goes through the
//! bounds-checked [`bytes::ByteReader`] or through a flatbuffer verifier first.
#![forbid(unsafe_code)]

pub mod bytes;
pub mod circle;
pub mod darwinn;
pub mod detect;
pub mod error;
pub mod etdump;
pub mod flexbuffer;
pub mod gguf;
pub mod io;
pub mod irpa;
pub mod npu_delegate;
pub mod npy;
pub mod origins;
pub mod ptd;
pub mod pte;
pub mod safetensors;
pub mod summary;
pub mod tflite;
pub mod txn;
pub mod verdict;
pub mod xnnpack;

pub use detect::{detect, Kind};
pub use error::{Error, Result};
