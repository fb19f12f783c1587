//! `MultiExecutable`: the flatbuffer (no file identifier) inside `Package.serialized_multi_executable`
//! whose only field, `serialized_executables:[string]`, holds one serialized `Executable` per
//! string.
//!
//! The strings hold binary flatbuffers, which the Rust flatbuffers verifier rejects as invalid
//! UTF-8, so this table is read and written by hand: every read is bounds-checked, and
//! verification checks what the C++ verifier checks (offsets in range, 4-byte alignment of
//! offsets and lengths, the vtable, and each string's NUL terminator) without requiring UTF-8.

use crate::bytes::{align_up, ByteReader};
use crate::error::{Error, Result};

const FORMAT: &str = "darwinn.multi_executable";

/// One executable blob inside a MultiExecutable.
#[derive(Clone, Copy, Debug)]
pub struct Blob<'a> {
    /// Offset of the blob's first byte inside the MultiExecutable buffer.
    pub offset: u64,
    /// The bytes (without the string's NUL terminator).
    pub bytes: &'a [u8],
}

/// A verified MultiExecutable: the executable blobs in vector order.
#[derive(Clone, Debug)]
pub struct MultiExecutable<'a> {
    /// The blobs of `serialized_executables`, in order (empty when the field is absent).
    pub executables: Vec<Blob<'a>>,
}

fn aligned(pos: u64, field: &str) -> Result<()> {
    if pos.is_multiple_of(4) {
        Ok(())
    } else {
        Err(Error::invalid(FORMAT, field, Some(pos), "not 4-byte aligned"))
    }
}

/// Follows the uoffset stored at `pos`.
fn follow(r: &ByteReader<'_>, pos: u64, field: &str) -> Result<u64> {
    aligned(pos, field)?;
    let off = r.u32(pos, field)?;
    let target = pos + u64::from(off);
    if target >= r.len() as u64 {
        return Err(Error::invalid(
            FORMAT,
            field,
            Some(pos),
            format!("offset {off} points past the end"),
        ));
    }
    Ok(target)
}

impl<'a> MultiExecutable<'a> {
    /// Reads and verifies a MultiExecutable buffer.
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let r = ByteReader::new(data, FORMAT);
        let table = follow(&r, 0, "root")?;
        aligned(table, "root")?;
        let soff = r.i32(table, "root.vtable")?;
        let vtable = i64::try_from(table)
            .ok()
            .and_then(|t| t.checked_sub(i64::from(soff)))
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| {
                Error::invalid(FORMAT, "root.vtable", Some(table), "vtable offset out of range")
            })?;
        if vtable % 2 != 0 {
            return Err(Error::invalid(FORMAT, "root.vtable", Some(vtable), "not 2-byte aligned"));
        }
        let vt_size = r.u16(vtable, "root.vtable.size")?;
        let table_size = r.u16(vtable + 2, "root.vtable.table_size")?;
        if vt_size < 4 || vt_size % 2 != 0 {
            return Err(Error::invalid(
                FORMAT,
                "root.vtable.size",
                Some(vtable),
                format!("bad vtable size {vt_size}"),
            ));
        }
        r.slice(vtable, u64::from(vt_size), "root.vtable")?;
        r.slice(table, u64::from(table_size), "root")?;
        let field_off = if vt_size >= 6 { r.u16(vtable + 4, "root.vtable[0]")? } else { 0 };
        if field_off == 0 {
            return Ok(MultiExecutable { executables: Vec::new() });
        }
        if u32::from(field_off) + 4 > u32::from(table_size) {
            return Err(Error::invalid(
                FORMAT,
                "serialized_executables",
                Some(table),
                "field outside its table",
            ));
        }
        let vector = follow(&r, table + u64::from(field_off), "serialized_executables")?;
        aligned(vector, "serialized_executables")?;
        let n = r.u32(vector, "serialized_executables.length")?;
        r.slice(vector + 4, u64::from(n) * 4, "serialized_executables")?;
        let mut executables = Vec::with_capacity(n as usize);
        for i in 0..u64::from(n) {
            let field = format!("serialized_executables[{i}]");
            let s = follow(&r, vector + 4 + 4 * i, &field)?;
            aligned(s, &field)?;
            let len = r.u32(s, &field)?;
            let bytes = r.slice(s + 4, u64::from(len), &field)?;
            if r.u8(s + 4 + u64::from(len), &field)? != 0 {
                return Err(Error::invalid(
                    FORMAT,
                    field,
                    Some(s + 4 + u64::from(len)),
                    "string has no NUL terminator",
                ));
            }
            executables.push(Blob { offset: s + 4, bytes });
        }
        Ok(MultiExecutable { executables })
    }
}

/// Serialises a MultiExecutable holding `executables`, each blob starting at a multiple of
/// `align` bytes from the buffer start (libedgetpu's files use 4096) and the total length
/// padded to a multiple of `align`. `align` must be a power of two of at least 8.
pub fn write(executables: &[&[u8]], align: u64) -> Result<Vec<u8>> {
    if align < 8 || !align.is_power_of_two() {
        return Err(Error::invalid(
            FORMAT,
            "alignment",
            None,
            format!("{align} is not a power of two >= 8"),
        ));
    }
    let overflow = || Error::Limit {
        format: FORMAT,
        what: "total size".into(),
        value: u64::MAX,
        limit: u64::from(u32::MAX),
    };
    // Header: root offset, 4 zero bytes (no identifier); vtable at 8 (size 6, table size 8,
    // field 0 at 4); table at 16; vector at 24.
    let mut out = Vec::new();
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&6u16.to_le_bytes());
    out.extend_from_slice(&8u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 2]);
    out.extend_from_slice(&8i32.to_le_bytes()); // table at 16 - vtable at 8
    out.extend_from_slice(&4u32.to_le_bytes()); // field at 20 -> vector at 24
    let n = u32::try_from(executables.len()).map_err(|_| overflow())?;
    out.extend_from_slice(&n.to_le_bytes());
    let slots = out.len();
    out.resize(slots + 4 * executables.len(), 0);
    for (i, blob) in executables.iter().enumerate() {
        let data_at = align_up(out.len() as u64 + 4, align).ok_or_else(overflow)?;
        let len = u32::try_from(blob.len()).map_err(|_| overflow())?;
        out.resize((data_at - 4) as usize, 0);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(blob);
        out.push(0);
        let slot = slots + 4 * i;
        let rel = u32::try_from(data_at - 4 - slot as u64).map_err(|_| overflow())?;
        out[slot..slot + 4].copy_from_slice(&rel.to_le_bytes());
    }
    let total = align_up(out.len() as u64, align).ok_or_else(overflow)?;
    if total > u64::from(u32::MAX) {
        return Err(overflow());
    }
    out.resize(total as usize, 0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_parse_round_trips_binary_blobs_page_aligned() {
        let a = vec![0xffu8, 0xfe, 0, 1];
        let b = vec![7u8; 5000];
        let buf = write(&[&a, &b], 4096).unwrap();
        assert_eq!(buf.len() % 4096, 0);
        let me = MultiExecutable::parse(&buf).unwrap();
        assert_eq!(me.executables.len(), 2);
        assert_eq!(me.executables[0].bytes, &a[..]);
        assert_eq!(me.executables[1].bytes, &b[..]);
        assert!(me.executables.iter().all(|e| e.offset % 4096 == 0));
    }

    #[test]
    fn missing_nul_and_truncation_are_errors() {
        let buf = write(&[b"abc"], 8).unwrap();
        let me = MultiExecutable::parse(&buf).unwrap();
        let end = (me.executables[0].offset + 3) as usize;
        let mut bad = buf.clone();
        bad[end] = 1;
        assert!(MultiExecutable::parse(&bad).unwrap_err().to_string().contains("NUL"));
        for cut in 0..buf.len() {
            let _ = MultiExecutable::parse(&buf[..cut]);
        }
    }
}
