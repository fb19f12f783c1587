//! `kiln profile`: every kernel attributed to the program's own instructions. The expected
//! instructions (kind, operator, delegate) and XNNPACK debug handles come from ExecuTorch's
//! deserializer and flatc with ExecuTorch's schema (`tools/fixtures/profile_expected.py`).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::{kiln, scratch};
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn expected() -> Value {
    let path = fixtures().join("profile/expected.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn numbers(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

/// Checks the trace event format: the JSON object form, metadata and complete events with
/// their required fields, and complete events on one thread that do not overlap.
fn check_trace(path: &Path, kernels: &[Value], iters: u64) {
    let trace: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().expect("traceEvents array");
    let mut per_thread: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    let mut named_threads = BTreeSet::new();
    let mut main_events = 0u64;
    for e in events {
        assert!(e["name"].is_string(), "{e}");
        assert_eq!(e["pid"].as_u64(), Some(1), "{e}");
        let tid = e["tid"].as_u64().expect("tid");
        match e["ph"].as_str() {
            Some("M") => {
                assert!(e["args"]["name"].is_string(), "{e}");
                if e["name"] == "thread_name" {
                    named_threads.insert(tid);
                }
            }
            Some("X") => {
                let ts = e["ts"].as_f64().expect("ts");
                let dur = e["dur"].as_f64().expect("dur");
                assert!(ts >= 0.0 && dur >= 0.0, "{e}");
                assert!(!e["args"]["origins"].as_array().unwrap().is_empty(), "{e}");
                per_thread.entry(tid).or_default().push((ts, ts + dur));
                if tid == 0 {
                    main_events += 1;
                    let step = e["args"]["step"].as_u64().unwrap();
                    let k = kernels.iter().find(|k| k["step"].as_u64() == Some(step)).unwrap();
                    assert_eq!(e["name"], k["operator"]);
                    assert_eq!(e["args"]["origins"], k["origins"]);
                }
            }
            other => panic!("unexpected phase {other:?} in {e}"),
        }
    }
    let calls: u64 = kernels.iter().map(|k| k["calls"].as_u64().unwrap()).sum();
    assert_eq!(main_events, calls, "one event per executed kernel");
    assert!(calls >= iters);
    for (tid, mut spans) in per_thread {
        assert!(named_threads.contains(&tid), "thread {tid} has no name");
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            // Timestamps are printed in microseconds with nanosecond digits.
            assert!(w[0].1 <= w[1].0 + 1e-3, "overlapping events on thread {tid}: {w:?}");
        }
    }
}

/// Checks an ETDump `kiln profile` wrote, read back by `kiln dump`: a block per profiled
/// execute, each with the events of every executed kernel on original kernel or delegate
/// calls (`calls`), delegate events on XNNPACK debug handles (`handles`), `Method::execute`
/// last.
fn check_etdump(
    path: &Path,
    kernels: &[Value],
    calls: &BTreeSet<u64>,
    handles: &BTreeSet<u64>,
    iters: u64,
) {
    let (code, stdout, stderr) = kiln(&["dump", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let dump: Value = serde_json::from_str(&stdout).unwrap();
    let blocks = dump["run_data"].as_array().unwrap();
    assert_eq!(blocks.len() as u64, iters);
    // A kernel outside delegates has two events (its native_call_* span and OPERATOR_CALL);
    // one inside (a delegate node's, or DELEGATE_CALL for the delegate's own copies) has one.
    let per_execute: u64 = kernels
        .iter()
        .map(|k| {
            let delegated = k.get("debug_handles").is_some()
                || k["operator"].as_str().unwrap().starts_with("delegate:");
            if delegated {
                1
            } else {
                2
            }
        })
        .sum();
    for b in blocks {
        assert_eq!(b["name"], "Execute");
        let events = b["events"].as_array().unwrap();
        assert_eq!(events.len() as u64, per_execute + 1, "kernel events and Method::execute");
        let last = &events.last().unwrap()["profile_event"];
        assert_eq!(last["name"], "Method::execute");
        for e in &events[..events.len() - 1] {
            let e = &e["profile_event"];
            assert!(calls.contains(&e["instruction_id"].as_u64().unwrap()), "{e}");
            assert!(e["start_time"].as_u64() <= e["end_time"].as_u64(), "{e}");
            match e["delegate_debug_id_int"].as_i64().unwrap() {
                // native_call_*, OPERATOR_CALL or DELEGATE_CALL.
                -1 => assert!(e["name"].is_string(), "{e}"),
                h => assert!(handles.contains(&(h as u64)), "{e}"),
            }
        }
    }
}

#[test]
fn kernels_stand_for_exactly_the_kernel_and_delegate_calls() {
    let expected = expected();
    let dir = scratch("profile", "kernels");
    let iters = 2u64;
    for (program, methods) in expected["programs"].as_object().unwrap() {
        let pte = fixtures().join(program);
        for (method, want) in methods.as_object().unwrap() {
            let trace = dir.join("trace.json");
            let etdp = dir.join("profile.etdp");
            let (code, stdout, stderr) = kiln(&[
                "profile",
                "--json",
                "--iters",
                &iters.to_string(),
                "--warmup",
                "0",
                "--method",
                method,
                "--trace",
                trace.to_str().unwrap(),
                "--etdump",
                etdp.to_str().unwrap(),
                pte.to_str().unwrap(),
            ]);
            assert_eq!(code, 0, "{program} {method}: {stderr}");
            let v: Value = serde_json::from_str(&stdout).unwrap();
            let kernels = v["kernels"].as_array().unwrap();
            let instructions = want["instructions"].as_array().unwrap();
            let calls: BTreeSet<u64> = instructions
                .iter()
                .filter(|i| i["kind"] == "KernelCall" || i["kind"] == "DelegateCall")
                .map(|i| i["index"].as_u64().unwrap())
                .collect();
            let mut union = BTreeSet::new();
            let mut handles = BTreeSet::new();
            for k in kernels {
                let origins = numbers(&k["origins"]);
                assert!(!origins.is_empty(), "{program}: {k}");
                assert_eq!(k["calls"].as_u64(), Some(iters), "{program}: straight-line {k}");
                let operator = k["operator"].as_str().unwrap();
                for o in &origins {
                    let ins = &instructions[*o as usize];
                    let name = ins["name"].as_str().unwrap();
                    let shown = match ins["kind"].as_str() {
                        Some("DelegateCall") => format!("delegate:{name}"),
                        _ => name.to_string(),
                    };
                    assert!(operator.contains(&shown), "{program}: {operator} lacks {shown}");
                }
                union.extend(origins);
                if let Some(h) = k.get("debug_handles") {
                    handles.extend(numbers(h));
                }
            }
            assert_eq!(union, calls, "{program} {method}");
            // Nodes the partitioner inserted carry ExecuTorch's default handle, no graph node.
            handles.remove(&expected["default_debug_handle"].as_u64().unwrap());
            let xnn: BTreeSet<u64> = want["xnnpack_debug_handles"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(numbers)
                .collect();
            assert_eq!(handles, xnn, "{program} {method}: XNNPACK nodes covered");
            let total: f64 = kernels.iter().map(|k| k["share"].as_f64().unwrap()).sum();
            assert!((total - 100.0).abs() < 1e-6 || kernels.is_empty(), "{program}: {total}");
            check_trace(&trace, kernels, iters);
            let xnn_all: BTreeSet<u64> =
                xnn.iter().copied().chain(handles.iter().copied()).collect();
            check_etdump(&etdp, kernels, &calls, &xnn_all, iters);
        }
    }
}

#[test]
fn without_the_compile_stage_each_kernel_is_one_instruction() {
    let pte = fixtures().join("pte/resnet_small.pte");
    let (code, stdout, stderr) =
        kiln(&["profile", "--json", "--no-compile", "--iters", "1", pte.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let kernels = v["kernels"].as_array().unwrap();
    let n = expected()["programs"]["pte/resnet_small.pte"]["forward"]["instructions"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(kernels.len(), n);
    assert!(kernels.iter().all(|k| k["origins"].as_array().unwrap().len() == 1));
}

#[test]
fn the_table_names_operators_and_bad_arguments_exit_2() {
    let pte = fixtures().join("pte/tiny_cnn.pte");
    let (code, stdout, stderr) = kiln(&["profile", "--iters", "1", pte.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("aten::convolution.out"), "{stdout}");
    assert!(stdout.contains("unprofiled"), "{stdout}");
    let (code, _, _) = kiln(&["profile", "--iters", "0", pte.to_str().unwrap()]);
    assert_eq!(code, 2);
    let (code, _, stderr) = kiln(&["profile", "--method", "nope", pte.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("nope"), "{stderr}");
}
