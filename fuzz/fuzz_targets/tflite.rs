//! Fuzz the TFLite reader: open, operator codes, every operator and its tensors.
#![no_main]

use kiln_format::tflite::Model;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = Model::open(data) else { return };
    let _ = model.operator_codes();
    let _ = model.description();
    for s in 0..model.num_subgraphs() {
        let _ = model.subgraph_io(s);
    }
    let Ok(ops) = model.operators() else { return };
    for op in ops.iter().take(64) {
        for &t in op.inputs.iter().chain(&op.outputs).take(16) {
            let _ = model.tensor(op.subgraph, t);
        }
    }
    let _ = kiln_format::darwinn::custom_op::find_ops(&model);
});
