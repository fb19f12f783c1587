//! kiln's errors as Python exceptions: `kiln.KilnError` and one subclass per kind a caller
//! may want to catch, each carrying kiln's own message.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(kiln, KilnError, PyException, "Every error kiln raises.");
create_exception!(
    kiln,
    FileError,
    KilnError,
    "A file could not be opened, read or written (missing, a folder, no permission)."
);
create_exception!(
    kiln,
    InvalidFileError,
    KilnError,
    "A file is not a valid file of its kind: the message names the field and offset."
);
create_exception!(
    kiln,
    NotSupportedError,
    KilnError,
    "A valid program that kiln does not run: operators without a kernel, delegates without a \
     backend, dtypes or features kiln does not handle."
);
create_exception!(
    kiln,
    InputError,
    KilnError,
    "Arguments that do not fit: an unknown method, inputs whose count, dtype or shape the \
     method does not declare, a prompt the language model cannot take."
);
create_exception!(
    kiln,
    ExecutionError,
    KilnError,
    "A kernel or delegate failed while the method ran."
);
create_exception!(
    kiln,
    MemoryLimitError,
    KilnError,
    "The method would take more memory than its limit (`max_memory`), or the system refused it."
);

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("KilnError", py.get_type::<KilnError>())?;
    m.add("FileError", py.get_type::<FileError>())?;
    m.add("InvalidFileError", py.get_type::<InvalidFileError>())?;
    m.add("NotSupportedError", py.get_type::<NotSupportedError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("ExecutionError", py.get_type::<ExecutionError>())?;
    m.add("MemoryLimitError", py.get_type::<MemoryLimitError>())?;
    Ok(())
}

/// The exception for a runtime error, with its message.
pub fn runtime(err: kiln_runtime::Error) -> PyErr {
    let message = err.to_string();
    runtime_kind(&err, message)
}

/// The exception for a runtime error, by its kind.
fn runtime_kind(err: &kiln_runtime::Error, message: String) -> PyErr {
    use kiln_runtime::Error as E;
    match err {
        E::Map(_) => FileError::new_err(message),
        E::Format { source, .. } => format(source, message),
        E::InvalidProgram { .. } | E::ExternalData { .. } => InvalidFileError::new_err(message),
        E::Missing { .. } | E::NotSupported { .. } => NotSupportedError::new_err(message),
        E::MethodNotFound { .. }
        | E::InputCount { .. }
        | E::Input { .. }
        | E::Llm { .. }
        | E::ContextFull { .. } => InputError::new_err(message),
        E::Memory { .. } => MemoryLimitError::new_err(message),
        E::Kernel { .. }
        | E::Delegate { .. }
        | E::Execution { .. }
        | E::InstructionLimit { .. } => ExecutionError::new_err(message),
        _ => KilnError::new_err(message),
    }
}

/// The exception for a format error, by its kind: a file that could not be read, or is of no
/// kind kiln reads, is a `FileError` (as for `kiln.verify`), any other an `InvalidFileError`.
pub fn format(err: &kiln_format::Error, message: String) -> PyErr {
    match err {
        kiln_format::Error::Io { .. } | kiln_format::Error::Unrecognised { .. } => {
            FileError::new_err(message)
        }
        _ => InvalidFileError::new_err(message),
    }
}

/// The exception for an error of the format layer, by its kind, with its causes as the
/// message (the words the `kiln` command prints).
pub fn file(err: &kiln_format::Error) -> PyErr {
    format(err, kiln_runtime::error::message_chain(err))
}

/// Converts a runtime result.
pub fn check<T>(result: Result<T, kiln_runtime::Error>) -> PyResult<T> {
    result.map_err(runtime)
}
