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

/// True when `bytes` is the text form of a transaction: only hex words, one per line, whose
/// first four words are a header with version 0.1 or 1.0 and a `TxnSize` equal to the number
/// of words times four. Stops at the first byte that cannot belong to the text form and
/// allocates nothing.
pub fn is_hex_text(bytes: &[u8]) -> bool {
    let blank = |b: u8| b != b'\n' && b.is_ascii_whitespace();
    let mut header = [0u32; 4];
    let mut words = 0u64;
    let mut at = 0;
    while at < bytes.len() {
        // One line: blanks, a word (`0x` and 1 to 8 hex digits), blanks; or a blank line.
        while bytes.get(at).is_some_and(|&b| blank(b)) {
            at += 1;
        }
        match bytes.get(at) {
            None => break,
            Some(b'\n') => {
                at += 1;
                continue;
            }
            Some(_) => {}
        }
        if matches!(bytes.get(at..at + 2), Some(b"0x" | b"0X")) {
            at += 2;
        }
        let digits = at;
        let mut value = 0u32;
        while let Some(&d) = bytes.get(at).filter(|d| d.is_ascii_hexdigit()) {
            if at - digits == 8 {
                return false;
            }
            value = (value << 4) | hex_value(d);
            at += 1;
        }
        if at == digits {
            return false;
        }
        while bytes.get(at).is_some_and(|&b| blank(b)) {
            at += 1;
        }
        match bytes.get(at) {
            None => {}
            Some(b'\n') => at += 1,
            Some(_) => return false,
        }
        if let Some(slot) = header.get_mut(words as usize) {
            *slot = value;
        }
        words += 1;
    }
    let [version, _, _, txn_size] = header;
    let version_ok = matches!((version & 0xff, (version >> 8) & 0xff), (0, 1) | (1, 0));
    words >= 4 && version_ok && u64::from(txn_size) == words * 4
}

/// The value of an ASCII hex digit (checked by the caller).
fn hex_value(d: u8) -> u32 {
    u32::from(match d {
        b'0'..=b'9' => d - b'0',
        b'a'..=b'f' => d - b'a' + 10,
        _ => d.wrapping_sub(b'A').wrapping_add(10),
    })
}

/// The binary form of a transaction given in either form.
pub fn binary_of(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>> {
    if is_hex_text(bytes) {
        from_hex_text(&String::from_utf8_lossy(bytes)).map(std::borrow::Cow::Owned)
    } else {
        Ok(std::borrow::Cow::Borrowed(bytes))
    }
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

    #[test]
    fn recognises_the_text_form_by_its_header() {
        // Version 0.1 header of four words; TxnSize = 16 bytes.
        let text = "06040100
00000000
00000000
00000010
";
        assert!(is_hex_text(text.as_bytes()));
        assert_eq!(binary_of(text.as_bytes()).unwrap().len(), 16);
        assert!(!is_hex_text(
            b"06040100
00000000
00000000
00000014
"
        ));
        assert!(!is_hex_text(
            b"06040100
00000000
00000000
zz
"
        ));
        assert!(!is_hex_text(b""));
        assert_eq!(binary_of(b"\x00\x01").unwrap().as_ref(), b"\x00\x01");
    }
}
