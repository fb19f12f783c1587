//! Opening parameter files of any supported format as [`ParamSource`]s.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kiln_format::gguf::Gguf;
use kiln_format::irpa::source::ParamSource;
use kiln_format::irpa::{Archive, SourceEntry};
use kiln_format::ptd::FlatTensor;
use kiln_format::pte::Program;
use kiln_format::safetensors::SafeTensors;
use kiln_format::Kind;

use crate::input::Input;

/// A parsed parameter file borrowing its mapped bytes.
pub enum Parsed<'a> {
    /// An IREE parameter archive.
    Irpa(Archive<'a>),
    /// A safetensors file.
    Safetensors(SafeTensors<'a>),
    /// A GGUF file.
    Gguf(Gguf<'a>),
    /// An ExecuTorch `.ptd` (named tensors).
    Ptd(FlatTensor<'a>),
    /// An ExecuTorch `.pte` (named data and named constants).
    Pte(Program<'a>),
}

impl<'a> Parsed<'a> {
    /// Parses `input` by its detected kind.
    pub fn new(input: &'a Input) -> Result<Self> {
        let path = input.file.path();
        let bytes = input.bytes();
        Ok(match input.kind {
            Kind::Irpa => {
                Parsed::Irpa(Archive::parse(bytes).with_context(|| path.display().to_string())?)
            }
            Kind::Safetensors => Parsed::Safetensors(
                SafeTensors::parse(bytes).with_context(|| path.display().to_string())?,
            ),
            Kind::Gguf => {
                Parsed::Gguf(Gguf::parse(bytes).with_context(|| path.display().to_string())?)
            }
            Kind::Ptd => {
                Parsed::Ptd(FlatTensor::open(bytes).with_context(|| path.display().to_string())?)
            }
            Kind::Pte => {
                Parsed::Pte(Program::open(bytes).with_context(|| path.display().to_string())?)
            }
            kind => bail!(
                "{}: {kind} files are not a parameter source (irpa, safetensors, gguf, ptd and \
                 pte are)",
                path.display()
            ),
        })
    }

    /// The file as a parameter source.
    pub fn source(&self) -> &dyn ParamSource {
        match self {
            Parsed::Irpa(a) => a,
            Parsed::Safetensors(s) => s,
            Parsed::Gguf(g) => g,
            Parsed::Ptd(f) => f,
            Parsed::Pte(p) => p,
        }
    }
}

/// Opens every path (mapped) in order.
pub fn open_all(paths: &[PathBuf]) -> Result<Vec<Input>> {
    paths.iter().map(|p| Input::open(p)).collect()
}

/// Parses every input.
pub fn parse_all(inputs: &[Input]) -> Result<Vec<Parsed<'_>>> {
    inputs.iter().map(Parsed::new).collect()
}

/// Every entry of every source, in input order then file order.
pub fn entries_of<'a>(parsed: &'a [Parsed<'a>], paths: &[&Path]) -> Result<Vec<SourceEntry<'a>>> {
    let mut all = Vec::new();
    for (p, path) in parsed.iter().zip(paths) {
        all.extend(p.source().param_entries().with_context(|| path.display().to_string())?);
    }
    Ok(all)
}
