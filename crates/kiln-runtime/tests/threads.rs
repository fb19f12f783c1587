//! Threads and callers: a program's outputs are the same bits whatever the thread count,
//! and whatever other callers run the same loaded program at the same time; and they are
//! ExecuTorch's outputs.

mod common;

use common::{compare, pte_dir, read_npy, Array};
use kiln_runtime::{Input, LoadOptions, Output, Program, TensorInput, Threads};

/// Fixtures whose large layers split over threads (convolutions, depthwise pairs, linear
/// layers), with their recorded input and ExecuTorch's output.
const SPLIT_PROGRAMS: [&str; 3] = ["mobilenet_v2_xnnpack", "resnet_small", "transformer_block"];

fn load(name: &str, threads: usize) -> Program {
    let options = LoadOptions { threads: Threads::new(threads).unwrap(), ..LoadOptions::default() };
    Program::builder().options(options).load(pte_dir().join(format!("{name}.pte"))).unwrap()
}

fn input(name: &str) -> Array {
    read_npy(&pte_dir().join(format!("{name}.forward.in0.npy")), None)
}

fn bits(outputs: &[Output]) -> Vec<Vec<u8>> {
    outputs
        .iter()
        .map(|o| match o {
            Output::Tensor(t) => t.data.clone(),
            other => panic!("expected tensors, got {other:?}"),
        })
        .collect()
}

fn run(program: &Program, x: &Array) -> Vec<Output> {
    let mut method = program.method("forward").unwrap();
    let input = Input::Tensor(TensorInput { dtype: x.dtype, sizes: &x.sizes, data: &x.data });
    method.execute(&[input]).unwrap()
}

#[test]
fn outputs_are_the_same_bits_on_one_to_four_threads() {
    for name in SPLIT_PROGRAMS {
        let x = input(name);
        let want = read_npy(&pte_dir().join(format!("{name}.forward.out0.npy")), None);
        let one = run(&load(name, 1), &x);
        compare(name, &one[0], &want, 1e-4).unwrap();
        for n in 2..=4 {
            let got = run(&load(name, n), &x);
            assert!(bits(&got) == bits(&one), "{name}: {n} threads give other bits than one");
        }
    }
}

#[test]
fn callers_at_once_get_a_lone_callers_bits() {
    for name in SPLIT_PROGRAMS {
        let x = input(name);
        let program = load(name, 2);
        let alone = bits(&run(&program, &x));
        // Four callers on one program and one pool of two threads, each with its own
        // execution state, at the same time.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let mut method = program.method("forward").unwrap();
                    let input = Input::Tensor(TensorInput {
                        dtype: x.dtype,
                        sizes: &x.sizes,
                        data: &x.data,
                    });
                    for _ in 0..5 {
                        let got = method.execute(&[input]).unwrap();
                        assert!(bits(&got) == alone, "{name}: a concurrent caller's bits differ");
                    }
                });
            }
        });
    }
}

#[test]
fn another_state_runs_beside_the_first() {
    let name = "mobilenet_v2_xnnpack";
    let x = input(name);
    let program = load(name, 2);
    let mut first = program.method("forward").unwrap();
    let mut second = first.another().unwrap();
    assert_eq!(first.memory_bytes(), second.memory_bytes());
    let input = Input::Tensor(TensorInput { dtype: x.dtype, sizes: &x.sizes, data: &x.data });
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| first.execute(&[input]).unwrap());
        let b = s.spawn(|| second.execute(&[input]).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(bits(&a) == bits(&b));
}

#[test]
fn a_new_state_starts_from_the_loaded_weights() {
    // ExecuTorch's xor training program: its weights come from the `.ptd` and are planned in
    // method memory, where a training loop updates them; a state made later must copy them
    // in again (a state with zeros there gives other outputs than ExecuTorch's).
    let dir = pte_dir().join("../pte-compat");
    let program = Program::load_with_data(dir.join("xor.pte"), dir.join("xor.ptd")).unwrap();
    let xs: Vec<Array> =
        (0..2).map(|i| read_npy(&dir.join(format!("xor.forward.in{i}.npy")), None)).collect();
    let inputs: Vec<Input<'_>> = xs
        .iter()
        .map(|x| Input::Tensor(TensorInput { dtype: x.dtype, sizes: &x.sizes, data: &x.data }))
        .collect();
    let mut first = program.method("forward").unwrap();
    let mut states = vec![first.another().unwrap()];
    first.execute(&inputs).unwrap();
    states.push(first.another().unwrap());
    states.push(program.method("forward").unwrap());
    for (s, state) in states.iter_mut().enumerate() {
        let outputs = state.execute(&inputs).unwrap();
        assert_eq!(outputs.len(), 10);
        for (i, got) in outputs.iter().enumerate() {
            let want = read_npy(&dir.join(format!("xor.forward.out{i}.npy")), None);
            compare(&format!("state {s}, output {i}"), got, &want, 1e-6).unwrap();
        }
    }
}
