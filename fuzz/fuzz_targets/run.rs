//! Fuzzes the runtime: load a (mutated) `.pte`, load every method, and execute it with random
//! inputs of the declared shapes. Memory and instruction caps keep each case small; the
//! runtime must return errors, never panic.
#![no_main]

use kiln_kernels::DType;
use kiln_runtime::{Input, LoadOptions, Program, TensorInput, ValueMeta};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let options = LoadOptions { memory_limit: 32 << 20, instruction_limit: 20_000, ..LoadOptions::default() };
    let Ok(program) = Program::builder().options(options).load_bytes("fuzz.pte", data.to_vec()) else {
        return;
    };
    let mut seed = data.len() as u64 ^ 0x9E37_79B9_7F4A_7C15;
    let names: Vec<String> = program.method_names().iter().map(|s| s.to_string()).collect();
    for name in names {
        let Ok(mut method) = program.method(&name) else { continue };
        let metas = method.inputs();
        let mut arrays: Vec<(DType, Vec<usize>, Vec<u8>)> = Vec::new();
        let mut inputs_ok = true;
        for m in &metas {
            match m {
                ValueMeta::Tensor(t) => {
                    let n: usize = t.sizes.iter().product();
                    let bytes = n.saturating_mul(t.dtype.size());
                    if bytes > (4 << 20) {
                        inputs_ok = false;
                        break;
                    }
                    let mut v = Vec::with_capacity(bytes);
                    for _ in 0..bytes {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        v.push((seed >> 56) as u8);
                    }
                    arrays.push((t.dtype, t.sizes.clone(), v));
                }
                _ => arrays.push((DType::Byte, vec![], vec![])),
            }
        }
        if !inputs_ok {
            continue;
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
        // A second run reuses the scratch and memory.
        let _ = method.execute(&inputs);
    }
});
