//! ETDumps (`.etdp`) in `kiln inspect`, `kiln verify` and `kiln dump`: detected from their
//! bytes, summarized per block, dumped as ExecuTorch's Python deserializer reads them, refused
//! with exit 1 when damaged.

mod common;

use std::fs;
use std::path::PathBuf;

use common::{kiln, s, scratch};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/etdump").join(name)
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap()
}

#[test]
fn inspect_counts_events_per_block() {
    let file = fixture("tiny_cnn_debug.etdp");
    let (code, stdout, stderr) = kiln(&["inspect", s(&file)]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("etdump version 0, 2 blocks\n"), "{stdout}");
    assert!(stdout.contains("\"Execute\": 13 profile, 0 allocation, 10 debug events"), "{stdout}");
    let (code, stdout, _) = kiln(&["inspect", "--json", s(&file)]);
    assert_eq!(code, 0);
    let v = json(&stdout);
    let execute = &v["run_data"][1];
    assert_eq!(execute["events"]["debug"], 10, "{v}");
    let span = execute["end_time"].as_u64().unwrap() - execute["start_time"].as_u64().unwrap();
    assert_eq!(execute["duration"].as_u64(), Some(span));
}

#[test]
fn dump_is_what_executorchs_deserializer_reads() {
    for name in ["tiny_cnn", "xnnpack_cnn", "tiny_cnn_debug"] {
        let (code, stdout, stderr) = kiln(&["dump", s(&fixture(&format!("{name}.etdp")))]);
        assert_eq!(code, 0, "{stderr}");
        let expected =
            json(&fs::read_to_string(fixture(&format!("{name}.expected.json"))).unwrap());
        assert_eq!(json(&stdout), expected["etdump"], "{name}");
    }
}

#[test]
fn verify_accepts_executorchs_files_and_refuses_damaged_ones() {
    let good = fixture("xnnpack_cnn.etdp");
    let (code, stdout, stderr) = kiln(&["verify", s(&good)]);
    assert_eq!(
        (code, stdout.trim_end()),
        (0, format!("{}: ok (etdump)", good.display()).as_str()),
        "{stderr}"
    );
    let dir = scratch("etdump-cli", "damaged");
    let damaged = dir.join("damaged.etdp");
    let mut bytes = fs::read(&good).unwrap();
    bytes.truncate(bytes.len() - 8);
    fs::write(&damaged, &bytes).unwrap();
    let (code, _, stderr) = kiln(&["verify", s(&damaged)]);
    assert_eq!(code, 1);
    assert!(stderr.contains("invalid: etdump: invalid size prefix"), "{stderr}");
    let (code, _, stderr) = kiln(&["inspect", s(&damaged)]);
    assert_eq!(code, 1, "{stderr}");
}
