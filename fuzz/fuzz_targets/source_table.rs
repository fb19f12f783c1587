#![no_main]
//! Fuzzes the `ONE_source_table` decoder: what it accepts re-encodes to a table that decodes
//! to the same map.

use kiln_format::origins::{decode_source_table, encode_source_table};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(table) = decode_source_table(data) else { return };
    let bytes = encode_source_table(&table).unwrap();
    assert_eq!(bytes.len(), data.len());
    assert_eq!(decode_source_table(&bytes).unwrap(), table);
});
