//! IREE parameter archives (`.irpa`): a zero-copy reader that follows linked headers, a
//! verifier, a builder whose output is byte-identical to IREE's writer, and edit operations.
//!
//! The on-disk layout is `iree/schemas/parameter_archive.h`: a packed little-endian header
//! (prefix of 32 bytes, v0 header of 88), an entry table of 16-byte aligned entries, a
//! metadata segment of names and opaque metadata, and a storage segment of data. Every offset
//! in a header is relative to that header, so archives can be linked into one file through
//! `next_header_offset`.
//!
//! - [`reader`]: [`Archive::parse`] indexes every entry of every linked header.
//! - [`verify`]: structural checks beyond what parsing needs (overlaps, alignment, splats).
//! - [`builder`]: lays out and streams a new archive exactly as IREE's writer does.
//! - [`source`]: the [`ParamSource`] trait every importable format implements.
//! - [`edit`]: in-place edits (erase) and header linking (append, concat).
//! - [`executorch`]: `.ptd` tensors and `.pte` named constants as parameter sources.
//! - [`tensor_metadata`]: element type and shape in entry metadata (IREE's `TENSORv0:` form).
//! - [`summary`]: what `kiln inspect` shows of a parameter file of any of these formats.
//! - [`transform`]: the entry transformations of `iree-convert-parameters`.

pub mod builder;
pub mod edit;
pub mod executorch;
mod layout;
#[cfg(feature = "all-formats")]
pub mod param_file;
pub mod reader;
pub mod source;
#[cfg(feature = "all-formats")]
pub mod summary;
pub mod tensor_metadata;
pub mod transform;
pub mod verify;

pub use layout::{
    entry_type, Range, DATA_ENTRY_SIZE, DEFAULT_DATA_ALIGNMENT, ENTRY_ALIGNMENT, ENTRY_HEADER_SIZE,
    EXTERNAL_ENTRY_SIZE, FILE_ALIGNMENT, FORMAT, HEADER_ALIGNMENT, HEADER_PREFIX_SIZE,
    HEADER_V0_SIZE, MAGIC, MAX_SPLAT_PATTERN_LENGTH, SPLAT_ENTRY_SIZE,
};

pub use builder::{BuildEntry, Payload};
#[cfg(feature = "all-formats")]
pub use param_file::ParamFile;
pub use reader::{Archive, Entry, EntryKind, Header};
pub use source::{ParamSource, SourceEntry};
