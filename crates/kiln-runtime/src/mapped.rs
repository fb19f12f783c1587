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
            // SAFETY: the map is read-only and private to this process. Another process
            // truncating or rewriting the file while it is mapped is outside what kiln can
            // guard against (the same contract as every mmap-based loader, ExecuTorch's
            // MmapDataLoader included); kiln itself never writes to a file it has mapped:
            // every output goes to a temporary file that is renamed into place.
            Some(unsafe { memmap2::Mmap::map(&file) }.map_err(err)?)
        };
        Ok(MappedFile { path, map })
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
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
        let missing = MappedFile::open(dir.join("missing.bin")).unwrap_err();
        assert!(missing.to_string().contains("missing.bin"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
