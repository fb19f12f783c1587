//! Any file kiln reads, summarised or verified as JSON (feature `inspect`, on by default):
//! ExecuTorch programs and data, IREE parameter archives, Circle and Edge TPU models, NPU
//! transaction binaries, ETDumps, safetensors, GGUF, npy. An app checks a downloaded model
//! before it loads it; the runtime-only library (`--no-default-features`) leaves this out.

use std::ffi::{c_char, CString};

use crate::program::path_arg;
use crate::status::{guard, put, Failure, KilnStatus};

/// `json` as a C string the caller frees with `kiln_string_free`.
fn c_string(json: String) -> *mut c_char {
    // JSON escapes every control character, NUL among them.
    CString::new(json).unwrap_or_default().into_raw()
}

/// The summary of the file at `path`, the document `kiln inspect --json` prints, into `*out`
/// (a NUL-terminated string to free with `kiln_string_free`). A file of no kind kiln reads,
/// or one that does not parse, is `KILN_ERROR_INVALID_PROGRAM`.
///
/// # Safety
/// `path` is a NUL-terminated string, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn kiln_inspect(path: *const c_char, out: *mut *mut c_char) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let path = unsafe { path_arg(path, "path") }?;
        if out.is_null() {
            return Err(Failure::argument("out is null"));
        }
        let artifact = kiln_runtime::artifact::open(&path)?;
        let summary = artifact.summary().map_err(|e| {
            Failure::new(KilnStatus::KilnErrorInvalidProgram, format!("{}: {e}", path.display()))
        })?;
        let json = serde_json::to_string(&summary)
            .map_err(|e| Failure::new(KilnStatus::KilnErrorInternal, e.to_string()))?;
        // SAFETY: `out` is writable (the contract above; checked non-null).
        unsafe { put(out, c_string(json)) }
    })
}

/// Verifies the file at `path` as `kiln verify` does (`strict` non-zero: as `kiln verify
/// --strict`): `KILN_OK` when it passes, `KILN_ERROR_INVALID_PROGRAM` when it does not
/// (`KILN_ERROR_IO` when it cannot be read), `kiln_last_error()` saying why; either way `*out`, unless `out` is null, receives the
/// verdict as the JSON `kiln verify --json` prints (free it with `kiln_string_free`).
///
/// # Safety
/// `path` is a NUL-terminated string, `out` null or writable.
#[no_mangle]
pub unsafe extern "C" fn kiln_verify(
    path: *const c_char,
    strict: u8,
    out: *mut *mut c_char,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let path = unsafe { path_arg(path, "path") }?;
        let opened = kiln_runtime::artifact::open(&path);
        let unreadable = matches!(opened, Err(kiln_runtime::Error::Map(_)));
        let verdict = kiln_runtime::artifact::verdict(&path, opened, strict != 0);
        if !out.is_null() {
            let json = serde_json::to_string(&verdict)
                .map_err(|e| Failure::new(KilnStatus::KilnErrorInternal, e.to_string()))?;
            // SAFETY: `out` is writable (the contract above; non-null).
            unsafe { put(out, c_string(json)) }?;
        }
        match verdict.error {
            None => Ok(()),
            Some(why) => Err(Failure::new(
                if unreadable {
                    KilnStatus::KilnErrorIo
                } else {
                    KilnStatus::KilnErrorInvalidProgram
                },
                format!("{}: {why}", path.display()),
            )),
        }
    })
}

/// Frees a string from `kiln_inspect` or `kiln_verify` (null is ignored).
///
/// # Safety
/// `s` is null or a string those functions gave, not freed before.
#[no_mangle]
pub unsafe extern "C" fn kiln_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: made by CString::into_raw in `c_string`, freed once.
        drop(unsafe { CString::from_raw(s) });
    }
}
