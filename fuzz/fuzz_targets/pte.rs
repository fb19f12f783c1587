//! Fuzzes the `.pte` reader: open (header, flatbuffer verifier, semantic verification), every
//! accessor, the summary, and for inputs that verify, model -> write -> open again.
#![no_main]

use kiln_format::pte::{self, model::ProgramModel, Program, TensorData, Value};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(program) = Program::open(data) else { return };
    let _ = pte::summary::summarize(&program);
    for m in program.methods() {
        let _ = (m.inputs(), m.outputs(), m.planned_buffer_sizes());
        for i in 0..m.num_values() {
            if let Ok(Value::Tensor(t)) = m.value(i) {
                match t.data() {
                    TensorData::Constant(idx) => {
                        let _ = program.constant_data(idx as usize, t.nbytes());
                    }
                    TensorData::PlannedInitialized(_, idx) => {
                        let _ = program.mutable_data(idx as usize, t.nbytes());
                    }
                    _ => {}
                }
            }
        }
        for chain in m.chains() {
            for ins in chain.instructions() {
                let _ = ins.map(|i| i.kind_name());
            }
        }
        for d in m.delegates().flatten() {
            let _ = program.delegate_data(&d);
        }
    }
    for (key, _) in program.named_data() {
        let _ = program.named_data_bytes(key);
    }
    // A program that verifies must survive the writer and verify again.
    if let Ok(model) = ProgramModel::from_program(&program) {
        let written = pte::writer::write(&model).expect("a verified program can be written");
        Program::open(&written).expect("kiln's own output verifies");
    }
});
