//! Fusing chains of operators: transactions built by hand from aie-rt's layouts and real
//! DynamicDispatch / mlir-aie transactions, checked byte for byte against offsets derived by
//! hand from DD's packing rules (every buffer at the next multiple of 4 in its fused buffer).

mod common;

use std::fs;

use common::{
    arg, constant, expected_fusion, hand_txn, patches_of, shared_testdata, tensor, RecordedOp,
};
use kiln_format::txn::{Txn, HEADER_SIZE};
use kiln_npu::{fuse, Fused, Node, OpArgType::*, PackedTensor};

/// Parses the fused transaction and checks that its ops tile it from the header to the end
/// and that the header counts them.
fn check_tiling(fused: &Fused, num_ops: u32) -> Txn {
    let txn = Txn::parse(&fused.txn).unwrap();
    assert_eq!(txn.header.num_ops, num_ops);
    assert_eq!(txn.ops.len() as u32, num_ops);
    assert_eq!(txn.header.txn_size as usize, fused.txn.len());
    let mut at = HEADER_SIZE;
    for op in &txn.ops {
        assert_eq!(op.offset, at);
        at += txn.op_size(op).unwrap();
    }
    assert_eq!(at as usize, fused.txn.len());
    txn
}

/// Elementwise add as the interface document maps it: output in xrt arg 0, both inputs in
/// xrt arg 1 (the second after the first), consts in 2, super-kernel params in 3.
fn add_maps(
    in1: u64,
    in2: u64,
    out: u64,
    consts: &[(usize, u64)],
    params: u64,
) -> Vec<kiln_npu::OpArgMap> {
    let mut maps = vec![arg(Input, 1, 0, 0, in1), arg(Input, 1, 1, in1, in2)];
    for (k, &(xrt, size)) in consts.iter().enumerate() {
        maps.push(arg(ConstInput, xrt, 2 + k, 0, size));
    }
    maps.push(arg(Output, 0, 2 + consts.len(), 0, out));
    maps.push(arg(ConstKernelParamInput, 3, 0, 0, params));
    maps
}

#[test]
fn two_adds_fuse_into_the_documented_buffers() {
    // add0: t = a + b (a 40 bytes, b 42), one 6-byte const, 10 bytes of params.
    let op0 = RecordedOp {
        maps: add_maps(40, 42, 40, &[(2, 6)], 10),
        txn: hand_txn(&[
            (0x1D004, 0, 8),  // output t, 8 bytes in
            (0x1D024, 1, 0),  // a
            (0x1D044, 1, 44), // b (at 40 in xrt arg 1), 4 bytes in
            (0x1D064, 2, 2),  // const, 2 bytes in
            (0x1D084, 3, 4),  // params, 4 bytes in
        ]),
        params: (0xA0..0xAA).collect(),
    };
    // add1: out = t + c (c 42 bytes), consts of 6 and 5 bytes (xrt 2 and 5), 7 of its 10
    // bytes of params, and a 22-byte scratch pad in xrt arg 4.
    let mut maps1 = add_maps(40, 42, 40, &[(2, 6), (5, 5)], 10);
    maps1.push(arg(ScratchPad, 4, 0, 0, 22));
    let op1 = RecordedOp {
        maps: maps1,
        txn: hand_txn(&[
            (0x1D004, 0, 0),  // output out
            (0x1D024, 1, 12), // t, 12 bytes in
            (0x1D044, 1, 40), // c
            (0x1D064, 2, 0),  // first const
            (0x1D084, 5, 4),  // second const, 4 bytes in
            (0x1D0A4, 3, 8),  // params, 8 bytes in
            (0x1D0C4, 4, 16), // scratch pad, 16 bytes in
        ]),
        params: (0xB0..0xB7).collect(),
    };
    let k0: Vec<u8> = (1..=6).collect();
    let k1: Vec<u8> = (11..=16).collect();
    let k2: Vec<u8> = (21..=25).collect();
    let nodes = [
        Node {
            name: "add0".into(),
            op: &op0,
            inputs: vec![tensor("a", 40), tensor("b", 42)],
            consts: vec![constant("k0", k0.clone())],
            outputs: vec![tensor("t", 40)],
        },
        Node {
            name: "add1".into(),
            op: &op1,
            inputs: vec![tensor("t", 40), tensor("c", 42)],
            consts: vec![constant("k1", k1.clone()), constant("k2", k2.clone())],
            outputs: vec![tensor("out", 40)],
        },
    ];
    let fused = fuse(&nodes).unwrap();

    // By hand: input buffer a@0 (40), b@40 (42), c@84 (82 rounded up); output out@0;
    // scratch t@0, then the shared pad at 40, 24 bytes (22 rounded up): 64 in all;
    // const k0@0 (6), k1@8, k2@16: 21 bytes; params add0@0 (10), add1@12: 22 bytes.
    let expected_patches = [
        (2, 8),  // add0 output t: scratch 0 + 8
        (0, 0),  // a
        (0, 44), // b: 40 + 4
        (3, 2),  // k0: 0 + 2
        (4, 4),  // add0 params: 0 + 4
        (1, 0),  // add1 output out
        (2, 12), // t: scratch 0 + 12
        (0, 84), // c
        (3, 8),  // k1: 8 + 0
        (3, 20), // k2: 16 + 4
        (4, 20), // add1 params: 12 + 8
        (2, 56), // scratch pad: 40 + 16
    ];
    assert_eq!(fused.txn, expected_fusion(&[&op0.txn, &op1.txn], &expected_patches));
    let txn = check_tiling(&fused, (2 * 5 + 2) + (2 * 7 + 2));
    assert_eq!(patches_of(&txn), expected_patches);
    assert_eq!(fused.txn.len(), 16 + (op0.txn.len() - 16) + (op1.txn.len() - 16));

    let mut consts = vec![0; 21];
    consts[0..6].copy_from_slice(&k0);
    consts[8..14].copy_from_slice(&k1);
    consts[16..21].copy_from_slice(&k2);
    assert_eq!(fused.const_buffer, consts);
    let mut params = vec![0; 22];
    params[0..10].copy_from_slice(&op0.params);
    params[12..19].copy_from_slice(&op1.params);
    assert_eq!(fused.super_kernel_params, params);

    let placed =
        |name: &str, buffer, offset, size| PackedTensor { name: name.into(), buffer, offset, size };
    assert_eq!(
        fused.tensors,
        [
            placed("a", Input, 0, 40),
            placed("b", Input, 40, 42),
            placed("c", Input, 84, 42),
            placed("out", Output, 0, 40),
            placed("t", ScratchPad, 0, 40),
        ]
    );
    assert_eq!(
        fused.arg_map,
        [
            arg(Input, 0, 0, 0, 40),
            arg(Input, 0, 1, 40, 42),
            arg(Input, 0, 2, 84, 42),
            arg(ConstInput, 3, 3, 0, 21),
            arg(Output, 1, 4, 0, 40),
            arg(ScratchPad, 2, 0, 0, 64),
            arg(ConstKernelParamInput, 4, 0, 0, 22),
        ]
    );
}

/// DD's transpose map (reference B4): input in xrt arg 1, a 16-byte dummy const in 2, output
/// in 0, the 256-byte `_param.bin` in 3. Shape 1×49×1024 of 16-bit values: 100,352 bytes.
fn transpose(txn: Vec<u8>, params: u8) -> RecordedOp {
    const BYTES: u64 = 49 * 1024 * 2;
    RecordedOp {
        maps: vec![
            arg(Input, 1, 0, 0, BYTES),
            arg(ConstInput, 2, 1, 0, 16),
            arg(Output, 0, 2, 0, BYTES),
            arg(ConstKernelParamInput, 3, 0, 0, 256),
        ],
        txn,
        params: vec![params; 256],
    }
}

#[test]
fn real_transposes_fuse() {
    let Some(dir) = shared_testdata("aie_txn", "real_transposes_fuse") else { return };
    let bytes = fs::read(dir.join("dd_transpose_a16a16_1_49_1024.bin")).unwrap();
    let (op0, op1) = (transpose(bytes.clone(), 0x11), transpose(bytes.clone(), 0x22));
    let node = |name: &str, op, input: &str, output: &str, fill: u8| Node {
        name: name.into(),
        op,
        inputs: vec![tensor(input, 100_352)],
        consts: vec![constant("dummy", vec![fill; 16])],
        outputs: vec![tensor(output, 100_352)],
    };
    let nodes = [node("t0", &op0, "x", "m", 0xC0), node("t1", &op1, "m", "y", 0xC1)];
    let fused = fuse(&nodes).unwrap();
    // The file's patches are (xrt 3, 0) twice, (1, 0), (0, 0): params, input, output.
    // t0: params at 0, x in the input buffer, m in scratch; t1: params at 256, m, y.
    let expected = [(4, 0), (4, 0), (0, 0), (2, 0), (4, 256), (4, 256), (2, 0), (1, 0)];
    assert_eq!(fused.txn, expected_fusion(&[&bytes, &bytes], &expected));
    let txn = check_tiling(&fused, 2 * 126);
    assert_eq!(txn.header.txn_size, 16 + 2 * (4080 - 16));
    assert_eq!(patches_of(&txn), expected);
    assert_eq!(fused.const_buffer, [[0xC0; 16], [0xC1; 16]].concat());
    assert_eq!(fused.super_kernel_params, [[0x11; 256], [0x22; 256]].concat());
}

#[test]
fn real_mlir_aie_transactions_fuse() {
    let Some(dir) = shared_testdata("aie_txn", "real_mlir_aie_transactions_fuse") else { return };
    let bytes = fs::read(dir.join("mlir_aie_add_one_two_insts.bin")).unwrap();
    // add_one_two reads xrt arg 0 and writes xrt arg 2: 64 int32 each.
    let op = RecordedOp {
        maps: vec![arg(Input, 0, 0, 0, 256), arg(Output, 2, 1, 0, 256)],
        txn: bytes.clone(),
        params: vec![],
    };
    let node = |name: &str, input: &str, output: &str| Node {
        name: name.into(),
        op: &op,
        inputs: vec![tensor(input, 256)],
        consts: vec![],
        outputs: vec![tensor(output, 256)],
    };
    let fused = fuse(&[node("n0", "x", "m"), node("n1", "m", "y")]).unwrap();
    // Patches in the file: (2, 0) then (0, 0).
    let expected = [(2, 0), (0, 0), (1, 0), (2, 0)];
    assert_eq!(fused.txn, expected_fusion(&[&bytes, &bytes], &expected));
    check_tiling(&fused, 14);
    assert!(fused.const_buffer.is_empty() && fused.super_kernel_params.is_empty());
    assert_eq!(
        fused.arg_map,
        [arg(Input, 0, 0, 0, 256), arg(Output, 1, 1, 0, 256), arg(ScratchPad, 2, 0, 0, 256)]
    );
}
