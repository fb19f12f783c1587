//! Writing archives exactly as IREE's writer (`irpa_builder.c`) lays them out.
//!
//! Layout: the v0 header at 0; the entry table at 96 with each entry 16-byte aligned (the
//! table length stops at the end of the last entry); the metadata segment right after the
//! table holding, per entry, its name then its metadata (an empty metadata reference is
//! `{0, 0}`); the storage segment at the first data entry's alignment, each data entry at
//! `align(end of previous, alignment)`; zero padding up to a multiple of 4096. DATA entries
//! record a `minimum_alignment` of 64 whatever their placement, SPLAT entries 0, as IREE does.
//!
//! [`Plan`] computes the layout and the bytes of everything before the storage segment (its
//! memory is proportional to the number of entries, never to the data); [`Plan::write`] then
//! streams the payloads, which are borrowed slices (normally of memory maps), to any writer.

use crate::bytes::align_up;
use crate::error::{Error, Result};
use crate::io::{Sink, WriteSink};
use std::borrow::Cow;

use super::layout::{
    entry_type, field, Range, DATA_ENTRY_SIZE, DEFAULT_DATA_ALIGNMENT, ENTRY_ALIGNMENT,
};
use super::layout::{EXTERNAL_ENTRY_SIZE, FILE_ALIGNMENT, FORMAT, HEADER_V0_SIZE, MAGIC};
use super::layout::{MAX_SPLAT_PATTERN_LENGTH, SPLAT_ENTRY_SIZE};

/// The payload of an entry to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A pattern of 1, 2, 4, 8 or 16 bytes repeated over `length` bytes.
    Splat {
        /// The pattern.
        pattern: Cow<'a, [u8]>,
        /// Virtual length in bytes.
        length: u64,
    },
    /// Bytes stored in the archive, borrowed (normally from a memory map).
    Data(&'a [u8]),
    /// A reference to bytes in another file.
    External {
        /// Path of the other file.
        path: Cow<'a, [u8]>,
        /// Offset in that file.
        offset: u64,
        /// Length in bytes.
        length: u64,
    },
}

impl Payload<'_> {
    /// Virtual length in bytes.
    pub fn length(&self) -> u64 {
        match self {
            Payload::Splat { length, .. } | Payload::External { length, .. } => *length,
            Payload::Data(bytes) => bytes.len() as u64,
        }
    }
}

/// One entry to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildEntry<'a> {
    /// The key.
    pub name: Cow<'a, [u8]>,
    /// Opaque metadata (empty for none).
    pub metadata: Cow<'a, [u8]>,
    /// What the entry holds.
    pub payload: Payload<'a>,
}

/// A computed archive layout, ready to be written.
#[derive(Debug)]
pub struct Plan<'e, 'a> {
    entries: &'e [BuildEntry<'a>],
    head: Vec<u8>,
    /// Absolute offset of each DATA entry's bytes, `None` for other entries.
    data_offsets: Vec<Option<u64>>,
    storage: Range,
    total_size: u64,
}

fn too_big(what: &str) -> Error {
    Error::invalid(FORMAT, what, None, "the archive would be larger than 2^64 bytes")
}

impl<'e, 'a> Plan<'e, 'a> {
    /// Lays out `entries` in order with data aligned to `alignment` (a power of two; IREE's
    /// default is 64).
    pub fn new(entries: &'e [BuildEntry<'a>], alignment: u64) -> Result<Self> {
        if !alignment.is_power_of_two() {
            return Err(Error::invalid(
                FORMAT,
                "alignment",
                None,
                format!("{alignment} is not a power of two"),
            ));
        }
        let table_offset =
            align_up(HEADER_V0_SIZE, ENTRY_ALIGNMENT).ok_or_else(|| too_big("table"))?;
        // Pass 1: sizes and relative offsets.
        let mut table_len = 0u64;
        let mut entry_offsets = Vec::with_capacity(entries.len());
        let mut metadata_len = 0u64;
        let mut storage_len = 0u64;
        let mut storage_alignment = None;
        let mut rel_data = Vec::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            let size = match &e.payload {
                Payload::Splat { pattern, .. } => {
                    check_pattern(pattern).map_err(|_| {
                        Error::invalid(
                            FORMAT,
                            format!("entries[{i}] ({}).pattern", String::from_utf8_lossy(&e.name)),
                            None,
                            format!(
                                "a splat pattern must be 1, 2, 4, 8 or 16 bytes, not {}",
                                pattern.len()
                            ),
                        )
                    })?;
                    SPLAT_ENTRY_SIZE
                }
                Payload::Data(_) => DATA_ENTRY_SIZE,
                Payload::External { .. } => EXTERNAL_ENTRY_SIZE,
            };
            let start = align_up(table_len, ENTRY_ALIGNMENT).ok_or_else(|| too_big("table"))?;
            entry_offsets.push(start);
            table_len = start.checked_add(size).ok_or_else(|| too_big("table"))?;
            let extra = match &e.payload {
                Payload::External { path, .. } => path.len() as u64,
                _ => 0,
            };
            metadata_len = metadata_len
                .checked_add(e.name.len() as u64)
                .and_then(|m| m.checked_add(e.metadata.len() as u64))
                .and_then(|m| m.checked_add(extra))
                .ok_or_else(|| too_big("metadata"))?;
            if let Payload::Data(bytes) = &e.payload {
                storage_alignment.get_or_insert(alignment);
                let at = align_up(storage_len, alignment).ok_or_else(|| too_big("storage"))?;
                storage_len =
                    at.checked_add(bytes.len() as u64).ok_or_else(|| too_big("storage"))?;
                rel_data.push(Some(at));
            } else {
                rel_data.push(None);
            }
        }
        let metadata = Range {
            offset: table_offset.checked_add(table_len).ok_or_else(|| too_big("table"))?,
            length: metadata_len,
        };
        let metadata_end = metadata.end().ok_or_else(|| too_big("metadata"))?;
        let storage = Range {
            offset: align_up(metadata_end, storage_alignment.unwrap_or(1))
                .ok_or_else(|| too_big("storage"))?,
            length: storage_len,
        };
        let total_size = storage
            .end()
            .and_then(|end| align_up(end, FILE_ALIGNMENT))
            .ok_or_else(|| too_big("storage"))?;
        let head_len = usize::try_from(metadata_end).map_err(|_| too_big("metadata"))?;

        // Pass 2: the bytes of header, table and metadata.
        let mut head = vec![0u8; head_len];
        put_u32(&mut head, field::MAGIC, MAGIC);
        put_u64(&mut head, field::HEADER_SIZE, HEADER_V0_SIZE);
        put_u64(&mut head, field::ENTRY_COUNT, entries.len() as u64);
        put_range(
            &mut head,
            field::ENTRY_SEGMENT,
            Range { offset: table_offset, length: table_len },
        );
        put_range(&mut head, field::METADATA_SEGMENT, metadata);
        put_range(&mut head, field::STORAGE_SEGMENT, storage);
        let mut cursor = 0u64;
        let mut push_meta = |head: &mut Vec<u8>, bytes: &[u8], empty_is_zero: bool| -> Range {
            if bytes.is_empty() && empty_is_zero {
                return Range::default();
            }
            let at = (metadata.offset + cursor) as usize;
            head[at..at + bytes.len()].copy_from_slice(bytes);
            let range = Range { offset: cursor, length: bytes.len() as u64 };
            cursor += bytes.len() as u64;
            range
        };
        for ((e, &rel), rel_storage) in entries.iter().zip(&entry_offsets).zip(&rel_data) {
            let at = table_offset + rel;
            let name = push_meta(&mut head, &e.name, false);
            let meta = push_meta(&mut head, &e.metadata, true);
            put_range(&mut head, at + field::ENTRY_NAME, name);
            put_range(&mut head, at + field::ENTRY_METADATA, meta);
            match &e.payload {
                Payload::Splat { pattern, length } => {
                    put_u64(&mut head, at + field::ENTRY_SIZE, SPLAT_ENTRY_SIZE);
                    put_u32(&mut head, at + field::ENTRY_TYPE, entry_type::SPLAT);
                    put_u64(&mut head, at + field::SPLAT_LENGTH, *length);
                    let p = (at + field::SPLAT_PATTERN) as usize;
                    head[p..p + pattern.len()].copy_from_slice(pattern);
                    head[(at + field::SPLAT_PATTERN_LENGTH) as usize] = pattern.len() as u8;
                }
                Payload::Data(bytes) => {
                    put_u64(&mut head, at + field::ENTRY_SIZE, DATA_ENTRY_SIZE);
                    put_u32(&mut head, at + field::ENTRY_TYPE, entry_type::DATA);
                    put_u64(&mut head, at + field::ENTRY_MIN_ALIGNMENT, DEFAULT_DATA_ALIGNMENT);
                    let range =
                        Range { offset: rel_storage.unwrap_or(0), length: bytes.len() as u64 };
                    put_range(&mut head, at + field::DATA_STORAGE, range);
                }
                Payload::External { path, offset, length } => {
                    put_u64(&mut head, at + field::ENTRY_SIZE, EXTERNAL_ENTRY_SIZE);
                    put_u32(&mut head, at + field::ENTRY_TYPE, entry_type::EXTERNAL);
                    let path = push_meta(&mut head, path, false);
                    put_range(&mut head, at + field::EXTERNAL_PATH, path);
                    put_range(
                        &mut head,
                        at + field::EXTERNAL_RANGE,
                        Range { offset: *offset, length: *length },
                    );
                }
            }
        }
        let data_offsets = rel_data.iter().map(|r| r.map(|rel| storage.offset + rel)).collect();
        Ok(Plan { entries, head, data_offsets, storage, total_size })
    }

    /// Total size of the file in bytes.
    pub fn total_size(&self) -> u64 {
        self.total_size
    }

    /// The storage segment (absolute, as the archive starts at 0).
    pub fn storage(&self) -> Range {
        self.storage
    }

    /// Absolute file offset of entry `i`'s data, for DATA entries.
    pub fn data_offset(&self, i: usize) -> Option<u64> {
        self.data_offsets.get(i).copied().flatten()
    }

    /// Streams the whole archive to `out`, payloads through [`Sink::copy`]; after each chunk
    /// `progress` is called with the number of bytes written so far and the payload chunk just
    /// written (empty for headers and padding), so a caller can report progress and release
    /// the pages of a memory map it has finished with. Returns the number of bytes written.
    pub fn write(&self, out: &mut dyn Sink, progress: Progress<'_>) -> std::io::Result<u64> {
        out.write_all(&self.head)?;
        let mut w = Counter { out, written: self.head.len() as u64, progress };
        for (e, off) in self.entries.iter().zip(&self.data_offsets) {
            if let (Payload::Data(bytes), Some(off)) = (&e.payload, off) {
                w.zeros(off - w.written)?;
                w.copy(bytes)?;
            }
        }
        w.zeros(self.total_size - w.written)?;
        Ok(w.written)
    }

    /// The whole archive in memory (for small archives and tests).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = WriteSink(Vec::with_capacity(usize::try_from(self.total_size).unwrap_or(0)));
        // Writing to a Vec cannot fail.
        let _ = self.write(&mut out, &mut |_, _| {});
        out.0
    }
}

/// Size of the chunks payloads are written in (and progress is reported at).
const CHUNK: usize = 8 << 20;

/// The progress callback of the streaming writers: bytes written so far, and the payload chunk
/// just written (empty for headers and padding).
pub type Progress<'p> = &'p mut dyn FnMut(u64, &[u8]);

struct Counter<'w, 'p> {
    out: &'w mut dyn Sink,
    written: u64,
    progress: Progress<'p>,
}

impl Counter<'_, '_> {
    fn copy(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        for chunk in bytes.chunks(CHUNK) {
            self.out.copy(chunk)?;
            self.written += chunk.len() as u64;
            (self.progress)(self.written, chunk);
        }
        Ok(())
    }

    fn zeros(&mut self, mut n: u64) -> std::io::Result<()> {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        while n > 0 {
            let k = n.min(ZEROS.len() as u64) as usize;
            self.out.write_all(&ZEROS[..k])?;
            self.written += k as u64;
            n -= k as u64;
        }
        (self.progress)(self.written, &[]);
        Ok(())
    }
}

fn put_u32(buf: &mut [u8], at: u64, v: u32) {
    let at = at as usize;
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(buf: &mut [u8], at: u64, v: u64) {
    let at = at as usize;
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn put_range(buf: &mut [u8], at: u64, r: Range) {
    put_u64(buf, at, r.offset);
    put_u64(buf, at + 8, r.length);
}

/// Checks a splat pattern given by a user: 1, 2, 4, 8 or 16 bytes.
pub fn check_pattern(pattern: &[u8]) -> Result<()> {
    if pattern.len().is_power_of_two() && pattern.len() <= MAX_SPLAT_PATTERN_LENGTH {
        Ok(())
    } else {
        Err(Error::invalid(
            FORMAT,
            "pattern",
            None,
            format!("a splat pattern must be 1, 2, 4, 8 or 16 bytes, not {}", pattern.len()),
        ))
    }
}
