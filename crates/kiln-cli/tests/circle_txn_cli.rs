//! The script-facing interface of `kiln circle origins` and `kiln txn` on the real files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{json, Value};

/// `../shared/testdata/<sub>` beside the repository, or `None` after a visible skip message.
fn shared_testdata(sub: &str, test: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata").join(sub);
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIPPED {test}: {} is absent", dir.display());
        None
    }
}

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().unwrap()
}

fn json(args: &[&str]) -> Value {
    let out = kiln(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn origins_set_then_dump_json() {
    let Some(dir) = shared_testdata("circle", "origins_set_then_dump_json") else { return };
    let model = dir.join("one_vscode_while_000.circle");
    let model = model.to_str().unwrap();
    let empty = json(&["circle", "origins", "dump", "--json", model]);
    assert_eq!((&empty["source_table"], &empty["op_table"]), (&json!({}), &json!({})));
    // Without tables, luci's importer gives operator i the origin (i, name of its first
    // output tensor).
    let dump = json(&["dump", model]);
    let expected_singles: Vec<Value> = dump["subgraphs"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .flat_map(|(s, sg)| {
            let tensors = sg["tensors"].clone();
            sg["operators"].as_array().unwrap().iter().enumerate().map(move |(i, op)| {
                let out = op["outputs"][0].as_u64().unwrap() as usize;
                json!({"subgraph": s, "operator": i,
                       "origin": [{"id": i, "name": tensors[out]["name"]}]})
            })
        })
        .collect();
    assert_eq!(empty["operators"], json!(expected_singles));

    let out = temp("while_origins.circle");
    let out_s = out.to_str().unwrap();
    let status = kiln(&[
        "circle", "origins", "set", model, "-o", out_s, "--source", "1=node1", "--source",
        "2=node 2", "--op", "0=1,2", "--op", "1=2",
    ]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let mut dumped = json(&["circle", "origins", "dump", "--json", out_s]);
    // Composite origins, named from the source table: the op table is model-wide, so operator
    // 0 of every subgraph gets {1, 2}; only subgraph 2 has an operator 1.
    let both = json!([{"id": 1, "name": "node1"}, {"id": 2, "name": "node 2"}]);
    let ops = dumped.as_object_mut().unwrap().remove("operators").unwrap();
    assert_eq!(
        ops,
        json!([
            {"subgraph": 0, "operator": 0, "origin": both},
            {"subgraph": 1, "operator": 0, "origin": both},
            {"subgraph": 2, "operator": 0, "origin": both},
            {"subgraph": 2, "operator": 1, "origin": [{"id": 2, "name": "node 2"}]},
        ])
    );
    assert_eq!(
        dumped,
        json!({
            "source_table": {"1": "node1", "2": "node 2"},
            "op_table": {"0": [1, 2], "1": [2]}
        })
    );
    // inspect shows the decoded tables; verify accepts the file.
    let inspect = json(&["inspect", "--json", out_s]);
    assert_eq!(inspect["origins"], dumped);
    assert_eq!(inspect["subgraphs"].as_array().unwrap().len(), 3);
    assert!(kiln(&["verify", out_s]).status.success());

    // An op naming an id with no source entry is a usage error (exit 1), and OUT is not written.
    let bad = temp("bad.circle");
    let status =
        kiln(&["circle", "origins", "set", model, "-o", bad.to_str().unwrap(), "--op", "0=9"]);
    assert_eq!(status.status.code(), Some(1));
    assert!(!bad.exists());
}

#[test]
fn txn_inspect_json_shape() {
    let Some(dir) = shared_testdata("aie_txn", "txn_inspect_json_shape") else { return };
    for name in ["dd_gap_a16c16_26431_49_1_1024.bin", "mlir_aie_add_one_two_insts.txt"] {
        let path = dir.join(name);
        let v = json(&["txn", "inspect", "--json", path.to_str().unwrap()]);
        let header = &v["header"];
        for key in [
            "major",
            "minor",
            "dev_gen",
            "num_rows",
            "num_cols",
            "num_mem_tile_rows",
            "num_ops",
            "txn_size",
        ] {
            assert!(header[key].is_u64(), "{name}: header.{key}");
        }
        let ops = v["ops"].as_array().unwrap();
        assert_eq!(ops.len() as u64, header["num_ops"].as_u64().unwrap());
        let total: u64 = ops.iter().map(|o| o["size"].as_u64().unwrap()).sum();
        assert_eq!(total, header["txn_size"].as_u64().unwrap() - 16, "{name}");
        for op in ops {
            assert!(op["offset"].is_u64() && op["opcode"].is_u64() && op["name"].is_string());
        }
    }
}

#[test]
fn txn_patch_changes_only_patched_words() {
    let Some(dir) = shared_testdata("aie_txn", "txn_patch_changes_only_patched_words") else {
        return;
    };
    let input = dir.join("mlir_aie_add_one_two_insts.bin");
    let out = temp("patched.bin");
    let status = kiln(&[
        "txn",
        "patch",
        input.to_str().unwrap(),
        "--arg",
        "0=0x80001000",
        "--arg",
        "2=0x80002000",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let before = std::fs::read(&input).unwrap();
    let after = std::fs::read(&out).unwrap();
    let changed: Vec<(usize, u32)> = before
        .chunks(4)
        .zip(after.chunks(4))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (_, b))| (i * 4, u32::from_le_bytes(b.try_into().unwrap())))
        .collect();
    // BD1 word 1 (BLOCKWRITE at 0x10, data from 0x20) gets arg 2; BD0 word 1 (BLOCKWRITE at
    // 0x88, data from 0x98) gets arg 0; both argplus are 0.
    assert_eq!(changed, [(0x24, 0x8000_2000), (0x9c, 0x8000_1000)]);

    // The text form is written back as text.
    let text_out = temp("patched.txt");
    let text_in = dir.join("mlir_aie_add_one_two_insts.txt");
    let status = kiln(&[
        "txn",
        "patch",
        text_in.to_str().unwrap(),
        "--arg",
        "0=0x80001000",
        "--arg",
        "2=0x80002000",
        "-o",
        text_out.to_str().unwrap(),
    ]);
    assert!(status.status.success());
    let text = std::fs::read_to_string(&text_out).unwrap();
    let words: Vec<u8> =
        text.lines().flat_map(|l| u32::from_str_radix(l, 16).unwrap().to_le_bytes()).collect();
    assert_eq!(words, after);
}

#[test]
fn txn_patch_refuses_missing_args_unless_allowed() {
    let Some(dir) = shared_testdata("aie_txn", "txn_patch_refuses_missing_args_unless_allowed")
    else {
        return;
    };
    let input = dir.join("mlir_aie_add_one_two_insts.bin");
    let out = temp("partly_patched.bin");
    let args = ["txn", "patch", input.to_str().unwrap(), "--arg", "0=0x80001000", "-o"];
    let mut refused = args.to_vec();
    refused.push(out.to_str().unwrap());
    let status = kiln(&refused);
    assert_eq!(status.status.code(), Some(1));
    let err = String::from_utf8_lossy(&status.stderr);
    assert!(err.contains("argument(s) 2") && err.contains("--allow-unpatched"), "{err}");
    assert!(!out.exists(), "a partly patched file was written");
    refused.push("--allow-unpatched");
    let status = kiln(&refused);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    assert!(out.exists());
}

#[test]
fn txn_inspect_shows_kiln_launch() {
    // v0.1 header (1 op), then KILN_LAUNCH: opcode 133, 3 header bytes, u32 size 80, magic,
    // kernel 4 (MATMUL), dtype 6, 3 args, 3 dims, reserved, registers, dims.
    let mut bytes =
        vec![0, 1, 4, 6, 4, 1, 0, 0, 1, 0, 0, 0, 96, 0, 0, 0, 133, 0, 0, 0, 80, 0, 0, 0];
    bytes.extend_from_slice(b"KILN");
    for w in [4u32, 6, 3, 3, 0] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    for w in [0x1D004u64, 0x1D024, 0x1D044, 2, 3, 5] {
        bytes.extend_from_slice(&w.to_le_bytes());
    }
    let path = temp("launch.bin");
    std::fs::write(&path, &bytes).unwrap();
    let v = json(&["txn", "inspect", "--json", path.to_str().unwrap()]);
    let op = &v["ops"][0];
    assert_eq!(op["name"], "KILN_LAUNCH");
    assert_eq!(op["kernel"], "MATMUL");
    assert_eq!(op["dtype"], 6);
    assert_eq!(op["arg_regs"], json!([0x1D004, 0x1D024, 0x1D044]));
    assert_eq!(op["dims"], json!([2, 3, 5]));
    let out = kiln(&["txn", "inspect", path.to_str().unwrap()]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("KILN_LAUNCH") && text.contains("MATMUL dtype 6"), "{text}");
    assert!(text.contains("dims [2, 3, 5]"), "{text}");
}
