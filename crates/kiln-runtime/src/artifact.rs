//! Any file kiln reads, as `kiln inspect` and `kiln verify` (and the Python package's
//! `kiln.inspect` and `kiln.verify`) take it: mapped, its kind detected from its first bytes,
//! then summarised ([`kiln_format::summary`]) or verified ([`kiln_format::verdict`]).

use std::path::Path;

use kiln_format::summary::Summary;
use kiln_format::verdict::Verdict;
use kiln_format::Kind;

use crate::error::{message_chain, Error, Result};
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

/// Verifies the file at `path` as `kiln verify [--strict]` does: every failure, opening it
/// included, becomes the verdict's one-line error.
pub fn verify(path: &Path, strict: bool) -> Verdict {
    verdict(path, open(path), strict)
}

/// The verdict on the file `name`, `opened` (or not) from it: why it could not be opened or
/// recognised, or what [`Artifact::check`] finds.
pub fn verdict(name: &Path, opened: Result<Artifact>, strict: bool) -> Verdict {
    match opened {
        Ok(artifact) => Verdict::new(name, Some(artifact.kind), artifact.check(strict)),
        Err(err) => Verdict::new(name, None, Err(message_chain(&err))),
    }
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

    /// Why the file is not valid (`strict`: or valid but suspect), as `kiln verify` says it;
    /// `Ok` when it passes.
    pub fn check(&self, strict: bool) -> std::result::Result<(), String> {
        kiln_format::verdict::check(self.file.path(), self.bytes(), self.kind, strict)
    }
}
