//! Every file format kiln reads and writes.
//!
//! Each artifact kind has its own module with the same inner shape: generated schema code (for
//! flatbuffer formats) kept apart from hand code, a zero-copy reader over `&[u8]`, a verification
//! step that runs before anything else touches the bytes, and a writer.
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
pub mod tflite;
pub mod txn;
pub mod xnnpack;

pub use detect::{detect, Kind};
pub use error::{Error, Result};
