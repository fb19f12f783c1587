//! `kiln verify FILE...`: many files, `--json`, one-line reasons on standard error, `--strict`.

mod common;

use std::fs;
use std::path::PathBuf;

use common::{kiln, s, scratch};
use kiln_format::pte::{model::ProgramModel, writer, Program};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pte").join(name)
}

#[test]
fn many_files_with_one_line_reasons_on_standard_error() {
    let dir = scratch("verify-cli", "many");
    let (good, other) = (fixture("tiny_cnn.pte"), fixture("multi_method.pte"));
    let (code, stdout, stderr) = kiln(&["verify", s(&good), s(&other)]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(stdout.lines().all(|l| l.ends_with(": ok (pte)")), "{stdout}");
    // A truncated program, a missing file and a folder beside a good file.
    let truncated = dir.join("truncated.pte");
    fs::write(&truncated, &fs::read(&good).unwrap()[..2000]).unwrap();
    let missing = dir.join("missing.pte");
    let (code, stdout, stderr) = kiln(&["verify", s(&truncated), s(&good), s(&missing), s(&dir)]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert_eq!(stdout, format!("{}: ok (pte)\n", good.display()));
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "one line per failing file: {stderr}");
    assert!(lines[0].starts_with(&format!("{}: invalid: ", truncated.display())), "{stderr}");
    assert!(lines[1].starts_with(&format!("{}: invalid: ", missing.display())), "{stderr}");
    assert!(lines[2].contains("is a directory"), "{stderr}");
    // The same as JSON.
    let (code, stdout, _) =
        kiln(&["verify", "--json", s(&truncated), s(&good), s(&missing), s(&dir)]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let v = v.as_array().unwrap();
    assert_eq!(v.len(), 4);
    for item in v {
        let keys: Vec<&str> = item.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["file", "kind", "ok", "error"]);
    }
    assert_eq!(v[0]["kind"], "pte");
    assert_eq!(v[0]["ok"], false);
    assert!(!v[0]["error"].as_str().unwrap().contains('\n'));
    assert_eq!(v[1]["file"], s(&good));
    assert_eq!((&v[1]["ok"], &v[1]["error"]), (&Value::Bool(true), &Value::Null));
    assert_eq!((&v[2]["kind"], &v[2]["ok"]), (&Value::Null, &Value::Bool(false)));
    assert!(v[2]["error"].as_str().unwrap().contains("missing.pte"));
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn strict_flags_trailing_data_and_oversized_plans() {
    let dir = scratch("verify-cli", "strict");
    let bytes = fs::read(fixture("tiny_cnn.pte")).unwrap();
    let mut trailing = bytes.clone();
    trailing.extend_from_slice(&[0u8; 100]);
    let trailing_path = dir.join("trailing.pte");
    fs::write(&trailing_path, &trailing).unwrap();
    assert_eq!(kiln(&["verify", s(&trailing_path)]).0, 0, "valid without --strict");
    let (code, _, stderr) = kiln(&["verify", "--strict", s(&trailing_path)]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("100 bytes of trailing data"), "{stderr}");
    // An arena planned 1 MiB larger than the tensors need.
    let mut model = ProgramModel::from_program(&Program::open(&bytes).unwrap()).unwrap();
    let sizes = &mut model.methods[0].non_const_buffer_sizes;
    assert!(sizes.len() > 1, "the fixture has a planned arena");
    sizes[1] += 1 << 20;
    let big = dir.join("big_plan.pte");
    fs::write(&big, writer::write(&model).unwrap()).unwrap();
    assert_eq!(kiln(&["verify", s(&big)]).0, 0, "valid without --strict");
    let (code, _, stderr) = kiln(&["verify", "--strict", s(&big)]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("plans memory arena 1 of"), "{stderr}");
    // The fixtures themselves pass.
    let (code, _, stderr) = kiln(&["verify", "--strict", s(&fixture("tiny_cnn.pte"))]);
    assert_eq!(code, 0, "{stderr}");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn strict_reports_misaligned_8_byte_values_that_plain_verify_accepts() {
    // ExecuTorch's xor training program: an empty int64 list at offset 10444.
    let xor = format!("{}/../../tests/fixtures/pte-compat/xor.pte", env!("CARGO_MANIFEST_DIR"));
    let (code, _, stderr) = kiln(&["verify", &xor]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = kiln(&["verify", "--strict", &xor]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("not 8-byte aligned"), "{stderr}");
    assert!(stderr.contains("int_list.items at offset 10444"), "{stderr}");
}
