//! The summary behind `kiln inspect` for a parameter file (an archive, safetensors, GGUF, or
//! an ExecuTorch file read as one): its entries by type, what its format records beside them,
//! and every entry's key, type, dtype, shape, offset and length.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::builder::Payload;
use super::param_file::ParamFile;
use super::reader::Header;
use crate::detect::Kind;
use crate::error::Result;

/// `kiln inspect --json` for a parameter file.
#[derive(Serialize)]
pub struct Summary {
    /// The file, as its name was given.
    pub file: String,
    /// Its kind.
    pub kind: Kind,
    /// Its size in bytes.
    pub size: usize,
    /// Number of entries.
    pub entries: usize,
    /// Entries and their bytes per entry type (`data`, `splat`, `external`).
    pub by_type: BTreeMap<&'static str, TypeTotal>,
    /// What the format records beside its entries.
    #[serde(flatten)]
    pub details: Details,
    /// Every entry, in file order.
    pub tensors: Vec<EntrySummary>,
}

/// The entries of one type.
#[derive(Serialize, Default)]
pub struct TypeTotal {
    /// How many.
    pub count: u64,
    /// Their bytes (virtual length for splats and external entries).
    pub bytes: u64,
}

/// What a parameter file's format records beside its entries.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Details {
    /// An archive: its headers, and the entries they mark to skip.
    Irpa {
        /// Every header of the chain.
        headers: Vec<Header>,
        /// Entries marked to skip.
        skipped_entries: usize,
    },
    /// safetensors: `__metadata__`.
    Safetensors {
        /// The metadata, by key.
        metadata: BTreeMap<String, String>,
    },
    /// GGUF: version, alignment and metadata keys.
    Gguf {
        /// Format version.
        version: u32,
        /// Data alignment.
        alignment: u64,
        /// Metadata keys, in file order.
        metadata_keys: Vec<String>,
    },
    /// An ExecuTorch `.ptd` (FlatTensor) or `.pte` (Program): its version.
    Executorch {
        /// Format version.
        version: u32,
    },
}

/// One entry.
#[derive(Serialize)]
pub struct EntrySummary {
    /// Key.
    pub key: String,
    /// `data`, `splat` or `external`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Element type, when the file records one.
    pub dtype: Option<String>,
    /// Shape, when the file records one.
    pub shape: Option<Vec<u64>>,
    /// Absolute offset of a data entry.
    pub offset: Option<u64>,
    /// Length in bytes (virtual length for splats and external entries).
    pub length: u64,
}

/// The summary of `parsed`, a file of `kind` and `size` bytes that messages call `file`.
pub fn summarize(file: &Path, kind: Kind, size: usize, parsed: &ParamFile<'_>) -> Result<Summary> {
    let entries = parsed.source().param_entries()?;
    let mut by_type: BTreeMap<&'static str, TypeTotal> = BTreeMap::new();
    let mut tensors = Vec::with_capacity(entries.len());
    for e in &entries {
        let kind = match e.payload {
            Payload::Data(_) => "data",
            Payload::Splat { .. } => "splat",
            Payload::External { .. } => "external",
        };
        let total = by_type.entry(kind).or_default();
        total.count += 1;
        total.bytes += e.payload.length();
        tensors.push(EntrySummary {
            key: e.key_str().into_owned(),
            kind,
            dtype: e.tensor.as_ref().map(|t| t.dtype.clone()),
            shape: e.tensor.as_ref().map(|t| t.shape.clone()),
            offset: e.offset,
            length: e.payload.length(),
        });
    }
    let details = match parsed {
        ParamFile::Irpa(a) => Details::Irpa {
            headers: a.headers().to_vec(),
            skipped_entries: a.entries().len() - a.live_entries().count(),
        },
        ParamFile::Safetensors(s) => {
            Details::Safetensors { metadata: s.metadata.iter().cloned().collect() }
        }
        ParamFile::Gguf(g) => Details::Gguf {
            version: g.version,
            alignment: g.alignment,
            metadata_keys: g
                .metadata
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.key).into_owned())
                .collect(),
        },
        ParamFile::Ptd(f) => Details::Executorch { version: f.version() },
        ParamFile::Pte(p) => Details::Executorch { version: p.version() },
    };
    Ok(Summary {
        file: file.to_string_lossy().into_owned(),
        kind,
        size,
        entries: entries.len(),
        by_type,
        details,
        tensors,
    })
}
