//! External named data: tensors that a program names by fully qualified name instead of
//! storing them (`.ptd` files today; an `.irpa` source implements the same trait).

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use kiln_format::ptd::{FlatTensor, TensorLayout};

use crate::error::{Error, Result};
use crate::mapped::MappedFile;

/// One named entry of a source: where its bytes are and, when the source records it, the
/// tensor layout (dtype, sizes, dim order) that must match the program's tensor exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedEntry {
    /// Byte range in [`NamedDataSource::bytes`].
    pub range: Range<usize>,
    /// The layout, if the source stores one (a `.ptd` does; an `.irpa` does not, and then
    /// only the byte size is checked).
    pub layout: Option<TensorLayout>,
}

/// A source of named data. Lookups happen once, at method load; execution reads the bytes
/// through [`NamedDataSource::bytes`] with the range found then, without further lookups.
pub trait NamedDataSource: Send + Sync + std::fmt::Debug {
    /// A name for messages (the file path).
    fn describe(&self) -> String;
    /// All bytes of the source (ranges of [`NamedEntry`] index into them).
    fn bytes(&self) -> &[u8];
    /// The entry called `key`, if any.
    fn entry(&self, key: &str) -> Option<&NamedEntry>;
    /// Drops the resident pages of `range` of [`NamedDataSource::bytes`] once what they hold
    /// has been packed, keeping the bytes readable (a mapped source's pages fault back in
    /// from the page cache). The default keeps everything: bytes in memory that cannot be
    /// read back once given up.
    fn release(&self, range: Range<usize>) {
        let _ = range;
    }
}

/// A memory-mapped `.ptd` file, verified at open and indexed by key.
#[derive(Debug)]
pub struct PtdFile {
    file: MappedFile,
    entries: HashMap<String, NamedEntry>,
}

impl PtdFile {
    /// Maps, verifies and indexes a `.ptd` file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let file = MappedFile::open(path.as_ref())?;
        let fmt = |source| Error::Format { path: path.as_ref().display().to_string(), source };
        let bytes = file.bytes();
        let ptd = FlatTensor::open(bytes).map_err(fmt)?;
        let mut entries = HashMap::new();
        for entry in ptd.entries() {
            let entry = entry.map_err(fmt)?;
            // The reader hands out sub-slices of `bytes`; keep them as ranges.
            let start = (entry.data.as_ptr() as usize).saturating_sub(bytes.as_ptr() as usize);
            let range = start..start.saturating_add(entry.data.len());
            if bytes.get(range.clone()).is_none() {
                continue;
            }
            // ExecuTorch's lookup is a linear search: the first entry of a key wins.
            entries
                .entry(entry.key.to_string())
                .or_insert(NamedEntry { range, layout: entry.layout });
        }
        Ok(PtdFile { file, entries })
    }

    /// Number of named entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl NamedDataSource for PtdFile {
    fn describe(&self) -> String {
        self.file.path().display().to_string()
    }

    fn bytes(&self) -> &[u8] {
        self.file.bytes()
    }

    fn entry(&self, key: &str) -> Option<&NamedEntry> {
        self.entries.get(key)
    }

    fn release(&self, range: Range<usize>) {
        self.file.release_range(range);
    }
}

/// The named data a delegate may read: the program's own (`Program.named_data`, segments of
/// the `.pte`), then each external source (`.ptd`, `.irpa`) in the order they were given.
pub trait NamedDataMap {
    /// The bytes stored under `key`, if any source has it.
    fn get(&self, key: &str) -> Option<&[u8]>;
}

/// A program's named data: its `.pte` entries (key -> byte range of the file) and its sources.
pub(crate) struct ProgramData<'a> {
    pub file: &'a [u8],
    pub named: &'a std::collections::HashMap<String, Range<usize>>,
    pub sources: &'a [std::sync::Arc<dyn NamedDataSource>],
    /// Gives back the resident pages of a range of `file` (a mapped file's; nothing for
    /// bytes on the heap).
    pub release: &'a dyn Fn(Range<usize>),
}

/// Where named data lies: what a tensor borrowing it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DataPlace {
    /// A range of the program file.
    File,
    /// A range of external source `source` (its index among the program's sources).
    Source { source: u32, range: Range<usize> },
}

impl<'a> ProgramData<'a> {
    /// The bytes under `key`, and where they lie (so a tensor can borrow them in place).
    pub fn locate(&self, key: &str) -> Option<(&'a [u8], DataPlace)> {
        if let Some(r) = self.named.get(key) {
            return Some((self.file.get(r.clone())?, DataPlace::File));
        }
        self.sources.iter().enumerate().find_map(|(i, s)| {
            let e = s.entry(key)?;
            let place =
                DataPlace::Source { source: u32::try_from(i).ok()?, range: e.range.clone() };
            Some((s.bytes().get(e.range.clone())?, place))
        })
    }
}

impl NamedDataMap for ProgramData<'_> {
    fn get(&self, key: &str) -> Option<&[u8]> {
        self.locate(key).map(|(b, _)| b)
    }
}
