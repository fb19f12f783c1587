//! `kiln edgetpu inspect --json` against `facts.json`, which an independent decoder
//! (`shared/tools/dwn_inspect.py`) produced from the same real models.

mod common;

use std::path::{Path, PathBuf};

use common::kiln;
use serde_json::Value;

fn testdata(test: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata/edgetpu");
    if dir.join("facts.json").is_file() {
        Some(dir)
    } else {
        eprintln!("SKIPPED {test}: {} is absent", dir.display());
        None
    }
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().expect("object").keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

fn f32_of(v: &Value) -> f32 {
    v.as_f64().expect("number") as f32
}

fn check_layer(ours: &Value, fact: &Value, at: &str) {
    assert_eq!(
        keys(ours),
        [
            "data_type",
            "dequantization_factor",
            "execution_count_per_inference",
            "name",
            "size_bytes",
            "x_dim",
            "y_dim",
            "z_dim",
            "zero_point"
        ],
        "{at}"
    );
    for (k, f) in [
        ("name", "name"),
        ("size_bytes", "size_bytes"),
        ("y_dim", "y"),
        ("x_dim", "x"),
        ("z_dim", "z"),
        ("data_type", "data_type"),
        ("zero_point", "zero_point"),
        ("execution_count_per_inference", "exec_count"),
    ] {
        assert_eq!(ours[k], fact[f], "{at}.{k}");
    }
    assert_eq!(
        f32_of(&ours["dequantization_factor"]),
        f32_of(&fact["deq"]),
        "{at}.dequantization_factor"
    );
}

#[test]
fn inspect_json_agrees_with_facts_for_every_sample_model() {
    let Some(dir) = testdata("inspect_json_agrees_with_facts_for_every_sample_model") else {
        return;
    };
    let facts: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("facts.json")).unwrap()).unwrap();
    let facts = facts.as_object().unwrap();
    assert!(!facts.is_empty());
    for (file, fact) in facts {
        let path = dir.join(file);
        let (code, stdout, stderr) =
            kiln(&["edgetpu", "inspect", "--json", path.to_str().unwrap()]);
        assert_eq!(code, 0, "{file}: {stderr}");
        let ours: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(keys(&ours), ["packages"]);
        let packages = ours["packages"].as_array().unwrap();
        let ops = fact["edgetpu_ops"].as_array().unwrap();
        assert_eq!(packages.len(), ops.len(), "{file}: package count");
        for (pi, (p, op)) in packages.iter().zip(ops).enumerate() {
            let at = format!("{file}: packages[{pi}]");
            assert_eq!(
                keys(p),
                ["compiler_version", "executables", "min_runtime_version", "operator", "subgraph"],
                "{at}"
            );
            assert_eq!(p["subgraph"], op["subgraph"], "{at}");
            assert_eq!(p["operator"], op["op_index"], "{at}");
            assert_eq!(p["min_runtime_version"], op["package"]["min_runtime_version"], "{at}");
            assert_eq!(p["compiler_version"], op["package"]["compiler_version"], "{at}");
            let exes = p["executables"].as_array().unwrap();
            let fexes = op["executables"].as_array().unwrap();
            assert_eq!(exes.len(), fexes.len(), "{at}: executable count");
            for (ei, (e, fe)) in exes.iter().zip(fexes).enumerate() {
                let at = format!("{at}.executables[{ei}]");
                assert_eq!(
                    keys(e),
                    [
                        "batch_size",
                        "chip",
                        "input_layers",
                        "instruction_bitstreams",
                        "name",
                        "output_layers",
                        "parameter_caching_token",
                        "parameters_bytes",
                        "scratch_size_bytes",
                        "type"
                    ],
                    "{at}"
                );
                for (k, f) in [
                    ("type", "type"),
                    ("name", "name"),
                    ("chip", "chip"),
                    ("batch_size", "batch_size"),
                    ("scratch_size_bytes", "scratch"),
                    ("parameters_bytes", "parameters_len"),
                ] {
                    assert_eq!(e[k], fe[f], "{at}.{k}");
                }
                let token = e["parameter_caching_token"].as_str().unwrap();
                assert_eq!(token.len(), 18, "{at}: token {token} must be 0x + 16 hex digits");
                let parse = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
                assert_eq!(
                    parse(token),
                    parse(fe["pc_token"].as_str().unwrap()),
                    "{at}.parameter_caching_token"
                );
                let bits = e["instruction_bitstreams"].as_array().unwrap();
                let fbits = fe["instruction_bitstreams"].as_array().unwrap();
                assert_eq!(bits.len(), fbits.len(), "{at}: bitstream count");
                for (bi, (b, fb)) in bits.iter().zip(fbits).enumerate() {
                    let at = format!("{at}.instruction_bitstreams[{bi}]");
                    assert_eq!(keys(b), ["bytes", "field_offsets"], "{at}");
                    assert_eq!(b["bytes"], fb["bitstream_len"], "{at}.bytes");
                    let fos = b["field_offsets"].as_array().unwrap();
                    let ffos = fb["field_offsets"].as_array().unwrap();
                    assert_eq!(fos.len(), ffos.len(), "{at}: field count");
                    for (fi, (fo, ffo)) in fos.iter().zip(ffos).enumerate() {
                        let at = format!("{at}.field_offsets[{fi}]");
                        assert_eq!(
                            keys(fo),
                            ["batch", "desc", "name", "offset_bit", "position"],
                            "{at}"
                        );
                        for (k, f) in [
                            ("offset_bit", "bit"),
                            ("desc", "desc"),
                            ("name", "name"),
                            ("batch", "batch"),
                            ("position", "pos"),
                        ] {
                            assert_eq!(fo[k], ffo[f], "{at}.{k}");
                        }
                    }
                }
                for (k, f) in [("input_layers", "inputs"), ("output_layers", "outputs")] {
                    let ls = e[k].as_array().unwrap();
                    let fls = fe[f].as_array().unwrap();
                    assert_eq!(ls.len(), fls.len(), "{at}.{k}: count");
                    for (li, (l, fl)) in ls.iter().zip(fls).enumerate() {
                        check_layer(l, fl, &format!("{at}.{k}[{li}]"));
                    }
                }
            }
        }
    }
}

#[test]
fn plain_inspect_recognises_edgetpu_models() {
    let Some(dir) = testdata("plain_inspect_recognises_edgetpu_models") else { return };
    let path = dir.join("testconv1-edgetpu.tflite");
    let (code, stdout, stderr) = kiln(&["inspect", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("STAND_ALONE"), "{stdout}");
    assert!(stdout.contains("30x30x16"), "{stdout}");
}

/// A sample with its custom op renamed (`edgetpu-custom-op` -> `edgetpu-custom-oq`, same
/// length) is a plain TFLite model: `kiln inspect --json` and `kiln verify` take the TFLite arm,
/// and its subgraph summary agrees with the independent decoder's facts.
#[test]
fn plain_tflite_inspect_agrees_with_facts() {
    let Some(dir) = testdata("plain_tflite_inspect_agrees_with_facts") else { return };
    let facts: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("facts.json")).unwrap()).unwrap();
    let tmp = std::env::temp_dir().join(format!("kiln-plain-tflite-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for (name, fact) in facts.as_object().unwrap() {
        let mut bytes = std::fs::read(dir.join(name)).unwrap();
        let at = bytes.windows(17).position(|w| w == b"edgetpu-custom-op").unwrap();
        bytes[at + 16] = b'q';
        let path = tmp.join(name);
        std::fs::write(&path, &bytes).unwrap();
        let p = path.to_str().unwrap();
        let (code, stdout, stderr) = kiln(&["verify", p]);
        assert_eq!(code, 0, "{name}: {stdout}{stderr}");
        assert!(stdout.contains("ok (tflite)"), "{name}: {stdout}");
        let (code, stdout, stderr) = kiln(&["inspect", "--json", p]);
        assert_eq!(code, 0, "{name}: {stderr}");
        let ours: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(ours["version"], fact["schema_version"], "{name}");
        assert_eq!(ours["description"], fact["description"], "{name}");
        assert_eq!(ours["buffers"], fact["n_buffers"], "{name}");
        let (sgs, fact_sgs) = (ours["subgraphs"].as_array().unwrap(), &fact["subgraphs"]);
        assert_eq!(sgs.len(), fact_sgs.as_array().unwrap().len(), "{name}");
        for (sg, f) in sgs.iter().zip(fact_sgs.as_array().unwrap()) {
            assert_eq!(sg["tensors"], f["n_tensors"], "{name}");
            assert_eq!(sg["operators"], f["n_ops"], "{name}");
            let counts = sg["operator_counts"].as_object().unwrap();
            assert_eq!(counts.len(), 1, "{name}: {counts:?}");
            assert_eq!(counts["CUSTOM:edgetpu-custom-oq"], f["n_ops"], "{name}");
            for (io, key) in [("inputs", "inputs"), ("outputs", "outputs")] {
                let ours: Vec<&Value> =
                    sg[io].as_array().unwrap().iter().map(|t| &t["index"]).collect();
                let theirs: Vec<&Value> = f[key].as_array().unwrap().iter().collect();
                assert_eq!(ours, theirs, "{name}: {io}");
            }
        }
        // The node tensors the decoder recorded carry names, shapes and quantization.
        let io: Vec<&Value> = ["inputs", "outputs"]
            .iter()
            .flat_map(|k| ours["subgraphs"][0][k].as_array().unwrap())
            .collect();
        for t in fact["edgetpu_ops"][0]["node_tensors"].as_array().unwrap() {
            let Some(ours) = io.iter().find(|o| o["index"] == t["idx"]) else { continue };
            assert_eq!(ours["name"], t["name"], "{name}");
            assert_eq!(ours["shape"], t["shape"], "{name}");
            assert_eq!(ours["zero_point"], t["zp"], "{name}");
            let scale: Vec<f32> = ours["scale"].as_array().unwrap().iter().map(f32_of).collect();
            let fact_scale: Vec<f32> = t["scale"].as_array().unwrap().iter().map(f32_of).collect();
            assert_eq!(scale, fact_scale, "{name}");
        }
        let (code, stdout, _) = kiln(&["inspect", p]);
        assert_eq!(code, 0);
        assert!(stdout.contains("CUSTOM:edgetpu-custom-oq"), "{name}: {stdout}");
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
