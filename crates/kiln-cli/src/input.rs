//! Opening input files: memory-mapped, kind detected ([`kiln_runtime::artifact`]). The argument
//! `-` stands for standard input; streams (a pipe, a FIFO) are read into memory, a folder is an
//! error that says so (see [`MappedFile::open`]).

use std::path::Path;

use anyhow::{bail, Result};
use kiln_format::Kind;
use kiln_runtime::MappedFile;

/// An input file, mapped, with its detected kind.
pub use kiln_runtime::Artifact as Input;

/// Maps `path` (`-`: standard input) and detects its kind; an unknown kind is an error naming
/// the file as given.
pub fn open(path: &Path) -> kiln_runtime::Result<Input> {
    Input::detect(MappedFile::open(resolve(path))?, path)
}

/// Fails unless `input` is of `kind`.
pub fn expect(input: &Input, kind: Kind) -> Result<()> {
    if input.kind != kind {
        bail!("{}: expected a {kind} file, found {}", input.file.path().display(), input.kind);
    }
    Ok(())
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
