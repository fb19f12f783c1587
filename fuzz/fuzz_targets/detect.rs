#![no_main]
//! Fuzzes magic-number detection over arbitrary bytes.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = kiln_format::detect(data);
});
