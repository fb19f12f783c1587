//! kiln's C library (`libkiln.so`, `libkiln.a`, `include/kiln.h`): a thin C ABI over
//! `kiln-runtime` for apps that reach a runtime through C (JNI, Swift, cgo, C++, FFI).
//!
//! - [`program`]: load a program from a path (mapped) or the caller's bytes, with external
//!   data and options; its methods' names.
//! - [`method`]: execution states of a method, any number per program, each usable from its
//!   own thread at once; inputs, execute, outputs.
//! - [`generate`]: an exported LLM's generation loop in one call, with a token callback.
//! - `inspect` (feature `inspect`, on by default): any file kiln reads, summarised or
//!   verified as JSON.
//! - [`status`]: the status every call returns, the calling thread's last error message, and
//!   the guard that keeps panics from crossing the boundary.
//!
//! # What the ABI promises
//! Within one `KILN_ABI_VERSION`, releases only add functions, enum values at the end and
//! nothing else: existing functions keep their signatures and meanings, structs their layout.
//! A change that breaks any of that raises `KILN_ABI_VERSION`. `kiln_abi_version()` gives the
//! library's, to compare with the header's at run time.
//!
//! Every function that can fail returns a [`KilnStatus`]; null pointers, indices out of range
//! and sizes that do not fit are errors (`KILN_ERROR_INVALID_ARGUMENT`), never a crash, and a
//! panic inside kiln comes back as `KILN_ERROR_INTERNAL`.

pub mod generate;
#[cfg(feature = "inspect")]
pub mod inspect;
pub mod method;
pub mod program;
pub mod status;

use std::ffi::c_char;

pub use generate::KilnTokenCallback;
pub use method::{KilnMethod, KilnTensor, KilnValueInfo, KilnValueKind, KILN_MAX_RANK};
pub use program::{KilnLoadOptions, KilnProgram};
pub use status::KilnStatus;

/// The version of the ABI this header describes: raised by any change that breaks a caller
/// built against an earlier header.
pub const KILN_ABI_VERSION: u32 = 1;

/// The library's ABI version (`KILN_ABI_VERSION` of the header it was built with).
#[no_mangle]
pub extern "C" fn kiln_abi_version() -> u32 {
    KILN_ABI_VERSION
}

/// The library's version, as `kiln --version` prints it ("0.1.0"): a static string.
#[no_mangle]
pub extern "C" fn kiln_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
