//! The archive's on-disk layout (IREE's `iree_io_parameter_archive_*` structs): magic,
//! sizes, alignments, entry types and field offsets, and the ranges they describe.

/// The format name used in errors.
pub const FORMAT: &str = "irpa";
/// `IREE_IO_PARAMETER_ARCHIVE_MAGIC`: the bytes `IRPA`.
pub const MAGIC: u32 = 0x4150_5249;
/// Size of the header prefix every header version shares.
pub const HEADER_PREFIX_SIZE: u64 = 32;
/// Size of a version 0 header.
pub const HEADER_V0_SIZE: u64 = 88;
/// Headers start at a multiple of this.
pub const HEADER_ALIGNMENT: u64 = 16;
/// Entries in the entry table start at a multiple of this.
pub const ENTRY_ALIGNMENT: u64 = 16;
/// Default alignment of data in the storage segment.
pub const DEFAULT_DATA_ALIGNMENT: u64 = 64;
/// Archives written by IREE are padded to a multiple of this.
pub const FILE_ALIGNMENT: u64 = 4096;
/// Longest splat pattern.
pub const MAX_SPLAT_PATTERN_LENGTH: usize = 16;
/// Size of the common entry header.
pub const ENTRY_HEADER_SIZE: u64 = 60;
/// Size of a SPLAT entry.
pub const SPLAT_ENTRY_SIZE: u64 = 85;
/// Size of a DATA entry.
pub const DATA_ENTRY_SIZE: u64 = 76;
/// Size of an EXTERNAL entry.
pub const EXTERNAL_ENTRY_SIZE: u64 = 92;

/// Entry type codes of the format.
pub mod entry_type {
    /// An erased entry; readers ignore it.
    pub const SKIP: u32 = 0;
    /// A repeated pattern with no storage.
    pub const SPLAT: u32 = 1;
    /// Bytes in the storage segment.
    pub const DATA: u32 = 2;
    /// Bytes in another file.
    pub const EXTERNAL: u32 = 3;
}

/// Field offsets inside a header and an entry (all packed, little-endian).
pub(crate) mod field {
    pub const MAGIC: u64 = 0;
    pub const VERSION_MAJOR: u64 = 4;
    pub const VERSION_MINOR: u64 = 6;
    pub const HEADER_SIZE: u64 = 8;
    pub const NEXT_HEADER_OFFSET: u64 = 16;
    pub const FLAGS: u64 = 24;
    pub const ENTRY_COUNT: u64 = 32;
    pub const ENTRY_SEGMENT: u64 = 40;
    pub const METADATA_SEGMENT: u64 = 56;
    pub const STORAGE_SEGMENT: u64 = 72;

    pub const ENTRY_SIZE: u64 = 0;
    pub const ENTRY_TYPE: u64 = 8;
    pub const ENTRY_FLAGS: u64 = 12;
    pub const ENTRY_NAME: u64 = 20;
    pub const ENTRY_METADATA: u64 = 36;
    pub const ENTRY_MIN_ALIGNMENT: u64 = 52;
    pub const SPLAT_LENGTH: u64 = 60;
    pub const SPLAT_PATTERN: u64 = 68;
    pub const SPLAT_PATTERN_LENGTH: u64 = 84;
    pub const DATA_STORAGE: u64 = 60;
    pub const EXTERNAL_PATH: u64 = 60;
    pub const EXTERNAL_RANGE: u64 = 76;
}

/// An `{offset, length}` pair as stored in the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Range {
    /// Start, relative to whatever the field says.
    pub offset: u64,
    /// Length in bytes.
    pub length: u64,
}

impl Range {
    /// `offset + length`, or `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.length)
    }
}
