//! Fuzzes the ETDump reader (`kiln inspect/verify/dump` of `.etdp` files): parse, the block
//! summaries, the JSON, and for inputs that parse, write -> parse again to the same content.
#![no_main]

use kiln_format::etdump::{self, ETDump};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(dump) = ETDump::parse(data) else { return };
    for run in &dump.run_data {
        let _ = (run.event_counts(), run.time_span());
    }
    let json = etdump::to_json(&dump);
    let again = ETDump::parse(&etdump::write(&dump).expect("a parsed ETDump writes"))
        .expect("kiln's own ETDump parses");
    assert_eq!(etdump::to_json(&again), json);
});
