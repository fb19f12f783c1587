//! The `FH01` header ExecuTorch splices into a `.ptd` after byte 8
//! (`extension/flat_tensor/flat_tensor_header.h`).
//!
//! ```text
//! [8..12)  "FH01"
//! [12..16) u32 header length (>= 40)
//! [16..24) u64 flatbuffer_offset: the padded header length (48)
//! [24..32) u64 flatbuffer_size: size of the flatbuffer before the header was inserted
//! [32..40) u64 segment_base_offset
//! [40..48) u64 segment_data_size
//! ```
//! Bytes `0..flatbuffer_offset + flatbuffer_size` are the flatbuffer, header included.

use crate::bytes::ByteReader;
use crate::error::{Error, Result};

/// The header magic.
pub const MAGIC: &[u8; 4] = b"FH01";
/// Header length as written and the minimum accepted.
pub const LENGTH: u32 = 40;
/// The header's length padded to the flatbuffer alignment (16), as ExecuTorch writes it.
pub const PADDED_LENGTH: u64 = 48;

/// The parsed `FH01` header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header length as written.
    pub length: u32,
    /// The padded header length.
    pub flatbuffer_offset: u64,
    /// The flatbuffer's size without the header.
    pub flatbuffer_size: u64,
    /// Absolute file offset of the segment data.
    pub segment_base_offset: u64,
    /// Bytes of segment data.
    pub segment_data_size: u64,
}

impl Header {
    /// Parses and checks the header of a `.ptd` of `bytes`: the flatbuffer and the segment
    /// data must lie inside the file (overflow-checked) without overlapping.
    pub fn parse(bytes: &[u8]) -> Result<Header> {
        let r = ByteReader::new(bytes, "ptd");
        let magic = r.array::<4>(8, "header.magic")?;
        if &magic != MAGIC {
            return Err(Error::BadMagic {
                format: "ptd",
                offset: 8,
                expected: "\"FH01\"".into(),
                found: format!("{:?}", String::from_utf8_lossy(&magic)),
            });
        }
        let length = r.u32(12, "header.length")?;
        if length < LENGTH {
            return Err(Error::invalid(
                "ptd",
                "header.length",
                Some(12),
                format!("{length} is shorter than the minimum of {LENGTH}"),
            ));
        }
        let h = Header {
            length,
            flatbuffer_offset: r.u64(16, "header.flatbuffer_offset")?,
            flatbuffer_size: r.u64(24, "header.flatbuffer_size")?,
            segment_base_offset: r.u64(32, "header.segment_base_offset")?,
            segment_data_size: r.u64(40, "header.segment_data_size")?,
        };
        let len = bytes.len() as u64;
        if h.flatbuffer_offset < 8 + u64::from(length) {
            return Err(Error::invalid(
                "ptd",
                "header.flatbuffer_offset",
                Some(16),
                format!("{} lies inside the header", h.flatbuffer_offset),
            ));
        }
        let fb_end = h.flatbuffer_offset.checked_add(h.flatbuffer_size).filter(|e| *e <= len);
        let Some(fb_end) = fb_end else {
            return Err(Error::invalid(
                "ptd",
                "header.flatbuffer_size",
                Some(24),
                format!(
                    "flatbuffer {}+{} extends past the end of the file ({len} bytes)",
                    h.flatbuffer_offset, h.flatbuffer_size
                ),
            ));
        };
        let seg_end = h.segment_base_offset.checked_add(h.segment_data_size).filter(|e| *e <= len);
        if seg_end.is_none() {
            return Err(Error::invalid(
                "ptd",
                "header.segment_data_size",
                Some(40),
                format!(
                    "segment data {}+{} extends past the end of the file ({len} bytes)",
                    h.segment_base_offset, h.segment_data_size
                ),
            ));
        }
        if h.segment_data_size > 0 && h.segment_base_offset < fb_end {
            return Err(Error::invalid(
                "ptd",
                "header.segment_base_offset",
                Some(32),
                format!("{} lies inside the flatbuffer (ends at {fb_end})", h.segment_base_offset),
            ));
        }
        Ok(h)
    }

    /// End (exclusive) of the flatbuffer region (checked in [`Header::parse`]).
    pub fn flatbuffer_end(&self) -> u64 {
        self.flatbuffer_offset.saturating_add(self.flatbuffer_size)
    }

    /// The 40-byte encoding, followed by zero padding to [`PADDED_LENGTH`].
    pub fn encode(&self) -> [u8; PADDED_LENGTH as usize] {
        let mut out = [0u8; PADDED_LENGTH as usize];
        out[0..4].copy_from_slice(MAGIC);
        out[4..8].copy_from_slice(&LENGTH.to_le_bytes());
        out[8..16].copy_from_slice(&self.flatbuffer_offset.to_le_bytes());
        out[16..24].copy_from_slice(&self.flatbuffer_size.to_le_bytes());
        out[24..32].copy_from_slice(&self.segment_base_offset.to_le_bytes());
        out[32..40].copy_from_slice(&self.segment_data_size.to_le_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_executorch_header_and_rejects_bad_ranges() {
        // The header of the hexdump in the reference (904-byte file).
        let h = Header {
            length: 40,
            flatbuffer_offset: 48,
            flatbuffer_size: 456,
            segment_base_offset: 512,
            segment_data_size: 392,
        };
        let mut f = vec![0u8; 904];
        f[4..8].copy_from_slice(b"FT01");
        f[8..56].copy_from_slice(&h.encode());
        assert_eq!(Header::parse(&f).unwrap(), h);
        assert!(Header::parse(&f[..903]).is_err());
        f[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(Header::parse(&f).is_err());
        f[8] = b'X';
        assert!(matches!(Header::parse(&f), Err(Error::BadMagic { .. })));
    }
}
