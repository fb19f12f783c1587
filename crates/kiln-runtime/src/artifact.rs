//! Any file kiln reads, as `kiln inspect` and `kiln verify` (and the Python package's
//! `kiln.inspect` and `kiln.verify`) take it: mapped, its kind detected from its first bytes,
//! then summarised ([`kiln_format::summary`]).

use std::path::Path;

use kiln_format::summary::Summary;
use kiln_format::Kind;

use crate::error::{Error, Result};
use crate::mapped::MappedFile;

/// A mapped file of a kind kiln reads.
#[derive(Debug)]
pub struct Artifact {
    /// The bytes.
    pub file: MappedFile,
    /// What its first bytes say it is.
    pub kind: Kind,
}

/// Maps the file at `path` and detects its kind; a file of no kind kiln reads is an error
/// naming it, saying what it looks like and showing its first bytes.
pub fn open(path: &Path) -> Result<Artifact> {
    Artifact::detect(MappedFile::open(path)?, path)
}

impl Artifact {
    /// `file` with its kind detected; `name` is the file as messages call it (the path as
    /// given, `-` where `file` is standard input).
    pub fn detect(file: MappedFile, name: &Path) -> Result<Self> {
        let kind = kiln_format::detect::kind_of(file.bytes())
            .map_err(|source| Error::Format { path: name.display().to_string(), source })?;
        Ok(Artifact { file, kind })
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        self.file.bytes()
    }

    /// The file's summary: the document `kiln inspect --json` prints.
    pub fn summary(&self) -> kiln_format::Result<Summary> {
        kiln_format::summary::summarize(self.file.path(), self.bytes(), self.kind)
    }
}
