//! The one error type of kiln-runtime.

use kiln_kernels::{DType, KernelError};

/// Everything that can go wrong while loading or running a program. Messages name the method,
/// the instruction index, the operator and the argument where they apply.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be mapped.
    #[error(transparent)]
    Map(#[from] crate::mapped::MapError),
    /// An external data file that is not one kiln reads (`.ptd`, `.irpa`), or could not be
    /// read.
    #[error("{path}: {reason}")]
    DataFile {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The worker threads asked for could not be started.
    #[error(transparent)]
    Threads(#[from] kiln_kernels::compute::threads::ThreadsError),
    /// The file is not a valid program or data file.
    #[error("{path}: {source}")]
    Format {
        /// The file.
        path: String,
        /// What the format layer found.
        #[source]
        source: kiln_format::Error,
    },
    /// No method of that name.
    #[error("no method {name:?} in the program (methods: {})", available.join(", "))]
    MethodNotFound {
        /// The requested name.
        name: String,
        /// The methods the program has.
        available: Vec<String>,
    },
    /// Operators without a kernel and delegates without a backend, all listed at once.
    #[error("method {method}: {}", missing_message(operators, delegates))]
    Missing {
        /// The method.
        method: String,
        /// Every operator (`name.overload`) without a registered kernel, in table order.
        operators: Vec<String>,
        /// Every delegate id no registered backend handles.
        delegates: Vec<String>,
    },
    /// The program is structurally unusable for execution (bad value kinds, memory plan
    /// outside its arenas, ...).
    #[error("method {method}: {location}: {reason}")]
    InvalidProgram {
        /// The method.
        method: String,
        /// Where (`values[12]`, `instruction 4 (aten::add.out) argument 2`, ...).
        location: String,
        /// What is wrong.
        reason: String,
    },
    /// A feature kiln does not run: DYNAMIC_UNBOUND tensors (ExecuTorch refuses them too), or
    /// tensors of more than [`kiln_kernels::MAX_RANK`] dimensions.
    #[error("method {method}: {location}: not supported: {reason}")]
    NotSupported {
        /// The method.
        method: String,
        /// Where.
        location: String,
        /// What.
        reason: String,
    },
    /// An external constant could not be resolved or does not match.
    #[error("method {method}: external tensor {fqn:?} (values[{value}]): {reason}")]
    ExternalData {
        /// The method.
        method: String,
        /// Value index of the tensor.
        value: usize,
        /// Fully qualified name.
        fqn: String,
        /// What is wrong.
        reason: String,
    },
    /// The method's memory (planned arenas, constants it owns, prepared weights) would pass
    /// [`crate::LoadOptions::memory_limit`], or the OS refused it. Checked before allocating.
    #[error("method {method}: {what} would take {bytes} bytes{}", memory_message(*counted, *limit, reason))]
    Memory {
        /// The method.
        method: String,
        /// What needed it.
        what: String,
        /// Bytes requested.
        bytes: u64,
        /// Bytes of the method counted before this request.
        counted: u64,
        /// The limit.
        limit: u64,
        /// Why the request failed.
        reason: MemoryReason,
    },
    /// Wrong number of inputs.
    #[error("method {method}: expected {expected} inputs, got {actual}")]
    InputCount {
        /// The method.
        method: String,
        /// Declared inputs.
        expected: usize,
        /// Given inputs.
        actual: usize,
    },
    /// An input does not match the method's declaration.
    #[error("method {method}: input {index}: expected {expected}, got {actual}")]
    Input {
        /// The method.
        method: String,
        /// Input position.
        index: usize,
        /// What the method declares.
        expected: String,
        /// What was given.
        actual: String,
    },
    /// A kernel failed.
    #[error("method {method}: instruction {instruction} ({op}): {source}")]
    Kernel {
        /// The method.
        method: String,
        /// Instruction index in its chain.
        instruction: usize,
        /// `name.overload`.
        op: String,
        /// The kernel's error.
        #[source]
        source: Box<KernelError>,
    },
    /// A delegate failed at init or execution.
    #[error("method {method}: delegate {delegate} ({backend}){}: {source}", at_instruction(*instruction))]
    Delegate {
        /// The method.
        method: String,
        /// Instruction index, for execution errors.
        instruction: Option<usize>,
        /// Delegate index.
        delegate: usize,
        /// Backend id.
        backend: String,
        /// What the backend reported.
        #[source]
        source: BackendError,
    },
    /// An instruction's values cannot be used as it needs at run time.
    #[error("method {method}: instruction {instruction} ({op}): {reason}")]
    Execution {
        /// The method.
        method: String,
        /// Instruction index in its chain.
        instruction: usize,
        /// Operator or instruction kind.
        op: String,
        /// What is wrong (argument, expected vs actual).
        reason: String,
    },
    /// A program that is not the language model [`crate::llm`] expects, or a call it refuses.
    #[error("language model: {reason}")]
    Llm {
        /// What is wrong.
        reason: String,
    },
    /// A call would pass the KV cache's last position.
    #[error(
        "language model: {tokens} more token(s) at position {position} would pass the maximum \
         context length of {max_context_len}"
    )]
    ContextFull {
        /// Tokens already in the cache.
        position: usize,
        /// Tokens the call would add.
        tokens: usize,
        /// Positions the cache holds.
        max_context_len: usize,
    },
    /// The run executed more instructions than allowed (an endless JumpFalse loop).
    #[error("method {method}: stopped after {limit} instructions (endless control flow?)")]
    InstructionLimit {
        /// The method.
        method: String,
        /// The limit.
        limit: u64,
    },
}

fn missing_message(ops: &[String], delegates: &[String]) -> String {
    let mut parts = Vec::new();
    if !ops.is_empty() {
        parts.push(format!(
            "{} operator{} without a kernel: {}",
            ops.len(),
            if ops.len() == 1 { "" } else { "s" },
            ops.join(", ")
        ));
    }
    if !delegates.is_empty() {
        let list: Vec<String> = delegates.iter().map(|d| format!("no backend for {d}")).collect();
        parts.push(list.join(", "));
    }
    parts.join("; ")
}

fn at_instruction(i: Option<usize>) -> String {
    i.map(|i| format!(" at instruction {i}")).unwrap_or_default()
}

/// Describes a tensor for messages: `float32[1, 3, 16, 16]`.
pub(crate) fn describe_tensor(dtype: DType, sizes: &[usize]) -> String {
    format!("{}{:?}", dtype.name(), sizes)
}

/// The result type of kiln-runtime.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a method's memory request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryReason {
    /// The request would pass the method's memory limit.
    OverLimit,
    /// The system refused the memory (its message).
    Refused(String),
}

fn memory_message(counted: u64, limit: u64, reason: &MemoryReason) -> String {
    let counted =
        if counted > 0 { format!(" beside the {counted} already taken") } else { String::new() };
    match reason {
        MemoryReason::OverLimit => format!("{counted}, over the memory limit of {limit} bytes"),
        MemoryReason::Refused(os) => format!("{counted}, and the system refused them: {os}"),
    }
}

/// What a backend reports when it cannot prepare or run a delegate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The processed bytes are not a valid payload for the backend.
    #[error("invalid payload: {0}")]
    InvalidPayload(String),
    /// A valid payload uses something the backend does not implement.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// The payload names data that no named-data source holds.
    #[error("named data {key:?} is in neither the program nor its data files")]
    MissingData {
        /// The key.
        key: String,
    },
    /// A call's values do not fit what the delegate was prepared for, or running failed.
    #[error("{0}")]
    Execution(String),
}

/// The message of `err` and of its causes joined by ": ", leaving out a cause whose text the
/// message already holds (kiln's errors print their source inline): the words the `kiln`
/// command prints after `kiln: error:`, and the Python package's exception messages.
pub fn message_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !msg.contains(&text) {
            msg.push_str(": ");
            msg.push_str(&text);
        }
        cause = c.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Outer(&'static str, #[source] std::io::Error);

    /// A cause whose text the message already holds is said once; another is appended.
    #[test]
    fn message_chain_says_each_cause_once() {
        let inline = Error::DataFile { path: "w.bin".into(), reason: "no such file".into() };
        assert_eq!(message_chain(&inline), "w.bin: no such file");
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        assert_eq!(message_chain(&Outer("opening w.bin", io())), "opening w.bin: no such file");
        assert_eq!(message_chain(&Outer("w.bin: no such file", io())), "w.bin: no such file");
    }
}
