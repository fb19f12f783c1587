//! The verdict `kiln verify [--strict]` (and the Python package's `kiln.verify`) reaches on a
//! file of any kind kiln reads: the verifier of its kind, with `--strict` the checks for what
//! is valid but suspect, and why a file fails, on one line.

use std::path::Path;

use serde::Serialize;

use crate::detect::Kind;
use crate::{circle, darwinn, etdump, gguf, irpa, npy, ptd, pte, safetensors, tflite, txn};

/// The outcome for one file, as `kiln verify --json` prints it.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The file as given.
    pub file: String,
    /// Its kind, `None` when it could not be read or recognised.
    pub kind: Option<Kind>,
    /// Whether it passed.
    pub ok: bool,
    /// Why not, on one line (`None` when `ok`).
    pub error: Option<String>,
}

impl Verdict {
    /// The verdict on `file`, of `kind` when it was recognised, whose check came to
    /// `outcome`: the reason is folded onto one line ([`one_line`]).
    pub fn new(file: &Path, kind: Option<Kind>, outcome: Result<(), String>) -> Self {
        let error = outcome.err().map(|reason| one_line(&reason));
        Verdict { file: file.display().to_string(), kind, ok: error.is_none(), error }
    }
}

/// Why `bytes`, a file of `kind` that messages call `file`, is not valid (the reason may span
/// lines), or `Ok`: the verifier of its kind and, `strict`, the checks for what is valid but
/// suspect (only programs have any, [`pte::strict`]).
pub fn check(file: &Path, bytes: &[u8], kind: Kind, strict: bool) -> Result<(), String> {
    verify(file, bytes, kind)?;
    if strict && kind == Kind::Pte {
        pte::strict::check(bytes)?;
    }
    Ok(())
}

/// The verifier of each kind.
fn verify(file: &Path, bytes: &[u8], kind: Kind) -> Result<(), String> {
    let checked = match kind {
        // Each format registers its verifier here.
        Kind::Pte => pte::Program::open(bytes).and_then(|p| pte::payloads::verify(&p)),
        Kind::Ptd => ptd::FlatTensor::open(bytes).map(|_| ()),
        Kind::Edgetpu => return darwinn::verdict::check(file, bytes),
        Kind::Irpa => irpa::verify::verify(bytes).map(|_| ()),
        Kind::Safetensors => safetensors::SafeTensors::parse(bytes).map(|_| ()),
        Kind::Gguf => gguf::Gguf::parse(bytes).and_then(|g| g.verify()),
        Kind::Circle => circle::CircleModel::parse(bytes)
            .and_then(|model| circle::origins::read_tables(&model))
            .map(|_| ()),
        Kind::Txn => txn::binary_of(bytes).and_then(|binary| txn::Txn::parse(&binary)).map(|_| ()),
        Kind::Tflite => {
            return tflite::summary::summarize(bytes).map(|_| ()).map_err(|e| e.with_causes())
        }
        Kind::Npy => npy::Npy::parse(bytes).map(|_| ()),
        Kind::Etdump => etdump::ETDump::parse(bytes).map(|_| ()),
    };
    checked.map_err(|e| e.to_string())
}

/// `reason` on one line: its non-empty lines, trimmed, joined by "; ".
pub fn one_line(reason: &str) -> String {
    let lines: Vec<&str> = reason.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join("; ")
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn reasons_fold_onto_one_line() {
        assert_eq!(one_line("a\n  b: c\n\n d\n"), "a; b: c; d");
        assert_eq!(one_line("plain"), "plain");
    }
}
