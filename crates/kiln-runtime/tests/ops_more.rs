//! Op-level ExecuTorch fixtures of `tests/fixtures/ops-more` (written by
//! `tools/fixtures/export_ops_more.py`: InstanceNorm, grid_sample, antialiased interpolate,
//! cdist/pdist and PT2E-quantized linear models run as portable kernels). Every method must
//! load (all its operators have kernels) and match ExecuTorch's recorded outputs: float32
//! within 1e-4, everything else exactly.

mod common;

use std::path::PathBuf;

use common::{compare, read_npy};
use kiln_runtime::{Input, Program, TensorInput, ValueMeta};
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ops-more")
}

fn run_family(name: &str) -> usize {
    let text = std::fs::read_to_string(dir().join(format!("{name}.expected.json"))).unwrap();
    let expected: Value = serde_json::from_str(&text).unwrap();
    let program = Program::load(dir().join(expected["files"]["pte"].as_str().unwrap())).unwrap();
    let methods = expected["inspect"]["methods"].as_array().unwrap();
    for m in methods {
        let method = m["name"].as_str().unwrap();
        let mut loaded = program.method(method).unwrap_or_else(|e| panic!("{name}.{method}: {e}"));
        let metas = loaded.inputs();
        let run = &expected["runs"][method];
        let arrays: Vec<_> = run["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .zip(&metas)
            .map(|(f, meta)| {
                let want = match meta {
                    ValueMeta::Tensor(t) => Some(t.dtype),
                    _ => None,
                };
                read_npy(&dir().join(f.as_str().unwrap()), want)
            })
            .collect();
        let inputs: Vec<Input<'_>> = arrays
            .iter()
            .map(|a| Input::Tensor(TensorInput { dtype: a.dtype, sizes: &a.sizes, data: &a.data }))
            .collect();
        let outputs = loaded.execute(&inputs).unwrap_or_else(|e| panic!("{name}.{method}: {e}"));
        let want_files = run["outputs"].as_array().unwrap();
        assert_eq!(outputs.len(), want_files.len(), "{name}.{method}: output count");
        for (k, (got, f)) in outputs.iter().zip(want_files).enumerate() {
            let want = read_npy(&dir().join(f.as_str().unwrap()), None);
            let d = compare(&format!("{name}.{method} output {k}"), got, &want, 1e-4)
                .unwrap_or_else(|e| panic!("{e}"));
            println!("MATCH {name}.{method}: max abs diff {d:e}");
        }
    }
    methods.len()
}

#[test]
fn sampling_family_matches_executorch() {
    assert_eq!(run_family("sampling"), 18);
}

#[test]
fn lone_copies_match_executorch() {
    // Methods made of one contiguous copy: the compile stage must keep the copy as a step.
    assert_eq!(run_family("lone_copies"), 6);
}

#[test]
fn pt2e_quantized_linear_models_match_executorch() {
    assert_eq!(run_family("pt2e_quant"), 3);
}
