//! Fuzzes the `.ptd` reader: open (header, flatbuffer verifier, checks), every entry and name
//! lookup, and for inputs that verify, model -> write -> open again.
#![no_main]

use kiln_format::ptd::{FlatTensor, FlatTensorModel};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(ft) = FlatTensor::open(data) else { return };
    for e in ft.entries().flatten() {
        let _ = ft.get(e.key);
    }
    if let Ok(model) = FlatTensorModel::from_flat_tensor(&ft) {
        let written = model.write().expect("a verified .ptd can be written");
        FlatTensor::open(&written).expect("kiln's own output verifies");
    }
});
