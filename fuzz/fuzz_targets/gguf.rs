//! Fuzzes the GGUF reader and its conversion to archive entries.
#![no_main]

use kiln_format::gguf::Gguf;
use kiln_format::irpa::source::ParamSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(g) = Gguf::parse(data) {
        let _ = g.verify();
        let _ = g.param_entries();
    }
});
