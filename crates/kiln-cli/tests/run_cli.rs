//! `kiln run`: inputs by name, `--seed`, `--expect`/`--atol`, the per-output summary, the
//! method choice and float64 inputs.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{kiln, s, scratch};
use kiln_format::npy::Npy;
use kiln_format::pte::{model::ProgramModel, writer, Program};
use serde_json::Value;

fn fixture(dir: &str, name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(dir).join(name)
}

/// `path`'s array with its float32 data changed by `edit`, written as `out`.
fn edited_f32(path: &Path, out: &Path, edit: impl FnOnce(&mut Vec<f32>)) {
    let bytes = fs::read(path).unwrap();
    let npy = Npy::parse(&bytes).unwrap();
    assert_eq!(npy.descr, "<f4");
    let mut values: Vec<f32> =
        npy.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    edit(&mut values);
    let mut file = bytes[..bytes.len() - npy.data.len()].to_vec();
    file.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    fs::write(out, file).unwrap();
}

#[test]
fn expect_compares_outputs_and_names_the_worst_element() {
    let dir = scratch("run-cli", "expect");
    let pte = fixture("pte", "tiny_cnn.pte");
    let input = fixture("pte", "tiny_cnn.forward.in0.npy");
    let output = fixture("pte", "tiny_cnn.forward.out0.npy");
    let (code, stdout, stderr) =
        kiln(&["run", s(&pte), "--input", s(&input), "--expect", s(&output), "--atol", "1e-4"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("min ") && stdout.contains("mean ") && stdout.contains("NaN 0"));
    let wrong = dir.join("wrong.npy");
    edited_f32(&output, &wrong, |v| {
        v[3] += 0.5;
        v[1] -= 0.01;
    });
    let (code, _, stderr) =
        kiln(&["run", s(&pte), "--input", s(&input), "--expect", s(&wrong), "--atol", "1e-4"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("output 0"), "{stderr}");
    assert!(stderr.contains("2 of"), "{stderr}");
    assert!(stderr.contains("worst at index [0, 3]"), "{stderr}");
    // The wrong shape is a mismatch too.
    let (code, _, stderr) = kiln(&["run", s(&pte), "--input", s(&input), "--expect", s(&input)]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("output 0") && stderr.contains("shape"), "{stderr}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn summary_json_has_min_max_mean_and_nan() {
    let pte = fixture("pte", "tiny_cnn.pte");
    let input = fixture("pte", "tiny_cnn.forward.in0.npy");
    let (code, stdout, stderr) = kiln(&["run", s(&pte), "--input", s(&input), "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let stats = &v["outputs"][0]["stats"];
    let (min, max, mean) = (
        stats["min"].as_f64().unwrap(),
        stats["max"].as_f64().unwrap(),
        stats["mean"].as_f64().unwrap(),
    );
    assert!(min <= mean && mean <= max, "{stats}");
    assert_eq!(stats["nan"], 0);
}

#[test]
fn seed_changes_generated_inputs_and_repeats() {
    let pte = fixture("pte", "tiny_cnn.pte");
    let preview = |seed: &str| {
        let (code, stdout, stderr) = kiln(&["run", s(&pte), "--seed", seed, "--json"]);
        assert_eq!(code, 0, "{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        v["outputs"][0]["preview"].clone()
    };
    assert_eq!(preview("1"), preview("1"));
    assert_ne!(preview("1"), preview("2"));
}

#[test]
fn inputs_by_name_or_index() {
    let pte = fixture("pte", "tiny_cnn.pte");
    let input = fixture("pte", "tiny_cnn.forward.in0.npy");
    let output = fixture("pte", "tiny_cnn.forward.out0.npy");
    let named = format!("0={}", s(&input));
    let (code, _, stderr) = kiln(&["run", s(&pte), "--input", &named, "--expect", s(&output)]);
    assert_eq!(code, 0, "{stderr}");
    // An LLM export names its keyword argument `input_pos`.
    let llm = fixture("llm", "fp32.pte");
    let (code, _, stderr) = kiln(&["run", s(&llm), "--input", "nope=x.npy"]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("no input \"nope\" (inputs: 0, input_pos)"), "{stderr}");
    // Named and positional together is refused.
    let (code, _, stderr) = kiln(&["run", s(&pte), "--input", &named, "--input", s(&input)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("by name"), "{stderr}");
}

#[test]
fn float64_arrays_are_cast_to_float32_inputs() {
    let dir = scratch("run-cli", "f64");
    let pte = fixture("pte", "tiny_cnn.pte");
    let input = fixture("pte", "tiny_cnn.forward.in0.npy");
    let bytes = fs::read(&input).unwrap();
    let npy = Npy::parse(&bytes).unwrap();
    let mut f64_file = kiln_format::npy::header("<f8", &npy.shape);
    for c in npy.data.chunks_exact(4) {
        f64_file.extend(f64::from(f32::from_le_bytes(c.try_into().unwrap())).to_le_bytes());
    }
    let wide = dir.join("wide.npy");
    fs::write(&wide, f64_file).unwrap();
    let output = fixture("pte", "tiny_cnn.forward.out0.npy");
    let (code, _, stderr) =
        kiln(&["run", s(&pte), "--input", s(&wide), "--expect", s(&output), "--atol", "1e-4"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("float64 array cast to the method's float32"), "{stderr}");
    fs::remove_dir_all(&dir).unwrap();
}

/// `fixture` with its methods renamed by `rename`, written to `out`.
fn renamed(fixture: &Path, out: &Path, rename: &[(&str, &str)]) {
    let bytes = fs::read(fixture).unwrap();
    let mut model = ProgramModel::from_program(&Program::open(&bytes).unwrap()).unwrap();
    for m in &mut model.methods {
        if let Some((_, to)) = rename.iter().find(|(from, _)| *from == m.name) {
            m.name = to.to_string();
        }
    }
    fs::write(out, writer::write(&model).unwrap()).unwrap();
}

#[test]
fn without_forward_the_only_method_runs_or_the_methods_are_listed() {
    let dir = scratch("run-cli", "methods");
    let single = dir.join("predict.pte");
    renamed(&fixture("pte", "tiny_cnn.pte"), &single, &[("forward", "predict")]);
    let input = fixture("pte", "tiny_cnn.forward.in0.npy");
    let (code, stdout, stderr) = kiln(&["run", s(&single), "--input", s(&input)]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(" predict ("), "{stdout}");
    assert!(stderr.contains("running \"predict\""), "{stderr}");
    let multi = dir.join("multi.pte");
    renamed(&fixture("pte", "multi_method.pte"), &multi, &[("forward", "main")]);
    let (code, _, stderr) = kiln(&["run", s(&multi)]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("--method"), "{stderr}");
    for name in ["main", "encode", "decode"] {
        assert!(stderr.contains(name), "{name}: {stderr}");
    }
    fs::remove_dir_all(&dir).unwrap();
}
