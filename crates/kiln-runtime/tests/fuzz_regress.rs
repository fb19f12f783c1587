//! Inputs the `run` fuzz target (`fuzz/fuzz_targets/run.rs`) once crashed on, kept in
//! `tests/fixtures/fuzz/`: each goes through the same steps (load with caps, load every method,
//! execute twice with deterministic random inputs of the declared shapes) and must end in
//! results or errors, never a panic. Each input must also still reach the step it once
//! crashed in, so a stricter check earlier on cannot turn this test into one that runs nothing.

use std::path::PathBuf;

use kiln_kernels::DType;
use kiln_runtime::{Error, Input, LoadOptions, Program, TensorInput, ValueMeta};

/// How far an input got.
#[derive(Debug, Default)]
struct Reached {
    /// The program loaded.
    loaded: bool,
    /// Errors of the methods that failed to load.
    method_errors: Vec<Error>,
    /// Methods loaded and executed (twice each).
    executed: usize,
}

fn run_like_the_fuzzer(data: &[u8]) -> Reached {
    let options =
        LoadOptions { memory_limit: 32 << 20, instruction_limit: 20_000, ..LoadOptions::default() };
    let mut reached = Reached::default();
    let Ok(program) = Program::builder().options(options).load_bytes("fuzz.pte", data.to_vec())
    else {
        return reached;
    };
    reached.loaded = true;
    let mut seed = data.len() as u64 ^ 0x9E37_79B9_7F4A_7C15;
    let names: Vec<String> = program.method_names().iter().map(|s| s.to_string()).collect();
    for name in names {
        let mut method = match program.method(&name) {
            Ok(m) => m,
            Err(e) => {
                reached.method_errors.push(e);
                continue;
            }
        };
        let metas = method.inputs();
        let mut arrays: Vec<(DType, Vec<usize>, Vec<u8>)> = Vec::new();
        for m in &metas {
            match m {
                ValueMeta::Tensor(t) => {
                    let n: usize = t.sizes.iter().product();
                    let bytes = n.saturating_mul(t.dtype.size()).min(4 << 20);
                    let v = (0..bytes)
                        .map(|_| {
                            seed = seed
                                .wrapping_mul(6364136223846793005)
                                .wrapping_add(1442695040888963407);
                            (seed >> 56) as u8
                        })
                        .collect();
                    arrays.push((t.dtype, t.sizes.clone(), v));
                }
                _ => arrays.push((DType::Byte, vec![], vec![])),
            }
        }
        let inputs: Vec<Input<'_>> = arrays
            .iter()
            .zip(&metas)
            .map(|((dtype, sizes, data), m)| match m {
                ValueMeta::Tensor(_) => Input::Tensor(TensorInput { dtype: *dtype, sizes, data }),
                ValueMeta::Int => Input::Int(0),
                ValueMeta::Double => Input::Double(0.0),
                ValueMeta::Bool => Input::Bool(false),
                _ => Input::None,
            })
            .collect();
        let _ = method.execute(&inputs);
        let _ = method.execute(&inputs);
        reached.executed += 1;
    }
    reached
}

#[test]
fn fuzz_findings_end_in_errors_not_panics() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fuzz");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pte"))
        .collect();
    files.sort();
    // Where each input crashed, and so what it must still reach: (file, methods executed, a
    // method load error that must contain this text, when it crashed at method load).
    let expected: [(&str, usize, Option<&str>); 3] = [
        // Folding a batch norm with a short constant into its convolution, at method load.
        ("run-batch-norm-short-constant.pte", 0, Some("per-channel constant")),
        // Sizing a convolution's indirection buffer, at method load.
        ("run-conv-indirection-too-large.pte", 0, Some("is not [N, 16, 52405522936674880, 20]")),
        // Quantize kernels on a zero point out of range, at execution.
        ("run-quantize-zero-point-overflow.pte", 8, None),
    ];
    let names: Vec<String> =
        files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    assert_eq!(names, expected.iter().map(|e| e.0).collect::<Vec<_>>(), "inputs in {dir:?}");
    for (f, (name, executed, load_error)) in files.iter().zip(expected) {
        let reached = run_like_the_fuzzer(&std::fs::read(f).unwrap());
        assert!(reached.loaded, "{name}: the program no longer loads");
        assert_eq!(reached.executed, executed, "{name}: {reached:?}");
        if let Some(text) = load_error {
            assert!(
                reached
                    .method_errors
                    .iter()
                    .any(|e| matches!(e, Error::InvalidProgram { .. })
                        && e.to_string().contains(text)),
                "{name}: {reached:?}"
            );
        }
    }
}
