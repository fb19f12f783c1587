//! Operator interface queries and the typed errors of fusion: each names the operator (and the
//! arg or patch) at fault, none panics.

mod common;

use std::fs;

use common::{arg, constant, hand_txn, shared_testdata, tensor, RecordedOp};
use kiln_format::txn::{opcode, Txn};
use kiln_npu::{fuse, Error, Node, NpuOp, OpArgMap, OpArgType::*};

/// A one-input, one-output operator with `maps` and a transaction of `patches`.
fn op(maps: Vec<OpArgMap>, patches: &[(u64, u64, u64)]) -> RecordedOp {
    RecordedOp { maps, txn: hand_txn(patches), params: vec![] }
}

fn node<'a>(name: &str, op: &'a RecordedOp, inputs: &[&str], outputs: &[&str]) -> Node<'a> {
    Node {
        name: name.into(),
        op,
        inputs: inputs.iter().map(|n| tensor(n, 40)).collect(),
        consts: vec![],
        outputs: outputs.iter().map(|n| tensor(n, 40)).collect(),
    }
}

/// Fuses a one-node chain and returns its error, checking that the message names `name`.
fn fuse_err(n: Node<'_>) -> Error {
    let name = n.name.clone();
    let err = fuse(&[n]).unwrap_err();
    assert!(err.to_string().contains(&name), "{err}");
    err
}

#[test]
fn onnx_arg_maps_kernel_arguments_to_onnx_arguments() {
    // The interface document's elementwise add: output in xrt 0, inputs in xrt 1 at 0 and 40.
    let add =
        op(vec![arg(Input, 1, 0, 0, 40), arg(Input, 1, 1, 40, 42), arg(Output, 0, 2, 0, 40)], &[]);
    let (ins, outs) = ([tensor("a", 40), tensor("b", 42)], [tensor("c", 40)]);
    let at = |xrt, offset| add.onnx_arg(&ins, &outs, xrt, offset).unwrap();
    assert_eq!(
        (at(1, 0), at(1, 39), at(1, 40), at(1, 81), at(0, 0)),
        (Some(0), Some(0), Some(1), Some(1), Some(2))
    );
    assert_eq!((at(1, 82), at(2, 0)), (None, None));
}

#[test]
fn bad_arg_maps_are_typed_errors() {
    let overlapping = op(vec![arg(Input, 1, 0, 0, 40), arg(Input, 1, 1, 36, 40)], &[]);
    assert!(matches!(
        fuse_err(node("ovl", &overlapping, &["a", "b"], &[])),
        Error::OverlappingArgs { first: 0, second: 1, xrt_arg_idx: 1, .. }
    ));
    // A first input of 42 bytes puts the second at 42: not whole words.
    let misaligned = op(vec![arg(Input, 1, 0, 0, 42), arg(Input, 1, 1, 42, 40)], &[]);
    assert!(matches!(
        fuse_err(node("mis", &misaligned, &["a", "b"], &[])),
        Error::MisalignedArg { arg: 1, xrt_arg_idx: 1, offset: 42, .. }
    ));
    // One input and one output: ONNX index 1 is the output, 2 is nothing.
    let out_of_range = op(vec![arg(Input, 1, 0, 0, 40), arg(Output, 0, 2, 0, 40)], &[]);
    assert!(matches!(
        fuse_err(node("oor", &out_of_range, &["a"], &["b"])),
        Error::OnnxArgOutOfRange { arg: 1, onnx_arg_idx: 2, .. }
    ));
    let input_as_output = op(vec![arg(Input, 1, 1, 0, 40)], &[]);
    assert!(matches!(
        fuse_err(node("io", &input_as_output, &["a"], &["b"])),
        Error::OnnxArgOutOfRange { arg: 0, onnx_arg_idx: 1, .. }
    ));
    let two_supers = op(
        vec![arg(ConstKernelParamInput, 3, 0, 0, 8), arg(ConstKernelParamInput, 4, 0, 0, 8)],
        &[],
    );
    assert!(matches!(
        fuse_err(node("sup", &two_supers, &[], &[])),
        Error::DuplicateSuperParams { first: 0, second: 1, .. }
    ));
    let mut big_params = op(vec![arg(ConstKernelParamInput, 3, 0, 0, 8)], &[]);
    big_params.params = vec![1; 9];
    assert!(matches!(
        fuse_err(node("par", &big_params, &[], &[])),
        Error::SuperParamsSize { len: 9, requested: 8, .. }
    ));
    assert!(matches!(fuse(&[]), Err(Error::Empty)));
}

#[test]
fn bad_patches_are_typed_errors() {
    let maps = || vec![arg(Input, 1, 0, 0, 40), arg(Output, 0, 1, 0, 40)];
    // The second DDR_PATCH (op 3: BLOCKWRITE, DDR_PATCH, BLOCKWRITE, DDR_PATCH) names xrt 2.
    let unknown = op(maps(), &[(0x1D004, 1, 0), (0x1D024, 2, 0)]);
    assert!(matches!(
        fuse_err(node("unk", &unknown, &["a"], &["b"])),
        Error::UnknownPatchArg { txn_op: 3, argidx: 2, argplus: 0, .. }
    ));
    let outside = op(maps(), &[(0x1D004, 0, 40)]);
    assert!(matches!(
        fuse_err(node("out", &outside, &["a"], &["b"])),
        Error::PatchOutsideArg { txn_op: 1, argidx: 0, argplus: 40, arg: 1, end: 40, .. }
    ));
    let mut corrupt = op(maps(), &[]);
    corrupt.txn.push(0);
    assert!(matches!(fuse_err(node("bad", &corrupt, &["a"], &["b"])), Error::Txn { .. }));
}

#[test]
fn const_data_larger_than_its_arg_is_refused() {
    let small = op(vec![arg(ConstInput, 2, 0, 0, 4)], &[]);
    let mut n = node("lut", &small, &[], &[]);
    n.consts = vec![constant("lut", vec![7; 6])];
    assert!(matches!(fuse_err(n), Error::ConstWrite { offset: 0, len: 6, size: 4, .. }));
}

#[test]
fn real_patch_of_an_arg_the_map_lacks_is_named() {
    let Some(dir) = shared_testdata("aie_txn", "real_patch_of_an_arg_the_map_lacks_is_named")
    else {
        return;
    };
    // DD's gap patches only its control packets (xrt 3, a buffer type the interface document
    // does not have); with the documented part of its map (input 1, const 0, output 2) the
    // first DDR_PATCH, op 2 of the file, is refused.
    let bytes = fs::read(dir.join("dd_gap_a16c16_26431_49_1_1024.bin")).unwrap();
    assert_eq!(Txn::parse(&bytes).unwrap().ops[2].kind.opcode(), opcode::DDR_PATCH);
    let gap = RecordedOp {
        maps: vec![
            arg(Input, 1, 0, 0, 49 * 1024 * 2),
            arg(ConstInput, 0, 1, 0, 64),
            arg(Output, 2, 2, 0, 1024 * 2),
        ],
        txn: bytes,
        params: vec![],
    };
    let mut n = node("gap", &gap, &["x"], &["y"]);
    n.consts = vec![constant("qdq", vec![0; 64])];
    assert!(matches!(fuse_err(n), Error::UnknownPatchArg { txn_op: 2, argidx: 3, argplus: 0, .. }));
}

#[test]
fn transactions_for_other_arrays_do_not_fuse() {
    let Some(dir) = shared_testdata("aie_txn", "transactions_for_other_arrays_do_not_fuse") else {
        return;
    };
    // The transpose is for Strix (DevGen 4), add_one_two for Phoenix (DevGen 3).
    let strix = RecordedOp {
        maps: vec![arg(Input, 1, 0, 0, 100_352), arg(Output, 0, 1, 0, 100_352)],
        txn: fs::read(dir.join("dd_transpose_a16a16_1_49_1024.bin")).unwrap(),
        params: vec![],
    };
    let phoenix = RecordedOp {
        maps: vec![arg(Input, 0, 0, 0, 256), arg(Output, 2, 1, 0, 256)],
        txn: fs::read(dir.join("mlir_aie_add_one_two_insts.bin")).unwrap(),
        params: vec![],
    };
    let err =
        fuse(&[node("tr", &strix, &["a"], &["b"]), node("one_two", &phoenix, &["b"], &["c"])])
            .unwrap_err();
    assert!(err.to_string().contains("one_two"), "{err}");
    assert!(matches!(err, Error::IncompatibleTxn { field: "dev_gen", expected: 4, found: 3, .. }));
}
