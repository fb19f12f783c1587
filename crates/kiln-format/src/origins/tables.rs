//! The two luci-profile metadata tables, `ONE_source_table` and `ONE_op_table`, byte for byte
//! as ONE's `compiler/luci/profile/README.md` specifies, decoded with the strictness of luci's
//! importer (`CircleImportMetadata.cpp`).
//!
//! All integers are little-endian `u32`.
//! - Source table: `entry_number`, then per entry `id`, `length`, `length` bytes of name
//!   including a trailing NUL.
//! - Op table: `entry_number`, then per entry `id` (operator index), `node_num`, `node_num`
//!   origin ids.
//!
//! Decoding fails, naming the entry and byte offset, on: fewer than 4 bytes; a truncated entry;
//! a name without its NUL terminator; a duplicated id; bytes left over after the last entry.
//! luci's last check, decoded count ≠ `entry_number`, cannot fail once duplicates are refused:
//! a wrong `entry_number` shows up as a truncated entry or as leftover bytes. kiln adds two refusals luci reaches later or
//! not at all: a name that is not UTF-8 (kiln keeps names as text) and an op entry with no
//! origin ids (luci's `composite_origin` throws "No origins provided" on it). Encoding writes
//! entries in ascending id order and origin ids ascending, as luci's `std::map`/`std::set` do.

use std::collections::{BTreeMap, BTreeSet};

use crate::bytes::ByteReader;
use crate::error::{Error, Result};

/// Metadata name of the source table.
pub const SOURCE_TABLE_NAME: &str = "ONE_source_table";
/// Metadata name of the op table.
pub const OP_TABLE_NAME: &str = "ONE_op_table";

/// Origin (source node) id → name.
pub type SourceTable = BTreeMap<u32, String>;
/// Operator index → origin ids. An empty table means "no origin information" (ONE's exporter
/// writes one since 2022 because of an upstream bug).
pub type OpTable = BTreeMap<u32, BTreeSet<u32>>;

const SOURCE: &str = "ONE_source_table";
const OP: &str = "ONE_op_table";

/// Reads `entry_number`, checking there are at least 4 bytes.
fn entry_number(r: &ByteReader<'_>, format: &'static str) -> Result<u32> {
    if r.len() < 4 {
        return Err(Error::invalid(
            format,
            "entry_number",
            Some(0),
            format!("the table is {} bytes, shorter than its 4-byte entry count", r.len()),
        ));
    }
    r.u32(0, "entry_number")
}

/// Fails when `at`, the end of entry `n - 1`, is not the end of the data.
fn check_end(r: &ByteReader<'_>, format: &'static str, at: u64, n: u32) -> Result<()> {
    if at != r.len() as u64 {
        return Err(Error::invalid(
            format,
            format!("entries[{n}]"),
            Some(at),
            format!("{} bytes are left over after the {n} entries", r.len() as u64 - at),
        ));
    }
    Ok(())
}

/// Decodes an `ONE_source_table` buffer.
pub fn decode_source_table(data: &[u8]) -> Result<SourceTable> {
    let r = ByteReader::new(data, SOURCE);
    let n = entry_number(&r, SOURCE)?;
    let mut table = SourceTable::new();
    let mut at = 4u64;
    for i in 0..n {
        let field = |f: &str| format!("entries[{i}].{f}");
        let entry_at = at;
        let id = r.u32(at, &field("id"))?;
        let length = r.u32(at + 4, &field("length"))?;
        let name_at = at + 8;
        let bytes = r.slice(name_at, u64::from(length), &field("name"))?;
        let Some((&0, name)) = bytes.split_last() else {
            return Err(Error::invalid(
                SOURCE,
                field("name"),
                Some(name_at),
                "the name does not end with its NUL terminator",
            ));
        };
        let name = std::str::from_utf8(name).map_err(|e| {
            Error::invalid(SOURCE, field("name"), Some(name_at), format!("not UTF-8: {e}"))
        })?;
        if table.insert(id, name.to_string()).is_some() {
            return Err(Error::invalid(
                SOURCE,
                field("id"),
                Some(entry_at),
                format!("id {id} appears twice"),
            ));
        }
        at = name_at + u64::from(length);
    }
    check_end(&r, SOURCE, at, n)?;
    Ok(table)
}

/// Encodes a source table.
pub fn encode_source_table(table: &SourceTable) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(&count(table.len(), SOURCE)?.to_le_bytes());
    for (id, name) in table {
        let length = u32::try_from(name.len() + 1).map_err(|_| {
            Error::invalid(SOURCE, format!("source {id}"), None, "name longer than 4 GiB")
        })?;
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&length.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.push(0);
    }
    Ok(out)
}

/// Decodes an `ONE_op_table` buffer.
pub fn decode_op_table(data: &[u8]) -> Result<OpTable> {
    let r = ByteReader::new(data, OP);
    let n = entry_number(&r, OP)?;
    let mut table = OpTable::new();
    let mut at = 4u64;
    for i in 0..n {
        let field = |f: &str| format!("entries[{i}].{f}");
        let entry_at = at;
        let id = r.u32(at, &field("id"))?;
        let node_num = r.u32(at + 4, &field("node_num"))?;
        let ids_at = at + 8;
        let ids = r.slice(ids_at, u64::from(node_num) * 4, &field("node_ids"))?;
        if node_num == 0 {
            return Err(Error::invalid(
                OP,
                field("node_num"),
                Some(at + 4),
                format!("operation {id} has no origin ids"),
            ));
        }
        let set: BTreeSet<u32> =
            ids.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
        if table.insert(id, set).is_some() {
            return Err(Error::invalid(
                OP,
                field("id"),
                Some(entry_at),
                format!("operation id {id} appears twice"),
            ));
        }
        at = ids_at + u64::from(node_num) * 4;
    }
    check_end(&r, OP, at, n)?;
    Ok(table)
}

/// Encodes an op table.
pub fn encode_op_table(table: &OpTable) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(&count(table.len(), OP)?.to_le_bytes());
    for (id, ids) in table {
        if ids.is_empty() {
            return Err(Error::invalid(OP, format!("operation {id}"), None, "no origin ids"));
        }
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&count(ids.len(), OP)?.to_le_bytes());
        for node in ids {
            out.extend_from_slice(&node.to_le_bytes());
        }
    }
    Ok(out)
}

fn count(n: usize, format: &'static str) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::invalid(format, "entry_number", None, "over 2^32 - 1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's source-table example: "Name of origin 1 is node1".
    const SOURCE_EXAMPLE: [u8; 18] =
        [1, 0, 0, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0x6e, 0x6f, 0x64, 0x65, 0x31, 0];
    /// The README's op-table example: "Operation 5 is originated from origin 1 and origin 2".
    const OP_EXAMPLE: [u8; 20] = [1, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0];

    #[test]
    fn spec_examples_decode_and_encode_exactly() {
        let source = decode_source_table(&SOURCE_EXAMPLE).unwrap();
        assert_eq!(source, SourceTable::from([(1, "node1".to_string())]));
        assert_eq!(encode_source_table(&source).unwrap(), SOURCE_EXAMPLE);
        let op = decode_op_table(&OP_EXAMPLE).unwrap();
        assert_eq!(op, OpTable::from([(5, BTreeSet::from([1, 2]))]));
        assert_eq!(encode_op_table(&op).unwrap(), OP_EXAMPLE);
    }

    #[test]
    fn empty_tables_are_valid() {
        assert!(decode_op_table(&[0; 4]).unwrap().is_empty());
        assert!(decode_source_table(&[0; 4]).unwrap().is_empty());
        assert_eq!(encode_op_table(&OpTable::new()).unwrap(), [0; 4]);
    }

    fn err(result: Result<impl std::fmt::Debug>) -> String {
        result.unwrap_err().to_string()
    }

    #[test]
    fn source_table_decoding_is_strict() {
        assert!(err(decode_source_table(&[1, 0, 0])).contains("shorter than its 4-byte"));
        // Truncated entry.
        assert!(err(decode_source_table(&SOURCE_EXAMPLE[..17])).contains("truncated"));
        // Missing NUL terminator.
        let mut no_nul = SOURCE_EXAMPLE;
        no_nul[17] = b'x';
        assert!(err(decode_source_table(&no_nul)).contains("NUL terminator"));
        let mut zero_length = SOURCE_EXAMPLE[..12].to_vec();
        zero_length[8] = 0;
        assert!(err(decode_source_table(&zero_length)).contains("NUL terminator"));
        // Duplicated id.
        let mut dup = SOURCE_EXAMPLE.to_vec();
        dup[0] = 2;
        dup.extend_from_slice(&SOURCE_EXAMPLE[4..]);
        let e = err(decode_source_table(&dup));
        assert!(e.contains("entries[1].id at offset 18") && e.contains("twice"), "{e}");
        // Leftover bytes.
        let mut extra = SOURCE_EXAMPLE.to_vec();
        extra.push(0);
        assert!(err(decode_source_table(&extra)).contains("1 bytes are left over"));
        // Count larger than the entries present.
        let mut more = SOURCE_EXAMPLE;
        more[0] = 2;
        assert!(err(decode_source_table(&more)).contains("truncated at entries[1].id"));
        // Not UTF-8.
        let mut bad = SOURCE_EXAMPLE;
        bad[12] = 0xff;
        assert!(err(decode_source_table(&bad)).contains("not UTF-8"));
    }

    #[test]
    fn op_table_decoding_is_strict() {
        assert!(err(decode_op_table(&[])).contains("shorter than its 4-byte"));
        assert!(
            err(decode_op_table(&OP_EXAMPLE[..19])).contains("truncated at entries[0].node_ids")
        );
        let mut dup = OP_EXAMPLE.to_vec();
        dup[0] = 2;
        dup.extend_from_slice(&OP_EXAMPLE[4..]);
        assert!(err(decode_op_table(&dup)).contains("appears twice"));
        let mut extra = OP_EXAMPLE.to_vec();
        extra.extend_from_slice(&[0; 4]);
        assert!(err(decode_op_table(&extra)).contains("left over"));
        let zero = [1, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0];
        assert!(err(decode_op_table(&zero)).contains("no origin ids"));
        // A huge node_num is a truncation error, not an allocation.
        let huge = [1, 0, 0, 0, 5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff];
        assert!(err(decode_op_table(&huge)).contains("truncated"));
    }
}
