//! `.pte` fixtures exported by ExecuTorch 1.5.1 (`tools/fixtures/export_pte.py`): kiln's
//! summary must equal what ExecuTorch's own deserializer recorded, and random mutations of the
//! fixtures must never panic the reader.

mod common;

use std::fs;
use std::path::PathBuf;

use kiln_format::pte::{self, Program, Value};
use serde_json::Value as Json;

/// Every `tests/fixtures/pte/*.expected.json` with the bytes of its `.pte`.
fn fixtures() -> Vec<(PathBuf, Json, Vec<u8>)> {
    let dir = common::fixture("pte");
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir).expect("tests/fixtures/pte exists") {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".expected.json") {
            continue;
        }
        let expected: Json = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        let pte = expected["files"]["pte"].as_str().expect("files.pte names the program");
        let bytes = fs::read(dir.join(pte)).unwrap();
        out.push((dir.join(pte), expected, bytes));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 7, "expected at least 7 pte fixtures, found {}", out.len());
    out
}

#[test]
fn inspect_matches_executorch_deserializer() {
    for (path, expected, bytes) in fixtures() {
        let program = Program::open(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let summary = serde_json::to_value(pte::summary::summarize(&program).unwrap()).unwrap();
        let want = &expected["inspect"];
        assert_eq!(summary["format"], want["format"], "{}", path.display());
        assert_eq!(summary["segments"], want["segments"], "{}: segments", path.display());
        let got_methods = summary["methods"].as_array().unwrap();
        let want_methods = want["methods"].as_array().unwrap();
        assert_eq!(got_methods.len(), want_methods.len(), "{}: method count", path.display());
        for (got, want) in got_methods.iter().zip(want_methods) {
            for key in ["name", "inputs", "outputs", "instructions", "operators", "delegates"] {
                let got_field = match key {
                    // Compare only the recorded keys of each input/output (kiln adds dynamism).
                    "inputs" | "outputs" => Json::Array(
                        got[key]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|v| serde_json::json!({"dtype": v["dtype"], "shape": v["shape"]}))
                            .collect(),
                    ),
                    _ => got[key].clone(),
                };
                assert_eq!(
                    got_field,
                    want[key],
                    "{}: method {} {key}",
                    path.display(),
                    want["name"]
                );
            }
        }
    }
}

/// Touches every accessor the runtime uses, so mutation tests exercise them all.
fn walk(program: &Program<'_>) {
    let _ = pte::summary::summarize(program);
    for m in program.methods() {
        for i in 0..m.num_values() {
            if let Ok(Value::Tensor(t)) = m.value(i) {
                if let pte::TensorData::Constant(idx) = t.data() {
                    let _ = program.constant_data(idx as usize, t.nbytes());
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
    for i in 0..program.num_segments() {
        let _ = program.segment_bytes(i);
    }
}

#[test]
fn accessors_work_on_every_fixture() {
    for (path, _, bytes) in fixtures() {
        let program = Program::open(&bytes).unwrap();
        walk(&program);
        for m in program.methods() {
            for chain in m.chains() {
                for ins in chain.instructions() {
                    ins.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                }
            }
            for i in 0..m.num_values() {
                m.value(i).unwrap();
            }
        }
    }
}

#[test]
fn mutated_fixtures_never_panic() {
    let fixtures = fixtures();
    let mut rng = common::Rng::new(0x6b69_6c6e);
    let (mut ok, mut rejected) = (0, 0);
    for i in 0..1000 {
        let (_, _, original) = &fixtures[i % fixtures.len()];
        let mutated = common::mutate(original, &mut rng);
        match Program::open(&mutated) {
            Ok(p) => {
                walk(&p);
                ok += 1;
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                rejected += 1;
            }
        }
    }
    eprintln!("1000 mutations: {ok} still valid, {rejected} rejected");
    assert!(rejected > 0);
}
