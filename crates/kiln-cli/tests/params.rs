//! `kiln params` end to end against the IREE 3.13.0 reference fixtures in tests/fixtures/irpa
//! (made by tools/fixtures/irpa/make_irpa_fixtures.py).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/irpa")
}

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).current_dir(fixtures()).output().unwrap()
}

fn ok(args: &[&str]) -> Vec<u8> {
    let out = kiln(args);
    assert!(out.status.success(), "kiln {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-params-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn manifest(case: &str) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(fixtures().join(format!("{case}.manifest.json"))).unwrap(),
    )
    .unwrap()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

#[test]
fn dump_table_matches_iree_dump_parameters() {
    for file in [
        "empty.irpa",
        "splats.irpa",
        "data_metadata.irpa",
        "many.irpa",
        "align64.irpa",
        "align4096.irpa",
        "merged.irpa",
        "edited.irpa",
        "stripped.irpa",
        "from_gguf.irpa",
        "from_safetensors.irpa",
        "small.safetensors",
        "small.gguf",
    ] {
        let expected = std::fs::read(fixtures().join(format!("{file}.dump.txt"))).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ok(&["params", "dump", file])),
            String::from_utf8_lossy(&expected),
            "{file}"
        );
    }
}

#[test]
fn dump_of_several_files_matches_iree_merged_scope() {
    let expected = std::fs::read(fixtures().join("multi.dump.txt")).unwrap();
    let ours = ok(&["params", "dump", "splats.irpa", "small.gguf", "small.safetensors"]);
    assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&expected));
}

#[test]
fn dump_json_lists_entries_in_table_order() {
    let v: serde_json::Value =
        serde_json::from_slice(&ok(&["params", "dump", "--json", "data_metadata.irpa"])).unwrap();
    let e = v["entries"].as_array().unwrap();
    assert_eq!(e.len(), 5);
    assert_eq!(
        e[0],
        serde_json::json!({"key": "weight", "type": "splat", "length": 600, "metadata": null})
    );
    // Offsets and lengths agree with iree-dump-parameters' table for the same file.
    let table = std::fs::read_to_string(fixtures().join("data_metadata.irpa.dump.txt")).unwrap();
    assert!(table.contains(&format!(
        "{:>16} | {:>16} | {:>16} | `meta`",
        e[2]["offset"],
        e[2]["offset"].as_u64().unwrap() + 5,
        5
    )));
    assert_eq!(e[2]["metadata"], "hello");
}

#[test]
fn create_matches_iree_create_parameters() {
    for case in ["align64", "align4096"] {
        let out = tmp(&format!("{case}.irpa"));
        // IREE's tool writes no dtype metadata.
        let mut args = vec![
            "params".to_string(),
            "create".into(),
            "--no-tensor-metadata".into(),
            "-o".into(),
            out.display().to_string(),
        ];
        args.extend(strings(&manifest(case)["kiln_create"]));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&args);
        assert!(
            std::fs::read(&out).unwrap()
                == std::fs::read(fixtures().join(format!("{case}.irpa"))).unwrap(),
            "{case}"
        );
    }
}

#[test]
fn convert_matches_iree_convert_parameters() {
    for case in ["from_safetensors", "from_gguf", "merged", "edited", "stripped"] {
        let m = manifest(case);
        let out = tmp(&format!("{case}.irpa"));
        let mut args = vec!["params".to_string(), "convert".into(), "--no-tensor-metadata".into()];
        args.extend(strings(&m["inputs"]));
        args.extend(["-o".to_string(), out.display().to_string()]);
        args.extend(strings(&m["kiln_convert"]));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ok(&args);
        assert!(
            std::fs::read(&out).unwrap()
                == std::fs::read(fixtures().join(format!("{case}.irpa"))).unwrap(),
            "{case}"
        );
    }
}

fn keys(path: &Path) -> Vec<String> {
    let v: serde_json::Value =
        serde_json::from_slice(&ok(&["params", "dump", "--json", path.to_str().unwrap()])).unwrap();
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] != "skip")
        .map(|e| e["key"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn edits_produce_valid_archives_with_the_expected_entries() {
    let out = tmp("edit.irpa");
    let o = out.to_str().unwrap();
    ok(&["params", "erase", "data_metadata.irpa", "meta", "-o", o]);
    assert_eq!(keys(&out), ["weight", "array", "bias", "w"]);
    ok(&["params", "verify", o]);
    ok(&["params", "repack", o, "-o", o]);
    assert_eq!(keys(&out), ["weight", "array", "bias", "w"]);
    assert_eq!(std::fs::read(&out).unwrap().len(), 4096);
    ok(&["params", "rename", "data_metadata.irpa", "array=arr", "w=weights", "-o", o]);
    assert_eq!(keys(&out), ["weight", "arr", "meta", "bias", "weights"]);
    ok(&["params", "exclude", "data_metadata.irpa", "weight", "bias", "-o", o]);
    assert_eq!(keys(&out), ["array", "meta", "w"]);
    ok(&["params", "splat", "data_metadata.irpa", "w=0000803f", "-o", o]);
    let v: serde_json::Value = serde_json::from_slice(&ok(&["dump", o])).unwrap();
    assert_eq!(v["entries"][4]["pattern"], "0000803f");
    assert_eq!(v["entries"][4]["length"], 132);
    ok(&["params", "strip", "data_metadata.irpa", "-o", o]);
    let v: serde_json::Value =
        serde_json::from_slice(&ok(&["params", "dump", "--json", o])).unwrap();
    assert!(v["entries"].as_array().unwrap().iter().all(|e| e["type"] == "splat"));
    // Same result as iree-convert-parameters --strip for the same input set.
    ok(&[
        "params",
        "convert",
        "data_metadata.irpa",
        "small.gguf",
        "--strip",
        "--no-tensor-metadata",
        "-o",
        o,
    ]);
    assert!(
        std::fs::read(&out).unwrap() == std::fs::read(fixtures().join("stripped.irpa")).unwrap()
    );

    // Linking: concat keeps both archives' bytes; append adds a linked header.
    ok(&["params", "concat", "data_metadata.irpa", "splats.irpa", "-o", o]);
    assert_eq!(keys(&out), ["weight", "array", "meta", "bias", "w", "p1", "p2", "p4", "p8", "p16"]);
    let linked = std::fs::read(&out).unwrap();
    assert_eq!(&linked[4096..8192], &std::fs::read(fixtures().join("splats.irpa")).unwrap()[..]);
    ok(&[
        "params",
        "append",
        "data_metadata.irpa",
        "--splat",
        "s=16:0000803f",
        "--data",
        "k=npy/align64.k.npy",
        "--from",
        "small.safetensors",
        "-o",
        o,
    ]);
    assert_eq!(keys(&out)[5..], ["s", "k", "c.idx", "b.weight", "a.bias", "e.bytes", "d.mask"]);
    ok(&["verify", o]);
    ok(&["params", "repack", o, "-o", o]);
    assert_eq!(keys(&out).len(), 12);
}

#[test]
fn replace_and_extract_round_trip() {
    let out = tmp("replace.irpa");
    let o = out.to_str().unwrap();
    let npy = tmp("w.npy");
    let n = npy.to_str().unwrap();
    // Same length: patched in place, the rest of the file is unchanged.
    let raw = tmp("meta.bin");
    std::fs::write(&raw, [9u8, 8, 7, 6, 5]).unwrap();
    ok(&[
        "params",
        "replace",
        "data_metadata.irpa",
        "--data",
        &format!("meta={}", raw.display()),
        "-o",
        o,
    ]);
    let (before, after) = (
        std::fs::read(fixtures().join("data_metadata.irpa")).unwrap(),
        std::fs::read(&out).unwrap(),
    );
    assert_eq!(before.len(), after.len());
    assert_eq!(before.iter().zip(&after).filter(|(a, b)| a != b).count(), 5);
    ok(&["params", "extract", o, "meta", "-o", n, "--raw"]);
    assert_eq!(std::fs::read(&npy).unwrap(), [9, 8, 7, 6, 5]);
    // Different length: rebuilt.
    ok(&["params", "replace", "data_metadata.irpa", "--data", "meta=npy/align64.k.npy", "-o", o]);
    ok(&["params", "extract", o, "meta", "-o", n]);
    let extracted = std::fs::read(&npy).unwrap();
    assert!(extracted.starts_with(b"\x93NUMPY"));
    assert_eq!(&extracted[extracted.len() - 5..], [7, 7, 7, 7, 7]);
    // Typed extraction keeps dtype and shape (GGUF dims are innermost first).
    ok(&["params", "extract", "small.gguf", "tok_embd.weight", "-o", n]);
    let text = String::from_utf8_lossy(&std::fs::read(&npy).unwrap()[..128]).into_owned();
    assert!(text.contains("'descr': '<f4', 'fortran_order': False, 'shape': (4, 6), }"), "{text}");
    ok(&["params", "extract", "align64.irpa", "z", "-o", n]);
    let ours = std::fs::read(&npy).unwrap();
    let numpy = std::fs::read(fixtures().join("npy/align64.z.npy")).unwrap();
    assert_eq!(ours.len(), 128 + 16384);
    assert_eq!(&ours[128..], &numpy[128..]);
    // The header kiln writes is byte-identical to NumPy's for the same dtype and shape.
    ok(&["params", "extract", "from_safetensors.irpa", "b.weight", "-o", n]);
    let st = tmp("b.npy");
    ok(&["params", "extract", "small.safetensors", "b.weight", "-o", st.to_str().unwrap()]);
    let typed = std::fs::read(&st).unwrap();
    assert!(String::from_utf8_lossy(&typed).contains("'shape': (3, 4), }"));
    assert_eq!(kiln_format::npy::header("<f4", &[4096]), numpy[..128]);
    // Splats are materialised.
    ok(&["params", "extract", "splats.irpa", "p4", "-o", n, "--raw"]);
    assert_eq!(std::fs::read(&npy).unwrap(), [0u8, 0, 0xc0, 0x3f].repeat(64));
}

#[test]
fn failures_leave_no_output_and_exit_1() {
    let out = tmp("never.irpa");
    let o = out.to_str().unwrap();
    for args in [
        &["params", "erase", "data_metadata.irpa", "nope", "-o", o][..],
        &["params", "rename", "data_metadata.irpa", "nope=x", "-o", o],
        &["params", "concat", "data_metadata.irpa", "small.gguf", "-o", o],
    ] {
        let r = kiln(args);
        assert_eq!(r.status.code(), Some(1), "{args:?}");
        assert!(!out.exists(), "{args:?} left an output");
    }
    let bad = tmp("bad.irpa");
    let mut bytes = std::fs::read(fixtures().join("data_metadata.irpa")).unwrap();
    bytes[72..80].copy_from_slice(&96u64.to_le_bytes());
    std::fs::write(&bad, &bytes).unwrap();
    let r = kiln(&["params", "verify", bad.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stdout).contains("overlaps"));
    let r = kiln(&["verify", bad.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1));
}

#[test]
fn convert_of_executorch_files_matches_iree_archives() {
    for (case, source) in [
        ("from_ptd_external_constants", "../pte/external_constants.ptd"),
        ("from_pte_xnnpack_cnn", "../pte/xnnpack_cnn.pte"),
        ("from_pte_mobilenet_v2_xnnpack", "../pte/mobilenet_v2_xnnpack.pte"),
    ] {
        let out = tmp(&format!("{case}.irpa"));
        let out_s = out.display().to_string();
        ok(&["params", "convert", "--no-tensor-metadata", source, "-o", &out_s]);
        ok(&["verify", &out_s]);
        // iree-dump-parameters' table of IREE's archive of the same tensors.
        let expected = std::fs::read(fixtures().join(format!("{case}.irpa.dump.txt"))).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&ok(&["params", "dump", &out_s])),
            String::from_utf8_lossy(&expected),
            "{case}"
        );
        if let Ok(iree) = std::fs::read(fixtures().join(format!("{case}.irpa"))) {
            assert!(std::fs::read(&out).unwrap() == iree, "{case}: not IREE's bytes");
        }
    }
}

#[test]
fn extract_and_append_take_ptd_tensors() {
    let ptd = "../pte/external_constants.ptd";
    let raw = tmp("fc1.weight.bin");
    ok(&["params", "extract", ptd, "fc1.weight", "-o", &raw.display().to_string()]);
    let from_iree = tmp("fc1.weight.iree.bin");
    ok(&[
        "params",
        "extract",
        "from_ptd_external_constants.irpa",
        "fc1.weight",
        "-o",
        &from_iree.display().to_string(),
    ]);
    let bytes = std::fs::read(&raw).unwrap();
    assert_eq!(bytes.len(), 2048);
    assert!(bytes == std::fs::read(&from_iree).unwrap());
    let appended = tmp("appended.irpa");
    let appended_s = appended.display().to_string();
    ok(&["params", "append", "splats.irpa", "--from", ptd, "-o", &appended_s]);
    ok(&["verify", &appended_s]);
    let v: serde_json::Value =
        serde_json::from_slice(&ok(&["params", "dump", "--json", &appended_s])).unwrap();
    let keys: Vec<&str> =
        v["entries"].as_array().unwrap().iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        ["p1", "p2", "p4", "p8", "p16", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    );
}

#[test]
fn malformed_flag_values_are_usage_errors() {
    let out = tmp("usage.irpa");
    let o = out.to_str().unwrap();
    for args in [
        &["params", "create", "-o", o, "--splat", "s=15:0000803f"][..],
        &["params", "create", "-o", o, "--splat", "s=3:000000"],
        &["params", "create", "-o", o, "--splat", "s"],
        &["params", "create", "-o", o, "--data", "w"],
        &["params", "create", "-o", o, "--data", "w=npy/align64.k.npy", "--alignment", "3"],
        &["params", "repack", "splats.irpa", "-o", o, "--alignment", "0"],
        &["params", "convert", "splats.irpa", "-o", o, "--rename", "p1"],
        &["params", "convert", "splats.irpa", "-o", o, "--splat", "p1=000000"],
        &["params", "rename", "splats.irpa", "p1", "-o", o],
        &["params", "replace", "splats.irpa", "--data", "p1", "-o", o],
    ] {
        let r = kiln(args);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&r.stderr));
        assert!(!out.exists(), "{args:?} left an output");
    }
}

#[test]
fn duplicate_keys_are_refused_unless_allowed() {
    let out = tmp("dups.irpa");
    let o = out.to_str().unwrap();
    let k = "npy/align64.k.npy";
    for args in [
        &["params", "create", "-o", o, "--data", &format!("a={k}"), "--splat", "a=4:00"][..],
        &["params", "convert", "splats.irpa", "splats.irpa", "-o", o],
        &["params", "rename", "data_metadata.irpa", "array=w", "-o", o],
        &["params", "append", "splats.irpa", "--splat", "p1=4:00", "-o", o],
        &["params", "concat", "splats.irpa", "splats.irpa", "-o", o],
    ] {
        let r = kiln(args);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("duplicate key") && err.contains("--allow-duplicates"), "{err}");
        assert!(!out.exists(), "{args:?} left an output");
        let mut allowed = args.to_vec();
        allowed.push("--allow-duplicates");
        ok(&allowed);
        std::fs::remove_file(&out).unwrap();
    }
}

/// The shape and descr in a .npy header.
fn npy_type(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    let npy = kiln_format::npy::Npy::parse(&bytes).unwrap();
    format!("{} {:?}", npy.descr, npy.shape)
}

#[test]
fn npy_types_survive_an_archive_and_match_iree_python() {
    // kiln's archive of the .npy files is byte for byte what IREE's
    // parameter_index_add_numpy_ndarray writes (TENSORv0 metadata included).
    let out = tmp("typed.irpa");
    let mut args =
        vec!["params".to_string(), "create".into(), "-o".into(), out.display().to_string()];
    args.extend(strings(&manifest("typed")["kiln_create"]));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&args);
    assert!(std::fs::read(&out).unwrap() == std::fs::read(fixtures().join("typed.irpa")).unwrap());
    // .npy -> .irpa -> .npy gives NumPy's own file back.
    for key in ["w", "ids", "mask", "h", "scalar"] {
        let back = tmp(&format!("typed.{key}.npy"));
        ok(&["params", "extract", out.to_str().unwrap(), key, "-o", back.to_str().unwrap()]);
        let original = fixtures().join(format!("npy/typed.{key}.npy"));
        assert!(std::fs::read(&back).unwrap() == std::fs::read(&original).unwrap(), "{key}");
    }
    assert_eq!(npy_type(&fixtures().join("npy/typed.w.npy")), "<f4 [5, 6]");
    // Replacing with the same number of bytes of another type records the new type.
    let ints = tmp("ints.npy");
    let mut bytes = Vec::new();
    kiln_format::npy::write(&mut bytes, "<i4", &[30], &[7u8; 120]).unwrap();
    std::fs::write(&ints, bytes).unwrap();
    let replaced = tmp("typed_replaced.irpa");
    let r = replaced.to_str().unwrap();
    let data = format!("w={}", ints.display());
    ok(&["params", "replace", out.to_str().unwrap(), "--data", &data, "-o", r]);
    let back = tmp("typed_replaced.npy");
    ok(&["params", "extract", r, "w", "-o", back.to_str().unwrap()]);
    assert_eq!(npy_type(&back), "<i4 [30]");
}

#[test]
fn safetensors_and_gguf_types_survive_conversion() {
    let out = tmp("typed_convert.irpa");
    let o = out.to_str().unwrap();
    ok(&["params", "convert", "small.safetensors", "small.gguf", "-o", o]);
    ok(&["params", "verify", o]);
    let n = tmp("typed_convert.npy");
    for (file, key) in [("small.safetensors", "b.weight"), ("small.gguf", "tok_embd.weight")] {
        ok(&["params", "extract", file, key, "-o", n.to_str().unwrap()]);
        let direct = npy_type(&n);
        ok(&["params", "extract", o, key, "-o", n.to_str().unwrap()]);
        assert_eq!(npy_type(&n), direct, "{key}");
    }
    assert_eq!(npy_type(&n), "<f4 [4, 6]");
    // Types NumPy lacks keep their name.
    let v: serde_json::Value =
        serde_json::from_slice(&ok(&["params", "dump", "--json", o])).unwrap();
    let q8 = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["metadata"].as_str().is_some_and(|m| m.contains("\"dtype\": \"Q8_0\"")));
    assert!(q8.is_some(), "{v}");
}

#[test]
fn params_verify_accepts_what_dump_reads() {
    for file in ["../pte/external_constants.ptd", "../pte/xnnpack_cnn.pte"] {
        ok(&["params", "dump", file]);
        let out = ok(&["params", "verify", file]);
        assert!(String::from_utf8_lossy(&out).contains("ok ("), "{file}");
    }
}
