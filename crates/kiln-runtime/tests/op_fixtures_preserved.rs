//! The op-level fixtures exported with `preserve_ops` by `tools/fixtures/export_ops_preserved.py`
//! (`tests/fixtures/ops/{pad_kernels,topk_kernels}`): each method is a single portable
//! KernelCall (`reflection_pad*`, `replication_pad*`, `constant_pad_nd`, `topk.values`) and its
//! outputs must match ExecuTorch's recorded ones (float32 within 1e-6, integers exactly).

mod common;

use std::path::PathBuf;

use common::{compare, read_npy};
use kiln_runtime::{Input, Program, TensorInput, ValueMeta};
use serde_json::Value;

fn ops_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ops")
}

/// Runs every method of fixture `name`; returns the number of methods checked.
fn run_fixture(name: &str) -> usize {
    let dir = ops_dir();
    let text = std::fs::read_to_string(dir.join(format!("{name}.expected.json"))).unwrap();
    let expected: Value = serde_json::from_str(&text).unwrap();
    let program = Program::load(dir.join(expected["files"]["pte"].as_str().unwrap())).unwrap();
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
                read_npy(&dir.join(f.as_str().unwrap()), want)
            })
            .collect();
        let inputs: Vec<Input<'_>> = arrays
            .iter()
            .map(|a| Input::Tensor(TensorInput { dtype: a.dtype, sizes: &a.sizes, data: &a.data }))
            .collect();
        let outputs = loaded.execute(&inputs).unwrap_or_else(|e| panic!("{name}.{method}: {e}"));
        let want = run["outputs"].as_array().unwrap();
        assert_eq!(outputs.len(), want.len(), "{name}.{method}: output count");
        for (k, (got, f)) in outputs.iter().zip(want).enumerate() {
            let w = read_npy(&dir.join(f.as_str().unwrap()), None);
            compare(&format!("{name}.{method} output {k}"), got, &w, 1e-6)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    methods.len()
}

#[test]
fn pad_kernels_match_executorch() {
    let n = run_fixture("pad_kernels");
    assert!(n >= 10, "only {n} pad methods");
}

#[test]
fn topk_kernels_match_executorch() {
    let n = run_fixture("topk_kernels");
    assert!(n >= 6, "only {n} topk methods");
}
