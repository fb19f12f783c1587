//! Programs: loaded from a path (mapped) or from the caller's bytes, with their external data
//! and load options; their methods' names.

use std::ffi::{c_char, CStr, CString};
use std::path::{Path, PathBuf};

use kiln_runtime::{LoadOptions, Program, ProgramBuilder};

use crate::status::{guard, put, Failure, KilnStatus};

/// A loaded program (opaque). Any number of methods (`KilnMethod`) may
/// be made from one, on any threads at once; it is freed by `kiln_program_free` (the methods
/// made from it stay valid).
pub struct KilnProgram {
    program: Program,
    /// Its methods' names, as C strings.
    names: Vec<CString>,
}

impl KilnProgram {
    /// The program.
    pub(crate) fn program(&self) -> &Program {
        &self.program
    }
}

/// The program behind `p`, or an error when it is null.
///
/// # Safety
/// `p` is null or a valid program.
pub(crate) unsafe fn program_arg<'a>(p: *const KilnProgram) -> Result<&'a KilnProgram, Failure> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::argument("program is null"))
}

/// How a program is loaded. Zeroed, it means kiln's defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KilnLoadOptions {
    /// Threads kernels split their work over, the calling thread included; 0 for kiln's
    /// default (one per core this process may run on).
    pub threads: u32,
    /// Most bytes a method may take, its predicted peak (as `kiln run --max-memory`); 0 for
    /// kiln's default (the smaller of 8 GiB and half the machine's memory).
    pub memory_limit: u64,
    /// The program's external data (a `.ptd` or an `.irpa` file), or null.
    pub data_path: *const c_char,
}

/// A path from a C string; an error naming `what` when it is null (or, off Unix, not UTF-8).
///
/// # Safety
/// `p` is null or a NUL-terminated string.
pub(crate) unsafe fn path_arg(p: *const c_char, what: &str) -> Result<PathBuf, Failure> {
    if p.is_null() {
        return Err(Failure::argument(format!("{what} is null")));
    }
    // SAFETY: the caller passes a NUL-terminated string (the function's contract).
    let c = unsafe { CStr::from_ptr(p) };
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(c.to_bytes())))
    }
    #[cfg(not(unix))]
    {
        let s = c.to_str().map_err(|_| Failure::argument(format!("{what} is not UTF-8")))?;
        Ok(PathBuf::from(s))
    }
}

/// The builder `options` (null: the defaults) describe, for a program at `program`.
///
/// # Safety
/// `options` is null or points to a `KilnLoadOptions` whose `data_path` is null or a
/// NUL-terminated string.
unsafe fn builder(
    options: *const KilnLoadOptions,
    program: &Path,
) -> Result<ProgramBuilder, Failure> {
    // SAFETY: null or a valid KilnLoadOptions (the caller's contract).
    let options = unsafe { options.as_ref() }.copied();
    let mut load = LoadOptions::default();
    let mut data = None;
    if let Some(o) = options {
        if o.threads > 0 {
            load = load.with_threads(Some(o.threads as usize))?;
        }
        if o.memory_limit > 0 {
            load = load.with_memory_limit(Some(o.memory_limit));
        }
        if !o.data_path.is_null() {
            // SAFETY: a NUL-terminated string (the caller's contract).
            data = Some(unsafe { path_arg(o.data_path, "options.data_path") }?);
        }
    }
    let mut builder = Program::builder().options(load);
    if let Some(data) = data {
        builder = builder.data_file(&data, program)?;
    }
    Ok(builder)
}

fn finish(program: Program, out: *mut *mut KilnProgram) -> Result<(), Failure> {
    let names = program
        .method_names()
        .iter()
        .map(|n| CString::new(*n).map_err(|_| Failure::argument("a method name holds NUL")))
        .collect::<Result<_, _>>()?;
    let boxed = Box::new(KilnProgram { program, names });
    // SAFETY: `out` was checked non-null by the caller of `finish`, and points to writable
    // storage for a pointer (the entry point's contract).
    unsafe { *out = Box::into_raw(boxed) };
    Ok(())
}

/// Loads the program at `path` (memory-mapped), with `options` (null for the defaults), into
/// `*out`, to be freed by `kiln_program_free`.
///
/// # Safety
/// `path` is a NUL-terminated string, `options` null or valid, `out` a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn kiln_program_load(
    path: *const c_char,
    options: *const KilnLoadOptions,
    out: *mut *mut KilnProgram,
) -> KilnStatus {
    guard(|| {
        if out.is_null() {
            return Err(Failure::argument("out is null"));
        }
        // SAFETY: the contract above.
        let path = unsafe { path_arg(path, "path") }?;
        // SAFETY: the contract above.
        let program = unsafe { builder(options, &path) }?.load(&path)?;
        finish(program, out)
    })
}

/// Loads a program from `len` bytes at `bytes`, which are copied (from 1 MiB on into an
/// unlinked temporary file, mapped): the caller may free them when the call returns.
///
/// # Safety
/// `bytes` points to `len` readable bytes; `options` null or valid; `out` a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn kiln_program_load_bytes(
    bytes: *const u8,
    len: usize,
    options: *const KilnLoadOptions,
    out: *mut *mut KilnProgram,
) -> KilnStatus {
    guard(|| {
        if out.is_null() {
            return Err(Failure::argument("out is null"));
        }
        if bytes.is_null() {
            return Err(Failure::argument("bytes is null"));
        }
        // SAFETY: `bytes` points to `len` readable bytes (the contract above).
        let data = unsafe { std::slice::from_raw_parts(bytes, len) }.to_vec();
        let name = Path::new("<bytes>");
        // SAFETY: the contract above.
        let program = unsafe { builder(options, name) }?.load_bytes("<bytes>", data)?;
        finish(program, out)
    })
}

/// Frees a program (null is ignored). Methods made from it stay valid.
///
/// # Safety
/// `program` is null or a program from `kiln_program_load*`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn kiln_program_free(program: *mut KilnProgram) {
    if !program.is_null() {
        // SAFETY: made by Box::into_raw in `finish`, freed once (the contract above). Dropping
        // a program runs no code that panics.
        drop(unsafe { Box::from_raw(program) });
    }
}

/// The number of the program's methods, into `*out`.
///
/// # Safety
/// `program` is a valid program, `out` a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn kiln_program_method_count(
    program: *const KilnProgram,
    out: *mut usize,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        unsafe { put(out, program_arg(program)?.names.len()) }
    })
}

/// The name of method `index` (in file order), into `*out`: valid while the program lives.
///
/// # Safety
/// `program` is a valid program, `out` a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn kiln_program_method_name(
    program: *const KilnProgram,
    index: usize,
    out: *mut *const c_char,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let p = unsafe { program_arg(program) }?;
        let name = p.names.get(index).ok_or_else(|| {
            Failure::argument(format!("method {index} of a program with {}", p.names.len()))
        })?;
        // SAFETY: the contract above.
        unsafe { put(out, name.as_ptr()) }
    })
}
