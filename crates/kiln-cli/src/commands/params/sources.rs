//! Opening parameter files of any supported format as [`kiln_format::irpa::ParamSource`]s.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kiln_format::irpa::{ParamFile, SourceEntry};

use crate::input::Input;

/// Parses `input` as a parameter file of its detected kind; a kind that holds no parameters
/// is an error naming the file.
pub fn parse(input: &Input) -> Result<ParamFile<'_>> {
    let path = input.file.path();
    match ParamFile::parse(input.kind, input.bytes()).with_context(|| path.display().to_string())? {
        Some(parsed) => Ok(parsed),
        None => bail!(
            "{}: {} files are not a parameter source (irpa, safetensors, gguf, ptd and pte are)",
            path.display(),
            input.kind
        ),
    }
}

/// Opens every path (mapped) in order.
pub fn open_all(paths: &[PathBuf]) -> Result<Vec<Input>> {
    paths.iter().map(|p| Ok(crate::input::open(p)?)).collect()
}

/// Parses every input.
pub fn parse_all(inputs: &[Input]) -> Result<Vec<ParamFile<'_>>> {
    inputs.iter().map(parse).collect()
}

/// Every entry of every source, in input order then file order.
pub fn entries_of<'a>(
    parsed: &'a [ParamFile<'a>],
    paths: &[&Path],
) -> Result<Vec<SourceEntry<'a>>> {
    let mut all = Vec::new();
    for (p, path) in parsed.iter().zip(paths) {
        all.extend(p.source().param_entries().with_context(|| path.display().to_string())?);
    }
    Ok(all)
}
