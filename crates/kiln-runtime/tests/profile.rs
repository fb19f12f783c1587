//! The per-step profiling hook: counts every executed step, attributes the steps to every
//! instruction and operator the program lists, and leaves results unchanged.

mod common;

use std::collections::BTreeSet;

use common::{compare, pte_dir, read_npy};
use kiln_kernels::DType;
use kiln_runtime::{Input, Program, TensorInput};
use serde_json::Value;

#[test]
fn profiling_counts_each_instruction_and_keeps_results() {
    let dir = pte_dir();
    let expected: Value =
        serde_json::from_slice(&std::fs::read(dir.join("tiny_cnn.expected.json")).unwrap())
            .unwrap();
    let program = Program::load(dir.join("tiny_cnn.pte")).unwrap();
    let mut m = program.method("forward").unwrap();
    assert!(!m.is_profiling());
    assert!(m.profile().is_empty());
    let x = read_npy(&dir.join("tiny_cnn.forward.in0.npy"), None);
    let want = read_npy(&dir.join("tiny_cnn.forward.out0.npy"), None);
    let input =
        [Input::Tensor(TensorInput { dtype: DType::Float, sizes: &x.sizes, data: &x.data })];
    m.set_profiling(true);
    for _ in 0..3 {
        let out = m.execute(&input).unwrap();
        compare("out0", &out[0], &want, 1e-4).unwrap();
    }
    let profile = m.profile();
    let mut origins: Vec<u32> = profile.iter().flat_map(|t| t.origins.clone()).collect();
    origins.sort_unstable();
    let all: Vec<u32> = (0..m.num_instructions() as u32).collect();
    assert_eq!(origins, all, "every instruction of the chain ran, within one step");
    assert!(profile.iter().all(|t| t.count == 3), "{profile:?}");
    let ops: BTreeSet<String> = profile.iter().flat_map(|t| t.operators.clone()).collect();
    let listed: BTreeSet<String> = expected["inspect"]["methods"][0]["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ops, listed);
    m.set_profiling(false);
    assert!(m.profile().is_empty());
}
