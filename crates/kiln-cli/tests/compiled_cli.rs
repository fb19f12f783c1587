//! `kiln inspect --compiled`, `kiln run --no-compile`: the compiled plan of a shipped program,
//! its JSON shape, and the usage errors.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::kiln;
use serde_json::Value;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pte").join(name);
    p.to_string_lossy().into_owned()
}

#[test]
fn compiled_plan_of_resnet_stands_for_every_instruction() {
    let pte = fixture("resnet_small.pte");
    let (code, stdout, stderr) = kiln(&["inspect", "--compiled", "--json", &pte]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let m = &v["methods"][0];
    assert_eq!(m["name"], "forward");
    // The instruction count ExecuTorch's deserializer reports for this fixture.
    let expected: Value =
        serde_json::from_slice(&std::fs::read(fixture("resnet_small.expected.json")).unwrap())
            .unwrap();
    let n = expected["inspect"]["methods"][0]["instructions"].as_u64().unwrap();
    assert_eq!(m["instructions"].as_u64(), Some(n));
    let steps = m["steps"].as_array().unwrap();
    assert!((steps.len() as u64) < n, "nothing was fused");
    let mut origins: Vec<u64> = steps
        .iter()
        .flat_map(|s| s["origins"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap()))
        .collect();
    origins.sort_unstable();
    assert_eq!(origins, (0..n).collect::<Vec<_>>());
    for s in steps {
        assert_eq!(
            s["operators"].as_array().unwrap().len(),
            s["origins"].as_array().unwrap().len()
        );
        // Convolutions say which activation layouts they run with, a global mean the one it
        // reads; no other step has one.
        let kind = s["kind"].as_str().unwrap();
        let layout = s["layout"].as_str();
        let names = ["nchw", "nhwc"];
        if kind.starts_with("conv2d[") {
            let l = layout.unwrap_or_else(|| panic!("{s}"));
            let (a, b) = l.split_once('>').unwrap_or_else(|| panic!("{l}"));
            assert!(names.contains(&a) && names.contains(&b), "{l}");
            // And how they compute.
            let algorithms = ["gemm", "im2col", "igemm", "winograd", "few-pixels"];
            let algorithm = s["algorithm"].as_str().unwrap_or_else(|| panic!("{s}"));
            assert!(algorithms.contains(&algorithm), "{s}");
        } else if kind.starts_with("mean[") {
            assert!(names.contains(&layout.unwrap_or_else(|| panic!("{s}"))), "{s}");
        } else {
            assert_eq!(layout, None, "{s}");
        }
        if !kind.starts_with("conv2d") {
            assert_eq!(s["algorithm"].as_str(), None, "{s}");
        }
    }
    // The program's input is NCHW, and the last convolution feeds the final mean.
    let convs: Vec<&str> = steps
        .iter()
        .filter(|s| s["kind"].as_str().unwrap().starts_with("conv2d["))
        .filter_map(|s| s["layout"].as_str())
        .collect();
    assert!(convs[0].starts_with("nchw>"), "{convs:?}");
    let (code, text, _) = kiln(&["inspect", "--compiled", &pte]);
    assert_eq!(code, 0);
    assert!(text.contains("conv2d") && text.contains("origins"), "{text}");
    assert!(text.contains("layout") && text.contains("nchw>"), "{text}");
    assert!(text.contains("algorithm") && text.contains("gemm"), "{text}");
}

#[test]
fn compiled_needs_a_program_and_method_needs_compiled() {
    let ptd = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/pte/external_constants.ptd");
    let (code, _, stderr) = kiln(&["inspect", "--compiled", &ptd.to_string_lossy()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--compiled needs an ExecuTorch program"), "{stderr}");
    let (code, _, _) = kiln(&["inspect", "--method", "forward", &fixture("tiny_cnn.pte")]);
    assert_eq!(code, 2);
    let (code, _, stderr) =
        kiln(&["inspect", "--compiled", "--method", "nope", &fixture("tiny_cnn.pte")]);
    assert_eq!(code, 1);
    assert!(stderr.contains("nope"), "{stderr}");
}

#[test]
fn run_with_and_without_the_compile_stage_agree() {
    let pte = fixture("tiny_cnn.pte");
    let input = fixture("tiny_cnn.forward.in0.npy");
    let out = |extra: &[&str]| {
        let mut args = vec!["run", pte.as_str(), "--input", input.as_str(), "--json"];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = kiln(&args);
        assert_eq!(code, 0, "{stderr}");
        serde_json::from_str::<Value>(&stdout).unwrap()
    };
    let (a, b) = (out(&[]), out(&["--no-compile"]));
    let preview = |v: &Value| -> Vec<f64> {
        v["outputs"][0]["preview"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().parse().unwrap())
            .collect()
    };
    let (pa, pb) = (preview(&a), preview(&b));
    assert!(!pa.is_empty() && pa.len() == pb.len());
    for (x, y) in pa.iter().zip(&pb) {
        assert!((x - y).abs() <= 2e-6, "{pa:?} vs {pb:?}");
    }
}

#[test]
fn threads_are_chosen_reported_and_do_not_change_outputs() {
    let pte = fixture("resnet_small.pte");
    let input = fixture("resnet_small.forward.in0.npy");
    let mut outputs = Vec::new();
    for threads in ["1", "3"] {
        let dir =
            std::env::temp_dir().join(format!("kiln-threads-{}-{threads}", std::process::id()));
        let dir_s = dir.to_string_lossy().into_owned();
        let args = ["run", "--threads", threads, "--input", &input, "--out-dir", &dir_s, &pte];
        let (code, _, stderr) = kiln(&args);
        assert_eq!(code, 0, "{stderr}");
        outputs.push(std::fs::read(dir.join("output0.npy")).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
    assert!(outputs[0] == outputs[1], "1 and 3 threads gave different outputs");
    let (code, stdout, stderr) =
        kiln(&["bench", "--threads", "2", "--iters", "1", "--warmup", "0", "--json", &pte]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["threads"], 2);
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["bench", "--iters", "1", "--warmup", "0", &pte])
        .env("KILN_THREADS", "1")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("; 1 thread, asked for"));
    for bad in ["0", "257", "two"] {
        let (code, _, stderr) = kiln(&["bench", "--threads", bad, &pte]);
        assert_eq!(code, 2, "--threads {bad}: {stderr}");
    }
}
