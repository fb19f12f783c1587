//! AIE transaction binaries: the real files from DynamicDispatch and mlir-aie, hand-built v1.0
//! words, patching and mutation.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::fs;

use common::{mutate, shared_testdata, Rng};
use kiln_format::txn::{
    from_hex_text, opcode, resolve_patches, to_hex_text, CustomPayload, DdrPatch, Launch,
    LaunchKernel, Layout, OpKind, Txn, HEADER_SIZE,
};

const REAL_BINS: [&str; 4] = [
    "dd_AttentionMaskPrePro_win25_4x4_a16acc16_1_64.bin",
    "dd_gap_a16c16_26431_49_1_1024.bin",
    "dd_transpose_a16a16_1_49_1024.bin",
    "mlir_aie_add_one_two_insts.bin",
];

fn histogram(txn: &Txn) -> HashMap<String, usize> {
    let mut h = HashMap::new();
    for op in &txn.ops {
        *h.entry(op.kind.name()).or_default() += 1;
    }
    h
}

#[test]
fn real_binaries_parse_fully_and_rewrite_identically() {
    let Some(dir) = shared_testdata("aie_txn", "real_binaries_parse_fully_and_rewrite_identically")
    else {
        return;
    };
    for name in REAL_BINS {
        let bytes = fs::read(dir.join(name)).unwrap();
        let txn = Txn::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(txn.ops.len() as u32, txn.header.num_ops, "{name}");
        // Every byte accounted for: op sizes tile the file after the header, in order.
        let mut at = HEADER_SIZE;
        for op in &txn.ops {
            assert_eq!(op.offset, at, "{name}");
            at += txn.op_size(op).unwrap();
        }
        assert_eq!(at, u64::from(txn.header.txn_size), "{name}");
        assert_eq!(txn.to_bytes().unwrap(), bytes, "{name}: rewrite differs");
        assert_eq!(txn.layout().unwrap(), Layout::V0_1, "{name}");
    }
}

#[test]
fn real_binaries_have_the_documented_contents() {
    let Some(dir) = shared_testdata("aie_txn", "real_binaries_have_the_documented_contents") else {
        return;
    };
    // Op counts from the provenance notes (shared/reference/circle_aie.md, B6).
    let bytes = fs::read(dir.join(REAL_BINS[0])).unwrap();
    let txn = Txn::parse(&bytes).unwrap();
    assert_eq!((txn.header.dev_gen, txn.header.num_rows, txn.header.num_cols), (4, 6, 4));
    let h = histogram(&txn);
    assert_eq!(txn.ops.len(), 46);
    assert_eq!((h["WRITE"], h["BLOCKWRITE"], h["MASKPOLL"], h["DDR_PATCH"]), (16, 8, 14, 8));
    for op in &txn.ops {
        if let OpKind::Custom { payload: CustomPayload::DdrPatch(p), .. } = &op.kind {
            assert_eq!((p.argidx(), p.regaddr() & 0xFFFFF), (4, 0x1D004));
        }
    }

    let txn = Txn::parse(&fs::read(dir.join(REAL_BINS[1])).unwrap()).unwrap();
    let h = histogram(&txn);
    assert_eq!((txn.ops.len(), h["RECORD_TIMER"], h["DDR_PATCH"]), (48, 9, 22));

    let txn = Txn::parse(&fs::read(dir.join(REAL_BINS[2])).unwrap()).unwrap();
    assert_eq!((txn.ops.len(), histogram(&txn)["MASKWRITE"]), (126, 48));

    let txn = Txn::parse(&fs::read(dir.join(REAL_BINS[3])).unwrap()).unwrap();
    let h = histogram(&txn);
    assert_eq!((h["BLOCKWRITE"], h["DDR_PATCH"], h["WRITE"], h["TCT"]), (2, 2, 2, 1));
    let tct = txn.ops.iter().find_map(|op| match &op.kind {
        OpKind::Custom { payload: CustomPayload::Tct { word, config }, .. } => {
            Some((*word, *config))
        }
        _ => None,
    });
    assert_eq!(tct, Some((0, 0x0001_0100)));
    let patches: Vec<_> = txn
        .ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Custom { payload: CustomPayload::DdrPatch(p), .. } => {
                Some((p.regaddr(), p.argidx()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(patches, [(0x1D024, 2), (0x1D004, 0)]);
}

#[test]
fn hex_text_form_matches_binary() {
    let Some(dir) = shared_testdata("aie_txn", "hex_text_form_matches_binary") else { return };
    let text = fs::read_to_string(dir.join("mlir_aie_add_one_two_insts.txt")).unwrap();
    let bin = fs::read(dir.join("mlir_aie_add_one_two_insts.bin")).unwrap();
    let bytes = from_hex_text(&text).unwrap();
    assert_eq!(bytes, bin);
    assert_eq!(to_hex_text(&Txn::parse(&bytes).unwrap().to_bytes().unwrap()).unwrap(), text);
}

#[test]
fn patching_changes_exactly_the_patched_words() {
    let Some(dir) = shared_testdata("aie_txn", "patching_changes_exactly_the_patched_words") else {
        return;
    };
    for name in REAL_BINS {
        let bytes = fs::read(dir.join(name)).unwrap();
        let mut txn = Txn::parse(&bytes).unwrap();
        let argidxs: Vec<u64> = txn
            .ops
            .iter()
            .filter_map(|op| match &op.kind {
                OpKind::Custom { payload: CustomPayload::DdrPatch(p), .. } => Some(p.argidx()),
                _ => None,
            })
            .collect();
        let args: BTreeMap<u64, u64> =
            argidxs.iter().map(|a| (*a, 0x8000_0000 + 0x10_0000 * (a + 1))).collect();
        let outcome = resolve_patches(&mut txn, &args).unwrap();
        assert_eq!(outcome.patched.len(), argidxs.len(), "{name}");
        assert!(outcome.unresolved.is_empty() && outcome.unused_args.is_empty());
        let patched = txn.to_bytes().unwrap();
        assert_eq!(patched.len(), bytes.len());
        // The words that must differ: the target word of each patch, at the target op's offset
        // plus the v0.1 field offset (BLOCKWRITE data at 16, WRITE value at 16).
        let mut expected: BTreeMap<usize, u32> = BTreeMap::new();
        for p in &outcome.patched {
            let target = &txn.ops[p.target_op];
            let word = match &target.kind {
                OpKind::BlockWrite { reg_off, .. } => (p.regaddr - u64::from(*reg_off)) / 4,
                _ => 0,
            };
            let at = (target.offset + 16 + 4 * word) as usize;
            let patch_op = &txn.ops[p.patch_op];
            let argplus = match &patch_op.kind {
                OpKind::Custom { payload: CustomPayload::DdrPatch(d), .. } => d.argplus(),
                _ => unreachable!(),
            };
            assert_eq!(u64::from(p.new), args[&p.argidx] + argplus);
            expected.insert(at, p.new);
        }
        for (i, (a, b)) in bytes.chunks(4).zip(patched.chunks(4)).enumerate() {
            match expected.get(&(i * 4)) {
                Some(v) => assert_eq!(b, v.to_le_bytes(), "{name}: word {i}"),
                None => assert_eq!(a, b, "{name}: word {i} changed but was not patched"),
            }
        }
    }
}

#[test]
fn patching_reports_missing_args_and_targets() {
    let Some(dir) = shared_testdata("aie_txn", "patching_reports_missing_args_and_targets") else {
        return;
    };
    let bytes = fs::read(dir.join("mlir_aie_add_one_two_insts.bin")).unwrap();
    let mut txn = Txn::parse(&bytes).unwrap();
    let outcome = resolve_patches(&mut txn, &BTreeMap::from([(0, 0x1000), (7, 0)])).unwrap();
    assert_eq!(outcome.patched.len(), 1);
    assert_eq!(outcome.unresolved.iter().map(|u| u.1).collect::<Vec<_>>(), [2]);
    assert_eq!(outcome.unused_args, [7]);
    // An address that does not fit the 32-bit word is refused.
    let mut txn = Txn::parse(&bytes).unwrap();
    let err = resolve_patches(&mut txn, &BTreeMap::from([(0, 1 << 32)])).unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
    // A patch with no earlier write of its register is refused, naming the op's offset.
    let mut txn = Txn::parse(&bytes).unwrap();
    txn.ops.retain(|op| !matches!(op.kind, OpKind::BlockWrite { .. }));
    let err = resolve_patches(&mut txn, &BTreeMap::from([(0, 0)])).unwrap_err().to_string();
    assert!(err.contains("no earlier WRITE"), "{err}");
}

/// Little-endian bytes of `words`.
fn words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

#[test]
fn packed_v1_layout_decodes_and_encodes() {
    // A v1.0 transaction laid out word by word as older mlir-aie emitted it: WRITE 3 words,
    // MASKWRITE 4, BLOCKWRITE 3 + N, TCT 4, DDR_PATCH [0x81, 24, addr, argidx, argplus, 0].
    let body = [
        vec![0x00, 0x0001_D204, 0x5],
        vec![0x03, 0x0001_D000, 0x1, 0xFF],
        vec![0x01, 0x0001_D000, 20, 7, 8],
        vec![0x80, 16, 0x0001_0000, 0x0101_0000],
        vec![0x81, 24, 0x0001_D004, 2, 0x40, 0],
        vec![0x04, 0x0001_D228, 0, 0x1],
    ]
    .concat();
    let size = 16 + 4 * body.len() as u32;
    let mut bytes = words(&[0x0603_0001, 0x0000_0105, 6, size]);
    bytes.extend(words(&body));
    let txn = Txn::parse(&bytes).unwrap();
    assert_eq!(txn.layout().unwrap(), Layout::V1_0);
    assert!(matches!(txn.ops[0].kind, OpKind::Write { reg_off: 0x1D204, value: 5, .. }));
    assert!(matches!(
        txn.ops[1].kind,
        OpKind::Masked { opcode: opcode::MASKWRITE, reg_off: 0x1D000, value: 1, mask: 0xFF, .. }
    ));
    assert!(matches!(&txn.ops[2].kind, OpKind::BlockWrite { data, .. } if data == &[7, 8]));
    assert!(matches!(
        txn.ops[4].kind,
        OpKind::Custom {
            payload: CustomPayload::DdrPatch(DdrPatch::Packed {
                regaddr: 0x1D004,
                argidx: 2,
                argplus: 0x40,
                ..
            }),
            ..
        }
    ));
    assert_eq!(txn.ops[5].offset, 16 + 4 * (3 + 4 + 5 + 4 + 6));
    assert_eq!(txn.to_bytes().unwrap(), bytes);
}

#[test]
fn from_ops_places_ops_and_set_arg_repoints_patches() {
    // The v1.0 words of the test above, rebuilt from its parsed ops with the DDR_PATCH moved
    // to argument 4, 0x88 bytes in: offsets, counts and size are those of the encoding.
    let body = [
        vec![0x00, 0x0001_D204, 0x5],
        vec![0x81, 24, 0x0001_D004, 2, 0x40, 0],
        vec![0x04, 0x0001_D228, 0, 0x1],
    ]
    .concat();
    let mut bytes = words(&[0x0603_0001, 0x0000_0105, 3, 16 + 4 * body.len() as u32]);
    bytes.extend(words(&body));
    let parsed = Txn::parse(&bytes).unwrap();
    let mut kinds: Vec<OpKind> = parsed.ops.iter().map(|op| op.kind.clone()).collect();
    let OpKind::Custom { payload: CustomPayload::DdrPatch(patch), .. } = &mut kinds[1] else {
        panic!("op 1 is the DDR_PATCH");
    };
    patch.set_arg(4, 0x88).unwrap();
    assert!(patch.set_arg(256, 0).is_err(), "argidx 256 does not fit the packed u8");
    let mut header = parsed.header.clone();
    header.num_ops = 0;
    header.txn_size = 0;
    let built = Txn::from_ops(header, kinds).unwrap();
    assert_eq!((built.header.num_ops, built.header.txn_size), (3, 16 + 4 * 13));
    assert_eq!(built.ops.iter().map(|op| op.offset).collect::<Vec<_>>(), [16, 28, 52]);
    let mut expected = bytes.clone();
    expected[28 + 12..28 + 16].copy_from_slice(&[4, 0, 0, 0]); // argidx byte, then padding
    expected[28 + 16..28 + 20].copy_from_slice(&0x88u32.to_le_bytes());
    assert_eq!(built.to_bytes().unwrap(), expected);
    assert_eq!(Txn::parse(&expected).unwrap(), built);
}

#[test]
fn unknown_ops_and_bad_headers_are_reported_with_offsets() {
    let mut bytes = words(&[0x0604_0100, 0x0000_0104, 2, 0]);
    bytes.extend(words(&[0x83, 12, 0])); // RECORD_TIMER id 0
    bytes.extend(words(&[0x20, 0])); // opcode 32: unknown
    let size = bytes.len() as u32;
    bytes[12..16].copy_from_slice(&size.to_le_bytes());
    let err = Txn::parse(&bytes).unwrap_err().to_string();
    assert!(
        err.contains("ops[1].opcode at offset 28") && err.contains("unknown opcode 32"),
        "{err}"
    );

    // An unknown custom op is walked by its size and kept whole.
    bytes[28] = 0x86;
    bytes[32..36].copy_from_slice(&8u32.to_le_bytes());
    let txn = Txn::parse(&bytes).unwrap();
    assert_eq!(txn.ops[1].kind.name(), "CUSTOM_134");
    assert_eq!(txn.to_bytes().unwrap(), bytes);

    let mut short = bytes.clone();
    short[8] = 3; // num_ops 3, but only two ops
    assert!(Txn::parse(&short).unwrap_err().to_string().contains("ends after 2 ops"));
    let mut long = bytes.clone();
    long[8] = 1; // one op announced, 8 bytes left over
    assert!(Txn::parse(&long).unwrap_err().to_string().contains("follow the last"));
    let mut size = bytes.clone();
    size[12] = 99;
    assert!(Txn::parse(&size).unwrap_err().to_string().contains("txn_size"));
    let mut version = bytes;
    version[1] = 2;
    assert!(Txn::parse(&version).unwrap_err().to_string().contains("version 0.2"));
}

#[test]
fn mutated_real_binaries_never_panic_and_reparse_equal() {
    let Some(dir) =
        shared_testdata("aie_txn", "mutated_real_binaries_never_panic_and_reparse_equal")
    else {
        return;
    };
    let mut rng = Rng::new(0x7478_6e00);
    let mut parsed = 0;
    for name in REAL_BINS {
        let original = fs::read(dir.join(name)).unwrap();
        for _ in 0..500 {
            let bytes = mutate(&original, &mut rng);
            if let Ok(txn) = Txn::parse(&bytes) {
                parsed += 1;
                let again = txn.to_bytes().unwrap();
                assert_eq!(again, bytes, "{name}: accepted mutant does not rewrite identically");
            }
        }
    }
    assert!(parsed > 0, "some mutants (e.g. changed register values) must still parse");
}

/// A v0.1 transaction (DevGen 4, 6 rows, 4 columns) holding one custom op with opcode `code`,
/// junk header bytes and `payload`, encoded from aie-rt's `XAie_CustomOpHdr` layout.
fn custom_txn(code: u8, payload: &[u8]) -> Vec<u8> {
    let op_size = 8 + payload.len() as u32;
    let mut bytes = vec![0, 1, 4, 6, 4, 1, 0, 0];
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&(16 + op_size).to_le_bytes());
    bytes.extend_from_slice(&[code, 0x86, 0xe2, 0xf9]);
    bytes.extend_from_slice(&op_size.to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// A KILN_LAUNCH payload from the documented layout: magic, kernel, dtype, counts, reserved,
/// argument registers, dimensions.
fn launch_payload(kernel: u32, dtype: u32, regs: &[u64], dims: &[u64]) -> Vec<u8> {
    let mut p = b"KILN".to_vec();
    for w in [kernel, dtype, regs.len() as u32, dims.len() as u32, 7] {
        p.extend_from_slice(&w.to_le_bytes());
    }
    for w in regs.iter().chain(dims) {
        p.extend_from_slice(&w.to_le_bytes());
    }
    p
}

#[test]
fn kiln_launch_decodes_and_encodes_identically() {
    // MATMUL [2, 3] x [3, 5] -> [2, 5]: each argument's rank and sizes, no parameters.
    let dims = [2, 2, 3, 2, 3, 5, 2, 2, 5];
    let bytes = custom_txn(133, &launch_payload(4, 6, &[0x1D004, 0x1D024, 0x1D044], &dims));
    assert_eq!(bytes.len(), 16 + 32 + 8 * 12);
    let txn = Txn::parse(&bytes).unwrap();
    let OpKind::Custom { opcode: 133, hdr, payload: CustomPayload::Launch(l) } = &txn.ops[0].kind
    else {
        panic!("not a launch: {:?}", txn.ops[0]);
    };
    assert_eq!(hdr[..3], [0x86, 0xe2, 0xf9]);
    assert_eq!(l.kernel, LaunchKernel::MatMul);
    assert_eq!((l.dtype, l.reserved), (6, 7));
    assert_eq!(l.arg_regs, [0x1D004, 0x1D024, 0x1D044]);
    assert_eq!(l.dims, dims);
    let (shapes, params) = l.shapes().unwrap();
    assert_eq!(shapes, [vec![2, 3], vec![3, 5], vec![2, 5]]);
    assert!(params.is_empty());
    assert_eq!(Launch::dims_of(&[&[2, 3], &[3, 5], &[2, 5]], &[]), dims);
    assert_eq!(txn.ops[0].kind.name(), "KILN_LAUNCH");
    assert_eq!(txn.to_bytes().unwrap(), bytes);

    // Every code from 1 to 19 is a kernel, with its fewest arguments it reads back.
    for code in 1..=19u32 {
        let kernel = LaunchKernel::from_code(code).unwrap();
        assert_eq!(kernel as u32, code);
        let n = kernel.args().0;
        let bytes = custom_txn(133, &launch_payload(code, 6, &vec![4; n], &vec![0; n]));
        let txn = Txn::parse(&bytes).unwrap();
        let OpKind::Custom { payload: CustomPayload::Launch(l), .. } = &txn.ops[0].kind else {
            panic!("code {code} is not a launch");
        };
        assert_eq!(l.kernel, kernel);
        assert_eq!(l.shapes().unwrap().0, vec![Vec::<u64>::new(); n]);
        assert_eq!(txn.to_bytes().unwrap(), bytes);
    }
    assert_eq!(LaunchKernel::from_code(20), None);

    // CONCAT takes any number of inputs; its parameter (the dim) follows the shapes.
    let dims = Launch::dims_of(&[&[2], &[3], &[1], &[6]], &[0]);
    let bytes = custom_txn(133, &launch_payload(13, 6, &[1, 2, 3, 4], &dims));
    let txn = Txn::parse(&bytes).unwrap();
    let OpKind::Custom { payload: CustomPayload::Launch(l), .. } = &txn.ops[0].kind else {
        panic!("not a launch");
    };
    let (shapes, params) = l.shapes().unwrap();
    assert_eq!(shapes, [vec![2], vec![3], vec![1], vec![6]]);
    assert_eq!(params, [0]);
}

#[test]
fn kiln_launch_shapes_fail_with_a_reason_when_the_words_do_not_hold_them() {
    let launch = |regs: usize, dims: Vec<u64>| Launch {
        kernel: LaunchKernel::Add,
        dtype: 6,
        reserved: 0,
        arg_regs: vec![0; regs],
        dims,
    };
    for (l, needle) in [
        (launch(3, vec![1, 4, 1, 4]), "end before argument 2's rank"),
        (launch(3, vec![1, 4, 1, 4, 2, 4]), "argument 2 has rank 2, but only 1 words follow"),
        (launch(3, vec![1, 4, 1, 4, u64::MAX]), "rank 18446744073709551615"),
    ] {
        let err = l.shapes().unwrap_err();
        assert!(err.contains("ADD") && err.contains(needle), "{needle:?} not in {err}");
    }
}

#[test]
fn kiln_launch_errors_name_the_payload_offset() {
    let mut short = launch_payload(1, 6, &[1, 2, 3], &[4]);
    short.truncate(20);
    let mut long = launch_payload(1, 6, &[1, 2, 3], &[4]);
    long.extend_from_slice(&[0; 8]);
    let mut huge_counts = launch_payload(1, 6, &[], &[]);
    huge_counts[12..20].copy_from_slice(&[0xff; 8]);
    for (payload, needle) in [
        (launch_payload(20, 6, &[1, 2, 3], &[4]), "kernel 20, which is not one (1..=19)"),
        (launch_payload(3, 6, &[1, 2, 3], &[4]), "SIGMOID takes 2 buffer arguments, not 3"),
        (launch_payload(4, 6, &[1, 2], &[4]), "MATMUL takes 3 to 4 buffer arguments, not 2"),
        (launch_payload(13, 6, &[1], &[4]), "CONCAT takes 2 or more buffer arguments, not 1"),
        (short, "under 24"),
        (long, "need 56"),
        (huge_counts, "4294967295 arguments"),
    ] {
        let err = Txn::parse(&custom_txn(133, &payload)).unwrap_err().to_string();
        // The payload starts 8 bytes into the op, which starts right after the header.
        assert!(err.contains("24"), "{err}");
        assert!(err.contains(needle), "{needle:?} not in {err}");
    }
}

#[test]
fn opcode_133_without_the_magic_stays_raw() {
    let bytes = custom_txn(133, b"ABCDEFGH");
    let txn = Txn::parse(&bytes).unwrap();
    assert_eq!(
        txn.ops[0].kind,
        OpKind::Custom {
            opcode: 133,
            hdr: [0x86, 0xe2, 0xf9, 0, 0, 0, 0],
            payload: CustomPayload::Raw(b"ABCDEFGH".to_vec())
        }
    );
    assert_eq!(txn.to_bytes().unwrap(), bytes);
    // A raw 133 that starts with the magic would read back as a launch: the writer refuses it.
    let mut raw = txn.clone();
    raw.ops[0].kind = OpKind::Custom {
        opcode: 133,
        hdr: [0; 7],
        payload: CustomPayload::Raw(launch_payload(1, 6, &[1, 2, 3], &[4])),
    };
    assert!(raw.to_bytes().is_err());
    // So does a launch with the wrong arity built in memory.
    let bad = Launch {
        kernel: LaunchKernel::Add,
        dtype: 6,
        reserved: 0,
        arg_regs: vec![1, 2],
        dims: vec![4],
    };
    raw.ops[0].kind =
        OpKind::Custom { opcode: 133, hdr: [0; 7], payload: CustomPayload::Launch(bad) };
    let err = raw.to_bytes().unwrap_err().to_string();
    assert!(err.contains("ADD takes 3 buffer arguments"), "{err}");
}
