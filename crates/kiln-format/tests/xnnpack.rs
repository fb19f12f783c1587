//! The XNNPACK payload reader on every XNNPACK delegate of the committed fixtures (exported by
//! ExecuTorch 1.5.1): each payload parses, its summary matches what `flatc` decoded from the
//! same bytes with ExecuTorch's own schema (the `"xnnpack"` field of `<m>.expected.json`, see
//! `tools/fixtures/export_xnnpack.py`), and mutated payloads give errors, never panics.

mod common;

use common::{fixture, mutate, Rng};
use kiln_format::pte::Program;
use kiln_format::xnnpack::{summarize, Payload};
use serde_json::Value as Json;

/// Every (fixture name, payload bytes, expected summary if recorded) of the XNNPACK fixtures.
fn payloads() -> Vec<(String, Vec<u8>, Option<Json>)> {
    let mut out = Vec::new();
    for dir in ["pte", "xnnpack"] {
        let Ok(entries) = std::fs::read_dir(fixture(dir)) else { continue };
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths.into_iter().filter(|p| p.extension().is_some_and(|e| e == "pte")) {
            let bytes = std::fs::read(&path).unwrap();
            let program = Program::open(&bytes).unwrap();
            let expected: Option<Json> = std::fs::read(path.with_extension("expected.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Json>(&b).ok())
                .and_then(|j| j.get("xnnpack").cloned());
            let mut k = 0;
            for m in program.methods() {
                for d in m.delegates() {
                    let d = d.unwrap();
                    if d.id != "XnnpackBackend" {
                        continue;
                    }
                    let data = program.delegate_data(&d).unwrap().to_vec();
                    let want = expected.as_ref().and_then(|e| e.get(k).cloned());
                    let name = format!("{}#{k}", path.file_stem().unwrap().to_string_lossy());
                    out.push((name, data, want));
                    k += 1;
                }
            }
        }
    }
    out
}

#[test]
fn every_fixture_payload_parses_and_matches_flatc() {
    let all = payloads();
    assert!(!all.is_empty(), "no XNNPACK fixtures found");
    let mut compared = 0;
    for (name, bytes, want) in &all {
        let p = Payload::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&p.identifier, b"XN01", "{name}");
        let s = summarize(&p);
        let Some(want) = want else { continue };
        compared += 1;
        let nodes: std::collections::BTreeMap<String, usize> =
            serde_json::from_value(want["nodes"].clone()).unwrap();
        let got: std::collections::BTreeMap<String, usize> =
            s.nodes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(got, nodes, "{name}: node histogram");
        assert_eq!(s.values as u64, want["values"].as_u64().unwrap(), "{name}: values");
        assert_eq!(s.constants as u64, want["constant_data"].as_u64().unwrap(), "{name}");
        assert_eq!(s.constant_bytes, want["constant_bytes"].as_u64().unwrap(), "{name}");
        let quant: Vec<String> = serde_json::from_value(want["quant"].clone()).unwrap();
        assert_eq!(s.quant, quant, "{name}: quantization kinds");
    }
    eprintln!("{} payloads parsed, {compared} compared with flatc's decoding", all.len());
}

#[test]
fn mutated_payloads_never_panic() {
    let mut rng = Rng::new(0x11aa_5eed);
    let (mut ok, mut err) = (0, 0);
    for (_, bytes, _) in payloads() {
        for _ in 0..300 {
            let m = mutate(&bytes, &mut rng);
            match Payload::parse(&m) {
                Ok(p) => {
                    let _ = summarize(&p);
                    let _ = kiln_format::xnnpack::dump(&p);
                    ok += 1;
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    err += 1;
                }
            }
        }
    }
    eprintln!("mutated payloads: {ok} parsed, {err} rejected");
    assert!(err > 0);
}

/// Inputs the `xnnpack` fuzz target (`fuzz/fuzz_targets/xnnpack.rs`) once crashed on, kept in
/// `tests/fixtures/fuzz/xnnpack-*.bin`: each parses to a payload or an error, and what parses
/// summarizes and dumps, never a panic (a named constant's size near `u64::MAX` once overflowed
/// the summary's byte total).
#[test]
fn fuzz_findings_end_in_errors_not_panics() {
    let mut n = 0;
    for e in std::fs::read_dir(fixture("fuzz")).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !(name.starts_with("xnnpack-") && name.ends_with(".bin")) {
            continue;
        }
        n += 1;
        if let Ok(p) = Payload::parse(&std::fs::read(&path).unwrap()) {
            let _ = summarize(&p);
            let _ = kiln_format::xnnpack::dump(&p);
        }
    }
    assert!(n > 0, "no xnnpack fuzz regression inputs");
}
