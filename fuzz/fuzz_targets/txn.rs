#![no_main]
//! Fuzzes the transaction reader: what it accepts rewrites byte-identically, survives the hex
//! text form, and patching changes no length.

use std::collections::BTreeMap;

use kiln_format::txn::{from_hex_text, resolve_patches, to_hex_text, Txn};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut txn) = Txn::parse(data) else { return };
    let bytes = txn.to_bytes().unwrap();
    assert_eq!(bytes, data);
    if let Ok(text) = to_hex_text(&bytes) {
        assert_eq!(from_hex_text(&text).unwrap(), bytes);
    }
    let args: BTreeMap<u64, u64> = (0..8).map(|i| (i, 0x8000_0000 + (i << 16))).collect();
    if resolve_patches(&mut txn, &args).is_ok() {
        assert_eq!(txn.to_bytes().unwrap().len(), data.len());
    }
});
