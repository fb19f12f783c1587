//! Crash-safe output: every file kiln writes goes to a temporary file in the destination's
//! folder and is renamed over the destination only once it is complete.
//!
//! Only regular files are ever replaced. A destination that exists as anything else (a FIFO,
//! a device, a socket, a folder) is refused and left as it is; a symbolic link is written
//! through: the file it points at is replaced and the link is kept.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// How many symbolic links [`write_atomic`] follows before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;

/// Writes `path` atomically: `write` fills a buffered temporary file next to the destination,
/// which is flushed, synced and renamed over it. The destination is `path` itself or, when
/// `path` is a symbolic link, the file the links lead to. An existing destination that is not a
/// regular file is an error before anything is written. On any error the temporary file is
/// removed and the destination is left as it was.
pub fn write_atomic<F>(path: &Path, write: F) -> Result<()>
where
    F: FnOnce(&mut BufWriter<File>) -> Result<()>,
{
    let path = &destination(path)?;
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

/// The file that writing `path` replaces: `path` with its symbolic links followed. Fails when
/// that file exists and is not a regular file, or when the links loop.
fn destination(path: &Path) -> Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..=MAX_LINKS {
        let meta = match fs::symlink_metadata(&current) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(current),
            Err(e) => return Err(Error::io(&current, e)),
        };
        let kind = meta.file_type();
        if kind.is_file() {
            return Ok(current);
        }
        if !kind.is_symlink() {
            let what = if kind.is_dir() { "a directory" } else { special_kind(&kind) };
            let reason = format!("is {what}, not a regular file; kiln only replaces regular files");
            return Err(Error::io(&current, io::Error::new(io::ErrorKind::InvalidInput, reason)));
        }
        let target = fs::read_link(&current).map_err(|e| Error::io(&current, e))?;
        current = match current.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    let reason = format!("more than {MAX_LINKS} symbolic links to follow");
    Err(Error::io(path, io::Error::new(io::ErrorKind::InvalidInput, reason)))
}

/// Names a file type that is neither a regular file, a folder nor a link.
#[cfg(unix)]
fn special_kind(kind: &fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

/// Names a file type that is neither a regular file, a folder nor a link.
#[cfg(not(unix))]
fn special_kind(_: &fs::FileType) -> &'static str {
    "a special file"
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

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-io-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[cfg(unix)]
    #[test]
    fn writes_through_symbolic_links() {
        let dir = scratch("link");
        fs::create_dir_all(dir.join("real")).unwrap();
        let target = dir.join("real/data.bin");
        fs::write(&target, b"old").unwrap();
        // A relative link to a relative link.
        std::os::unix::fs::symlink("real/data.bin", dir.join("one")).unwrap();
        std::os::unix::fs::symlink("one", dir.join("two")).unwrap();
        write_bytes_atomic(&dir.join("two"), b"new").unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"new");
        assert!(fs::symlink_metadata(dir.join("two")).unwrap().file_type().is_symlink());
        assert!(fs::symlink_metadata(dir.join("one")).unwrap().file_type().is_symlink());
        // A dangling link creates its target.
        std::os::unix::fs::symlink("real/fresh.bin", dir.join("dangling")).unwrap();
        write_bytes_atomic(&dir.join("dangling"), b"made").unwrap();
        assert_eq!(fs::read(dir.join("real/fresh.bin")).unwrap(), b"made");
        // A loop is an error, not a hang.
        std::os::unix::fs::symlink("loop_b", dir.join("loop_a")).unwrap();
        std::os::unix::fs::symlink("loop_a", dir.join("loop_b")).unwrap();
        let err = write_bytes_atomic(&dir.join("loop_a"), b"x").unwrap_err();
        assert!(err.to_string().contains("symbolic links"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_a_directory_and_leaves_it() {
        let dir = scratch("dir");
        let sub = dir.join("sub");
        fs::create_dir_all(&sub).unwrap();
        let err = write_bytes_atomic(&sub, b"x").unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
        assert!(sub.is_dir());
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1, "nothing else was written");
        fs::remove_dir_all(&dir).unwrap();
    }
}
