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
//! Feature `all-formats` (on by default) holds every module; without it the crate is what a
//! runtime reads (pte, ptd and their XNNPACK payloads, irpa archives, npy, origin tables,
//! [`detect`]), for the runtime-only C library: no Circle, DarwiNN / TFLite, transaction
//! binaries, NPU delegate payloads, ETDump, GGUF or safetensors, and no summaries or verdicts.
//!
//! Nothing in this crate may panic, abort or allocate more than the input's size implies,
//! whatever bytes it is given: every offset, index and size read from a file goes through the
//! bounds-checked [`bytes::ByteReader`] or through a flatbuffer verifier first.
#![forbid(unsafe_code)]

pub mod bytes;
#[cfg(feature = "all-formats")]
pub mod circle;
#[cfg(feature = "all-formats")]
pub mod darwinn;
pub mod detect;
pub mod error;
#[cfg(feature = "all-formats")]
pub mod etdump;
#[cfg(feature = "all-formats")]
pub mod flexbuffer;
#[cfg(feature = "all-formats")]
pub mod gguf;
pub mod io;
pub mod irpa;
#[cfg(feature = "all-formats")]
pub mod npu_delegate;
pub mod npy;
pub mod origins;
pub mod ptd;
pub mod pte;
#[cfg(feature = "all-formats")]
pub mod safetensors;
#[cfg(feature = "all-formats")]
pub mod summary;
#[cfg(feature = "all-formats")]
pub mod tflite;
#[cfg(feature = "all-formats")]
pub mod txn;
#[cfg(feature = "all-formats")]
pub mod verdict;
pub mod xnnpack;

pub use detect::{detect, Kind};
pub use error::{Error, Result};
