//! The entry transformations of `iree-convert-parameters`, applied to source entries in order:
//! `--exclude` (by original key), `--rename OLD=NEW` (first match), `--splat KEY` (by new key:
//! a splat of the same length, with a one-byte zero pattern unless another is given) and
//! `--strip` (every remaining entry becomes a one-byte zero splat). An explicit splat wins over
//! strip. Entries whose source records a type get it as `TENSORv0:` metadata (see
//! [`super::tensor_metadata`]) unless `untyped` is set. Unlike IREE, entries with the same
//! key keep their own bytes (IREE copies data by key, so the last duplicate's bytes land in the
//! first entry and the second stays zero).

use std::borrow::Cow;

use super::builder::{BuildEntry, Payload};
use super::source::SourceEntry;

/// Options of a conversion.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Original keys to drop.
    pub exclude: Vec<Vec<u8>>,
    /// `(old, new)` renames; the first matching `old` applies.
    pub rename: Vec<(Vec<u8>, Vec<u8>)>,
    /// `(new key, pattern)` pairs: entries to turn into splats of that pattern.
    pub splat: Vec<(Vec<u8>, Vec<u8>)>,
    /// Turn every entry into a zero splat.
    pub strip: bool,
    /// Write no type metadata (what IREE's tools write).
    pub untyped: bool,
}

/// Applies `options` to `entries` in order.
pub fn apply<'a>(entries: &[SourceEntry<'a>], options: &Options) -> Vec<BuildEntry<'a>> {
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        if options.exclude.iter().any(|k| k.as_slice() == &*e.key) {
            continue;
        }
        let mut entry = e.to_build(!options.untyped);
        if let Some((_, new)) = options.rename.iter().find(|(old, _)| old.as_slice() == &*e.key) {
            entry.name = Cow::Owned(new.clone());
        }
        let length = entry.payload.length();
        if let Some((_, pattern)) = options.splat.iter().find(|(k, _)| k.as_slice() == &*entry.name)
        {
            entry.payload = Payload::Splat { pattern: Cow::Owned(pattern.clone()), length };
        } else if options.strip {
            entry.payload = Payload::Splat { pattern: Cow::Borrowed(&[0u8]), length };
        }
        out.push(entry);
    }
    out
}

/// Fails when two entries share a key, naming the key and both positions. IREE looks a key up
/// by its first entry, so a second one with the same key is unreachable.
pub fn check_unique(entries: &[BuildEntry<'_>]) -> crate::error::Result<()> {
    let mut seen = std::collections::HashMap::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        if let Some(first) = seen.insert(&*e.name, i) {
            return Err(crate::error::Error::invalid(
                super::FORMAT,
                format!("entries[{i}].name"),
                None,
                format!(
                    "duplicate key `{}` (entries {first} and {i})",
                    String::from_utf8_lossy(&e.name)
                ),
            ));
        }
    }
    Ok(())
}
