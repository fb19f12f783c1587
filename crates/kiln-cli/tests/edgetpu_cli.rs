//! `kiln edgetpu extract | link | relayout | pack` and `kiln verify` on the real sample models.

mod common;

use std::path::{Path, PathBuf};

use common::kiln;
use kiln_format::darwinn::{link, Package};
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

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-edgetpu-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn extract_then_pack_rebuilds_a_package_with_the_same_executables() {
    let Some(dir) = testdata("extract_then_pack_rebuilds_a_package_with_the_same_executables")
    else {
        return;
    };
    let out = tmp("extract");
    let model = dir.join("keras_lstm_mnist_ptq_edgetpu.tflite");
    let (code, _, err) = kiln(&["edgetpu", "extract", s(&model), "--out-dir", s(&out)]);
    assert_eq!(code, 0, "{err}");
    let pkg_dir = out.join("package0_sg0_op0");
    let original = std::fs::read(pkg_dir.join("package.dwn")).unwrap();
    let eo = pkg_dir.join("exe0_execution_only/executable.bin");
    let pc = pkg_dir.join("exe1_parameter_caching/executable.bin");
    assert_eq!(
        std::fs::read(pkg_dir.join("exe0_execution_only/parameters.bin")).unwrap().len(),
        576
    );
    assert_eq!(
        std::fs::read(pkg_dir.join("exe0_execution_only/bitstream0.bin")).unwrap().len(),
        60864
    );
    let packed = out.join("repacked.dwn");
    let (code, _, err) =
        kiln(&["edgetpu", "pack", s(&eo), s(&pc), "-o", s(&packed), "--min-runtime-version", "12"]);
    assert_eq!(code, 0, "{err}");
    let a = Package::open(&original).unwrap();
    let new_bytes = std::fs::read(&packed).unwrap();
    let b = Package::open(&new_bytes).unwrap();
    assert_eq!(b.root().min_runtime_version(), 12);
    assert_eq!(a.executables().len(), b.executables().len());
    for (x, y) in a.executables().iter().zip(b.executables()) {
        assert_eq!(x.data(), y.data());
    }
    // Two executables of the same type: the driver would refuse the package.
    let (code, _, err) = kiln(&["edgetpu", "pack", s(&eo), s(&eo), "-o", s(&out.join("bad.dwn"))]);
    assert_eq!(code, 1);
    assert!(err.contains("Multiple executables of the same type"), "{err}");
    assert!(!out.join("bad.dwn").exists());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn link_json_reports_every_field_and_the_files_read_back() {
    let Some(dir) = testdata("link_json_reports_every_field_and_the_files_read_back") else {
        return;
    };
    let out = tmp("link");
    let model = dir.join("split_concat_edgetpu.tflite");
    let (code, stdout, err) = kiln(&[
        "edgetpu",
        "link",
        s(&model),
        "--input-addr",
        "input1=0x7f0011223344",
        "--parameters",
        "4096",
        "--scratch",
        "0x10",
        "--out-dir",
        s(&out),
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let rows: Value = serde_json::from_str(&stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let facts: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("facts.json")).unwrap()).unwrap();
    let exes =
        facts["split_concat_edgetpu.tflite"]["edgetpu_ops"][0]["executables"].as_array().unwrap();
    let total: usize = exes
        .iter()
        .flat_map(|e| e["instruction_bitstreams"].as_array().unwrap())
        .map(|b| b["field_offsets"].as_array().unwrap().len())
        .sum();
    assert_eq!(rows.len(), total);
    let mut patched = 0;
    for r in rows {
        let file = out.join(format!("exe{}_chunk{}.linked.bin", r["executable"], r["chunk"]));
        let bytes = std::fs::read(file).unwrap();
        let bit = r["offset_bit"].as_i64().unwrap();
        let got = link::read_field(&bytes, bit).unwrap();
        match r["value"].as_str() {
            Some(v) => {
                patched += 1;
                assert_eq!(format!("0x{got:08x}"), v);
                let want = match (r["desc"].as_str().unwrap(), r["position"].as_str().unwrap()) {
                    ("INPUT", "LOWER") => 0x1122_3344,
                    ("INPUT", "UPPER") => 0x7f00,
                    ("PARAMETER", "LOWER") => 4096,
                    _ => 0,
                };
                assert_eq!(got, want, "{r}");
            }
            None => assert_eq!(got, 0, "unpatched fields keep the compiled placeholder: {r}"),
        }
    }
    assert!(patched > 0);
    let (code, _, err) =
        kiln(&["edgetpu", "link", s(&model), "--input-addr", "nope=1", "--out-dir", s(&out)]);
    assert_eq!(code, 1);
    assert!(err.contains("no layer named \"nope\""), "{err}");
    let _ = std::fs::remove_dir_all(&out);
}

/// Parses a .npy written by kiln: (descr, shape, data).
fn read_npy(bytes: &[u8]) -> (String, Vec<usize>, Vec<u8>) {
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + len) % 64, 0);
    let header = std::str::from_utf8(&bytes[10..10 + len]).unwrap();
    let descr = header.split("'descr': '").nth(1).unwrap().split('\'').next().unwrap().to_string();
    let shape = header.split("'shape': (").nth(1).unwrap().split(')').next().unwrap();
    let shape = shape
        .split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| x.trim().parse().unwrap())
        .collect();
    (descr, shape, bytes[10 + len..].to_vec())
}

#[test]
fn relayout_writes_dense_yxz_npy_matching_the_formula() {
    let Some(dir) = testdata("relayout_writes_dense_yxz_npy_matching_the_formula") else { return };
    let out = tmp("relayout");
    let model = dir.join("split_concat_edgetpu.tflite");
    let facts: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("facts.json")).unwrap()).unwrap();
    let exe = &facts["split_concat_edgetpu.tflite"]["edgetpu_ops"][0]["executables"][0];
    for layer in exe["outputs"].as_array().unwrap() {
        let name = layer["name"].as_str().unwrap();
        let size = layer["size_bytes"].as_u64().unwrap() as usize;
        let raw: Vec<u8> = (0..size).map(|i| (i * 31 % 256) as u8).collect();
        let raw_path = out.join("raw.bin");
        std::fs::write(&raw_path, &raw).unwrap();
        let npy = out.join("out.npy");
        let (code, _, err) =
            kiln(&["edgetpu", "relayout", s(&model), s(&raw_path), "--layer", name, "-o", s(&npy)]);
        assert_eq!(code, 0, "{err}");
        let (descr, shape, data) = read_npy(&std::fs::read(&npy).unwrap());
        assert_eq!(descr, "|u1");
        let (y, x, z) = (
            layer["y"].as_u64().unwrap() as usize,
            layer["x"].as_u64().unwrap() as usize,
            layer["z"].as_u64().unwrap() as usize,
        );
        assert_eq!(shape.iter().product::<usize>(), y * x * z);
        let m = |k: &str, i: usize| layer["layout"][k][i].as_u64().unwrap() as usize;
        for yy in 0..y {
            for xx in 0..x {
                let src = m("tile_byte_off", m("y_tile", yy) + m("x_tile", xx))
                    + m("y_local_y", yy) * m("x_row_size", xx)
                    + m("x_local_byte", xx);
                let dst = (yy * x + xx) * z;
                assert_eq!(data[dst..dst + z], raw[src..src + z], "{name} y={yy} x={xx}");
            }
        }
        // A raw buffer of the wrong size is refused with a message naming the sizes.
        std::fs::write(&raw_path, &raw[1..]).unwrap();
        let (code, _, err) =
            kiln(&["edgetpu", "relayout", s(&model), s(&raw_path), "--layer", name, "-o", s(&npy)]);
        assert_eq!(code, 1);
        assert!(err.contains(&format!("writes {size}")), "{err}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn verify_accepts_the_samples_and_rejects_a_broken_package() {
    let Some(dir) = testdata("verify_accepts_the_samples_and_rejects_a_broken_package") else {
        return;
    };
    for f in [
        "split_concat_edgetpu.tflite",
        "keras_lstm_mnist_ptq_edgetpu.tflite",
        "testconv1-edgetpu.tflite",
        "voice_commands_v0.7_edgetpu.tflite",
    ] {
        let (code, stdout, _) = kiln(&["verify", s(&dir.join(f))]);
        assert_eq!(code, 0, "{f}: {stdout}");
        assert!(stdout.contains("ok (edgetpu)"), "{stdout}");
    }
    // Point the MultiExecutable's root offset of testconv1's package past its end.
    let mut bytes = std::fs::read(dir.join("testconv1-edgetpu.tflite")).unwrap();
    let me_at = 186 + 4096; // package file offset (facts.json) + MultiExecutable offset
    bytes[me_at..me_at + 4].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    let out = tmp("verify");
    let bad = out.join("bad_edgetpu.tflite");
    std::fs::write(&bad, &bytes).unwrap();
    let (code, stdout, stderr) = kiln(&["verify", s(&bad)]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.contains("MultiExecutable verification failed"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "the reason fits on one line: {stderr}");
    let _ = std::fs::remove_dir_all(&out);
}
