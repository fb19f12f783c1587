//! What every call returns ([`KilnStatus`]), the calling thread's last error message, and the
//! guard each entry point runs its body in, so that no panic crosses the boundary.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What a call of the C API ended with. Every function that can fail returns one; on any
/// value but `KILN_OK`, `kiln_last_error()` gives the message.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KilnStatus {
    /// Success.
    KilnOk = 0,
    /// A null pointer, an index out of range, a size or length that does not fit, a string
    /// that is not UTF-8, an unknown dtype.
    KilnErrorInvalidArgument = 1,
    /// A file could not be opened, mapped or read.
    KilnErrorIo = 2,
    /// Not a valid program, or external data that does not fit it.
    KilnErrorInvalidProgram = 3,
    /// No method of that name.
    KilnErrorNotFound = 4,
    /// The program needs what this kiln does not have (an operator's kernel, a delegate's
    /// backend).
    KilnErrorUnsupported = 5,
    /// Over the memory limit, or the system refused memory.
    KilnErrorMemory = 6,
    /// An input of the wrong kind, dtype or shape, or one not set.
    KilnErrorInput = 7,
    /// The method failed while it ran.
    KilnErrorExecution = 8,
    /// A bug in kiln: a panic, caught at the boundary.
    KilnErrorInternal = 9,
}

/// A failed call: its status and message.
pub(crate) struct Failure {
    status: KilnStatus,
    message: String,
}

impl Failure {
    /// A failure of `status` saying `message`.
    pub(crate) fn new(status: KilnStatus, message: impl Into<String>) -> Failure {
        Failure { status, message: message.into() }
    }

    /// An argument the caller got wrong.
    pub(crate) fn argument(message: impl Into<String>) -> Failure {
        Failure::new(KilnStatus::KilnErrorInvalidArgument, message)
    }
}

impl From<kiln_runtime::Error> for Failure {
    fn from(e: kiln_runtime::Error) -> Failure {
        use kiln_runtime::Error as E;
        use KilnStatus::*;
        let status = match &e {
            E::Map(_) | E::DataFile { .. } => KilnErrorIo,
            E::Threads(_) => KilnErrorInvalidArgument,
            E::Format { .. } | E::InvalidProgram { .. } | E::ExternalData { .. } => {
                KilnErrorInvalidProgram
            }
            E::MethodNotFound { .. } => KilnErrorNotFound,
            E::Missing { .. } | E::NotSupported { .. } => KilnErrorUnsupported,
            E::Memory { .. } => KilnErrorMemory,
            E::InputCount { .. } | E::Input { .. } => KilnErrorInput,
            _ => KilnErrorExecution,
        };
        // The words `kiln run` prints.
        Failure::new(status, e.to_string())
    }
}

/// Writes `value` through `out`, or an error when it is null.
///
/// # Safety
/// `out` is null or writable.
pub(crate) unsafe fn put<T>(out: *mut T, value: T) -> Result<(), Failure> {
    // SAFETY: the caller's contract.
    let out = unsafe { out.as_mut() }.ok_or_else(|| Failure::argument("out is null"))?;
    *out = value;
    Ok(())
}

thread_local! {
    /// The message of this thread's last failed call.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // A message never holds NUL in practice; were one there, it ends the C string.
    let bytes: Vec<u8> = message.bytes().take_while(|&b| b != 0).collect();
    let message = CString::new(bytes).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = message);
}

/// Runs `body`, turning its failure, or a panic, into a status (its message kept as the
/// calling thread's last error).
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> KilnStatus {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => KilnStatus::KilnOk,
        Ok(Err(failure)) => {
            set_last_error(&failure.message);
            failure.status
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            set_last_error(&format!("internal error in kiln (please report it): {what}"));
            KilnStatus::KilnErrorInternal
        }
    }
}

/// The message of the calling thread's last failed call ("" before any): valid until this
/// thread's next failed call. Never null.
#[no_mangle]
pub extern "C" fn kiln_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}
