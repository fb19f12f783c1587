//! The one error type of `kiln-format`.
//!
//! Every variant says which format, which field (as a path such as
//! `execution_plan[0].values[12].tensor.sizes`) and, where the bytes have one, which file offset
//! the problem is at.

use std::fmt;
use std::path::PathBuf;

/// Result alias used throughout `kiln-format`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while reading, verifying or writing a file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A read past the end of the data.
    #[error("{format}: truncated at {field}: needs bytes {offset}..{end} but the data has {len}")]
    Truncated {
        /// Format being read.
        format: &'static str,
        /// Field path being read.
        field: String,
        /// Start of the read.
        offset: u64,
        /// End (exclusive) of the read.
        end: u64,
        /// Length of the data.
        len: u64,
    },
    /// A magic number or file identifier did not match.
    #[error("{format}: bad magic at offset {offset}: expected {expected}, found {found}")]
    BadMagic {
        /// Format being read.
        format: &'static str,
        /// Offset of the magic.
        offset: u64,
        /// What was expected, printable.
        expected: String,
        /// What was found, printable.
        found: String,
    },
    /// A value that breaks a rule of the format.
    #[error("{format}: invalid {field}{}: {reason}", at(*.offset))]
    Invalid {
        /// Format being read.
        format: &'static str,
        /// Field path, e.g. `execution_plan[0].values[3].tensor.dim_order`.
        field: String,
        /// File offset of the field, when known.
        offset: Option<u64>,
        /// What is wrong, in words.
        reason: String,
    },
    /// A value outside what kiln supports (valid for the format, but not handled).
    #[error("{format}: unsupported {field}{}: {reason}", at(*.offset))]
    Unsupported {
        /// Format being read.
        format: &'static str,
        /// Field path.
        field: String,
        /// File offset of the field, when known.
        offset: Option<u64>,
        /// What is not supported.
        reason: String,
    },
    /// A hard cap on a count or size, to keep allocation bounded.
    #[error("{format}: {what} is {value}, over the limit of {limit}")]
    Limit {
        /// Format being read.
        format: &'static str,
        /// What was counted.
        what: String,
        /// The value found.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// The flatbuffer verifier rejected the bytes.
    #[error("{format}: flatbuffer verification failed: {source}")]
    Flatbuffer {
        /// Format being read.
        format: &'static str,
        /// The verifier's error, which names the failing field path.
        #[source]
        source: flatbuffers::InvalidFlatbuffer,
    },
    /// A lookup by name found nothing.
    #[error("{format}: no {what} named {name:?}")]
    NotFound {
        /// Format being read.
        format: &'static str,
        /// Kind of thing looked up.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// An I/O error on a named file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// An error with where it happened: the file, and the part of it when that is more than a
    /// field path says (`model.tflite: subgraph 0 operator 2: package 0 at file offset 186`).
    #[error("{context}: {source}")]
    Context {
        /// Where.
        context: String,
        /// What went wrong there.
        #[source]
        source: Box<Error>,
    },
    /// An index read from the file is past the end of the table it indexes.
    #[error("{field} {index} is not below the {count} {what}")]
    OutOfRange {
        /// Field path of the index.
        field: String,
        /// The index.
        index: u64,
        /// Entries of the table.
        count: u64,
        /// What the table holds (`operator codes`).
        what: &'static str,
    },
    /// A file of a kind that holds the thing asked for, without one (`no edgetpu-custom-op
    /// operator in this model`).
    #[error("no {what} in this {container}")]
    Absent {
        /// What is missing.
        what: String,
        /// What the file is (`model`).
        container: &'static str,
    },
    /// The first bytes match no kind kiln reads ([`crate::detect::kind_of`]).
    #[error("{reason} (first bytes {first_bytes})")]
    Unrecognised {
        /// What the bytes look like ([`crate::detect::unrecognised`]).
        reason: String,
        /// Up to 8 of them, in hex, or `<empty file>`.
        first_bytes: String,
    },
}

fn at(offset: Option<u64>) -> AtOffset {
    AtOffset(offset)
}

/// Formats " at offset N" when an offset is known.
struct AtOffset(Option<u64>);

impl fmt::Display for AtOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(o) => write!(f, " at offset {o} (0x{o:x})"),
            None => Ok(()),
        }
    }
}

impl Error {
    /// Shorthand for [`Error::Invalid`].
    pub fn invalid(
        format: &'static str,
        field: impl Into<String>,
        offset: Option<u64>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Invalid { format, field: field.into(), offset, reason: reason.into() }
    }

    /// Shorthand for [`Error::Unsupported`].
    pub fn unsupported(
        format: &'static str,
        field: impl Into<String>,
        offset: Option<u64>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Unsupported { format, field: field.into(), offset, reason: reason.into() }
    }

    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// This error with where it happened in front ([`Error::Context`]).
    pub fn context(self, context: impl Into<String>) -> Self {
        Error::Context { context: context.into(), source: Box::new(self) }
    }

    /// This error with the file's name in front, as messages about a file given by name say it.
    pub fn in_file(self, file: &std::path::Path) -> Self {
        self.context(file.display().to_string())
    }

    /// This error and every cause under it, each after `": "`, as the `kiln` command has
    /// always worded why a TFLite or Edge TPU model fails `kiln verify`: a cause is said again
    /// even where the error's own text holds it (a flatbuffer verifier's finding), except
    /// under a [`Error::Context`], which adds only where it happened.
    #[cfg(feature = "all-formats")]
    pub(crate) fn with_causes(&self) -> String {
        if let Error::Context { context, source } = self {
            return format!("{context}: {}", source.with_causes());
        }
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_names_field_and_offset() {
        let e = Error::invalid("pte", "execution_plan[0].values[3]", Some(64), "bad tag 99");
        assert_eq!(
            e.to_string(),
            "pte: invalid execution_plan[0].values[3] at offset 64 (0x40): bad tag 99"
        );
        let e = Error::invalid("irpa", "entries[2]", None, "overlaps entries[1]");
        assert_eq!(e.to_string(), "irpa: invalid entries[2]: overlaps entries[1]");
    }
}
