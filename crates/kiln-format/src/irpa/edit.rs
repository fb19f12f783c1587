//! Edits that keep an archive's bytes and change only a few of them: erasing entries (their
//! type becomes SKIP) and replacing data of the same length in place, and linking archives
//! into one file through `next_header_offset` (append, concat).
//!
//! Every edit is a list of [`Patch`]es over the input plus, for linking, more parts after it;
//! [`Output::write`] streams the result, so memory use does not depend on the file size. The
//! edits that change the layout (rename, exclude, strip, splat, repack) rebuild the archive with
//! [`super::builder::Plan`] instead.

use crate::error::{Error, Result};
use crate::io::Sink;

use super::builder::{Plan, Progress};
use super::layout::{entry_type, field, FILE_ALIGNMENT, FORMAT};
use super::reader::{Archive, EntryKind};

/// Bytes to write over the input at an absolute offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patch<'a> {
    /// Absolute offset in the part being patched.
    pub offset: u64,
    /// Replacement bytes.
    pub bytes: std::borrow::Cow<'a, [u8]>,
}

/// One piece of an output file.
pub enum Part<'p, 'a> {
    /// Existing bytes with patches applied (sorted, non-overlapping, in range).
    Bytes {
        /// The bytes.
        data: &'a [u8],
        /// The patches.
        patches: Vec<Patch<'a>>,
    },
    /// A freshly built archive.
    Built(&'p Plan<'p, 'a>),
}

impl Part<'_, '_> {
    fn len(&self) -> u64 {
        match self {
            Part::Bytes { data, .. } => data.len() as u64,
            Part::Built(plan) => plan.total_size(),
        }
    }
}

/// An output file made of parts, each starting at a multiple of 4096.
pub struct Output<'p, 'a> {
    parts: Vec<Part<'p, 'a>>,
}

impl<'p, 'a> Output<'p, 'a> {
    /// Total size in bytes.
    pub fn total_size(&self) -> u64 {
        let mut total = 0u64;
        for (i, p) in self.parts.iter().enumerate() {
            total += p.len();
            if i + 1 < self.parts.len() {
                total = pad(total);
            }
        }
        total
    }

    /// Streams the output to `out`; `progress` gets the bytes written so far and each chunk
    /// of input bytes just written (see [`Plan::write`]).
    pub fn write(&self, out: &mut dyn Sink, progress: Progress<'_>) -> std::io::Result<u64> {
        let mut written = 0u64;
        for (i, part) in self.parts.iter().enumerate() {
            match part {
                Part::Bytes { data, patches } => {
                    let mut at = 0usize;
                    for p in patches {
                        let start = p.offset as usize;
                        copy_chunked(out, &data[at..start], &mut written, progress)?;
                        out.write_all(&p.bytes)?;
                        written += p.bytes.len() as u64;
                        at = start + p.bytes.len();
                    }
                    copy_chunked(out, &data[at..], &mut written, progress)?;
                }
                Part::Built(plan) => {
                    let before = written;
                    written += plan.write(out, &mut |n, chunk| progress(before + n, chunk))?;
                }
            }
            if i + 1 < self.parts.len() {
                let target = pad(written);
                out.write_all(&vec![0u8; (target - written) as usize])?;
                written = target;
            }
        }
        progress(written, &[]);
        Ok(written)
    }
}

fn pad(n: u64) -> u64 {
    n.div_ceil(FILE_ALIGNMENT) * FILE_ALIGNMENT
}

fn copy_chunked(
    out: &mut dyn Sink,
    bytes: &[u8],
    written: &mut u64,
    progress: Progress<'_>,
) -> std::io::Result<()> {
    for chunk in bytes.chunks(8 << 20) {
        out.copy(chunk)?;
        *written += chunk.len() as u64;
        progress(*written, chunk);
    }
    Ok(())
}

/// Patches that turn every live entry named one of `keys` into a SKIP entry. Fails naming the
/// first key that matches nothing.
pub fn erase<'a>(archive: &Archive<'a>, keys: &[&[u8]]) -> Result<Vec<Patch<'a>>> {
    let mut patches = Vec::new();
    for key in keys {
        let before = patches.len();
        for e in archive.live_entries().filter(|e| e.name == *key) {
            patches.push(Patch {
                offset: e.entry_offset + field::ENTRY_TYPE,
                bytes: entry_type::SKIP.to_le_bytes().to_vec().into(),
            });
        }
        if patches.len() == before {
            return Err(not_found(key));
        }
    }
    sort_patches(&mut patches)?;
    Ok(patches)
}

/// A patch that overwrites the data of the DATA entry `key` (the first one with that key) with
/// `bytes` of the same length, or `None` when the entry is not DATA or the lengths differ (the
/// caller then rebuilds).
pub fn replace_in_place<'a>(
    archive: &Archive<'a>,
    key: &[u8],
    bytes: &'a [u8],
) -> Result<Option<Patch<'a>>> {
    let entry = archive.find(key).ok_or_else(|| not_found(key))?;
    Ok(match entry.kind {
        EntryKind::Data { offset, length, .. } if length == bytes.len() as u64 && length > 0 => {
            Some(Patch { offset, bytes: bytes.into() })
        }
        _ => None,
    })
}

/// Sorts patches by offset and fails when two overlap.
pub fn sort_patches(patches: &mut [Patch<'_>]) -> Result<()> {
    patches.sort_by_key(|p| p.offset);
    for w in patches.windows(2) {
        if w[0].offset + w[0].bytes.len() as u64 > w[1].offset {
            return Err(Error::invalid(
                FORMAT,
                "edit",
                Some(w[1].offset),
                "two edits write the same bytes (is a key given twice?)",
            ));
        }
    }
    Ok(())
}

/// The output of patching one archive.
pub fn patched<'p, 'a>(data: &'a [u8], patches: Vec<Patch<'a>>) -> Output<'p, 'a> {
    Output { parts: vec![Part::Bytes { data, patches }] }
}

/// Links archives into one file: each starts at a multiple of 4096 after the previous one, and
/// the last header of each chain gets a `next_header_offset` pointing at the next archive's
/// first header. The archives' own bytes are otherwise unchanged (all their offsets are relative
/// to their headers). `existing` are parsed archives with their bytes; `appended`, when given,
/// is a new archive written after them.
pub fn link<'p, 'a>(
    existing: &[(&'a [u8], &Archive<'a>)],
    appended: Option<&'p Plan<'p, 'a>>,
) -> Output<'p, 'a> {
    let mut parts = Vec::with_capacity(existing.len() + 1);
    let mut start = 0u64;
    for (i, (data, archive)) in existing.iter().enumerate() {
        let next_start = pad(start + data.len() as u64);
        let is_last = i + 1 == existing.len() && appended.is_none();
        let mut patches = Vec::new();
        if !is_last {
            // Parsing yields at least one header.
            let last = archive.headers().last().map_or(0, |h| h.offset);
            patches.push(Patch {
                offset: last + field::NEXT_HEADER_OFFSET,
                bytes: (next_start - start - last).to_le_bytes().to_vec().into(),
            });
        }
        parts.push(Part::Bytes { data, patches });
        start = next_start;
    }
    if let Some(plan) = appended {
        parts.push(Part::Built(plan));
    }
    Output { parts }
}

fn not_found(key: &[u8]) -> Error {
    Error::NotFound {
        format: FORMAT,
        what: "entry",
        name: String::from_utf8_lossy(key).into_owned(),
    }
}
