//! External named data from an IREE parameter archive (`.irpa`): the EXTERNAL tensors of a
//! program are looked up by fully qualified name among the archive's entries.
//!
//! - DATA entries are served zero-copy from the memory map ([`IrpaFile`]).
//! - SPLAT entries have no bytes in the file; a splat named by the program is expanded into
//!   owned memory ([`ExpandedSplats`]) of exactly the tensor's declared `nbytes`, and only when
//!   the splat covers that size, so the allocation is bounded by the program, never by a
//!   length read from the archive.
//! - A key the program needs that is missing, only erased (SKIP), EXTERNAL (a reference to a
//!   third file, which kiln does not follow) or shorter than the tensor is an error at open
//!   that names the key.
//!
//! An archive stores no tensor layout, so only the byte size is checked (as for
//! [`NamedEntry::layout`] `None`).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use kiln_format::irpa::{verify::verify, EntryKind};
use kiln_format::pte::{Program, TensorData, Value};

use crate::data::{NamedDataSource, NamedEntry};
use crate::error::{Error, Result};
use crate::mapped::MappedFile;

/// A memory-mapped, verified `.irpa` serving its DATA entries by key.
#[derive(Debug)]
pub struct IrpaFile {
    file: MappedFile,
    entries: HashMap<String, NamedEntry>,
}

/// Splat entries of an archive expanded to the sizes a program's tensors declare.
#[derive(Debug)]
pub struct ExpandedSplats {
    name: String,
    bytes: Vec<u8>,
    entries: HashMap<String, NamedEntry>,
}

/// The sources for `program`'s EXTERNAL tensors from the archive at `path`: the archive
/// itself, then its expanded splats (when the program names any). Every external name of the
/// program is checked here, so a bad archive fails at open with the key in the message.
pub fn irpa_sources(
    path: impl AsRef<Path>,
    program: &Path,
) -> Result<Vec<Arc<dyn NamedDataSource>>> {
    let path = path.as_ref();
    let file = MappedFile::open(path)?;
    let name = path.display().to_string();
    let fmt = |source| Error::Format { path: name.clone(), source };
    let bad = |key: &str, at: Option<u64>, reason: String| {
        fmt(kiln_format::Error::invalid("irpa", format!("entry {key:?}"), at, reason))
    };
    let wanted = external_tensors(program)?;
    let archive = verify(file.bytes()).map_err(fmt)?;
    let base = file.bytes().as_ptr() as usize;
    // IREE's lookup rule: the first live entry of a key wins.
    let mut live: HashMap<&[u8], &kiln_format::irpa::Entry<'_>> = HashMap::new();
    for e in archive.live_entries() {
        live.entry(e.name).or_insert(e);
    }
    let mut entries = HashMap::new();
    let mut splat_bytes = Vec::new();
    let mut splat_entries = HashMap::new();
    for (key, nbytes) in &wanted {
        let Some(e) = live.get(key.as_bytes()) else {
            let erased = archive.entries().iter().any(|e| e.name == key.as_bytes());
            let reason = if erased {
                "the program needs it but the archive only has it erased (SKIP)"
            } else {
                "the program needs it but the archive has no such entry"
            };
            return Err(bad(key, None, reason.into()));
        };
        let at = Some(e.entry_offset);
        match e.kind {
            EntryKind::Data { bytes, .. } => {
                if (bytes.len() as u64) < *nbytes {
                    return Err(bad(
                        key,
                        at,
                        format!("holds {} bytes, the tensor needs {nbytes}", bytes.len()),
                    ));
                }
                let start = (bytes.as_ptr() as usize).saturating_sub(base);
                let range = start..start.saturating_add(bytes.len());
                entries.insert(key.clone(), NamedEntry { range, layout: None });
            }
            EntryKind::Splat { length, pattern, pattern_length } => {
                if length < *nbytes {
                    return Err(bad(
                        key,
                        at,
                        format!("splat of {length} bytes, the tensor needs {nbytes}"),
                    ));
                }
                let pattern = pattern.get(..usize::from(pattern_length)).unwrap_or(&[]);
                let n = usize::try_from(*nbytes)
                    .map_err(|_| bad(key, at, format!("{nbytes} bytes do not fit in memory")))?;
                let start = splat_bytes.len();
                splat_bytes.try_reserve(n).map_err(|_| {
                    bad(key, at, format!("cannot allocate {n} bytes to expand the splat"))
                })?;
                splat_bytes.extend(pattern.iter().copied().cycle().take(n));
                if splat_bytes.len() != start + n {
                    return Err(bad(key, at, "splat with an empty pattern".into()));
                }
                splat_entries
                    .insert(key.clone(), NamedEntry { range: start..start + n, layout: None });
            }
            EntryKind::External { path: target, .. } => {
                return Err(bad(
                    key,
                    at,
                    format!(
                        "is an EXTERNAL entry (bytes in {:?}), which kiln does not follow",
                        String::from_utf8_lossy(target)
                    ),
                ))
            }
            EntryKind::Skip => return Err(bad(key, at, "is erased (SKIP)".into())),
        }
    }
    let mut sources: Vec<Arc<dyn NamedDataSource>> = vec![Arc::new(IrpaFile { file, entries })];
    if !splat_entries.is_empty() {
        sources.push(Arc::new(ExpandedSplats {
            name: format!("{name} (expanded splats)"),
            bytes: splat_bytes,
            entries: splat_entries,
        }));
    }
    Ok(sources)
}

/// Every EXTERNAL tensor of every method of the program at `path`: name and declared byte
/// size (the largest when methods disagree; the runtime checks each tensor again at load).
fn external_tensors(path: &Path) -> Result<Vec<(String, u64)>> {
    let file = MappedFile::open(path)?;
    let fmt = |source| Error::Format { path: path.display().to_string(), source };
    let p = Program::open(file.bytes()).map_err(fmt)?;
    let mut out: Vec<(String, u64)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for m in p.methods() {
        for v in 0..m.num_values() {
            let Value::Tensor(t) = m.value(v).map_err(fmt)? else { continue };
            let (TensorData::External(fqn) | TensorData::ExternalPlanned(fqn, _)) = t.data() else {
                continue;
            };
            match index.get(fqn) {
                Some(&i) => {
                    if let Some(slot) = out.get_mut(i) {
                        slot.1 = slot.1.max(t.nbytes());
                    }
                }
                None => {
                    index.insert(fqn.to_string(), out.len());
                    out.push((fqn.to_string(), t.nbytes()));
                }
            }
        }
    }
    Ok(out)
}

impl NamedDataSource for IrpaFile {
    fn describe(&self) -> String {
        self.file.path().display().to_string()
    }

    fn bytes(&self) -> &[u8] {
        self.file.bytes()
    }

    fn entry(&self, key: &str) -> Option<&NamedEntry> {
        self.entries.get(key)
    }

    fn release(&self, range: std::ops::Range<usize>) {
        self.file.release_range(range);
    }
}

impl NamedDataSource for ExpandedSplats {
    fn describe(&self) -> String {
        self.name.clone()
    }

    fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn entry(&self, key: &str) -> Option<&NamedEntry> {
        self.entries.get(key)
    }
}
