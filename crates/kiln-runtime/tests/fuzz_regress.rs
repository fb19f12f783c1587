//! Inputs the `run` fuzz target (`fuzz/fuzz_targets/run.rs`) once crashed on, kept in
//! `tests/fixtures/fuzz/`: each goes through the same steps (load with caps, load every method,
//! execute twice with deterministic random inputs of the declared shapes) and must end in
//! results or errors, never a panic.

use std::path::PathBuf;

use kiln_kernels::DType;
use kiln_runtime::{Input, LoadOptions, Program, TensorInput, ValueMeta};

fn run_like_the_fuzzer(data: &[u8]) -> usize {
    let options =
        LoadOptions { memory_limit: 32 << 20, instruction_limit: 20_000, ..LoadOptions::default() };
    let Ok(program) = Program::builder().options(options).load_bytes("fuzz.pte", data.to_vec())
    else {
        return 0;
    };
    let mut seed = data.len() as u64 ^ 0x9E37_79B9_7F4A_7C15;
    let mut executed = 0;
    let names: Vec<String> = program.method_names().iter().map(|s| s.to_string()).collect();
    for name in names {
        let Ok(mut method) = program.method(&name) else { continue };
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
        executed += 1;
    }
    executed
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
    assert!(!files.is_empty(), "no fuzz regression inputs in {}", dir.display());
    for f in &files {
        let executed = run_like_the_fuzzer(&std::fs::read(f).unwrap());
        println!("{}: {executed} method(s) executed", f.display());
    }
}
