//! Locating fields inside a finished flatbuffer, with checked reads only: used by the writer to
//! fill in the file offsets of data it appends after the flatbuffer.

use crate::bytes::ByteReader;
use crate::error::{Error, Result};

use super::read::FORMAT;

/// Position of the table that the `u32` offset at `pos` points to.
pub(super) fn deref(r: &ByteReader<'_>, pos: u64, field: &str) -> Result<u64> {
    Ok(pos + u64::from(r.u32(pos, field)?))
}

/// Absolute position of the field at vtable offset `voffset` (the generated `VT_*` constants)
/// of the table at `table`, or `None` when it is absent.
pub(super) fn field(
    r: &ByteReader<'_>,
    table: u64,
    voffset: u16,
    name: &str,
) -> Result<Option<u64>> {
    let vtable = i64::try_from(table)
        .ok()
        .and_then(|t| t.checked_sub(i64::from(r.i32(table, name).ok()?)))
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(|| Error::invalid(FORMAT, name, Some(table), "bad vtable offset"))?;
    let vtable_len = r.u16(vtable, name)?;
    let at = u64::from(voffset);
    if at + 2 > u64::from(vtable_len) {
        return Ok(None);
    }
    let field_offset = r.u16(vtable + at, name)?;
    Ok((field_offset != 0).then_some(table + u64::from(field_offset)))
}

/// Positions of the tables of the vector of tables at vtable offset `voffset` of `table`.
pub(super) fn table_vector(
    r: &ByteReader<'_>,
    table: u64,
    voffset: u16,
    name: &str,
) -> Result<Vec<u64>> {
    let Some(pos) = field(r, table, voffset, name)? else { return Ok(Vec::new()) };
    let vector = deref(r, pos, name)?;
    let len = u64::from(r.u32(vector, name)?);
    (0..len).map(|i| deref(r, vector + 4 + 4 * i, name)).collect()
}
