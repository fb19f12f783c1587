//! NumPy `.npy` files: reading the header of versions 1.0, 2.0 and 3.0 and writing version 1.0
//! headers exactly as NumPy does (`{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }`,
//! padded with spaces and a newline so the data starts at a multiple of 64).
//!
//! Only simple dtypes are read (a `descr` string such as `<f4`, `|u1`, `<c16`, `|V2`), not
//! structured dtypes. Big-endian data is refused rather than silently byte-swapped.
//! [`summary`] is what `kiln inspect` shows of a file.

pub mod summary;

use crate::bytes::ByteReader;
use crate::error::{Error, Result};

/// The format name used in errors.
pub const FORMAT: &str = "npy";
const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// Longest header kiln reads (NumPy itself refuses headers over 10,000 bytes by default).
const MAX_HEADER: u64 = 1 << 20;

/// A parsed `.npy` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Npy<'a> {
    /// The dtype string, e.g. `<f4`.
    pub descr: String,
    /// Whether the data is in Fortran (column-major) order.
    pub fortran_order: bool,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Offset of the data in the file.
    pub data_offset: u64,
    /// The array bytes (exactly elements x item size).
    pub data: &'a [u8],
}

impl<'a> Npy<'a> {
    /// Parses a `.npy` file.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let r = ByteReader::new(bytes, FORMAT);
        let magic = r.array::<6>(0, "magic")?;
        if &magic != MAGIC {
            return Err(Error::BadMagic {
                format: FORMAT,
                offset: 0,
                expected: "\\x93NUMPY".into(),
                found: format!("{magic:02x?}"),
            });
        }
        let major = r.u8(6, "version.major")?;
        let (header_len, start) = match major {
            1 => (u64::from(r.u16(8, "header_len")?), 10),
            2 | 3 => (u64::from(r.u32(8, "header_len")?), 12),
            v => {
                return Err(Error::unsupported(
                    FORMAT,
                    "version",
                    Some(6),
                    format!("version {v}.x"),
                ))
            }
        };
        if header_len > MAX_HEADER {
            return Err(Error::Limit {
                format: FORMAT,
                what: "header length".into(),
                value: header_len,
                limit: MAX_HEADER,
            });
        }
        let text = r.slice(start, header_len, "header")?;
        let text = std::str::from_utf8(text)
            .map_err(|_| Error::invalid(FORMAT, "header", Some(start), "not UTF-8 text"))?;
        let dict =
            parse_dict(text).map_err(|why| Error::invalid(FORMAT, "header", Some(start), why))?;
        let data_offset = start + header_len;
        let item = item_size(&dict.descr).ok_or_else(|| {
            Error::unsupported(
                FORMAT,
                "header.descr",
                Some(start),
                format!("dtype {:?}", dict.descr),
            )
        })?;
        if dict.descr.starts_with('>') && item > 1 {
            return Err(Error::unsupported(FORMAT, "header.descr", Some(start), "big-endian data"));
        }
        let len =
            dict.shape.iter().try_fold(item, |acc, &d| acc.checked_mul(d)).ok_or_else(|| {
                Error::invalid(FORMAT, "header.shape", Some(start), "size overflows 64 bits")
            })?;
        let data = r.slice(data_offset, len, "data")?;
        Ok(Npy {
            descr: dict.descr,
            fortran_order: dict.fortran_order,
            shape: dict.shape,
            data_offset,
            data,
        })
    }
}

struct Dict {
    descr: String,
    fortran_order: bool,
    shape: Vec<u64>,
}

/// Parses the Python dict literal NumPy writes (keys in any order).
fn parse_dict(text: &str) -> Result<Dict, String> {
    let mut p = Lexer { s: text.as_bytes(), i: 0 };
    p.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        p.ws();
        if p.eat(b'}') {
            break;
        }
        let key = p.string()?;
        p.ws();
        p.expect(b':')?;
        p.ws();
        match key.as_str() {
            "descr" => descr = Some(p.string()?),
            "fortran_order" => fortran = Some(p.boolean()?),
            "shape" => shape = Some(p.tuple()?),
            other => return Err(format!("unexpected key {other:?}")),
        }
        p.ws();
        if !p.eat(b',') {
            p.ws();
            p.expect(b'}')?;
            break;
        }
    }
    Ok(Dict {
        descr: descr.ok_or("no 'descr'")?,
        fortran_order: fortran.ok_or("no 'fortran_order'")?,
        shape: shape.ok_or("no 'shape'")?,
    })
}

struct Lexer<'s> {
    s: &'s [u8],
    i: usize,
}

impl Lexer<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> bool {
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(format!("expected '{}' at header byte {}", c as char, self.i))
        }
    }
    fn string(&mut self) -> Result<String, String> {
        let quote = match self.s.get(self.i) {
            Some(&q @ (b'\'' | b'"')) => q,
            _ => return Err(format!("expected a string at header byte {}", self.i)),
        };
        self.i += 1;
        let start = self.i;
        while self.s.get(self.i).is_some_and(|&c| c != quote) {
            self.i += 1;
        }
        let text = self.s.get(start..self.i).ok_or("unterminated string")?;
        self.expect(quote)?;
        Ok(String::from_utf8_lossy(text).into_owned())
    }
    fn boolean(&mut self) -> Result<bool, String> {
        for (word, value) in [(&b"True"[..], true), (&b"False"[..], false)] {
            if self.s.get(self.i..self.i + word.len()) == Some(word) {
                self.i += word.len();
                return Ok(value);
            }
        }
        Err(format!("expected True or False at header byte {}", self.i))
    }
    fn tuple(&mut self) -> Result<Vec<u64>, String> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            self.ws();
            if self.eat(b')') {
                return Ok(dims);
            }
            let start = self.i;
            while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                self.i += 1;
            }
            let digits = self.s.get(start..self.i).and_then(|d| std::str::from_utf8(d).ok());
            let d: u64 = digits
                .and_then(|d| d.parse().ok())
                .ok_or_else(|| format!("bad dimension at header byte {start}"))?;
            // Python 2 wrote long integers with an `L` suffix.
            self.eat(b'L');
            dims.push(d);
            self.ws();
            if !self.eat(b',') {
                self.ws();
                self.expect(b')')?;
                return Ok(dims);
            }
        }
    }
}

/// Item size in bytes of a simple `descr` (`<f4` -> 4), or `None` when kiln does not read it.
pub fn item_size(descr: &str) -> Option<u64> {
    let rest = descr.strip_prefix(['<', '>', '|', '='])?;
    let mut chars = rest.chars();
    let kind = chars.next()?;
    let size: u64 = chars.as_str().parse().ok()?;
    match kind {
        'b' | 'i' | 'u' | 'f' | 'c' | 'V' | 'S' if size > 0 => Some(size),
        _ => None,
    }
}

/// The `.npy` (version 1.0) header for an array of `descr` and `shape` in C order, exactly as
/// NumPy writes it.
pub fn header(descr: &str, shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [] => "()".to_string(),
        [d] => format!("({d},)"),
        _ => format!("({})", shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    // NumPy pads with spaces so that magic + version + length + dict + '\n' is a multiple of 64.
    let total = 10 + dict.len() + 1;
    let padded = total.div_ceil(64) * 64;
    dict.push_str(&" ".repeat(padded - total));
    dict.push('\n');
    let mut out = Vec::with_capacity(padded);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out
}

/// Writes a whole `.npy` file: the header for `descr` and `shape`, then `data`, which must hold
/// exactly elements x item size bytes in C order.
pub fn write<W: std::io::Write>(
    out: &mut W,
    descr: &str,
    shape: &[u64],
    data: &[u8],
) -> Result<()> {
    let item = item_size(descr)
        .ok_or_else(|| Error::unsupported(FORMAT, "descr", None, format!("dtype {descr:?}")))?;
    let expected = shape.iter().try_fold(item, |acc, &d| acc.checked_mul(d));
    if expected != Some(data.len() as u64) {
        return Err(Error::invalid(
            FORMAT,
            "data",
            None,
            format!("{} bytes do not hold {shape:?} x {descr}", data.len()),
        ));
    }
    let io = |e| Error::io("<npy output>", e);
    out.write_all(&header(descr, shape)).map_err(io)?;
    out.write_all(data).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_sizes() {
        for shape in [vec![], vec![3], vec![2, 3, 4]] {
            let mut file = header("<f4", &shape);
            assert_eq!(file.len() % 64, 0);
            let n: u64 = shape.iter().product();
            file.extend(std::iter::repeat_n(0u8, (n * 4) as usize));
            let npy = Npy::parse(&file).unwrap();
            assert_eq!(
                (npy.descr.as_str(), npy.shape.clone(), npy.fortran_order),
                ("<f4", shape, false)
            );
            assert_eq!(npy.data.len() as u64, n * 4);
        }
    }

    #[test]
    fn write_checks_length_and_round_trips() {
        let mut out = Vec::new();
        write(&mut out, "<i2", &[2, 2], &[1, 0, 2, 0, 3, 0, 4, 0]).unwrap();
        let npy = Npy::parse(&out).unwrap();
        assert_eq!(
            (npy.shape.as_slice(), npy.data),
            (&[2u64, 2][..], &[1u8, 0, 2, 0, 3, 0, 4, 0][..])
        );
        assert!(write(&mut Vec::new(), "<i2", &[3], &[0; 4]).is_err());
        assert!(write(&mut Vec::new(), "O", &[1], &[0; 8]).is_err());
    }

    #[test]
    fn rejects_bad_headers() {
        assert!(Npy::parse(b"\x93NUMPY\x01\x00\x05\x00{'a'}").is_err());
        let mut file = header(">f4", &[1]);
        file.extend([0; 4]);
        assert!(Npy::parse(&file).is_err());
        let mut file = header("<f4", &[u64::MAX, 2]);
        file.extend([0; 4]);
        assert!(Npy::parse(&file).is_err());
        assert_eq!(item_size("<c16"), Some(16));
        assert_eq!(item_size("O"), None);
    }
}
