#![no_main]
//! Fuzzes the `ONE_op_table` decoder: what it accepts re-encodes to a table that decodes to
//! the same map.

use kiln_format::origins::{decode_op_table, encode_op_table};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(table) = decode_op_table(data) else { return };
    let bytes = encode_op_table(&table).unwrap();
    assert!(bytes.len() <= data.len());
    assert_eq!(decode_op_table(&bytes).unwrap(), table);
});
