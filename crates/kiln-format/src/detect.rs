//! Recognising a file's kind from its first bytes, for `kiln inspect` and every command that
//! takes "any supported file".

use serde::Serialize;

use crate::error::{Error, Result};

/// The artifact kinds kiln knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// ExecuTorch program (`ET12` identifier at bytes 4..8).
    Pte,
    /// ExecuTorch external data, FlatTensor (`FT01` identifier at bytes 4..8).
    Ptd,
    /// IREE parameter archive (`IRPA` magic at byte 0).
    Irpa,
    /// safetensors (u64 header length, then a JSON object).
    Safetensors,
    /// GGUF (`GGUF` magic at byte 0).
    Gguf,
    /// TensorFlow Lite flatbuffer (`TFL3` identifier) without an Edge TPU custom op.
    Tflite,
    /// Edge TPU: a TensorFlow Lite flatbuffer carrying DarwiNN packages, or one bare DarwiNN
    /// package (`DWN1` identifier at bytes 4..8), as `kiln edgetpu extract` and `pack` write.
    Edgetpu,
    /// Samsung ONE Circle model (`CIR0` identifier).
    Circle,
    /// AIE transaction, binary (no magic; header fields consistent with the file size) or its
    /// hex text form (one 32-bit word per line, as mlir-aie's `insts.txt`).
    Txn,
    /// NumPy array (`\x93NUMPY` magic), as `kiln run --out-dir`, `params extract` and
    /// `edgetpu relayout` write.
    Npy,
    /// ExecuTorch ETDump, profiling and debug data (`ED00` identifier at bytes 8..12, after
    /// the size prefix).
    Etdump,
}

impl Kind {
    /// The lower-case name used in `--json` output and messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pte => "pte",
            Kind::Ptd => "ptd",
            Kind::Irpa => "irpa",
            Kind::Safetensors => "safetensors",
            Kind::Gguf => "gguf",
            Kind::Tflite => "tflite",
            Kind::Edgetpu => "edgetpu",
            Kind::Circle => "circle",
            Kind::Txn => "txn",
            Kind::Npy => "npy",
            Kind::Etdump => "etdump",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Recognises `bytes` by magic numbers, or `None` when no known kind matches.
///
/// Detection only looks; it never verifies. A file detected as a kind may still fail that
/// kind's verifier.
pub fn detect(bytes: &[u8]) -> Option<Kind> {
    let ident = bytes.get(4..8);
    if bytes.starts_with(b"IRPA") {
        return Some(Kind::Irpa);
    }
    if bytes.starts_with(b"GGUF") {
        return Some(Kind::Gguf);
    }
    if bytes.starts_with(b"\x93NUMPY") {
        return Some(Kind::Npy);
    }
    match ident {
        Some(b"ET12") => return Some(Kind::Pte),
        Some(b"FT01") => return Some(Kind::Ptd),
        Some(b"CIR0") => return Some(Kind::Circle),
        Some(b"DWN1") => return Some(Kind::Edgetpu),
        #[cfg(feature = "all-formats")]
        Some(b"TFL3") if crate::darwinn::custom_op::has_edgetpu_op(bytes) => {
            return Some(Kind::Edgetpu)
        }
        Some(b"TFL3") => return Some(Kind::Tflite),
        _ => {}
    }
    #[cfg(feature = "all-formats")]
    if bytes.get(8..12) == Some(crate::etdump::IDENTIFIER.as_slice()) {
        return Some(Kind::Etdump);
    }
    if looks_like_safetensors(bytes) {
        return Some(Kind::Safetensors);
    }
    #[cfg(feature = "all-formats")]
    if crate::txn::is_hex_text(bytes) {
        return Some(Kind::Txn);
    }
    if looks_like_txn(bytes) {
        return Some(Kind::Txn);
    }
    None
}

/// The kind of `bytes`, or an [`Error::Unrecognised`] saying what they look like and showing
/// the first of them.
pub fn kind_of(bytes: &[u8]) -> Result<Kind> {
    detect(bytes).ok_or_else(|| Error::Unrecognised {
        reason: unrecognised(bytes),
        first_bytes: first_bytes(bytes),
    })
}

/// Up to 8 bytes from the start, in hex (`<empty file>` for none).
fn first_bytes(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "<empty file>".to_string();
    }
    let hex: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
    hex.join(" ")
}

/// What the file is, in words, when kiln can say: "a gguf file" for a kind kiln reads, or a
/// [`foreign`] name.
pub fn describe(bytes: &[u8]) -> Option<String> {
    match detect(bytes) {
        Some(kind) => {
            let article =
                if kind.name().starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
            Some(format!("{article} {kind} file"))
        }
        None => foreign(bytes).map(str::to_string),
    }
}

/// What to say of bytes [`detect`] does not recognise: the kind of file when kiln can name it
/// (see [`foreign`]), else that kiln does not recognise it.
pub fn unrecognised(bytes: &[u8]) -> String {
    match foreign(bytes) {
        Some(name) => format!("{name}, which kiln does not read"),
        None => "not a file kiln recognises".to_string(),
    }
}

/// Names a file of a kind kiln does not read: PyTorch zips (PyTorch Mobile programs,
/// TorchScript archives, `torch.save` checkpoints) and ONNX models. Only looks at the first
/// bytes and, for zips, at the last MiB (where the central directory lists every member).
pub fn foreign(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"PK\x03\x04") {
        let tail = &bytes[bytes.len().saturating_sub(1 << 20)..];
        let has = |needle: &[u8]| tail.windows(needle.len()).any(|w| w == needle);
        return Some(if has(b"/bytecode.pkl") {
            "a PyTorch Mobile (lite interpreter) program, not an ExecuTorch one"
        } else if has(b"/code/") {
            "a TorchScript archive (torch.jit.save)"
        } else if has(b"/data.pkl") {
            "a PyTorch checkpoint (torch.save)"
        } else {
            "a zip archive"
        });
    }
    looks_like_onnx(bytes).then_some("an ONNX model (protobuf)")
}

/// ONNX `ModelProto`: field 1 (`ir_version`, a small varint) first, then one of the model's
/// other fields (producer name or version, domain, model version, doc string, graph, opsets).
fn looks_like_onnx(bytes: &[u8]) -> bool {
    matches!(bytes, [0x08, 1..=15, 0x12 | 0x1a | 0x22 | 0x28 | 0x32 | 0x3a | 0x42, ..])
}

/// safetensors: a u64 header length that fits the file, then `{`.
fn looks_like_safetensors(bytes: &[u8]) -> bool {
    let Some(len) = bytes.get(0..8) else { return false };
    let len = u64::from_le_bytes(len.try_into().unwrap_or([0; 8]));
    len >= 2 && len.checked_add(8).is_some_and(|end| end <= bytes.len() as u64) && bytes[8] == b'{'
}

/// AIE transaction binary: a 16-byte header whose version is 0.1 or 1.0 and whose `TxnSize`
/// (bytes 12..16, header included) equals the file size.
fn looks_like_txn(bytes: &[u8]) -> bool {
    if bytes.len() < 16 {
        return false;
    }
    let version_ok = matches!((bytes[0], bytes[1]), (0, 1) | (1, 0));
    let txn_size = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    version_ok && txn_size as usize == bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_by_magic() {
        assert_eq!(detect(b"\x1c\0\0\0ET12eh00........"), Some(Kind::Pte));
        assert_eq!(detect(b"\x1c\0\0\0FT01FH01"), Some(Kind::Ptd));
        assert_eq!(detect(b"IRPA\0\0\0\0"), Some(Kind::Irpa));
        assert_eq!(detect(b"GGUF\x03\0\0\0"), Some(Kind::Gguf));
        assert_eq!(detect(b"\x93NUMPY\x01\0"), Some(Kind::Npy));
        assert_eq!(detect(b"\x9c\x08\0\0\x0c\0\0\0ED00"), Some(Kind::Etdump));
        assert_eq!(detect(b"\x1c\0\0\0CIR0"), Some(Kind::Circle));
        assert_eq!(detect(b"\x1c\0\0\0TFL3"), Some(Kind::Tflite));
        assert_eq!(detect(b"\x02\0\0\0\0\0\0\0{}"), Some(Kind::Safetensors));
        assert_eq!(detect(b"nothing we know"), None);
        assert_eq!(detect(b""), None);
    }

    #[test]
    fn names_files_it_does_not_read() {
        for (file, name) in [
            ("foreign/pytorch_mobile.pte", "PyTorch Mobile"),
            ("foreign/torchscript.pt", "TorchScript"),
            ("foreign/sigmoid.onnx", "ONNX"),
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../tests/fixtures")
                .join(file);
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(detect(&bytes), None, "{file}");
            assert!(unrecognised(&bytes).contains(name), "{file}: {}", unrecognised(&bytes));
        }
        assert_eq!(unrecognised(b"nothing we know"), "not a file kiln recognises");
        assert_eq!(describe(b"GGUF\x03\0\0\0").as_deref(), Some("a gguf file"));
        assert_eq!(describe(b"IRPA\0\0\0\0").as_deref(), Some("an irpa file"));
        assert_eq!(describe(b"nothing we know"), None);
    }

    #[test]
    fn detects_bare_darwinn_packages_and_txn_text() {
        assert_eq!(detect(b"\x0c\0\0\0DWN1\0\0\0\0"), Some(Kind::Edgetpu));
        assert_eq!(detect(b"06040100\n00000000\n00000000\n00000010\n"), Some(Kind::Txn));
    }

    #[test]
    fn detects_txn_by_consistent_header() {
        let mut txn = vec![0u8, 1, 4, 6, 4, 1, 0, 0, 0, 0, 0, 0];
        txn.extend_from_slice(&16u32.to_le_bytes());
        assert_eq!(detect(&txn), Some(Kind::Txn));
        txn[12] = 20;
        assert_eq!(detect(&txn), None);
    }
}
