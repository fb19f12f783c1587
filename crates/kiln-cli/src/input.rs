//! Opening input files: memory-mapped, kind detected. The argument `-` stands for standard
//! input; streams (a pipe, a FIFO) are read into memory, a folder is an error that says so (see
//! [`MappedFile::open`]).

use std::path::Path;

use anyhow::{bail, Context, Result};
use kiln_format::Kind;
use kiln_runtime::MappedFile;

/// An input file, mapped, with its detected kind.
pub struct Input {
    /// The mapped bytes.
    pub file: MappedFile,
    /// What the magic bytes say it is.
    pub kind: Kind,
}

impl Input {
    /// Maps `path` and detects its kind; an unknown kind is an error naming the file.
    pub fn open(path: &Path) -> Result<Self> {
        let file = read(path)?;
        let kind = kiln_format::detect(file.bytes()).with_context(|| {
            format!(
                "{}: {} (first bytes {})",
                path.display(),
                kiln_format::detect::unrecognised(file.bytes()),
                hex_prefix(file.bytes())
            )
        })?;
        Ok(Input { file, kind })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.file.bytes()
    }

    /// Fails unless the file is of `kind`.
    #[allow(dead_code)]
    pub fn expect(&self, kind: Kind) -> Result<()> {
        if self.kind != kind {
            bail!("{}: expected a {kind} file, found {}", self.file.path().display(), self.kind);
        }
        Ok(())
    }
}

/// The path to open for the argument `path`: `-` is standard input.
pub fn resolve(path: &Path) -> &Path {
    if path == Path::new("-") {
        Path::new("/dev/stdin")
    } else {
        path
    }
}

/// The whole of the file `path` (`-` for standard input), mapped or, for a stream, read.
pub fn read(path: &Path) -> Result<MappedFile> {
    Ok(MappedFile::open(resolve(path))?)
}

fn hex_prefix(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "<empty file>".to_string();
    }
    bytes.iter().take(8).map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}
