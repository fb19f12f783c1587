//! The summary of a file of any kind kiln reads: the document `kiln inspect --json` prints
//! (and the Python package's `kiln.inspect` returns), from each format's own `summary`.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::detect::Kind;
use crate::error::Result;
use crate::irpa::{Archive, ParamFile};
use crate::{circle, darwinn, etdump, gguf, irpa, npy, ptd, pte, safetensors, tflite, txn};

/// What [`summarize`] gives, by format; it serializes as the format's own summary.
#[derive(Serialize)]
#[serde(untagged)]
pub enum Summary {
    /// An ExecuTorch program ([`pte::summary`]).
    Pte(pte::summary::Summary),
    /// ExecuTorch external data ([`ptd::summary`]).
    Ptd(Value),
    /// An Edge TPU model or bare DarwiNN package ([`darwinn::summary`]).
    Edgetpu(darwinn::summary::Summary),
    /// An IREE archive, safetensors or GGUF file ([`irpa::summary`]).
    Params(irpa::summary::Summary),
    /// A Circle model ([`circle::summary`]).
    Circle(Value),
    /// An AIE transaction ([`txn::summary`]).
    Txn(Value),
    /// A plain TFLite model ([`tflite::summary`]).
    Tflite(tflite::summary::Summary),
    /// A NumPy array ([`npy::summary`]).
    Npy(Value),
    /// An ETDump ([`etdump::summary`]).
    Etdump(Value),
}

/// Opens `bytes`, a file of `kind` that messages call `file`, and summarises it. Where the
/// file does not open, the error starts with `file`.
pub fn summarize(file: &Path, bytes: &[u8], kind: Kind) -> Result<Summary> {
    let in_file = |e: crate::Error| e.in_file(file);
    Ok(match kind {
        Kind::Pte => {
            let program = pte::Program::open(bytes).map_err(in_file)?;
            Summary::Pte(pte::summary::summarize(&program)?)
        }
        Kind::Ptd => {
            let flat = ptd::FlatTensor::open(bytes).map_err(in_file)?;
            Summary::Ptd(ptd::summary::summarize(&flat, bytes.len())?)
        }
        Kind::Edgetpu => {
            let (_, found) = darwinn::found::open(file, bytes)?;
            Summary::Edgetpu(darwinn::summary::summarize(&found))
        }
        Kind::Irpa | Kind::Safetensors | Kind::Gguf => {
            let parsed = match kind {
                Kind::Irpa => ParamFile::Irpa(Archive::parse(bytes).map_err(in_file)?),
                Kind::Safetensors => {
                    ParamFile::Safetensors(safetensors::SafeTensors::parse(bytes).map_err(in_file)?)
                }
                _ => ParamFile::Gguf(gguf::Gguf::parse(bytes).map_err(in_file)?),
            };
            Summary::Params(irpa::summary::summarize(file, kind, bytes.len(), &parsed)?)
        }
        Kind::Circle => {
            let model = circle::CircleModel::parse(bytes).map_err(in_file)?;
            Summary::Circle(circle::summary::summarize(&model, false).map_err(in_file)?)
        }
        Kind::Txn => {
            let binary = txn::binary_of(bytes).map_err(in_file)?;
            let parsed = txn::Txn::parse(&binary).map_err(in_file)?;
            Summary::Txn(txn::summary::summarize(&parsed, false)?)
        }
        Kind::Tflite => Summary::Tflite(tflite::summary::summarize(bytes).map_err(in_file)?),
        Kind::Npy => {
            Summary::Npy(npy::summary::summarize(&npy::Npy::parse(bytes).map_err(in_file)?))
        }
        Kind::Etdump => {
            let dump = etdump::ETDump::parse(bytes).map_err(in_file)?;
            Summary::Etdump(etdump::summary::summarize(&dump))
        }
    })
}
