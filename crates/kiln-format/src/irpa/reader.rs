//! Indexing an archive over borrowed bytes (normally a memory map) without copying.
//!
//! [`Archive::parse`] accepts every file IREE's own parser accepts (missing tail padding, SKIP
//! entries, zero-length references with arbitrary offsets, duplicate keys) and, unlike IREE,
//! reads each linked header at its own offset, indexes EXTERNAL entries and skips headers of a
//! newer major version instead of failing (the schema allows parsers to skip headers they cannot
//! load). It rejects anything that would make an index unsound: truncated or out-of-range
//! headers, segments and references, entries that do not fit their table, a
//! `next_header_offset` that wraps around (the only way a chain could loop), and splat patterns
//! longer than 16 bytes. Layout rules that do not affect soundness (overlaps, alignment, splat
//! pattern lengths) are checked by [`super::verify`].

use crate::bytes::{align_up, ByteReader};
use crate::error::{Error, Result};

use super::layout::{entry_type, field, Range, ENTRY_ALIGNMENT, ENTRY_HEADER_SIZE, FORMAT, MAGIC};
use super::layout::{DATA_ENTRY_SIZE, EXTERNAL_ENTRY_SIZE, HEADER_PREFIX_SIZE, HEADER_V0_SIZE};
use super::layout::{MAX_SPLAT_PATTERN_LENGTH, SPLAT_ENTRY_SIZE};

/// One archive header of the chain.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Header {
    /// Absolute file offset of the header.
    pub offset: u64,
    /// `version_major`.
    pub version_major: u16,
    /// `version_minor`.
    pub version_minor: u16,
    /// `header_size`.
    pub header_size: u64,
    /// `next_header_offset` (relative to this header; 0 = last).
    pub next_header_offset: u64,
    /// `flags` (reserved).
    pub flags: u64,
    /// `entry_count`.
    pub entry_count: u64,
    /// `entry_segment`, relative to the header.
    pub entry_segment: Range,
    /// `metadata_segment`, relative to the header.
    pub metadata_segment: Range,
    /// `storage_segment`, relative to the header.
    pub storage_segment: Range,
    /// True when the header has a version kiln cannot read and its entries were skipped.
    pub skipped: bool,
}

impl Header {
    /// `segment` as an absolute file range (checked by parsing to fit the file when non-empty).
    pub fn absolute(&self, segment: Range) -> Range {
        Range { offset: self.offset.saturating_add(segment.offset), length: segment.length }
    }
}

/// What an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind<'a> {
    /// Erased entry (type 0); it holds nothing.
    Skip,
    /// A pattern repeated over `length` bytes.
    Splat {
        /// Virtual length in bytes.
        length: u64,
        /// The 16 pattern bytes as stored (only the first `pattern_length` are meaningful).
        pattern: [u8; 16],
        /// Number of meaningful pattern bytes (0..=16).
        pattern_length: u8,
    },
    /// Bytes in this file.
    Data {
        /// Absolute file offset of the bytes (0 when `length` is 0, as IREE does).
        offset: u64,
        /// Length in bytes.
        length: u64,
        /// The bytes themselves.
        bytes: &'a [u8],
    },
    /// Bytes in another file.
    External {
        /// Path of the other file, as stored.
        path: &'a [u8],
        /// Absolute offset in the other file.
        offset: u64,
        /// Length in bytes.
        length: u64,
    },
}

/// One entry of an entry table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Index of the header (in [`Archive::headers`]) whose table holds the entry.
    pub header: usize,
    /// Index within that header's table.
    pub index: usize,
    /// Absolute file offset of the entry.
    pub entry_offset: u64,
    /// `entry_size`.
    pub entry_size: u64,
    /// The raw `type` code.
    pub type_code: u32,
    /// `flags`.
    pub flags: u64,
    /// The name bytes (normally UTF-8, not guaranteed).
    pub name: &'a [u8],
    /// The opaque metadata bytes (empty when none).
    pub metadata: &'a [u8],
    /// `minimum_alignment` (0 = unspecified).
    pub minimum_alignment: u64,
    /// The typed payload.
    pub kind: EntryKind<'a>,
}

impl Entry<'_> {
    /// The name as text (invalid UTF-8 replaced).
    pub fn key(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.name)
    }

    /// The virtual length of the parameter in bytes (0 for SKIP).
    pub fn length(&self) -> u64 {
        match self.kind {
            EntryKind::Skip => 0,
            EntryKind::Splat { length, .. }
            | EntryKind::Data { length, .. }
            | EntryKind::External { length, .. } => length,
        }
    }

    /// `"data"`, `"splat"`, `"external"` or `"skip"`.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            EntryKind::Skip => "skip",
            EntryKind::Splat { .. } => "splat",
            EntryKind::Data { .. } => "data",
            EntryKind::External { .. } => "external",
        }
    }
}

/// A parsed archive: every header of the chain and every entry of every table, in order.
#[derive(Clone, Debug)]
pub struct Archive<'a> {
    data: &'a [u8],
    headers: Vec<Header>,
    entries: Vec<Entry<'a>>,
}

impl<'a> Archive<'a> {
    /// Parses the archive whose first header is at offset 0 of `data`.
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let mut archive = Archive { data, headers: Vec::new(), entries: Vec::new() };
        let mut base = 0u64;
        loop {
            let h = archive.headers.len();
            let header = archive.parse_header(base, h)?;
            let next = header.next_header_offset;
            archive.headers.push(header);
            if next == 0 {
                break;
            }
            base = base.checked_add(next).ok_or_else(|| {
                Error::invalid(
                    FORMAT,
                    format!("headers[{h}].next_header_offset"),
                    Some(base + field::NEXT_HEADER_OFFSET),
                    format!(
                        "{next} wraps around past the end of the address space (it would \
                         link back into the chain)"
                    ),
                )
            })?;
        }
        Ok(archive)
    }

    /// The bytes the archive was parsed from.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Every header of the chain, first to last.
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// Every entry of every header, in table order (SKIP entries included).
    pub fn entries(&self) -> &[Entry<'a>] {
        &self.entries
    }

    /// The entries that hold a parameter (everything but SKIP), in table order.
    pub fn live_entries(&self) -> impl Iterator<Item = &Entry<'a>> {
        self.entries.iter().filter(|e| !matches!(e.kind, EntryKind::Skip))
    }

    /// The first live entry named `key` (IREE's lookup rule for duplicate names).
    pub fn find(&self, key: &[u8]) -> Option<&Entry<'a>> {
        self.live_entries().find(|e| e.name == key)
    }

    fn reader(&self) -> ByteReader<'a> {
        ByteReader::new(self.data, FORMAT)
    }

    fn parse_header(&mut self, base: u64, h: usize) -> Result<Header> {
        let r = self.reader();
        let file_len = self.data.len() as u64;
        let path = |f: &str| format!("headers[{h}].{f}");
        let at = |off: u64| base.saturating_add(off);
        r.slice(base, HEADER_PREFIX_SIZE, &path("prefix"))?;
        let magic = r.u32(base, &path("magic"))?;
        if magic != MAGIC {
            return Err(Error::BadMagic {
                format: FORMAT,
                offset: base,
                expected: "IRPA (49 52 50 41)".into(),
                found: format!("{:02x?}", magic.to_le_bytes()),
            });
        }
        let version_major = r.u16(at(field::VERSION_MAJOR), &path("version_major"))?;
        let version_minor = r.u16(at(field::VERSION_MINOR), &path("version_minor"))?;
        let header_size = r.u64(at(field::HEADER_SIZE), &path("header_size"))?;
        let next_header_offset =
            r.u64(at(field::NEXT_HEADER_OFFSET), &path("next_header_offset"))?;
        let flags = r.u64(at(field::FLAGS), &path("flags"))?;
        if header_size < HEADER_PREFIX_SIZE {
            return Err(Error::invalid(
                FORMAT,
                path("header_size"),
                Some(at(field::HEADER_SIZE)),
                format!("{header_size} is smaller than the {HEADER_PREFIX_SIZE}-byte prefix"),
            ));
        }
        r.slice(base, header_size, &path("header"))?;
        if next_header_offset != 0 {
            if next_header_offset < header_size {
                return Err(Error::invalid(
                    FORMAT,
                    path("next_header_offset"),
                    Some(at(field::NEXT_HEADER_OFFSET)),
                    format!("{next_header_offset} points inside this {header_size}-byte header"),
                ));
            }
            let next = base.checked_add(next_header_offset);
            if next.is_none_or(|n| n.checked_add(HEADER_PREFIX_SIZE).is_none_or(|e| e > file_len)) {
                return Err(Error::invalid(
                    FORMAT,
                    path("next_header_offset"),
                    Some(at(field::NEXT_HEADER_OFFSET)),
                    format!(
                        "linked header at {base} + {next_header_offset} does not fit the \
                         {file_len}-byte file"
                    ),
                ));
            }
        }
        let mut header = Header {
            offset: base,
            version_major,
            version_minor,
            header_size,
            next_header_offset,
            flags,
            entry_count: 0,
            entry_segment: Range::default(),
            metadata_segment: Range::default(),
            storage_segment: Range::default(),
            skipped: false,
        };
        if version_major != 0 || version_minor != 0 {
            // The prefix is stable across versions, so a header kiln cannot read is skipped
            // and the chain continues, as the schema asks of parsers.
            header.skipped = true;
            return Ok(header);
        }
        if header_size != HEADER_V0_SIZE {
            return Err(Error::invalid(
                FORMAT,
                path("header_size"),
                Some(at(field::HEADER_SIZE)),
                format!("a version 0.0 header is {HEADER_V0_SIZE} bytes, not {header_size}"),
            ));
        }
        header.entry_count = r.u64(at(field::ENTRY_COUNT), &path("entry_count"))?;
        let segment = |off: u64, name: &str| -> Result<Range> {
            let range = Range {
                offset: r.u64(at(off), &path(&format!("{name}.offset")))?,
                length: r.u64(at(off + 8), &path(&format!("{name}.length")))?,
            };
            if range.length > 0 {
                let end = base.checked_add(range.offset).and_then(|s| s.checked_add(range.length));
                if end.is_none_or(|e| e > file_len) {
                    return Err(Error::invalid(
                        FORMAT,
                        path(name),
                        Some(at(off)),
                        format!(
                            "{} bytes at {base} + {} are outside the {file_len}-byte file",
                            range.length, range.offset
                        ),
                    ));
                }
            }
            Ok(range)
        };
        header.entry_segment = segment(field::ENTRY_SEGMENT, "entry_segment")?;
        header.metadata_segment = segment(field::METADATA_SEGMENT, "metadata_segment")?;
        header.storage_segment = segment(field::STORAGE_SEGMENT, "storage_segment")?;
        let max_entries = header.entry_segment.length / ENTRY_HEADER_SIZE + 1;
        if header.entry_count > max_entries {
            return Err(Error::invalid(
                FORMAT,
                path("entry_count"),
                Some(at(field::ENTRY_COUNT)),
                format!(
                    "{} entries cannot fit a {}-byte entry table",
                    header.entry_count, header.entry_segment.length
                ),
            ));
        }
        // Tables of different headers may overlap (verify rejects that), which would let a small
        // file claim quadratically many entries; every entry needs 60 bytes of its own in a
        // well-formed file, so the total is capped by the file size.
        let cap = file_len / ENTRY_HEADER_SIZE;
        let total = (self.entries.len() as u64).saturating_add(header.entry_count);
        if total > cap {
            return Err(Error::Limit {
                format: FORMAT,
                what: format!("entries up to headers[{h}]"),
                value: total,
                limit: cap,
            });
        }
        self.entries.reserve(header.entry_count as usize);
        let mut cursor = base.saturating_add(header.entry_segment.offset);
        let mut remaining = header.entry_segment.length;
        for i in 0..header.entry_count as usize {
            let entry = self.parse_entry(&header, h, i, cursor, remaining)?;
            let step = align_up(entry.entry_size, ENTRY_ALIGNMENT).unwrap_or(u64::MAX);
            cursor = cursor.saturating_add(step);
            remaining = remaining.saturating_sub(step);
            self.entries.push(entry);
        }
        Ok(header)
    }

    fn parse_entry(
        &self,
        header: &Header,
        h: usize,
        i: usize,
        at: u64,
        remaining: u64,
    ) -> Result<Entry<'a>> {
        let r = self.reader();
        let path = |f: &str| format!("headers[{h}].entries[{i}]{f}");
        if remaining < ENTRY_HEADER_SIZE {
            return Err(Error::invalid(
                FORMAT,
                path(""),
                Some(at),
                format!(
                    "the entry table has {remaining} bytes left, less than a \
                     {ENTRY_HEADER_SIZE}-byte entry header"
                ),
            ));
        }
        let entry_size = r.u64(at + field::ENTRY_SIZE, "entry.entry_size")?;
        if !(ENTRY_HEADER_SIZE..=remaining).contains(&entry_size) {
            return Err(Error::invalid(
                FORMAT,
                path(".entry_size"),
                Some(at),
                format!(
                    "{entry_size} is not between the {ENTRY_HEADER_SIZE}-byte entry header and \
                     the {remaining} bytes left in the table"
                ),
            ));
        }
        // The entry lies in the entry segment, which parsing checked to be in the file; reads
        // inside it use static field names (no allocation per field; the sizes were checked).
        let e = ByteReader::new(r.slice(at, entry_size, "entry")?, FORMAT);
        let type_code = e.u32(field::ENTRY_TYPE, "entry.type")?;
        let flags = e.u64(field::ENTRY_FLAGS, "entry.flags")?;
        let metadata_ref = |off: u64, name: &str| -> Result<&'a [u8]> {
            let range = Range {
                offset: e.u64(off, "entry.metadata_ref.offset")?,
                length: e.u64(off + 8, "entry.metadata_ref.length")?,
            };
            if range.length == 0 {
                return Ok(&[]);
            }
            if range.end().is_none_or(|e| e > header.metadata_segment.length) {
                return Err(Error::invalid(
                    FORMAT,
                    path(&format!(".{name}")),
                    Some(at + off),
                    format!(
                        "{} bytes at {} are outside the {}-byte metadata segment",
                        range.length, range.offset, header.metadata_segment.length
                    ),
                ));
            }
            // In range of the segment, which parsing checked to be in the file.
            let start = header.offset + header.metadata_segment.offset + range.offset;
            r.slice(start, range.length, "metadata_segment")
        };
        let name = metadata_ref(field::ENTRY_NAME, "name")?;
        let metadata = metadata_ref(field::ENTRY_METADATA, "metadata")?;
        let minimum_alignment = e.u64(field::ENTRY_MIN_ALIGNMENT, "entry.minimum_alignment")?;
        let need = |size: u64, what: &str| -> Result<()> {
            if entry_size < size {
                return Err(Error::invalid(
                    FORMAT,
                    path(".entry_size"),
                    Some(at),
                    format!("{entry_size} is smaller than a {size}-byte {what} entry"),
                ));
            }
            Ok(())
        };
        let kind = match type_code {
            entry_type::SKIP => EntryKind::Skip,
            entry_type::SPLAT => {
                need(SPLAT_ENTRY_SIZE, "SPLAT")?;
                let length = e.u64(field::SPLAT_LENGTH, "entry.length")?;
                let pattern = e.array::<16>(field::SPLAT_PATTERN, "entry.pattern")?;
                let pattern_length = e.u8(field::SPLAT_PATTERN_LENGTH, "entry.pattern_length")?;
                if pattern_length as usize > MAX_SPLAT_PATTERN_LENGTH {
                    return Err(Error::invalid(
                        FORMAT,
                        path(".pattern_length"),
                        Some(at + field::SPLAT_PATTERN_LENGTH),
                        format!(
                            "{pattern_length} is over the {MAX_SPLAT_PATTERN_LENGTH}-byte limit"
                        ),
                    ));
                }
                EntryKind::Splat { length, pattern, pattern_length }
            }
            entry_type::DATA => {
                need(DATA_ENTRY_SIZE, "DATA")?;
                let rel = e.u64(field::DATA_STORAGE, "entry.storage.offset")?;
                let length = e.u64(field::DATA_STORAGE + 8, "entry.storage.length")?;
                if length == 0 {
                    EntryKind::Data { offset: 0, length: 0, bytes: &[] }
                } else {
                    let storage = header.storage_segment;
                    if rel.checked_add(length).is_none_or(|e| e > storage.length) {
                        return Err(Error::invalid(
                            FORMAT,
                            path(".storage"),
                            Some(at + field::DATA_STORAGE),
                            format!(
                                "{length} bytes at {rel} are outside the {}-byte storage segment",
                                storage.length
                            ),
                        ));
                    }
                    let offset = header.offset + storage.offset + rel;
                    let bytes = r.slice(offset, length, "storage_segment")?;
                    EntryKind::Data { offset, length, bytes }
                }
            }
            entry_type::EXTERNAL => {
                need(EXTERNAL_ENTRY_SIZE, "EXTERNAL")?;
                let file = metadata_ref(field::EXTERNAL_PATH, "path")?;
                let offset = e.u64(field::EXTERNAL_RANGE, "entry.range.offset")?;
                let length = e.u64(field::EXTERNAL_RANGE + 8, "entry.range.length")?;
                if offset.checked_add(length).is_none() {
                    return Err(Error::invalid(
                        FORMAT,
                        path(".range"),
                        Some(at + field::EXTERNAL_RANGE),
                        format!("{length} bytes at {offset} overflow a 64-bit offset"),
                    ));
                }
                EntryKind::External { path: file, offset, length }
            }
            other => {
                return Err(Error::unsupported(
                    FORMAT,
                    path(".type"),
                    Some(at + field::ENTRY_TYPE),
                    format!(
                        "entry type {other} is not SKIP (0), SPLAT (1), DATA (2) or EXTERNAL (3)"
                    ),
                ))
            }
        };
        Ok(Entry {
            header: h,
            index: i,
            entry_offset: at,
            entry_size,
            type_code,
            flags,
            name,
            metadata,
            minimum_alignment,
            kind,
        })
    }
}
