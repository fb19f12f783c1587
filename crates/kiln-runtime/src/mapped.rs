//! Read-only memory maps of input files.
//!
//! Files are mapped rather than read so that multi-gigabyte archives cost no copy and no
//! memory beyond what is touched. Empty files (which cannot be mapped) are served from an
//! empty slice. Streams (a FIFO, a pipe such as `/dev/stdin`, a character device) cannot be
//! mapped either: they are read into memory up to [`STREAM_LIMIT`] bytes. A folder is an error
//! that says so.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The most bytes read from a stream that cannot be mapped (4 GiB).
pub const STREAM_LIMIT: u64 = 4 << 30;

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

/// A whole file mapped read-only (or, for a stream, read).
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    map: Option<memmap2::Mmap>,
    /// The bytes of a stream, which has no map.
    read: Vec<u8>,
}

impl MappedFile {
    /// Maps `path` read-only; a stream is read to its end instead (at most [`STREAM_LIMIT`]
    /// bytes), and a folder is an error.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, MapError> {
        let path = path.as_ref().to_path_buf();
        let err = |source| MapError { path: path.clone(), source };
        let file = File::open(&path).map_err(err)?;
        let meta = file.metadata().map_err(err)?;
        if meta.is_dir() {
            return Err(err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")));
        }
        if !meta.is_file() {
            let mut read = Vec::new();
            file.take(STREAM_LIMIT + 1).read_to_end(&mut read).map_err(err)?;
            if read.len() as u64 > STREAM_LIMIT {
                let reason = format!(
                    "a stream of more than {STREAM_LIMIT} bytes; save it to a file to map it"
                );
                return Err(err(io::Error::new(io::ErrorKind::FileTooLarge, reason)));
            }
            return Ok(MappedFile { path, map: None, read });
        }
        let map = if meta.len() == 0 {
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
        Ok(MappedFile { path, map, read: Vec::new() })
    }

    /// `bytes` written to an unlinked temporary file (in [`std::env::temp_dir`]) and mapped
    /// read-only, named `name` in messages: bytes whose pages [`Self::release`] can give back
    /// and the page cache serves again, where a heap buffer's would be lost. Costs a write
    /// of the bytes; an error when no temporary file can be made or written.
    pub fn spill(name: &str, bytes: &[u8]) -> Result<Self, MapError> {
        let path = PathBuf::from(name);
        let err = |source| MapError { path: path.clone(), source };
        if bytes.is_empty() {
            return Ok(MappedFile { path, map: None, read: Vec::new() });
        }
        let mut file = tempfile::tempfile().map_err(err)?;
        std::io::Write::write_all(&mut file, bytes).map_err(err)?;
        // SAFETY: as in `open`, a read-only shared mapping of a file nobody changes while it
        // is mapped: the file has no name (it was unlinked at creation, or made without
        // one), this process wrote it before mapping it and holds the only descriptor, which
        // the map outlives without further writes.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(err)?;
        Ok(MappedFile { path, map: Some(map), read: Vec::new() })
    }

    /// The bytes, owned: a stream's moved out, a map's copied.
    pub fn into_bytes(self) -> Vec<u8> {
        match self.map {
            Some(map) => map.to_vec(),
            None => self.read,
        }
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&self.read)
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

    /// [`Self::release`] of the bytes at `range` (nothing where it lies past the end).
    pub fn release_range(&self, range: std::ops::Range<usize>) {
        if let Some(chunk) = self.bytes().get(range) {
            self.release(chunk);
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
        let folder = MappedFile::open(&dir).unwrap_err();
        assert!(folder.to_string().ends_with("is a directory"), "{folder}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn reads_a_fifo_as_a_stream() {
        let dir = std::env::temp_dir().join(format!("kiln-map-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::write(fifo, b"streamed bytes").unwrap())
        };
        assert_eq!(MappedFile::open(&fifo).unwrap().bytes(), b"streamed bytes");
        writer.join().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
