//! Third-party programs ExecuTorch 1.5.1 runs, run by kiln with ExecuTorch's outputs
//! (`tests/fixtures/pte-compat/`, taken from pytorch/executorch at a pinned commit by
//! `tools/fixtures/fetch_compat.py`, which also records ExecuTorch's outputs).

mod common;

use std::path::PathBuf;

use common::{compare, read_npy};
use kiln_runtime::{Input, Program, TensorInput};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pte-compat")
}

#[test]
fn xor_training_program_with_an_unaligned_int64_vector_runs_as_in_executorch() {
    // The flatbuffer holds an int64 vector at position 10444, not 8-byte aligned: the plain
    // flatbuffers verifier refuses the file, ExecuTorch reads it.
    let program = Program::load_with_data(dir().join("xor.pte"), dir().join("xor.ptd")).unwrap();
    let mut method = program.method("forward").unwrap();
    let inputs: Vec<_> =
        (0..2).map(|i| read_npy(&dir().join(format!("xor.forward.in{i}.npy")), None)).collect();
    let args: Vec<Input<'_>> = inputs
        .iter()
        .map(|a| Input::Tensor(TensorInput { dtype: a.dtype, sizes: &a.sizes, data: &a.data }))
        .collect();
    let outputs = method.execute(&args).unwrap();
    assert_eq!(outputs.len(), 10);
    for (i, got) in outputs.iter().enumerate() {
        let want = read_npy(&dir().join(format!("xor.forward.out{i}.npy")), None);
        compare(&format!("xor forward output {i}"), got, &want, 1e-6).unwrap();
    }
}
