//! Opening input files: memory-mapped, kind detected.

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
        let file = MappedFile::open(path)?;
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

fn hex_prefix(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "<empty file>".to_string();
    }
    bytes.iter().take(8).map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ")
}
