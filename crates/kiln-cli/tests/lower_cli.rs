//! `kiln lower --to npu`: programs ExecuTorch exported, lowered into `KilnNpuBackend`
//! delegates and run through the dispatcher on kiln's reference NPU device, give ExecuTorch's
//! outputs (the `.npy` files its runtime wrote for the unlowered program) within 1e-4.
//!
//! - Single-node programs: every method of the op fixtures (`tests/fixtures/ops`) the lowering
//!   takes; the test names the methods that must be taken, one or more per NPU operator.
//! - Models (`tests/fixtures/pte`): a CNN with residual blocks, mobilenet_v2, a transformer
//!   block, a ViT, an LSTM, a GRU, an upsampling model, a dynamic-shape model (every recorded
//!   run) and a multi-method program; at most half of ExecuTorch's instruction count stays
//!   outside NPU delegates for the CNNs, the ViT and the LSTM.
//! - `kiln inspect` shows each delegate's nodes with their original instructions and its
//!   buffers; `kiln txn inspect --delegate` reads its transaction; errors and usage.

mod common;

use std::path::{Path, PathBuf};

use common::{kiln, s, scratch};
use serde_json::Value;

fn fixtures(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(sub)
}

/// Lowers `pte` into `out`; the `--json` report.
fn lower(pte: &Path, out: &Path) -> Value {
    let (code, stdout, stderr) = kiln(&["lower", s(pte), "--to", "npu", "-o", s(out), "--json"]);
    assert_eq!(code, 0, "{}: {stderr}", pte.display());
    serde_json::from_str(&stdout).unwrap()
}

/// Runs `method` of `pte` with the inputs `dir/stem.in*.npy` and checks every output against
/// `dir/stem.out*.npy` within `atol`; the number of outputs checked.
fn run_matches(pte: &Path, method: &str, dir: &Path, stem: &str, atol: &str) -> usize {
    let files = |kind: &str| -> Vec<String> {
        (0..)
            .map(|i| dir.join(format!("{stem}.{kind}{i}.npy")))
            .take_while(|p| p.exists())
            .map(|p| s(&p).to_string())
            .collect()
    };
    let (inputs, outputs) = (files("in"), files("out"));
    let mut args = vec!["run", s(pte), "--method", method];
    for i in &inputs {
        args.extend(["--input", i]);
    }
    for o in &outputs {
        args.extend(["--expect", o]);
    }
    args.extend(["--atol", atol]);
    let (code, stdout, stderr) = kiln(&args);
    assert_eq!(code, 0, "{} {method}: {stdout}{stderr}", pte.display());
    outputs.len()
}

/// Per op fixture file, methods that must be lowered, with the operator whose every call the
/// lowering must take into NPU delegates (a method may keep others outside, such as an int64
/// constant cast to float).
const SINGLE_NODE: &[(&str, &[(&str, &str)])] = &[
    (
        "elementwise",
        &[
            ("add_broadcast", "aten::add.out"),
            ("add_scalar", "aten::add.out"),
            ("mul_broadcast", "aten::mul.out"),
            ("clamp", "aten::clamp.out"),
        ],
    ),
    (
        "unary",
        &[
            ("relu", "aten::relu.out"),
            ("hardtanh", "aten::hardtanh.out"),
            ("sigmoid", "aten::sigmoid.out"),
            ("silu", "aten::sigmoid.out"),
            ("softmax", "aten::_softmax.out"),
            ("gelu", "aten::gelu.out"),
            ("gelu_tanh", "aten::gelu.out"),
        ],
    ),
    (
        "matmul",
        &[
            ("bmm", "aten::bmm.out"),
            ("linear", "aten::addmm.out"),
            ("mm", "aten::mm.out"),
            ("matmul_broadcast", "aten::bmm.out"),
            ("conv2d_groups", "aten::convolution.out"),
        ],
    ),
    (
        "norm",
        &[
            ("batch_norm", "aten::_native_batch_norm_legit_no_training.out"),
            ("layer_norm", "aten::native_layer_norm.out"),
        ],
    ),
    (
        "pool",
        &[
            ("max_pool2d", "aten::max_pool2d_with_indices.out"),
            ("max_pool2d_pad_stride", "aten::max_pool2d_with_indices.out"),
            ("max_pool2d_dilation", "aten::max_pool2d_with_indices.out"),
            ("max_pool2d_ceil", "aten::max_pool2d_with_indices.out"),
            ("avg_pool2d", "aten::avg_pool2d.out"),
            ("avg_pool2d_pad", "aten::avg_pool2d.out"),
            ("avg_pool2d_ceil", "aten::avg_pool2d.out"),
            ("avg_pool2d_divisor", "aten::avg_pool2d.out"),
        ],
    ),
    ("reduce", &[("mean_dim", "aten::mean.out"), ("mean_keepdim", "aten::mean.out")]),
    (
        "views",
        &[
            ("cat", "aten::cat.out"),
            ("stack", "aten::cat.out"),
            ("permute", "aten::permute_copy.out"),
            ("transpose", "aten::permute_copy.out"),
            ("pixel_shuffle", "aten::permute_copy.out"),
            ("expand", "aten::expand_copy.out"),
            ("squeeze_unsqueeze", "aten::unsqueeze_copy.out"),
        ],
    ),
];

/// The operators of the unlowered method `method` of op fixture `file`, by name.
fn operators_of(pte: &Path, method: &str) -> Vec<String> {
    let (code, json, stderr) = kiln(&["inspect", "--json", s(pte)]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&json).unwrap();
    let m = v["methods"].as_array().unwrap().iter().find(|m| m["name"] == method).unwrap();
    m["operators"].as_array().unwrap().iter().map(|o| o.as_str().unwrap().to_string()).collect()
}

#[test]
fn single_node_programs_match_executorch() {
    let dir = scratch("lower", "single");
    let ops = fixtures("ops");
    let (mut methods, mut outputs) = (0, 0);
    for (file, required) in SINGLE_NODE {
        let pte = ops.join(format!("{file}.pte"));
        let out = dir.join(format!("{file}.npu.pte"));
        let report = lower(&pte, &out);
        for m in report["methods"].as_array().unwrap() {
            let name = m["method"].as_str().unwrap();
            if let Some((_, op)) = required.iter().find(|(r, _)| *r == name) {
                assert!(
                    operators_of(&pte, name).iter().any(|o| o == op),
                    "{file}.{name} calls {op}"
                );
                assert!(m["left"].get(*op).is_none(), "{file}.{name}: {op} stayed outside: {m}");
            }
            if m["delegates"].as_array().unwrap().is_empty() {
                continue;
            }
            outputs += run_matches(&out, name, &ops, &format!("{file}.{name}"), "1e-4");
            methods += 1;
        }
    }
    let required: usize = SINGLE_NODE.iter().map(|(_, r)| r.len()).sum();
    assert!(methods >= required, "{methods} methods lowered and run, {required} required");
    eprintln!("{methods} lowered single-node methods, {outputs} outputs checked");
}

#[test]
fn models_match_executorch_with_most_instructions_delegated() {
    let dir = scratch("lower", "models");
    let pte = fixtures("pte");
    for (name, at_most_half) in [
        ("resnet_small", true),
        ("mobilenet_v2_portable", true),
        ("tiny_cnn", true),
        ("transformer_block", false),
        ("vit_small", true),
        ("lstm", true),
        ("gru", false),
        ("upsample_concat", false),
    ] {
        let out = dir.join(format!("{name}.npu.pte"));
        let report = lower(&pte.join(format!("{name}.pte")), &out);
        let m = &report["methods"][0];
        let expected: Value = serde_json::from_slice(
            &std::fs::read(pte.join(format!("{name}.expected.json"))).unwrap(),
        )
        .unwrap();
        // ExecuTorch's own count of the unlowered program's instructions.
        let before = expected["inspect"]["methods"][0]["instructions"].as_u64().unwrap();
        assert_eq!(m["instructions_before"], before, "{name}");
        let outside = m["outside_delegates"].as_u64().unwrap();
        assert!(!m["delegates"].as_array().unwrap().is_empty(), "{name}: {m}");
        if at_most_half {
            assert!(2 * outside <= before, "{name}: {outside} of {before} outside: {m}");
        }
        run_matches(&out, "forward", &pte, &format!("{name}.forward"), "1e-4");
    }
    // Dynamic shapes: only the static part lowers, and every run ExecuTorch recorded matches.
    let out = dir.join("dynamic_shape.npu.pte");
    let report = lower(&pte.join("dynamic_shape.pte"), &out);
    assert!(!report["methods"][0]["delegates"].as_array().unwrap().is_empty(), "{report}");
    for run in ["forward", "forward.run1", "forward.run2", "forward.run3"] {
        run_matches(&out, "forward", &pte, &format!("dynamic_shape.{run}"), "1e-4");
    }
    // Several methods: each lowered on its own.
    let out = dir.join("multi_method.npu.pte");
    lower(&pte.join("multi_method.pte"), &out);
    for m in ["forward", "encode", "decode"] {
        run_matches(&out, m, &pte, &format!("multi_method.{m}"), "1e-4");
    }
}

#[test]
fn inspect_shows_delegates_and_txn_inspect_reads_their_transactions() {
    let dir = scratch("lower", "inspect");
    let out = dir.join("tiny_cnn.npu.pte");
    lower(&fixtures("pte").join("tiny_cnn.pte"), &out);
    let (code, text, stderr) = kiln(&["inspect", s(&out)]);
    assert_eq!(code, 0, "{stderr}");
    assert!(text.contains("KilnNpuBackend"), "{text}");
    assert!(text.contains("aten::convolution.out"), "{text}");
    assert!(text.contains("buffers: input"), "{text}");
    let (code, json, _) = kiln(&["inspect", "--json", s(&out)]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&json).unwrap();
    let npu = v["methods"][0]["npu"].as_array().unwrap();
    assert!(!npu.is_empty());
    let d = &npu[0];
    // Every node names the original instructions it stands for.
    for node in d["nodes"].as_array().unwrap() {
        assert!(!node["instructions"].as_array().unwrap().is_empty(), "{node}");
        assert!(!node["operators"].as_array().unwrap().is_empty(), "{node}");
    }
    let delegate = d["delegate"].to_string();
    let (code, txn, stderr) = kiln(&["txn", "inspect", s(&out), "--delegate", &delegate, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let t: Value = serde_json::from_str(&txn).unwrap();
    let ops = t["ops"].as_array().unwrap();
    let launches = ops.iter().filter(|o| o.to_string().contains("KILN_LAUNCH")).count();
    assert_eq!(launches, d["nodes"].as_array().unwrap().len(), "{txn}");
    // The lowered program verifies, and --compiled loads it with the NPU backend.
    let (code, _, stderr) = kiln(&["verify", s(&out)]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = kiln(&["inspect", "--compiled", s(&out)]);
    assert_eq!(code, 0, "{stderr}");
    // A damaged delegate fails verify, which names it.
    let mut bytes = std::fs::read(&out).unwrap();
    let at = bytes.windows(4).position(|w| w == b"KNPU").unwrap();
    bytes[at + 4] = 7; // the version
    let bad = dir.join("bad.pte");
    std::fs::write(&bad, &bytes).unwrap();
    let (code, stdout, stderr) = kiln(&["verify", s(&bad)]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("delegate 0 (KilnNpuBackend)"),
        "{stdout}{stderr}"
    );
}

#[test]
fn lower_refuses_unknown_targets_and_bad_input() {
    let dir = scratch("lower", "errors");
    let out = dir.join("x.pte");
    let tiny = fixtures("pte").join("tiny_cnn.pte");
    let (code, _, stderr) = kiln(&["lower", s(&tiny), "--to", "gpu", "-o", s(&out)]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("npu"), "{stderr}");
    let junk = dir.join("junk.pte");
    std::fs::write(&junk, b"not a program").unwrap();
    let (code, _, stderr) = kiln(&["lower", s(&junk), "--to", "npu", "-o", s(&out)]);
    assert_eq!(code, 1, "{stderr}");
    assert!(!out.exists(), "no output is written on error");
}
