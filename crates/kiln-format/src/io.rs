//! Crash-safe output: every file kiln writes goes to a temporary file in the destination's
//! folder and is renamed over the destination only once it is complete.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Writes `path` atomically: `write` fills a buffered temporary file next to `path`, which is
/// flushed, synced and renamed over `path`. On any error the temporary file is removed and
/// `path` is left as it was.
pub fn write_atomic<F>(path: &Path, write: F) -> Result<()>
where
    F: FnOnce(&mut BufWriter<File>) -> Result<()>,
{
    let tmp = temp_path(path);
    let result = (|| {
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        write(&mut out)?;
        let file = out.into_inner().map_err(|e| Error::io(&tmp, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io(&tmp, e))?;
        fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Where the streaming writers ([`crate::irpa::builder::Plan::write`],
/// [`crate::irpa::edit::Output::write`]) put an output: bytes they make (headers, tables,
/// padding) through [`Sink::write_all`], and payloads borrowed from an input (normally a
/// memory map) through [`Sink::copy`], which a sink that knows the input's file may move
/// inside the kernel (`copy_file_range`) instead of through this process's memory.
pub trait Sink {
    /// Appends bytes the writer made.
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Appends a payload borrowed from an input; by default the same as [`Sink::write_all`].
    fn copy(&mut self, payload: &[u8]) -> std::io::Result<()> {
        self.write_all(payload)
    }
}

/// A [`Sink`] over any [`Write`]r: payloads are written like every other byte.
pub struct WriteSink<W: Write>(pub W);

impl<W: Write> Sink for WriteSink<W> {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.write_all(bytes)
    }
}

/// Writes `bytes` to `path` atomically (see [`write_atomic`]).
pub fn write_bytes_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |w| w.write_all(bytes).map_err(|e| Error::io(path, e)))
}

/// `dir/.name.kiln-tmp.PID` beside `path`, so the final rename stays on one file system.
fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp_name = format!(".{name}.kiln-tmp.{}", std::process::id());
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(tmp_name),
        _ => PathBuf::from(tmp_name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_write_leaves_destination_untouched() {
        let dir = std::env::temp_dir().join(format!("kiln-io-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let dest = dir.join("out.bin");
        write_bytes_atomic(&dest, b"first").unwrap();
        let err = write_atomic(&dest, |w| {
            w.write_all(b"partial").unwrap();
            Err(Error::invalid("test", "x", None, "boom"))
        });
        assert!(err.is_err());
        assert_eq!(fs::read(&dest).unwrap(), b"first");
        let leftovers: Vec<_> = fs::read_dir(&dir).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temporary file must be removed");
        fs::remove_dir_all(&dir).unwrap();
    }
}
