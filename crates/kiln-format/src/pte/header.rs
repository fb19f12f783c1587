//! The optional `eh00` extended header that ExecuTorch splices into a `.pte` after byte 8
//! (`schema/extended_header.{h,cpp}`).
//!
//! ```text
//! [8..12)  "eh00"
//! [12..16) u32 header length, counted from the magic (>= 24; writers use 32)
//! [16..24) u64 program_size: bytes of flatbuffer data from byte 0, header included
//! [24..32) u64 segment_base_offset: file offset of the first segment (0 = none)
//! [32..40) u64 segment_data_size (only when the length is >= 32; else 0)
//! ```

use crate::bytes::ByteReader;
use crate::error::{Error, Result};

/// Where the header starts in the file.
pub const HEADER_OFFSET: usize = 8;
/// The header magic.
pub const MAGIC: &[u8; 4] = b"eh00";
/// Smallest header length ExecuTorch accepts (up to and including `segment_base_offset`).
pub const MIN_LENGTH: u32 = 24;
/// The length current writers use (adds `segment_data_size`).
pub const LENGTH: u32 = 32;

/// The parsed extended header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendedHeader {
    /// Header length as written (24 in old files, 32 in current ones).
    pub length: u32,
    /// Bytes of flatbuffer program data from byte 0, the header included.
    pub program_size: u64,
    /// Absolute file offset of the first segment; 0 when there are no segments.
    pub segment_base_offset: u64,
    /// Bytes from `segment_base_offset` to the end of the last segment (0 for 24-byte headers).
    pub segment_data_size: u64,
}

impl ExtendedHeader {
    /// Parses the header at byte 8 of `bytes`: `Ok(None)` when the magic is absent (the file
    /// has no header), an error when the magic is there but the header is short or broken.
    pub fn parse(bytes: &[u8]) -> Result<Option<ExtendedHeader>> {
        let r = ByteReader::new(bytes, "pte");
        if bytes.get(HEADER_OFFSET..HEADER_OFFSET + 4) != Some(MAGIC.as_slice()) {
            return Ok(None);
        }
        let base = HEADER_OFFSET as u64;
        let length = r.u32(base + 4, "extended_header.length")?;
        if length < MIN_LENGTH {
            return Err(Error::invalid(
                "pte",
                "extended_header.length",
                Some(base + 4),
                format!("{length} is shorter than the minimum of {MIN_LENGTH}"),
            ));
        }
        let program_size = r.u64(base + 8, "extended_header.program_size")?;
        let segment_base_offset = r.u64(base + 16, "extended_header.segment_base_offset")?;
        let segment_data_size = if length >= LENGTH {
            r.u64(base + 24, "extended_header.segment_data_size")?
        } else {
            0
        };
        Ok(Some(ExtendedHeader { length, program_size, segment_base_offset, segment_data_size }))
    }

    /// The 32-byte encoding written by current ExecuTorch.
    pub fn encode(&self) -> [u8; LENGTH as usize] {
        let mut out = [0u8; LENGTH as usize];
        out[0..4].copy_from_slice(MAGIC);
        out[4..8].copy_from_slice(&LENGTH.to_le_bytes());
        out[8..16].copy_from_slice(&self.program_size.to_le_bytes());
        out[16..24].copy_from_slice(&self.segment_base_offset.to_le_bytes());
        out[24..32].copy_from_slice(&self.segment_data_size.to_le_bytes());
        out
    }
}

/// The program's layout in the file: how much is flatbuffer and where segments start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The header, when the file has one.
    pub header: Option<ExtendedHeader>,
    /// Bytes `0..program_size` are the flatbuffer.
    pub program_size: u64,
    /// Absolute offset of segment data (0 when there is none).
    pub segment_base_offset: u64,
    /// End (exclusive) of the segment data region.
    pub segment_end: u64,
}

impl Layout {
    /// Reads and checks the header of a file of `bytes`: program size and segment region must
    /// lie inside the file (overflow-checked), segments must not overlap the program.
    pub fn of(bytes: &[u8]) -> Result<Layout> {
        let file_len = bytes.len() as u64;
        let Some(h) = ExtendedHeader::parse(bytes)? else {
            return Ok(Layout {
                header: None,
                program_size: file_len,
                segment_base_offset: 0,
                segment_end: 0,
            });
        };
        let at = Some(HEADER_OFFSET as u64);
        if h.program_size < 8 + u64::from(h.length) || h.program_size > file_len {
            return Err(Error::invalid(
                "pte",
                "extended_header.program_size",
                Some(HEADER_OFFSET as u64 + 8),
                format!(
                    "{} is outside {}..={file_len} (header end .. file size)",
                    h.program_size,
                    8 + u64::from(h.length)
                ),
            ));
        }
        let end = h.segment_base_offset.checked_add(h.segment_data_size).ok_or_else(|| {
            Error::invalid(
                "pte",
                "extended_header.segment_data_size",
                at,
                "segment_base_offset + segment_data_size overflows",
            )
        })?;
        if end > file_len {
            return Err(Error::invalid(
                "pte",
                "extended_header.segment_data_size",
                Some(HEADER_OFFSET as u64 + 24),
                format!(
                    "segment data {}..{end} extends past the end of the file ({file_len} bytes)",
                    h.segment_base_offset
                ),
            ));
        }
        if h.segment_base_offset != 0 && h.segment_base_offset < h.program_size {
            return Err(Error::invalid(
                "pte",
                "extended_header.segment_base_offset",
                Some(HEADER_OFFSET as u64 + 16),
                format!(
                    "{} lies inside the program data (program_size {})",
                    h.segment_base_offset, h.program_size
                ),
            ));
        }
        // A 24-byte header does not record the data size, and ExecuTorch does not check a zero
        // size: segments may then reach the end of the file.
        let segment_end = if h.segment_base_offset == 0 {
            0
        } else if h.length < LENGTH || h.segment_data_size == 0 {
            file_len
        } else {
            end
        };
        Ok(Layout {
            header: Some(h),
            program_size: h.program_size,
            segment_base_offset: h.segment_base_offset,
            segment_end,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(length: u32, program_size: u64, base: u64, data: u64, total: usize) -> Vec<u8> {
        let mut b = vec![0u8; total];
        b[4..8].copy_from_slice(b"ET12");
        b[8..12].copy_from_slice(MAGIC);
        b[12..16].copy_from_slice(&length.to_le_bytes());
        b[16..24].copy_from_slice(&program_size.to_le_bytes());
        b[24..32].copy_from_slice(&base.to_le_bytes());
        if length >= 32 {
            b[32..40].copy_from_slice(&data.to_le_bytes());
        }
        b
    }

    #[test]
    fn parses_32_and_24_byte_headers_and_absent_header() {
        let f = file(32, 100, 128, 72, 200);
        let l = Layout::of(&f).unwrap();
        assert_eq!(l.program_size, 100);
        assert_eq!((l.segment_base_offset, l.segment_end), (128, 200));
        let f = file(24, 100, 128, 0xdead, 150);
        let l = Layout::of(&f).unwrap();
        assert_eq!(l.header.unwrap().segment_data_size, 0);
        assert_eq!(l.segment_end, 150);
        let l = Layout::of(b"\x10\0\0\0ET12\0\0\0\0\0\0\0\0").unwrap();
        assert!(l.header.is_none());
        assert_eq!(l.program_size, 16);
    }

    #[test]
    fn rejects_inconsistent_headers() {
        assert!(Layout::of(&file(16, 100, 128, 72, 200)).is_err());
        assert!(Layout::of(&file(32, 300, 128, 72, 200)).is_err());
        assert!(Layout::of(&file(32, 100, 128, 73, 200)).is_err());
        assert!(Layout::of(&file(32, 100, u64::MAX, 2, 200)).is_err());
        assert!(Layout::of(&file(32, 100, 64, 8, 200)).is_err());
        assert!(Layout::of(&file(32, 100, 0, 0, 200)[..20]).is_err());
    }

    #[test]
    fn encode_round_trips() {
        let h = ExtendedHeader {
            length: 32,
            program_size: 1088,
            segment_base_offset: 1152,
            segment_data_size: 432,
        };
        let mut f = vec![0u8; 1584];
        f[8..40].copy_from_slice(&h.encode());
        assert_eq!(ExtendedHeader::parse(&f).unwrap(), Some(h));
    }
}
