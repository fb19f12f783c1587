//! Fuzzes the `.npy` header reader (`kiln run --input`, `kiln inspect/verify/dump` of arrays).
#![no_main]

use kiln_format::npy::Npy;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(npy) = Npy::parse(data) {
        let _ = kiln_format::npy::item_size(&npy.descr);
        assert!(npy.data.len() as u64 <= data.len() as u64);
    }
});
