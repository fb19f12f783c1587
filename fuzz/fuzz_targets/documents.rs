#![no_main]
//! Fuzzes the documents kiln gives for any file: whatever kind the bytes are detected as, its
//! summary (`kiln inspect --json`, serialized) and its plain and strict verdicts (`kiln verify`)
//! end in a value or an error.

use std::path::Path;

use kiln_format::{summary, verdict};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(kind) = kiln_format::detect(data) else { return };
    let file = Path::new("fuzz");
    if let Ok(s) = summary::summarize(file, data, kind) {
        let _ = serde_json::to_string(&s);
    }
    let _ = verdict::check(file, data, kind, false);
    let _ = verdict::check(file, data, kind, true);
});
