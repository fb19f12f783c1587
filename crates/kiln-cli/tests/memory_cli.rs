//! `--max-memory` on every command that loads a method: a method whose predicted peak is over
//! it is refused with exit 1 naming the parts; a malformed size is a usage error (exit 2).

mod common;

use common::kiln;

fn fixture(rel: &str) -> String {
    format!("{}/../../tests/fixtures/{rel}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn max_memory_bounds_run_bench_and_generate() {
    let cnn = fixture("pte/tiny_cnn.pte");
    let llm = fixture("llm/fp32.pte");
    let commands: [Vec<&str>; 3] = [
        vec!["run", &cnn],
        vec!["bench", &cnn, "--iters", "1", "--warmup", "0"],
        vec!["generate", &llm, "--prompt-tokens", "1,2", "--max-new-tokens", "1"],
    ];
    for command in &commands {
        let with = |size: &str| {
            let mut args = command.clone();
            args.extend(["--max-memory", size]);
            kiln(&args)
        };
        let (code, _, err) = with("1KiB");
        assert_eq!(code, 1, "{command:?}: {err}");
        assert!(err.contains("over the memory limit of 1024 bytes"), "{command:?}: {err}");
        assert!(err.contains("predicted peak"), "{command:?}: {err}");
        let (code, _, err) = with("64MiB");
        assert_eq!(code, 0, "{command:?}: {err}");
        for bad in ["12x", "0", "lots"] {
            let (code, _, err) = with(bad);
            assert_eq!(code, 2, "{command:?} --max-memory {bad}: {err}");
            assert!(err.contains("--max-memory"), "{err}");
        }
    }
}

#[test]
fn txn_inspect_checks_the_declared_size_before_reading_a_large_file() {
    // A 4 GiB sparse file whose header declares 16 bytes. kiln maps it and fails on the size
    // check at once; reading it into memory first would need 4 GiB. The data segment limit
    // (RLIMIT_DATA: heap and private anonymous memory, not a shared file map) makes that
    // difference visible: a 4 GiB read would fail to allocate and abort.
    let dir = std::env::temp_dir().join(format!("kiln-memory-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("big.txn");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(4 << 30).unwrap();
    // Version 1.0, 0 ops, txn_size 16.
    let header = [1u8, 0, 4, 6, 5, 1, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0];
    std::os::unix::fs::FileExt::write_all_at(&file, &header, 0).unwrap();
    drop(file);
    let script = format!(
        "ulimit -d 1048576 && exec {} txn inspect {}",
        env!("CARGO_BIN_EXE_kiln"),
        path.display()
    );
    let out = std::process::Command::new("sh").args(["-c", &script]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("header.txn_size"), "{err}");
    assert!(err.contains("is 16 but the data is 4294967296 bytes"), "{err}");
}

#[test]
fn inspect_memory_predicts_what_run_then_holds() {
    let model = fixture("pte/mobilenet_v2_xnnpack.pte");
    let size = std::fs::metadata(&model).unwrap().len() as f64;
    let (code, out, err) = kiln(&["inspect", "--memory", "--json", &model]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let memory = &doc["methods"][0]["memory"];
    let bytes = |k: &str| memory[k].as_u64().unwrap_or_else(|| panic!("{k} in {memory}")) as f64;
    // mobilenet_v2's weights are nearly all of its file, every one packed at load; the file's
    // pages that stay are the few constants runs read in place.
    assert!(
        bytes("packed_weights_bytes") > 0.8 * size && bytes("packed_weights_bytes") < 1.3 * size
    );
    assert!(bytes("mapped_in_place_bytes") < 0.05 * size, "{memory}");
    assert!(
        bytes("predicted_peak_bytes") > bytes("packed_weights_bytes") + bytes("activations_bytes")
    );
    // `--max-memory` bounds the method's part of that prediction: just above it the program
    // runs, just below it the load names the prediction.
    let method = bytes("method_bytes") as u64;
    assert!(method as f64 >= bytes("packed_weights_bytes") + bytes("activations_bytes"));
    let (code, _, err) = kiln(&["run", &model, "--max-memory", &(method + 4096).to_string()]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = kiln(&["run", &model, "--max-memory", &(method - 4096).to_string()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("its predicted peak") && err.contains("packed weights"), "{err}");
    // `kiln run --json` reports the same prediction, with the peak it measured.
    let (code, out, err) = kiln(&["run", &model, "--json"]);
    assert_eq!(code, 0, "{err}");
    let run: serde_json::Value = serde_json::from_str(&out).unwrap();
    let run = &run["memory"];
    assert_eq!(run["packed_weights_bytes"], memory["packed_weights_bytes"]);
    assert!(run["measured_peak_bytes"].as_u64().unwrap() as f64 > bytes("packed_weights_bytes"));
    // Its convolutions' scratch, allocated at the execute, is reported beside it.
    assert!(run["scratch_bytes"].as_u64().unwrap() > 0, "{run}");
    // The text form, and the flag's errors.
    let (code, out, _) = kiln(&["inspect", "--memory", &model]);
    assert_eq!(code, 0);
    assert!(out.contains("predicted peak") && out.contains("packed weights"), "{out}");
    let (code, _, err) = kiln(&["inspect", "--memory", &fixture("pte-compat/xor.ptd")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--memory needs an ExecuTorch program"), "{err}");
    let (code, _, err) = kiln(&["inspect", "--method", "forward", &model]);
    assert_eq!(code, 2, "{err}");
}
