//! [`ParamFile`]: a file of any kind kiln takes parameters from (an archive, safetensors, GGUF,
//! an ExecuTorch `.ptd` or `.pte`), parsed, as one [`ParamSource`].

use super::reader::Archive;
use super::source::ParamSource;
use crate::error::Result;

/// A parsed file of any kind kiln takes parameters from, borrowing its bytes.
pub enum ParamFile<'a> {
    /// An IREE parameter archive.
    Irpa(Archive<'a>),
    /// A safetensors file.
    Safetensors(crate::safetensors::SafeTensors<'a>),
    /// A GGUF file.
    Gguf(crate::gguf::Gguf<'a>),
    /// An ExecuTorch `.ptd` (named tensors).
    Ptd(crate::ptd::FlatTensor<'a>),
    /// An ExecuTorch `.pte` (named data and named constants).
    Pte(crate::pte::Program<'a>),
}

impl<'a> ParamFile<'a> {
    /// Parses `bytes` as a file of `kind`; `None` when files of that kind hold no parameters
    /// (only irpa, safetensors, gguf, ptd and pte do).
    pub fn parse(kind: crate::Kind, bytes: &'a [u8]) -> Result<Option<Self>> {
        use crate::Kind;
        Ok(Some(match kind {
            Kind::Irpa => ParamFile::Irpa(Archive::parse(bytes)?),
            Kind::Safetensors => {
                ParamFile::Safetensors(crate::safetensors::SafeTensors::parse(bytes)?)
            }
            Kind::Gguf => ParamFile::Gguf(crate::gguf::Gguf::parse(bytes)?),
            Kind::Ptd => ParamFile::Ptd(crate::ptd::FlatTensor::open(bytes)?),
            Kind::Pte => ParamFile::Pte(crate::pte::Program::open(bytes)?),
            _ => return Ok(None),
        }))
    }

    /// The file as a parameter source.
    pub fn source(&self) -> &dyn ParamSource {
        match self {
            ParamFile::Irpa(a) => a,
            ParamFile::Safetensors(s) => s,
            ParamFile::Gguf(g) => g,
            ParamFile::Ptd(f) => f,
            ParamFile::Pte(p) => p,
        }
    }
}
