//! Read-only memory maps of input files.
//!
//! Files are mapped rather than read so that multi-gigabyte archives cost no copy and no
//! memory beyond what is touched. Empty files (which cannot be mapped) are served from an
//! empty slice.

use std::fs::File;
use std::path::{Path, PathBuf};

/// Errors from opening a mapped file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct MapError {
    /// The file.
    pub path: PathBuf,
    /// What the OS said.
    #[source]
    pub source: std::io::Error,
}

/// A whole file mapped read-only.
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    map: Option<memmap2::Mmap>,
}

impl MappedFile {
    /// Maps `path` read-only.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MapError> {
        let path = path.as_ref().to_path_buf();
        let err = |source| MapError { path: path.clone(), source };
        let file = File::open(&path).map_err(err)?;
        let len = file.metadata().map_err(err)?.len();
        let map = if len == 0 {
            None
        } else {
            // SAFETY: `Mmap::map` makes a read-only *shared* mapping (MAP_SHARED, PROT_READ):
            // the pages are the page cache's, so a write to the file by anyone shows through
            // the `&[u8]` this type hands out, and a truncation turns reads past the new end
            // into SIGBUS. Soundness therefore rests on nobody changing the file while it is
            // mapped. kiln never does: it never opens an input for writing, and every output
            // is written to a new temporary file that is then renamed over its path, which
            // replaces the directory entry and leaves the mapped inode's contents untouched.
            // Another process writing or truncating the file at the same time is outside what
            // a process can prevent (the same contract as every mmap-based loader, ExecuTorch's
            // MmapDataLoader included).
            Some(unsafe { memmap2::Mmap::map(&file) }.map_err(err)?)
        };
        Ok(MappedFile { path, map })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// Drops the pages of `chunk` (a sub-slice of [`Self::bytes`]; anything else is ignored)
    /// from this process's resident set, so streaming a large file through the map keeps memory
    /// use flat. The bytes stay readable: a later access faults them back in from the page
    /// cache. Failures are ignored (this is only a hint).
    pub fn release(&self, chunk: &[u8]) {
        let Some(map) = &self.map else { return };
        let base = map.as_ptr() as usize;
        let start = chunk.as_ptr() as usize;
        let Some(offset) = start.checked_sub(base) else { return };
        if offset.saturating_add(chunk.len()) > map.len() {
            return;
        }
        const PAGE: usize = 4096;
        // Whole pages inside the chunk only.
        let first = offset.div_ceil(PAGE) * PAGE;
        let last = (offset + chunk.len()) / PAGE * PAGE;
        if last > first {
            // SAFETY: the map is a read-only shared file mapping, so it holds no private copy
            // of any page: MADV_DONTNEED only drops this process's page-table entries, and the
            // next read faults the page back in from the page cache with the file's contents
            // (the same bytes, under the contract stated in `open`). The range lies inside the
            // map, and slices borrowed from it stay valid.
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
            };
        }
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_contents_and_empty_files() {
        let dir = std::env::temp_dir().join(format!("kiln-map-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let full = dir.join("full.bin");
        std::fs::write(&full, b"hello kiln").unwrap();
        assert_eq!(MappedFile::open(&full).unwrap().bytes(), b"hello kiln");
        let empty = dir.join("empty.bin");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(MappedFile::open(&empty).unwrap().bytes(), b"");
        let map = MappedFile::open(&full).unwrap();
        map.release(map.bytes());
        map.release(b"not in the map");
        assert_eq!(map.bytes(), b"hello kiln");
        let missing = MappedFile::open(dir.join("missing.bin")).unwrap_err();
        assert!(missing.to_string().contains("missing.bin"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
