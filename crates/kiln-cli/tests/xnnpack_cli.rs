//! `kiln inspect | dump | verify | run` on XNNPACK-lowered programs exported by ExecuTorch
//! 1.5.1 (`tests/fixtures/xnnpack/`): the per-delegate summary equals what `flatc` decoded from
//! the same payload with ExecuTorch's schema (the fixture's `"xnnpack"` field), the dump holds
//! every node, verify checks the payloads, and run matches ExecuTorch's int8 result.

mod common;

use std::path::PathBuf;

use common::kiln;
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/xnnpack").join(name)
}

fn expected(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(&format!("{name}.expected.json"))).unwrap())
        .unwrap()
}

#[test]
fn inspect_and_dump_show_each_delegates_graph() {
    for name in ["qs8_cnn", "transformer_encoder", "qb4w_linear"] {
        let pte = fixture(&format!("{name}.pte"));
        let pte = pte.to_str().unwrap();
        let want = expected(name)["xnnpack"].clone();
        let (code, stdout, stderr) = kiln(&["inspect", "--json", pte]);
        assert_eq!(code, 0, "{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let got = v["methods"][0]["xnnpack"].as_array().unwrap();
        assert_eq!(got.len(), want.as_array().unwrap().len(), "{name}: delegates");
        for (g, w) in got.iter().zip(want.as_array().unwrap()) {
            assert_eq!(g["nodes"], w["nodes"], "{name}");
            assert_eq!(g["values"], w["values"], "{name}");
            assert_eq!(g["constant_bytes"], w["constant_bytes"], "{name}");
            assert_eq!(g["quant"], w["quant"], "{name}");
        }
        let (code, text, _) = kiln(&["inspect", pte]);
        assert_eq!(code, 0);
        assert!(text.contains("XNNPACK graph (XN01)"), "{text}");
        let (code, stdout, stderr) = kiln(&["dump", pte]);
        assert_eq!(code, 0, "{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let payloads = v["xnnpack_payloads"].as_array().unwrap();
        for (p, w) in payloads.iter().zip(want.as_array().unwrap()) {
            let nodes: u64 =
                w["nodes"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
            assert_eq!(p["payload"]["xnodes"].as_array().unwrap().len() as u64, nodes, "{name}");
        }
    }
}

#[test]
fn verify_checks_the_payloads() {
    let pte = fixture("qs8_cnn.pte");
    let (code, _, stderr) = kiln(&["verify", pte.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    // The payload's flatbuffer identifier broken: the program is still a valid .pte, the
    // payload is not.
    let mut bytes = std::fs::read(&pte).unwrap();
    let at = bytes.windows(4).position(|w| w == b"XN01").unwrap();
    bytes[at..at + 4].copy_from_slice(b"XN99");
    let dir = std::env::temp_dir().join(format!("kiln-xnn-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("broken.pte");
    std::fs::write(&broken, &bytes).unwrap();
    let broken = broken.to_str().unwrap();
    let (code, stdout, stderr) = kiln(&["verify", broken]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let all = format!("{stdout}{stderr}");
    assert!(all.contains("delegate 0 (XnnpackBackend)") && all.contains("XN99"), "{all}");
    let (code, _, stderr) = kiln(&["run", broken]);
    assert_eq!(code, 1);
    assert!(stderr.contains("XnnpackBackend"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_matches_executorchs_int8_result() {
    let e = expected("qs8_cnn");
    let run = &e["runs"]["forward"];
    let dir = std::env::temp_dir().join(format!("kiln-xnn-run-{}", std::process::id()));
    let input = fixture(run["inputs"][0].as_str().unwrap());
    let pte = fixture("qs8_cnn.pte");
    let (code, _, stderr) = kiln(&[
        "run",
        pte.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out-dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let got = std::fs::read(dir.join("output0.npy")).unwrap();
    let got = kiln_format::npy::Npy::parse(&got).unwrap().data.to_vec();
    let want = std::fs::read(fixture(run["outputs"][0].as_str().unwrap())).unwrap();
    let want = kiln_format::npy::Npy::parse(&want).unwrap().data.to_vec();
    assert_eq!(got, want, "kiln's output differs from ExecuTorch's");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `KILN_MAX_ISA` caps the loops kiln picks; every cap runs the int8 programs to ExecuTorch's
/// outputs bit for bit (the portable loops, AVX2's pairs, AVX-VNNI's and AVX-512's quads,
/// on one and two threads: a cap above what the CPU has runs its best), and a value kiln
/// does not know is a usage error naming the ones it does.
#[test]
fn every_isa_cap_runs_int8_programs_exactly() {
    let run = |cap: &str, args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(args)
            .env("KILN_MAX_ISA", cap)
            .output()
            .expect("run kiln");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for cap in ["portable", "avx2", "avxvnni", "avx512"] {
        for name in ["qs8_cnn", "q8_conv2d", "q8_depthwise_conv2d", "q8_linear", "q8_conv1d"] {
            let path = |suffix: &str| fixture(&format!("{name}{suffix}")).display().to_string();
            for threads in ["1", "2"] {
                let (pte, input, want) =
                    (path(".pte"), path(".forward.in0.npy"), path(".forward.out0.npy"));
                let args = [
                    "run",
                    &pte,
                    "--input",
                    &input,
                    "--expect",
                    &want,
                    "--atol",
                    "0",
                    "--threads",
                    threads,
                ];
                let (code, stderr) = run(cap, &args);
                assert_eq!(code, Some(0), "{cap} {name} {threads} threads: {stderr}");
            }
        }
    }
    let pte = fixture("qs8_cnn.pte").display().to_string();
    let (code, stderr) = run("avx-512", &["run", &pte]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("KILN_MAX_ISA=\"avx-512\"") && stderr.contains("avxvnni"), "{stderr}");
}
