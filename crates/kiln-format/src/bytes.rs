//! Bounds-checked reads of little-endian plain data, in the style of the `object` crate.
//!
//! Every read names the field it is for, so a short or hostile file produces an
//! [`Error::Truncated`] that says what was being read and where.

use crate::error::{Error, Result};

/// A view over bytes that only hands out checked reads.
#[derive(Clone, Copy, Debug)]
pub struct ByteReader<'a> {
    data: &'a [u8],
    format: &'static str,
}

impl<'a> ByteReader<'a> {
    /// Wraps `data`; `format` names the format in errors.
    pub fn new(data: &'a [u8], format: &'static str) -> Self {
        ByteReader { data, format }
    }

    /// The whole underlying data.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Length of the data in bytes.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the data is empty.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The bytes `offset..offset + len`, or a [`Error::Truncated`] naming `field`.
    pub fn slice(&self, offset: u64, len: u64, field: &str) -> Result<&'a [u8]> {
        let truncated = || Error::Truncated {
            format: self.format,
            field: field.to_string(),
            offset,
            end: offset.saturating_add(len),
            len: self.data.len() as u64,
        };
        let end = offset.checked_add(len).ok_or_else(truncated)?;
        if end > self.data.len() as u64 {
            return Err(truncated());
        }
        // Both bounds are <= data.len(), which fits in usize.
        Ok(&self.data[offset as usize..end as usize])
    }

    /// `N` bytes at `offset` as an array.
    pub fn array<const N: usize>(&self, offset: u64, field: &str) -> Result<[u8; N]> {
        let s = self.slice(offset, N as u64, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    /// A `u8` at `offset`.
    pub fn u8(&self, offset: u64, field: &str) -> Result<u8> {
        Ok(self.array::<1>(offset, field)?[0])
    }

    /// A little-endian `u16` at `offset`.
    pub fn u16(&self, offset: u64, field: &str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(offset, field)?))
    }

    /// A little-endian `u32` at `offset`.
    pub fn u32(&self, offset: u64, field: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(offset, field)?))
    }

    /// A little-endian `u64` at `offset`.
    pub fn u64(&self, offset: u64, field: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(offset, field)?))
    }

    /// A little-endian `i32` at `offset`.
    pub fn i32(&self, offset: u64, field: &str) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array(offset, field)?))
    }

    /// A little-endian `i64` at `offset`.
    pub fn i64(&self, offset: u64, field: &str) -> Result<i64> {
        Ok(i64::from_le_bytes(self.array(offset, field)?))
    }
}

/// `value` rounded up to a multiple of `alignment` (a power of two or any non-zero value), or
/// `None` on overflow or a zero alignment.
pub fn align_up(value: u64, alignment: u64) -> Option<u64> {
    if alignment == 0 {
        return None;
    }
    let rem = value % alignment;
    if rem == 0 {
        Some(value)
    } else {
        value.checked_add(alignment - rem)
    }
}

/// The first pair of overlapping byte ranges, as `(later, earlier)` labels plus the later
/// range's start offset. `ranges` holds `(start, end, label)` with `end` exclusive; it is sorted
/// in place. Empty ranges never overlap anything.
pub fn first_overlap<L: Ord + Copy>(ranges: &mut [(u64, u64, L)]) -> Option<(L, L, u64)> {
    ranges.sort_unstable();
    let mut prev: Option<(u64, L)> = None;
    for &(start, end, label) in ranges.iter().filter(|r| r.0 < r.1) {
        if let Some((prev_end, prev_label)) = prev {
            if start < prev_end {
                return Some((label, prev_label, start));
            }
        }
        if prev.is_none_or(|(prev_end, _)| end > prev_end) {
            prev = Some((end, label));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_in_bounds_and_names_field_out_of_bounds() {
        let r = ByteReader::new(&[1, 0, 0, 0, 2, 0, 0, 0], "test");
        assert_eq!(r.u32(0, "a").unwrap(), 1);
        assert_eq!(r.u32(4, "b").unwrap(), 2);
        assert_eq!(r.u64(0, "c").unwrap(), 0x0000_0002_0000_0001);
        let err = r.u32(6, "header.length").unwrap_err().to_string();
        assert_eq!(err, "test: truncated at header.length: needs bytes 6..10 but the data has 8");
        assert!(r.slice(u64::MAX, 2, "x").is_err());
    }

    #[test]
    fn align_up_rounds_and_detects_overflow() {
        assert_eq!(align_up(0, 16), Some(0));
        assert_eq!(align_up(1, 16), Some(16));
        assert_eq!(align_up(129, 128), Some(256));
        assert_eq!(align_up(10, 12), Some(12));
        assert_eq!(align_up(u64::MAX, 16), None);
        assert_eq!(align_up(5, 0), None);
    }

    #[test]
    fn first_overlap_finds_shared_bytes_and_ignores_empty_and_adjacent_ranges() {
        assert_eq!(first_overlap(&mut [(10, 20, 1), (0, 10, 0), (20, 30, 2)]), None);
        assert_eq!(first_overlap(&mut [(5, 5, 1), (0, 10, 0)]), None);
        assert_eq!(first_overlap(&mut [(0, 100, 0), (10, 20, 1), (50, 60, 2)]), Some((1, 0, 10)));
        assert_eq!(first_overlap(&mut [(30, 40, 'b'), (0, 31, 'a')]), Some(('b', 'a', 30)));
        assert_eq!(first_overlap::<u8>(&mut []), None);
    }
}
