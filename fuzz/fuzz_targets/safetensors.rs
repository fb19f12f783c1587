//! Fuzzes the safetensors reader and its conversion to archive entries.
#![no_main]

use kiln_format::irpa::source::ParamSource;
use kiln_format::safetensors::SafeTensors;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(st) = SafeTensors::parse(data) {
        let _ = st.param_entries();
    }
});
