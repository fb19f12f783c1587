//! Every artifact kiln writes is read back by `kiln inspect`, `kiln verify` and `kiln dump`
//! (issue 13 item 4): the parameter commands, `pte rewrite`, `circle origins set`, `txn patch` (binary and
//! text) and `edgetpu extract` / `pack`. Plain data outputs (`.npy` arrays, raw bytes, linked
//! bitstreams) are not artifacts and are not listed. Cases on `../shared/testdata` are skipped
//! with a message when it is absent.

mod common;

use std::path::{Path, PathBuf};

use common::kiln;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixture(rel: &str) -> String {
    root().join("tests/fixtures").join(rel).display().to_string()
}

fn shared(rel: &str) -> Option<String> {
    let path = root().join("../shared/testdata").join(rel);
    path.exists().then(|| path.display().to_string())
}

fn tmp(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("kiln-roundtrip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).display().to_string()
}

fn ok(args: &[&str]) {
    let (code, _, err) = kiln(args);
    assert_eq!(code, 0, "kiln {args:?}: {err}");
}

/// `kiln inspect`, `kiln verify` and `kiln dump` all accept `path`; `inspect --json` and
/// `dump` print JSON.
fn reads_back(path: &str) {
    let (code, out, err) = kiln(&["dump", path]);
    assert_eq!(code, 0, "dump {path}: {err}");
    serde_json::from_str::<serde_json::Value>(&out).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (code, out, err) = kiln(&["inspect", "--json", path]);
    assert_eq!(code, 0, "inspect {path}: {err}");
    serde_json::from_str::<serde_json::Value>(&out).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (code, out, err) = kiln(&["verify", path]);
    assert_eq!(code, 0, "verify {path}: {out}{err}");
}

#[test]
fn every_writer_output_is_inspected_and_verified() {
    let irpa = |f: &str| fixture(&format!("irpa/{f}"));
    let written = tmp("written.irpa");
    let w = written.as_str();
    let npy = irpa("npy/typed.w.npy");
    let params: Vec<Vec<String>> = vec![
        vec![
            "create".into(),
            "--data".into(),
            format!("w={npy}"),
            "--splat".into(),
            "s=8:00".into(),
        ],
        vec!["convert".into(), irpa("small.safetensors"), irpa("small.gguf")],
        vec!["convert".into(), fixture("pte/external_constants.ptd")],
        vec!["append".into(), irpa("splats.irpa"), "--data".into(), format!("w={npy}")],
        vec!["erase".into(), irpa("data_metadata.irpa"), "meta".into()],
        vec!["replace".into(), irpa("data_metadata.irpa"), "--data".into(), format!("meta={npy}")],
        vec!["concat".into(), irpa("splats.irpa"), irpa("typed.irpa")],
        vec!["repack".into(), irpa("merged.irpa")],
        vec!["strip".into(), irpa("typed.irpa")],
        vec!["splat".into(), irpa("typed.irpa"), "w=0000803f".into()],
        vec!["rename".into(), irpa("typed.irpa"), "w=weight".into()],
        vec!["exclude".into(), irpa("typed.irpa"), "w".into()],
    ];
    for p in &params {
        let mut args = vec!["params"];
        args.extend(p.iter().map(String::as_str));
        args.extend(["-o", w]);
        ok(&args);
        reads_back(w);
        ok(&["params", "verify", w]);
    }

    let pte = tmp("rewritten.pte");
    ok(&["pte", "rewrite", &fixture("pte/xnnpack_cnn.pte"), "-o", &pte]);
    reads_back(&pte);

    if let Some(model) = shared("circle/one_vscode_while_000.circle") {
        let out = tmp("origins.circle");
        ok(&["circle", "origins", "set", &model, "-o", &out, "--source", "1=a", "--op", "0=1"]);
        reads_back(&out);
    }

    for (input, out) in [
        ("mlir_aie_add_one_two_insts.bin", "patched.bin"),
        ("mlir_aie_add_one_two_insts.txt", "patched.txt"),
    ] {
        let Some(input) = shared(&format!("aie_txn/{input}")) else { continue };
        // The unpatched input (text or binary) reads back too.
        reads_back(&input);
        let out = tmp(out);
        ok(&["txn", "patch", &input, "--arg", "0=0x80001000", "--arg", "2=0x80002000", "-o", &out]);
        reads_back(&out);
    }

    if let Some(model) = shared("edgetpu/keras_lstm_mnist_ptq_edgetpu.tflite") {
        let dir = tmp("extracted");
        ok(&["edgetpu", "extract", &model, "--out-dir", &dir]);
        let pkg = Path::new(&dir).join("package0_sg0_op0");
        let dwn = pkg.join("package.dwn").display().to_string();
        reads_back(&dwn);
        ok(&["edgetpu", "inspect", &dwn]);
        let packed = tmp("packed.dwn");
        let eo = pkg.join("exe0_execution_only/executable.bin").display().to_string();
        let pc = pkg.join("exe1_parameter_caching/executable.bin").display().to_string();
        ok(&["edgetpu", "pack", &eo, &pc, "-o", &packed]);
        reads_back(&packed);
        let (code, out, err) = kiln(&["edgetpu", "inspect", "--json", &packed]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["packages"][0]["executables"].as_array().unwrap().len(), 2);
    }

    // profile's ETDump and trace.
    let etdp = tmp("profile.etdp");
    let trace = tmp("profile-trace.json");
    ok(&["profile", &fixture("pte/tiny_cnn.pte"), "--iters", "2", "--etdump", &etdp]);
    reads_back(&etdp);
    ok(&["profile", &fixture("pte/tiny_cnn.pte"), "--iters", "1", "--trace", &trace]);
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&trace).unwrap()).unwrap();
    assert!(v["traceEvents"].as_array().is_some_and(|e| !e.is_empty()), "{v}");

    // The arrays kiln writes: run's outputs and params extract's tensors.
    let outs = tmp("run-outputs");
    ok(&["run", &fixture("pte/tiny_cnn.pte"), "--out-dir", &outs]);
    reads_back(&Path::new(&outs).join("output0.npy").display().to_string());
    let extracted = tmp("extracted-w.npy");
    ok(&["params", "extract", &irpa("typed.irpa"), "w", "-o", &extracted]);
    reads_back(&extracted);
    let (code, out, err) = kiln(&["dump", &extracted]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["values"].as_array().map(Vec::len), Some(30), "{v}");
}

#[test]
fn files_kiln_does_not_read_are_named() {
    for (file, name) in [
        ("foreign/pytorch_mobile.pte", "PyTorch Mobile"),
        ("foreign/torchscript.pt", "TorchScript"),
        ("foreign/sigmoid.onnx", "ONNX model"),
    ] {
        let (code, _, err) = kiln(&["inspect", &fixture(file)]);
        assert_eq!(code, 1, "{file}");
        assert!(err.contains(name) && err.contains("which kiln does not read"), "{file}: {err}");
    }
    // `kiln run` opens its file as a program directly; the error still says what it is.
    let (code, _, err) = kiln(&["run", &fixture("foreign/pytorch_mobile.pte")]);
    assert_eq!(code, 1);
    assert!(err.contains("PyTorch Mobile"), "{err}");
}
