//! The text form of a transaction used by mlir-aie (`insts.txt`): one 32-bit little-endian word
//! per line, as 8 hexadecimal digits.

use super::FORMAT;
use crate::error::{Error, Result};

/// Parses the hex-word text form into the transaction's bytes (each word little-endian).
///
/// Accepts an optional `0x` prefix and surrounding whitespace; blank lines are skipped. Any
/// other line is an error naming its line number.
pub fn from_hex_text(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 2);
    for (i, line) in text.lines().enumerate() {
        let word = line.trim();
        if word.is_empty() {
            continue;
        }
        let digits = word.strip_prefix("0x").or_else(|| word.strip_prefix("0X")).unwrap_or(word);
        let value = if digits.len() <= 8 && !digits.is_empty() {
            u32::from_str_radix(digits, 16).ok()
        } else {
            None
        };
        let value = value.ok_or_else(|| {
            Error::invalid(
                FORMAT,
                format!("line {}", i + 1),
                None,
                format!("{word:?} is not a 32-bit hexadecimal word"),
            )
        })?;
        out.extend_from_slice(&value.to_le_bytes());
    }
    Ok(out)
}

/// Formats `bytes` (a whole number of little-endian words) as one upper-case 8-digit hex word
/// per line, the form mlir-aie writes.
pub fn to_hex_text(bytes: &[u8]) -> Result<String> {
    if !bytes.len().is_multiple_of(4) {
        return Err(Error::invalid(
            FORMAT,
            "txn_size",
            None,
            format!("{} bytes is not a whole number of 32-bit words", bytes.len()),
        ));
    }
    let mut out = String::with_capacity(bytes.len() / 4 * 9);
    for w in bytes.chunks_exact(4) {
        let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        out.push_str(&format!("{v:08X}\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_and_bad_lines_are_named() {
        let bytes = from_hex_text("06030100\n0x00000105\n\n  0000ABCD \n").unwrap();
        assert_eq!(bytes, [0, 1, 3, 6, 5, 1, 0, 0, 0xcd, 0xab, 0, 0]);
        assert_eq!(to_hex_text(&bytes).unwrap(), "06030100\n00000105\n0000ABCD\n");
        let err = from_hex_text("00000000\nzz\n").unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(from_hex_text("123456789").is_err());
        assert!(to_hex_text(&[1, 2, 3]).is_err());
    }
}
