//! Where archive entries come from: every importable format turns itself into a list of
//! [`SourceEntry`] values through the [`ParamSource`] trait, and `convert`, `dump` and the
//! edit commands work on those lists only.
//!
//! Payloads are borrowed from the source's bytes (normally a memory map), so converting a
//! multi-gigabyte file copies nothing until the output is written. Adding a format (as
//! [`super::executorch`] does for `.ptd` and `.pte`) is one `impl ParamSource` that maps
//! its tensors to [`SourceEntry::data`].

use std::borrow::Cow;

use crate::error::Result;

use super::builder::{BuildEntry, Payload};
use super::reader::{Archive, EntryKind};
pub use super::tensor_metadata::TensorType;

/// One parameter offered by a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceEntry<'a> {
    /// The parameter's key.
    pub key: Cow<'a, [u8]>,
    /// Opaque metadata carried into an archive (empty for none).
    pub metadata: Cow<'a, [u8]>,
    /// What the entry holds.
    pub payload: Payload<'a>,
    /// Absolute offset of a data payload in the source file.
    pub offset: Option<u64>,
    /// Element type and shape, when known.
    pub tensor: Option<TensorType>,
}

impl<'a> SourceEntry<'a> {
    /// A data entry at `offset` of the source file, without metadata.
    pub fn data(key: &'a [u8], offset: u64, bytes: &'a [u8], tensor: Option<TensorType>) -> Self {
        SourceEntry {
            key: Cow::Borrowed(key),
            metadata: Cow::Borrowed(&[]),
            payload: Payload::Data(bytes),
            offset: Some(offset),
            tensor,
        }
    }

    /// The key as text (invalid UTF-8 replaced).
    pub fn key_str(&self) -> Cow<'_, str> {
        String::from_utf8_lossy(&self.key)
    }

    /// The NumPy `descr` and shape of the entry: its recorded type when NumPy has that type
    /// and the shape's byte count equals the payload's length, else `None` (the entry is
    /// then only bytes).
    pub fn numpy_type(&self) -> Option<(&'static str, &[u64])> {
        let t = self.tensor.as_ref()?;
        let descr = t.npy_descr?;
        let size =
            t.shape.iter().try_fold(crate::npy::item_size(descr)?, |a, &d| a.checked_mul(d))?;
        (size == self.payload.length()).then_some((descr, t.shape.as_slice()))
    }

    /// The entry as the builder takes it: its own metadata, or, when it has none and its
    /// source records a type, that type in IREE's `TENSORv0:` form (see
    /// [`super::tensor_metadata`]) unless `typed` is false.
    pub fn to_build(&self, typed: bool) -> BuildEntry<'a> {
        let metadata = match &self.tensor {
            Some(t) if typed && self.metadata.is_empty() => {
                Cow::Owned(super::tensor_metadata::encode(t))
            }
            _ => self.metadata.clone(),
        };
        BuildEntry { name: self.key.clone(), metadata, payload: self.payload.clone() }
    }
}

/// A file kiln can take parameters from.
pub trait ParamSource {
    /// Short format name for messages (`irpa`, `safetensors`, ...).
    fn format_name(&self) -> &'static str;
    /// Every parameter, in the order the file lists them.
    fn param_entries(&self) -> Result<Vec<SourceEntry<'_>>>;
}

impl ParamSource for Archive<'_> {
    fn format_name(&self) -> &'static str {
        super::FORMAT
    }

    fn param_entries(&self) -> Result<Vec<SourceEntry<'_>>> {
        let mut out = Vec::with_capacity(self.entries().len());
        for e in self.live_entries() {
            let (payload, offset) = match e.kind {
                EntryKind::Skip => continue,
                EntryKind::Splat { length, pattern, pattern_length } => {
                    let n = usize::from(pattern_length).min(pattern.len());
                    (Payload::Splat { pattern: Cow::Owned(pattern[..n].to_vec()), length }, None)
                }
                EntryKind::Data { offset, bytes, .. } => (Payload::Data(bytes), Some(offset)),
                EntryKind::External { path, offset, length } => {
                    (Payload::External { path: Cow::Borrowed(path), offset, length }, None)
                }
            };
            out.push(SourceEntry {
                key: Cow::Borrowed(e.name),
                metadata: Cow::Borrowed(e.metadata),
                payload,
                offset,
                tensor: super::tensor_metadata::decode(e.metadata),
            });
        }
        Ok(out)
    }
}
