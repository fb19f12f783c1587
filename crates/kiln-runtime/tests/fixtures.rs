//! Acceptance: every ExecuTorch fixture of `tests/fixtures/pte` and `tests/fixtures/xnnpack`
//! runs with the recorded inputs and matches ExecuTorch's recorded outputs (float32 within
//! 1e-4, float16 within one float16 ulp of the largest output, everything else exactly;
//! programs with quantized XNNPACK graphs within 1% of each output's range). Every operator of every fixture has a kernel and every XNNPACK delegate
//! lowers: such a method must load and match, so a removed kernel or node kind fails this test.
//! A method with another delegate must fail at load naming exactly those delegates ("no
//! backend for <id>") and no missing operator: never a wrong answer.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{compare, pte_dir, read_npy};
use kiln_runtime::{Error, Input, LoadOptions, Program, TensorInput, ValueMeta};
use serde_json::Value;

#[derive(Debug)]
enum Outcome {
    Matched { max_diff: f64 },
    NoBackend(Vec<String>),
}

/// The delegate kiln runs itself.
const XNNPACK: &str = "XnnpackBackend";

fn run_fixture(dir: &Path, name: &str, expected: &Value, compile: bool) -> Vec<(String, Outcome)> {
    let dir = dir.to_path_buf();
    // Quantized XNNPACK graphs match within 1% of the output range (the bar: integer
    // rounding is XNNPACK's, float parts may differ by an ulp that moves a rounding).
    let quantized = expected["xnnpack"]
        .as_array()
        .is_some_and(|d| d.iter().any(|d| d["quant"].as_array().is_some_and(|q| !q.is_empty())));
    let files = &expected["files"];
    let options = LoadOptions { compile, ..LoadOptions::default() };
    let pte = dir.join(files["pte"].as_str().unwrap());
    let program = match files.get("ptd").and_then(Value::as_str) {
        Some(ptd) => {
            Program::builder().ptd(dir.join(ptd)).unwrap().options(options).load(&pte).unwrap()
        }
        None => Program::builder().options(options).load(&pte).unwrap(),
    };
    let mut results = Vec::new();
    for m in expected["inspect"]["methods"].as_array().unwrap() {
        let method = m["name"].as_str().unwrap();
        let ops: Vec<String> = m["operators"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap().to_string())
            .collect();
        let delegates: Vec<String> = m["delegates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap().to_string())
            .collect();
        let loaded = program.method(method);
        let foreign: Vec<String> = delegates.iter().filter(|d| *d != XNNPACK).cloned().collect();
        if !foreign.is_empty() {
            match loaded {
                Err(Error::Missing { operators, delegates: missing_delegates, .. }) => {
                    assert!(
                        operators.is_empty(),
                        "{name}.{method}: operators without a kernel: {operators:?} (of {ops:?})"
                    );
                    let want_d: BTreeSet<_> = foreign.iter().cloned().collect();
                    let got_d: BTreeSet<_> = missing_delegates.iter().cloned().collect();
                    assert_eq!(got_d, want_d, "{name}.{method}: delegates without backend");
                    results.push((method.to_string(), Outcome::NoBackend(missing_delegates)));
                }
                Err(e) => panic!("{name}.{method}: expected a missing-delegate error, got: {e}"),
                Ok(_) => panic!("{name}.{method}: loaded although {foreign:?} have no backend"),
            }
            continue;
        }
        let mut method_obj = loaded.unwrap_or_else(|e| panic!("{name}.{method}: {e}"));
        let metas = method_obj.inputs();
        let mut runs = vec![expected["runs"][method].clone()];
        if let Some(extra) =
            expected.get("extra_runs").and_then(|e| e.get(method)).and_then(Value::as_array)
        {
            runs.extend(extra.iter().cloned());
        }
        let mut max_diff = 0f64;
        for (r, run) in runs.iter().enumerate() {
            let arrays: Vec<_> = run["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .zip(&metas)
                .map(|(f, meta)| {
                    let want = match meta {
                        ValueMeta::Tensor(t) => Some(t.dtype),
                        _ => None,
                    };
                    (read_npy(&dir.join(f.as_str().unwrap()), want), meta.clone())
                })
                .collect();
            let inputs: Vec<Input<'_>> = arrays
                .iter()
                .map(|(a, meta)| match meta {
                    ValueMeta::Tensor(_) => Input::Tensor(TensorInput {
                        dtype: a.dtype,
                        sizes: &a.sizes,
                        data: &a.data,
                    }),
                    ValueMeta::Int => {
                        Input::Int(i64::from_le_bytes(a.data[..8].try_into().unwrap()))
                    }
                    ValueMeta::Double => {
                        Input::Double(f64::from_le_bytes(a.data[..8].try_into().unwrap()))
                    }
                    ValueMeta::Bool => Input::Bool(a.data[0] != 0),
                    _ => Input::None,
                })
                .collect();
            let outputs = method_obj
                .execute(&inputs)
                .unwrap_or_else(|e| panic!("{name}.{method} run {r}: {e}"));
            let want_files = run["outputs"].as_array().unwrap();
            assert_eq!(outputs.len(), want_files.len(), "{name}.{method} run {r}: output count");
            for (k, (got, f)) in outputs.iter().zip(want_files).enumerate() {
                let want = read_npy(&dir.join(f.as_str().unwrap()), None);
                let tol = if quantized {
                    0.01 * range(&want).max(f64::MIN_POSITIVE)
                } else if want.dtype == kiln_kernels::DType::Half {
                    // XNNPACK's float16 kernels round every operation to float16, kiln's
                    // lowering computes in float32: one float16 ulp of the largest output.
                    (max_abs(&want) * f64::powi(2.0, -10)).max(1e-4)
                } else {
                    1e-4
                };
                let d = compare(&format!("{name}.{method} run {r} output {k}"), got, &want, tol)
                    .unwrap_or_else(|e| panic!("{e}"));
                max_diff = max_diff.max(d);
            }
        }
        results.push((method.to_string(), Outcome::Matched { max_diff }));
    }
    results
}

/// The range (max - min) of a float array's values; 0 for other dtypes.
fn range(a: &common::Array) -> f64 {
    if !a.dtype.is_float() {
        return 0.0;
    }
    let v = common::f64s(a.dtype, &a.data);
    let (lo, hi) =
        v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| (l.min(x), h.max(x)));
    if hi >= lo {
        hi - lo
    } else {
        0.0
    }
}

/// The largest magnitude of a float array's values; 0 for other dtypes.
fn max_abs(a: &common::Array) -> f64 {
    if !a.dtype.is_float() {
        return 0.0;
    }
    common::f64s(a.dtype, &a.data).iter().fold(0.0, |m, x| m.max(x.abs()))
}

/// Runs every fixture of `dir`; returns the number of methods that ran and matched.
fn run_dir(dir: &Path, compile: bool) -> usize {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".expected.json").map(str::to_string))
        .collect();
    names.sort();
    let mut matched = 0;
    for name in &names {
        let text = std::fs::read_to_string(dir.join(format!("{name}.expected.json"))).unwrap();
        let expected: Value = serde_json::from_str(&text).unwrap();
        for (method, outcome) in run_fixture(dir, name, &expected, compile) {
            match &outcome {
                Outcome::Matched { max_diff } => {
                    matched += 1;
                    println!("MATCH    {name}.{method}: max abs diff {max_diff:e}");
                }
                Outcome::NoBackend(ids) => {
                    println!("DELEGATE {name}.{method}: no backend for {}", ids.join(", "))
                }
            }
        }
    }
    matched
}

#[test]
fn every_fixture_matches_executorch_or_names_its_missing_delegates() {
    // The constant methods need no kernel at all, so at least those always run; the XNNPACK
    // fixtures (xnnpack_cnn, mobilenet_v2_xnnpack) run too.
    let matched = run_dir(&pte_dir(), true);
    assert!(matched >= 7, "only {matched} methods ran");
}

#[test]
fn every_xnnpack_fixture_matches_executorch() {
    let dir = pte_dir().join("../xnnpack");
    // Compiled (the lowered kernel calls packed, fused and laid out) and interpreted.
    for compile in [true, false] {
        let matched = run_dir(&dir, compile);
        assert!(matched >= 80, "only {matched} XNNPACK methods ran (compile {compile})");
    }
}
