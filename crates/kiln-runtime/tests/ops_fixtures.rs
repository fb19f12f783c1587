//! Acceptance: every op-level ExecuTorch fixture of `tests/fixtures/ops` (one program per
//! kernel family, one method per case, made by `tools/fixtures/export_ops.py` and its siblings)
//! runs through kiln's runtime with the recorded inputs and matches ExecuTorch's recorded
//! outputs (PyTorch eager's where the record's `expected_from` says so: operators ExecuTorch's
//! portable library lacks, which it cannot load): float32
//! and float64 within 1e-4 max abs diff, half/bfloat16 within one unit in the last place of the
//! output, integer and bool outputs exactly. Every case must load (all its operators have
//! kernels), so a removed kernel fails the test.
//!
//! Where ExecuTorch's portable kernel gives a mathematically wrong answer and kiln follows
//! PyTorch eager instead ([`FOLLOWS_PYTORCH`]), the test asserts that the two runtimes do differ
//! there and checks kiln's output against the operation's definition computed here from the
//! recorded inputs. (Where ExecuTorch is right and PyTorch eager is not, kiln follows
//! ExecuTorch and the plain comparison applies: `gelu(inf)` is `inf`, `sign(NaN)` is NaN.)
//!
//! `topk`'s index order among equal values is unspecified (ExecuTorch's comes from
//! `std::nth_element`/`std::sort`, PyTorch's from its own selection): its values must match
//! exactly, and its indices must point at the same values as ExecuTorch's, once each.

mod common;

use std::path::PathBuf;

use common::{compare, read_npy};
use kiln_kernels::DType;
use kiln_runtime::{Input, Output, Program, TensorInput, ValueMeta};
use serde_json::Value;

fn ops_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/ops")
}

/// Tolerance of one output: 1e-4 for float32/float64 (the acceptance bound); for half and
/// bfloat16 one unit in the last place at the magnitude of the largest recorded value (both
/// runtimes compute in float32 and round, so they may differ by one rounding step).
fn tolerance(out: &Output, want: &common::Array) -> f64 {
    let ulp = match want.dtype {
        DType::Half => 2f64.powi(-10),
        DType::BFloat16 => 2f64.powi(-7),
        _ => return 1e-4,
    };
    let Output::Tensor(_) = out else { return 1e-4 };
    let max = common::f64s(want.dtype, &want.data)
        .into_iter()
        .filter(|x| x.is_finite())
        .fold(0f64, |m, x| m.max(x.abs()));
    ulp * max.max(1.0)
}

/// Cases where kiln deliberately differs from ExecuTorch's recorded output: (family.case,
/// what ExecuTorch does, the definition kiln's output is checked against).
const FOLLOWS_PYTORCH: &[(&str, &str, Definition)] = &[
    (
        "elementwise.remainder_int",
        "ExecuTorch's integer remainder keeps the dividend's sign (C `%`: -7 % 3 = -1); \
         torch.remainder's result has the divisor's sign (-7 % 3 = 2)",
        Definition::RemainderInt,
    ),
    (
        "elementwise.div_floor",
        "ExecuTorch's float floor division returns (a - fmod(a, b)) / b without rounding it to \
         an integer (-1623.9998779); torch.div(rounding_mode=\"floor\") returns floor(a / b) \
         (-1624)",
        Definition::FloorDivFloat,
    ),
];

/// An independent computation of a case's output from its two inputs (`other` broadcast as a
/// trailing suffix of `self`'s shape).
#[derive(Clone, Copy)]
enum Definition {
    /// int32 `a - b * floor(a / b)`.
    RemainderInt,
    /// float32 `floor(a / b)` of the exact quotient.
    FloorDivFloat,
}

impl Definition {
    fn check(self, what: &str, inputs: &[common::Array], got: &Output) -> Result<(), String> {
        let Output::Tensor(got) = got else { return Err(format!("{what}: not a tensor")) };
        let [a, b] = inputs else { return Err(format!("{what}: expected two inputs")) };
        let suffix = a.sizes.ends_with(&b.sizes);
        if !suffix || got.sizes != a.sizes {
            return Err(format!("{what}: shapes {:?} {:?} -> {:?}", a.sizes, b.sizes, got.sizes));
        }
        let nb: usize = b.sizes.iter().product();
        match self {
            Definition::RemainderInt => {
                let ints = |d: &[u8]| -> Vec<i64> {
                    d.chunks_exact(4)
                        .map(|c| i32::from_le_bytes(c.try_into().unwrap()).into())
                        .collect()
                };
                let (x, y, g) = (ints(&a.data), ints(&b.data), ints(&got.data));
                for (i, (&xi, &gi)) in x.iter().zip(&g).enumerate() {
                    let yi = y[i % nb];
                    let want = xi - yi * (xi as f64 / yi as f64).floor() as i64;
                    if gi != want {
                        return Err(format!(
                            "{what}: element {i}: {xi} % {yi}: kiln {gi}, definition {want}"
                        ));
                    }
                }
            }
            Definition::FloorDivFloat => {
                let x = common::f64s(DType::Float, &a.data);
                let y = common::f64s(DType::Float, &b.data);
                let g = common::f64s(DType::Float, &got.data);
                for (i, (&xi, &gi)) in x.iter().zip(&g).enumerate() {
                    let want = ((xi / y[i % nb]).floor() as f32) as f64;
                    if gi != want {
                        return Err(format!("{what}: element {i}: kiln {gi}, definition {want}"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// `topk` indices `got` select the same values of `input` as ExecuTorch's `want`, and no index
/// twice in one line. The topk dim is the one axis where the index sizes differ from the
/// input's; when `k` is the whole axis, some axis must pass.
fn same_selection(
    what: &str,
    input: &common::Array,
    got: &Output,
    want: &common::Array,
) -> Result<(), String> {
    let Output::Tensor(got) = got else { return Err(format!("{what}: indices not a tensor")) };
    if got.sizes != want.sizes || got.sizes.len() != input.sizes.len() || got.sizes.is_empty() {
        return Err(format!("{what}: index sizes {:?} vs {:?}", got.sizes, want.sizes));
    }
    let rank = input.sizes.len();
    match (0..rank).find(|&d| got.sizes[d] != input.sizes[d]) {
        Some(dim) => same_selection_along(what, input, dim, got, want),
        None => (0..rank)
            .map(|dim| same_selection_along(what, input, dim, got, want))
            .find(Result::is_ok)
            .unwrap_or_else(|| Err(format!("{what}: no axis where the indices fit"))),
    }
}

fn same_selection_along(
    what: &str,
    input: &common::Array,
    dim: usize,
    got: &kiln_runtime::OutputTensor,
    want: &common::Array,
) -> Result<(), String> {
    let (n, k) = (input.sizes[dim], got.sizes[dim]);
    let inner: usize = input.sizes[dim + 1..].iter().product();
    let outer: usize = input.sizes[..dim].iter().product();
    let values = common::f64s(input.dtype, &input.data);
    let idx = |a: &[u8]| -> Vec<i64> {
        a.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect()
    };
    let (g, w) = (idx(&got.data), idx(&want.data));
    for o in 0..outer {
        for i in 0..inner {
            let mut seen = vec![false; n];
            for j in 0..k {
                let p = (o * k + j) * inner + i;
                let (gi, wi) = (g[p], w[p]);
                let gu = usize::try_from(gi).ok().filter(|&v| v < n);
                let Some(gu) = gu else { return Err(format!("{what}: index {gi} out of range")) };
                if std::mem::replace(&mut seen[gu], true) {
                    return Err(format!("{what}: index {gi} selected twice"));
                }
                let at = |v: usize| values[(o * n + v) * inner + i];
                let (gv, wv) = (at(gu), at(wi as usize));
                if !(gv == wv || gv.is_nan() && wv.is_nan()) {
                    return Err(format!(
                        "{what}: position {p}: kiln's index {gi} selects {gv}, ExecuTorch's \
                         {wi} selects {wv}"
                    ));
                }
            }
        }
    }
    Ok(())
}

enum Outcome {
    Matched(f64),
    /// Differs from ExecuTorch where listed in [`FOLLOWS_PYTORCH`] and matches the definition.
    FollowsPytorch(&'static str),
    Failed(String),
}

fn run_method(
    dir: &std::path::Path,
    program: &Program,
    family: &str,
    m: &Value,
    run: &Value,
) -> Outcome {
    let method = m["name"].as_str().unwrap();
    let loaded = program.method(method);
    let mut method_obj = match loaded {
        Ok(m) => m,
        Err(e) => return Outcome::Failed(format!("load: {e}")),
    };
    let metas = method_obj.inputs();
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
            read_npy(&dir.join(f.as_str().unwrap()), want)
        })
        .collect();
    let inputs: Vec<Input<'_>> = arrays
        .iter()
        .map(|a| Input::Tensor(TensorInput { dtype: a.dtype, sizes: &a.sizes, data: &a.data }))
        .collect();
    let outputs = match method_obj.execute(&inputs) {
        Ok(o) => o,
        Err(e) => return Outcome::Failed(format!("execute: {e}")),
    };
    let want_files = run["outputs"].as_array().unwrap();
    let key = format!("{family}.{method}");
    if let Some(&(_, why, def)) = FOLLOWS_PYTORCH.iter().find(|(k, _, _)| *k == key) {
        let want = read_npy(&dir.join(want_files[0].as_str().unwrap()), None);
        if compare(&key, &outputs[0], &want, 1e-4).is_ok() {
            return Outcome::Failed(format!(
                "listed as differing from ExecuTorch, but kiln now gives ExecuTorch's output: \
                 update FOLLOWS_PYTORCH ({why})"
            ));
        }
        return match def.check(&key, &arrays, &outputs[0]) {
            Ok(()) => Outcome::FollowsPytorch(why),
            Err(e) => Outcome::Failed(e),
        };
    }
    if outputs.len() != want_files.len() {
        return Outcome::Failed(format!(
            "{} outputs, ExecuTorch gave {}",
            outputs.len(),
            want_files.len()
        ));
    }
    let out_metas = method_obj.outputs();
    let topk = m["operators"].as_array().unwrap().iter().any(|o| o == "aten::topk.values");
    let mut max_diff = 0f64;
    for (k, (got, f)) in outputs.iter().zip(want_files).enumerate() {
        let want_dtype = match out_metas.get(k) {
            Some(ValueMeta::Tensor(t)) => Some(t.dtype),
            _ => None,
        };
        let want = read_npy(&dir.join(f.as_str().unwrap()), want_dtype);
        if topk && k == 1 {
            if let Err(e) = same_selection(&key, &arrays[0], got, &want) {
                return Outcome::Failed(e);
            }
            continue;
        }
        let tol = tolerance(got, &want);
        match compare(&format!("{family}.{method} output {k}"), got, &want, tol) {
            Ok(d) => max_diff = max_diff.max(d),
            Err(e) => return Outcome::Failed(e),
        }
    }
    Outcome::Matched(max_diff)
}

#[test]
fn every_op_fixture_matches_executorch() {
    let dir = ops_dir();
    let mut families: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".expected.json").map(str::to_string))
        .collect();
    families.sort();
    assert_eq!(families.len(), 17, "op families: {families:?}");
    let mut failures = Vec::new();
    let (mut matched, mut followed) = (0, 0);
    for family in &families {
        let text = std::fs::read_to_string(dir.join(format!("{family}.expected.json"))).unwrap();
        let expected: Value = serde_json::from_str(&text).unwrap();
        let pte = dir.join(expected["files"]["pte"].as_str().unwrap());
        let program = Program::load(&pte).unwrap();
        for m in expected["inspect"]["methods"].as_array().unwrap() {
            let method = m["name"].as_str().unwrap();
            let run = &expected["runs"][method];
            match run_method(&dir, &program, family, m, run) {
                Outcome::Matched(d) => {
                    matched += 1;
                    println!("MATCH    {family}.{method}: max abs diff {d:e}");
                }
                Outcome::FollowsPytorch(why) => {
                    followed += 1;
                    println!(
                        "PYTORCH  {family}.{method}: differs from ExecuTorch on purpose: {why}"
                    );
                }
                Outcome::Failed(e) => {
                    println!("FAILED   {family}.{method}: {e}");
                    failures.push(format!("{family}.{method}: {e}"));
                }
            }
        }
    }
    println!("{matched} matched, {followed} follow PyTorch on purpose, {} failed", failures.len());
    assert_eq!(followed, FOLLOWS_PYTORCH.len(), "every listed divergence must be exercised");
    assert!(
        failures.is_empty(),
        "{} op cases differ from ExecuTorch:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A kernel argument of a dtype kiln's kernels do not compute with (here the int32 input of
/// `add_int_float_promote`'s int -> float `_to_dim_order_copy`, rewritten as uint16) is refused
/// when the method loads, naming the instruction and the value: before, the conversion read the
/// unreadable input as zeros.
#[test]
fn uncomputable_argument_dtype_is_refused_at_load() {
    use kiln_format::pte::model::{ProgramModel, ValueModel};
    use kiln_format::pte::{writer::write, Program as PteFile, ScalarType};

    let bytes = std::fs::read(ops_dir().join("elementwise.pte")).unwrap();
    let mut model = ProgramModel::from_program(&PteFile::open(&bytes).unwrap()).unwrap();
    let method = model.methods.iter_mut().find(|m| m.name == "add_int_float_promote").unwrap();
    let input = method.inputs[0] as usize;
    match &mut method.values[input] {
        ValueModel::Tensor(t) => {
            assert_eq!(t.scalar_type, ScalarType::Int);
            t.scalar_type = ScalarType::UInt16;
        }
        other => panic!("input is {other:?}"),
    }
    let program = Program::builder().load_bytes("edited.pte", write(&model).unwrap()).unwrap();
    let err = program.method("add_int_float_promote").unwrap_err().to_string();
    assert!(
        err.contains("dim_order_ops::_to_dim_order_copy.out")
            && err.contains(&format!("values[{input}] has dtype uint16")),
        "{err}"
    );
}
