//! Inputs read where the caller gave them: an input no step writes is read in place when its
//! bytes are aligned for its dtype, from an aligned copy otherwise, and the outputs are
//! ExecuTorch's either way.

mod common;

use common::{compare, pte_dir, read_npy, Array};
use kiln_runtime::{Input, Method, Program, TensorInput};

fn forward(name: &str) -> Method {
    Program::load(pte_dir().join(format!("{name}.pte")))
        .and_then(|p| p.method("forward"))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn input<'a>(a: &'a Array, data: &'a [u8]) -> Input<'a> {
    Input::Tensor(TensorInput { dtype: a.dtype, sizes: &a.sizes, data })
}

/// `data` at an address one byte past an alignment of 4 (never aligned for a float32).
fn unaligned(data: &[u8]) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; data.len() + 8];
    let start = (4 - buf.as_ptr() as usize % 4) % 4 + 1;
    buf[start..start + data.len()].copy_from_slice(data);
    (buf, start)
}

#[test]
fn an_input_no_step_writes_is_read_in_place_and_an_unaligned_one_from_a_copy() {
    for name in ["mobilenet_v2_xnnpack", "tiny_cnn", "resnet_small"] {
        let dir = pte_dir();
        let x = read_npy(&dir.join(format!("{name}.forward.in0.npy")), None);
        let want = read_npy(&dir.join(format!("{name}.forward.out0.npy")), None);
        let mut m = forward(name);
        let aligned = m.execute(&[input(&x, &x.data)]).unwrap();
        assert!(m.reads_input_in_place(0), "{name}: the aligned input was copied");
        compare(&format!("{name} in place"), &aligned[0], &want, 1e-4).unwrap();

        let (buf, start) = unaligned(&x.data);
        let copied = m.execute(&[input(&x, &buf[start..start + x.data.len()])]).unwrap();
        assert!(!m.reads_input_in_place(0), "{name}: an unaligned input was read in place");
        assert_eq!(copied, aligned, "{name}: the copied input gave other outputs");
    }
}

#[test]
fn each_run_reads_the_bytes_it_is_given_now() {
    let dir = pte_dir();
    let x = read_npy(&dir.join("tiny_cnn.forward.in0.npy"), None);
    let mut m = forward("tiny_cnn");
    let first = m.execute(&[input(&x, &x.data)]).unwrap();
    // The same buffer, changed between two runs.
    let mut data = x.data.clone();
    let before = m.execute(&[input(&x, &data)]).unwrap();
    data.iter_mut().for_each(|b| *b = 0);
    let zeros = m.execute(&[input(&x, &data)]).unwrap();
    assert!(m.reads_input_in_place(0));
    assert_eq!(before, first);
    assert_ne!(zeros, first, "the run did not read the changed buffer");
    // A fresh state of the same method on zeros agrees.
    let mut other = forward("tiny_cnn");
    assert_eq!(other.execute(&[input(&x, &data)]).unwrap(), zeros);
}

#[test]
fn inputs_of_methods_with_control_flow_are_copied() {
    let dir = pte_dir();
    let x = read_npy(&dir.join("control_flow.forward.in0.npy"), None);
    let want = read_npy(&dir.join("control_flow.forward.out0.npy"), None);
    let mut m = forward("control_flow");
    let out = m.execute(&[input(&x, &x.data)]).unwrap();
    assert!(!m.reads_input_in_place(0));
    compare("control_flow", &out[0], &want, 1e-4).unwrap();
}
