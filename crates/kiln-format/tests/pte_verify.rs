//! Verification rejects each kind of inconsistency, naming the field: the tiny CNN fixture is
//! read into a model, one field is broken, and the written file must fail to open with an
//! error that names the broken field.
//!
//! tiny_cnn layout (see `kiln dump`): values 0..=8 constant tensors (8 is a 0-d LONG), 9 the
//! planned input, 11/12 Ints listed by IntList 13, 30 a TensorList of 25..=27; instruction 0 is
//! `aten::convolution.out` with 11 args; one planned arena of 28,672 bytes.

mod common;

use std::fs;

use kiln_format::pte::model::{InstructionModel, MethodModel, ProgramModel, ValueModel};
use kiln_format::pte::{writer::write, Program};

fn model() -> ProgramModel {
    let bytes = fs::read(common::fixture("pte/tiny_cnn.pte")).unwrap();
    ProgramModel::from_program(&Program::open(&bytes).unwrap()).unwrap()
}

fn tensor(m: &mut MethodModel, i: usize) -> &mut kiln_format::pte::model::TensorModel {
    match &mut m.values[i] {
        ValueModel::Tensor(t) => t,
        other => panic!("value {i} is {other:?}"),
    }
}

/// Applies `edit` to method 0 and checks that opening the written program fails naming `want`.
fn rejects(what: &str, want: &str, edit: impl FnOnce(&mut MethodModel)) {
    let mut m = model();
    edit(&mut m.methods[0]);
    let bytes = write(&m).unwrap();
    match Program::open(&bytes) {
        Ok(_) => panic!("{what}: accepted"),
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(want), "{what}: error {msg:?} does not contain {want:?}");
        }
    }
}

#[test]
fn the_unedited_model_verifies() {
    Program::open(&write(&model()).unwrap()).unwrap();
}

#[test]
fn rejects_broken_indices() {
    rejects("kernel arg", "instructions[0].kernel_call.args[2]", |m| {
        let InstructionModel::Kernel { args, .. } = &mut m.chains[0].instructions[0] else {
            panic!()
        };
        args[2] = m.values.len() as i32;
    });
    rejects("op index", "kernel_call.op_index", |m| {
        let n = m.operators.len() as i32;
        let InstructionModel::Kernel { op_index, .. } = &mut m.chains[0].instructions[0] else {
            panic!()
        };
        *op_index = n;
    });
    rejects("negative arg", "index -1 is outside", |m| {
        let InstructionModel::Kernel { args, .. } = &mut m.chains[0].instructions[1] else {
            panic!()
        };
        args[0] = -1;
    });
    rejects("move", "move_call.move_to", |m| {
        let n = m.values.len() as i32;
        m.chains[0].instructions.push(InstructionModel::Move { from: 0, to: n });
    });
    rejects("free on an Int", "free_call.value_index", |m| {
        m.chains[0].instructions.push(InstructionModel::Free { value: 11 });
    });
    rejects("jump on an Int", "jump_false_call.cond_value_index", |m| {
        m.chains[0].instructions.push(InstructionModel::JumpFalse { cond: 11, destination: 0 });
    });
    rejects("negative jump", "destination_instruction", |m| {
        m.chains[0].instructions.push(InstructionModel::JumpFalse { cond: 20, destination: -2 });
    });
    rejects("delegate index", "delegate_call.delegate_index", |m| {
        m.chains[0]
            .instructions
            .push(InstructionModel::Delegate { delegate_index: 0, args: vec![] });
    });
    rejects("input", "execution_plan[0].inputs[0]", |m| m.inputs[0] = 100_000);
    rejects("output", "execution_plan[0].outputs[0]", |m| m.outputs[0] = -5);
}

#[test]
fn rejects_list_items_of_the_wrong_kind() {
    rejects("int list -> tensor", "values[13].int_list.items[0]", |m| {
        m.values[13] = ValueModel::IntList(vec![9, 12]);
    });
    rejects("tensor list -> int", "values[30].tensor_list.items[1]", |m| {
        m.values[30] = ValueModel::TensorList(vec![25, 11, 27]);
    });
    rejects("tensor list forward reference", "comes after the list", |m| {
        m.values[30] = ValueModel::TensorList(vec![25, 31]);
    });
    rejects("optional tensor list", "optional_tensor_list.items[0]", |m| {
        m.values[30] = ValueModel::OptionalTensorList(vec![12, -1]);
    });
    rejects("int list out of range", "int_list.items[1]", |m| {
        m.values[13] = ValueModel::IntList(vec![11, 1 << 40]);
    });
}

#[test]
fn rejects_bad_tensor_shapes() {
    rejects("dim_order", "values[9].tensor.dim_order[3]", |m| {
        tensor(m, 9).dim_order = vec![0, 1, 2, 2];
    });
    rejects("dim_order length", "has 3 entries for rank 4", |m| {
        tensor(m, 9).dim_order = vec![0, 1, 2];
    });
    rejects("rank", "rank 17", |m| {
        let t = tensor(m, 9);
        t.sizes = vec![1; 17];
        t.dim_order = (0..17).collect();
    });
    rejects("negative size", "values[9].tensor.sizes[1]", |m| tensor(m, 9).sizes[1] = -3);
    rejects("numel overflow", "element count overflows", |m| {
        let t = tensor(m, 9);
        t.sizes = vec![i32::MAX; 3];
        t.dim_order = vec![0, 1, 2];
    });
}

#[test]
fn rejects_data_outside_its_storage() {
    rejects("planned tensor past its arena", "do not fit arena 1", |m| {
        tensor(m, 10).allocation = Some((1, 28_672 - 100));
    });
    rejects("memory_id 0", "memory_id 0 is reserved", |m| tensor(m, 10).allocation = Some((0, 0)));
    rejects("memory_id past the arenas", "allocation_info.memory_id", |m| {
        tensor(m, 10).allocation = Some((2, 0));
    });
    rejects("constant index past the table", "values[0].tensor.data_buffer_idx", |m| {
        tensor(m, 0).data_buffer_idx = 1000;
    });
    rejects("constant larger than its segment", "values[4].tensor.data_buffer_idx", |m| {
        tensor(m, 4).sizes = vec![10, 5120];
    });
    rejects("negative arena size", "non_const_buffer_sizes[1]", |m| {
        m.non_const_buffer_sizes[1] = -1
    });
}

#[test]
fn rejects_broken_headers_and_segments() {
    let bytes = write(&model()).unwrap();
    // segment_data_size one past the end of the file.
    let mut b = bytes.clone();
    let size = u64::from_le_bytes(b[32..40].try_into().unwrap()) + 1;
    b[32..40].copy_from_slice(&size.to_le_bytes());
    let e = Program::open(&b).unwrap_err().to_string();
    assert!(e.contains("extended_header.segment_data_size"), "{e}");
    // A truncated file: the segment no longer fits.
    let e = Program::open(&bytes[..bytes.len() - 1]).unwrap_err().to_string();
    assert!(e.contains("segment"), "{e}");
    // Another program version.
    let mut b = bytes.clone();
    b[6..8].copy_from_slice(b"99");
    let e = Program::open(&b).unwrap_err().to_string();
    assert!(e.contains("ET99"), "{e}");
    // Header length below 24.
    let mut b = bytes;
    b[12..16].copy_from_slice(&16u32.to_le_bytes());
    assert!(Program::open(&b).unwrap_err().to_string().contains("extended_header.length"));
}

#[test]
fn unaligned_8_byte_scalars_are_read_and_reported() {
    // ExecuTorch's xor training program (pytorch/executorch test resource): an int64 vector at
    // file offset 10444. ExecuTorch reads it; the file must verify, and the misalignment is
    // reported for `verify --strict`.
    let bytes = std::fs::read(common::fixture("pte-compat/xor.pte")).unwrap();
    let program = Program::open(&bytes).unwrap();
    let found = kiln_format::pte::misaligned_scalars(&program);
    assert!(!found.is_empty());
    assert!(found.iter().all(|m| m.offset % 8 != 0), "{found:?}");
    assert!(
        found.iter().any(|m| m.offset == 10444 && m.field.ends_with("int_list.items")),
        "{found:?}"
    );
    // kiln's writer aligns what it writes.
    let model = kiln_format::pte::model::ProgramModel::from_program(&program).unwrap();
    let written = kiln_format::pte::writer::write(&model).unwrap();
    let rewritten = Program::open(&written).unwrap();
    assert_eq!(kiln_format::pte::misaligned_scalars(&rewritten), vec![]);
    // Files ExecuTorch 1.5.1 writes have none.
    let tiny = std::fs::read(common::fixture("pte/tiny_cnn.pte")).unwrap();
    assert_eq!(kiln_format::pte::misaligned_scalars(&Program::open(&tiny).unwrap()), vec![]);
}
