//! The entry table of `iree-dump-parameters`, reproduced byte for byte, and the `--json` form.

use std::io::Write;

use kiln_format::irpa::reader::EntryKind;
use kiln_format::irpa::{Archive, Payload, SourceEntry};
use serde::Serialize;

/// One row of a dump.
#[derive(Serialize)]
pub struct Row<'a> {
    /// The key.
    #[serde(serialize_with = "lossy")]
    pub key: &'a [u8],
    /// `data`, `splat`, `external` or `skip`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Virtual length in bytes.
    pub length: u64,
    /// Absolute file offset (data entries only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// Metadata as text, or null when there is none.
    #[serde(serialize_with = "lossy_opt")]
    pub metadata: Option<&'a [u8]>,
    /// External file path (external entries only; shown in the table).
    #[serde(skip)]
    pub external: Option<(&'a [u8], u64)>,
}

fn lossy<S: serde::Serializer>(b: &&[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(b))
}

fn lossy_opt<S: serde::Serializer>(b: &Option<&[u8]>, s: S) -> Result<S::Ok, S::Error> {
    match b {
        Some(b) => s.serialize_str(&String::from_utf8_lossy(b)),
        None => s.serialize_none(),
    }
}

fn meta(m: &[u8]) -> Option<&[u8]> {
    (!m.is_empty()).then_some(m)
}

/// Rows of an archive's table, SKIP entries included.
pub fn archive_rows<'a>(archive: &'a Archive<'a>) -> Vec<Row<'a>> {
    archive
        .entries()
        .iter()
        .map(|e| {
            let (offset, external) = match e.kind {
                EntryKind::Data { offset, .. } => (Some(offset), None),
                EntryKind::External { path, offset, .. } => (None, Some((path, offset))),
                _ => (None, None),
            };
            Row {
                key: e.name,
                kind: e.type_name(),
                length: e.length(),
                offset,
                metadata: meta(e.metadata),
                external,
            }
        })
        .collect()
}

/// Rows of any source's entries.
pub fn source_rows<'a>(entries: &'a [SourceEntry<'a>]) -> Vec<Row<'a>> {
    entries
        .iter()
        .map(|e| {
            let (kind, external) = match &e.payload {
                Payload::Data(_) => ("data", None),
                Payload::Splat { .. } => ("splat", None),
                Payload::External { path, offset, .. } => ("external", Some((&path[..], *offset))),
            };
            Row {
                key: &e.key,
                kind,
                length: e.payload.length(),
                offset: e.offset,
                metadata: meta(&e.metadata),
                external,
            }
        })
        .collect()
}

const RULE: &str = "//===--------------------------------------------------------------------------------------------------------------===//\n";
const COLUMNS: &str = "//===------------+------------------+------------------+-----------------------------------------------------------===//\n//         Start |              End |           Length | Key\n//---------------+------------------+------------------+--------------------------------------------------------------//\n";

/// Writes the table exactly as `iree-dump-parameters` prints one scope (`<global>`); SKIP
/// entries, which IREE does not index, are left out.
pub fn write_table<W: Write>(out: &mut W, rows: &[Row<'_>]) -> std::io::Result<()> {
    let live = rows.iter().filter(|r| r.kind != "skip");
    let (count, total) =
        live.clone().fold((0u64, 0u64), |(n, t), r| (n + 1, t.wrapping_add(r.length)));
    out.write_all(RULE.as_bytes())?;
    writeln!(out, "// Parameter scope <global> ({count} entries, {total} total bytes)")?;
    out.write_all(COLUMNS.as_bytes())?;
    for r in live {
        match r.offset {
            Some(start) => write!(
                out,
                "{start:>16} | {:>16} | {:>16} | `",
                start.wrapping_add(r.length),
                r.length
            )?,
            None => write!(out, "{:>16} | {:>16} | {:>16} | `", "-", "-", r.length)?,
        }
        out.write_all(r.key)?;
        out.write_all(b"`")?;
        if let Some((path, offset)) = r.external {
            out.write_all(b" (external: ")?;
            out.write_all(path)?;
            write!(out, " at {offset})")?;
        }
        out.write_all(b"\n")?;
    }
    out.write_all(b"\n")
}
