//! The command-line contract shared by every subcommand: usage errors exit 2, renamed flags,
//! completions and `--version`.

mod common;

use std::path::PathBuf;

use common::kiln;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pte").join(name);
    p.to_string_lossy().into_owned()
}

#[test]
fn malformed_values_are_usage_errors_everywhere() {
    let pte = fixture("tiny_cnn.pte");
    let cases: &[&[&str]] = &[
        &["edgetpu", "link", "m.tflite", "--input-addr", "no_equals", "--out-dir", "d"],
        &["edgetpu", "link", "m.tflite", "--output-addr", "x=zz", "--out-dir", "d"],
        &["edgetpu", "link", "m.tflite", "--input-addr", "=0x10", "--out-dir", "d"],
        &["txn", "patch", "t.bin", "--arg", "no_equals", "-o", "o.bin"],
        &["circle", "origins", "set", "m.circle", "-o", "o.circle", "--source", "x"],
        &["run", &pte, "--input", "=a.npy"],
        &["run", &pte, "--seed", "-3"],
        &["run", &pte, "--expect", "a.npy", "--atol", "-1"],
        &["run", &pte, "--expect", "a.npy", "--atol", "NaN"],
        &["run", &pte, "--atol", "0.1"],
        &["verify"],
        &["generate", "m.pte", "--prompt-tokens", "1", "--temperature", "-1"],
        &["generate", "m.pte", "--prompt-tokens", "1", "--temperature", "1", "--top-p", "1.5"],
        &["generate", "m.pte", "--prompt-tokens", "1", "--temperature", "1", "--top-p", "0"],
    ];
    for args in cases {
        let (code, stdout, stderr) = kiln(args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
    }
}

#[test]
fn clashing_arguments_are_usage_errors() {
    let pte = fixture("tiny_cnn.pte");
    let input = fixture("tiny_cnn.forward.in0.npy");
    let named = format!("0={input}");
    for args in [
        &["run", pte.as_str(), "--input", &named, "--input", &input][..],
        &["run", pte.as_str(), "--input", &named, "--input", &named],
    ] {
        let (code, _, stderr) = kiln(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
    }
}

#[test]
fn renamed_flags_keep_one_meaning() {
    let pte = fixture("tiny_cnn.pte");
    // The old spellings that meant something else are usage errors now.
    for args in [
        &["edgetpu", "extract", "m.tflite", "-o", "d"][..],
        &["edgetpu", "extract", "m.tflite", "--output", "d"],
        &["edgetpu", "link", "m.tflite", "--input", "a=1", "--out-dir", "d"],
        &["edgetpu", "link", "m.tflite", "--output", "a=1", "--out-dir", "d"],
        &["edgetpu", "link", "m.tflite", "-o", "d"],
    ] {
        assert_eq!(kiln(args).0, 2, "{args:?}");
    }
    // `run --output-dir` stays as an alias of `--out-dir` (the same folder), for scripts.
    let dir = std::env::temp_dir().join(format!("kiln-contract-{}", std::process::id()));
    for flag in ["--out-dir", "--output-dir"] {
        let d = dir.join(flag.trim_start_matches('-'));
        let (code, _, stderr) = kiln(&["run", pte.as_str(), flag, d.to_str().unwrap()]);
        assert_eq!(code, 0, "{flag}: {stderr}");
        assert!(d.join("output0.npy").is_file(), "{flag}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
    // The new ones are accepted (the missing model then fails with exit 1).
    for args in [
        &["edgetpu", "extract", "missing.tflite", "--out-dir", "d"][..],
        &["edgetpu", "link", "missing.tflite", "--input-addr", "a=1", "--out-dir", "d"],
        &["edgetpu", "link", "missing.tflite", "--output-addr", "a=0x1", "--out-dir", "d"],
    ] {
        let (code, _, stderr) = kiln(args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains("missing.tflite"), "{args:?}: {stderr}");
    }
}

#[test]
fn completions_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, stdout, stderr) = kiln(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {stderr}");
        assert!(stdout.contains("verify") && stdout.contains("out-dir"), "{shell}: {stdout}");
    }
    assert_eq!(kiln(&["completions", "tcsh"]).0, 2);
}

#[test]
fn version_names_the_commit_and_the_profile() {
    let (code, stdout, stderr) = kiln(&["--version"]);
    assert_eq!(code, 0, "{stderr}");
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let commit = head.unwrap_or_else(|| "unknown".to_string());
    let want = format!("kiln {} (commit {commit}, ", env!("CARGO_PKG_VERSION"));
    assert!(stdout.starts_with(&want), "{stdout} does not start with {want}");
    assert!(stdout.trim_end().ends_with(" build)"), "{stdout}");
}
