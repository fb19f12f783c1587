//! Fuzz the FlexBuffer reader: the whole value as JSON, and the Edge TPU options decoder.
#![no_main]

use kiln_format::flexbuffer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(root) = flexbuffer::root(data) {
        let _ = root.to_json("root");
        if let Ok(map) = root.as_map("root") {
            let _ = map.get(b"4", "4");
        }
    }
    let _ = kiln_format::darwinn::custom_op::parse_custom_options(data, 0);
});
