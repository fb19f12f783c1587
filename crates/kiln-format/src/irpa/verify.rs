//! Checks beyond what indexing needs: alignment, overlaps, splat patterns, duplicates.
//!
//! [`findings`] reports every problem of a parsed archive as an error (the file breaks a rule
//! of the format) or a warning (the file is valid but a consumer may trip on it: duplicate
//! keys, which IREE resolves to the first; 8- and 16-byte splats, which IREE's HAL fill cannot
//! load; data ranges shared by two entries, which the schema allows). [`verify`] parses and
//! fails on the first error.

use std::collections::HashMap;

use crate::error::{Error, Result};

use super::layout::{Range, ENTRY_ALIGNMENT, FORMAT, HEADER_ALIGNMENT};
use super::reader::{Archive, EntryKind};

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The file breaks a rule of the format.
    Error,
    /// Valid, but likely to surprise a consumer.
    Warning,
}

/// One problem found in an archive.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// Field path, e.g. `headers[0].entries[3].storage`.
    pub field: String,
    /// File offset of the field.
    pub offset: Option<u64>,
    /// What is wrong.
    pub message: String,
}

impl Finding {
    /// The finding as a [`Error::Invalid`].
    pub fn to_error(&self) -> Error {
        Error::invalid(FORMAT, self.field.clone(), self.offset, self.message.clone())
    }
}

/// Parses `data` and fails with the first error finding.
pub fn verify(data: &[u8]) -> Result<Archive<'_>> {
    let archive = Archive::parse(data)?;
    if let Some(f) = findings(&archive).iter().find(|f| f.severity == Severity::Error) {
        return Err(f.to_error());
    }
    Ok(archive)
}

/// A labelled absolute byte range.
struct Region {
    label: String,
    start: u64,
    end: u64,
}

/// Every error and warning of `archive`, in file order of the headers and entries.
pub fn findings(archive: &Archive<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut push = |severity, field: String, offset, message: String| {
        out.push(Finding { severity, field, offset, message })
    };
    let mut structure: Vec<Region> = Vec::new();
    let mut storage: Vec<Region> = Vec::new();
    for (h, header) in archive.headers().iter().enumerate() {
        let base = header.offset;
        if base % HEADER_ALIGNMENT != 0 {
            push(
                Severity::Error,
                format!("headers[{h}]"),
                Some(base),
                format!("header at {base} is not {HEADER_ALIGNMENT}-byte aligned"),
            );
        }
        if header.skipped {
            push(
                Severity::Warning,
                format!("headers[{h}].version"),
                Some(base + 4),
                format!(
                    "version {}.{} is not supported; its entries were skipped",
                    header.version_major, header.version_minor
                ),
            );
            structure.push(Region {
                label: format!("headers[{h}]"),
                start: base,
                end: base.saturating_add(header.header_size),
            });
            continue;
        }
        if header.flags != 0 {
            push(
                Severity::Warning,
                format!("headers[{h}].flags"),
                Some(base + 24),
                format!("reserved flags are 0x{:x}, not 0", header.flags),
            );
        }
        structure.push(Region {
            label: format!("headers[{h}]"),
            start: base,
            end: base + header.header_size,
        });
        let entry_seg = header.absolute(header.entry_segment);
        if entry_seg.length > 0 && entry_seg.offset % ENTRY_ALIGNMENT != 0 {
            push(
                Severity::Error,
                format!("headers[{h}].entry_segment"),
                Some(base + 40),
                format!(
                    "entry table at {} is not {ENTRY_ALIGNMENT}-byte aligned",
                    entry_seg.offset
                ),
            );
        }
        let add = |list: &mut Vec<Region>, name: &str, r: Range| {
            if r.length > 0 {
                list.push(Region {
                    label: format!("headers[{h}].{name}"),
                    start: r.offset,
                    end: r.offset.saturating_add(r.length),
                });
            }
        };
        add(&mut structure, "entry_segment", entry_seg);
        add(&mut structure, "metadata_segment", header.absolute(header.metadata_segment));
        add(&mut storage, "storage_segment", header.absolute(header.storage_segment));
    }
    // Headers, entry tables, metadata and storage segments of every header are disjoint.
    structure.append(&mut storage);
    for (a, b) in overlaps(&mut structure) {
        push(Severity::Error, b, None, format!("overlaps {a}"));
    }

    let mut seen: HashMap<&[u8], String> = HashMap::new();
    let mut data: Vec<Region> = Vec::new();
    for e in archive.entries() {
        let path = format!("headers[{}].entries[{}]", e.header, e.index);
        let at = Some(e.entry_offset);
        if e.flags != 0 {
            push(
                Severity::Warning,
                format!("{path}.flags"),
                at,
                format!("flags are 0x{:x}, not 0", e.flags),
            );
        }
        match e.kind {
            EntryKind::Skip => continue,
            EntryKind::Splat { length, pattern_length, .. } => {
                let p = u64::from(pattern_length);
                if !matches!(p, 1 | 2 | 4 | 8 | 16) {
                    push(
                        Severity::Error,
                        format!("{path}.pattern_length"),
                        Some(e.entry_offset + 84),
                        format!("{p} is not 1, 2, 4, 8 or 16"),
                    );
                } else if length % p != 0 {
                    push(
                        Severity::Error,
                        format!("{path}.length"),
                        Some(e.entry_offset + 60),
                        format!("{length} is not a multiple of the {p}-byte pattern"),
                    );
                } else if p > 4 {
                    push(
                        Severity::Warning,
                        format!("{path}.pattern_length"),
                        Some(e.entry_offset + 84),
                        format!("IREE's HAL fill takes 1, 2 or 4-byte patterns; {p} will fail to load there"),
                    );
                }
            }
            EntryKind::Data { offset, length, .. } => {
                let align = e.minimum_alignment;
                if align != 0 && !align.is_power_of_two() {
                    push(
                        Severity::Error,
                        format!("{path}.minimum_alignment"),
                        Some(e.entry_offset + 52),
                        format!("{align} is not a power of two"),
                    );
                } else if length > 0 && align != 0 && offset % align != 0 {
                    push(
                        Severity::Error,
                        format!("{path}.storage"),
                        Some(e.entry_offset + 60),
                        format!("data at {offset} is not aligned to its minimum_alignment {align}"),
                    );
                }
                if length > 0 {
                    data.push(Region { label: path.clone(), start: offset, end: offset + length });
                }
            }
            EntryKind::External { .. } => {}
        }
        if let Some(first) = seen.get(e.name) {
            push(
                Severity::Warning,
                format!("{path}.name"),
                at,
                format!("key `{}` repeats {first}; lookups find the first", e.key()),
            );
        } else {
            seen.insert(e.name, path);
        }
    }
    for (a, b) in overlaps(&mut data) {
        push(Severity::Warning, b, None, format!("data shares bytes with {a}"));
    }
    out
}

/// Pairs `(earlier, later)` of overlapping regions, by sorting on start and sweeping.
fn overlaps(regions: &mut [Region]) -> Vec<(String, String)> {
    regions.sort_by_key(|r| (r.start, r.end));
    let mut out = Vec::new();
    let mut reach: Option<(u64, usize)> = None;
    for (i, r) in regions.iter().enumerate() {
        if let Some((end, j)) = reach {
            if r.start < end {
                out.push((regions[j].label.clone(), r.label.clone()));
            }
        }
        if reach.is_none_or(|(end, _)| r.end > end) {
            reach = Some((r.end, i));
        }
    }
    out
}
