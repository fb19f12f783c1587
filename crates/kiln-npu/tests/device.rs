//! The reference device: fused chains of kiln's operators, which launch kiln CPU kernels, run
//! on the device and compared with the same arithmetic done by plain loops here; one test per error
//! kind; and the real transactions of `../shared/testdata/aie_txn`.

mod common;

use std::fs;

use common::{f32_tensor, input_buffer, output, shared_testdata};
use kiln_npu::ops::{arg_reg, Add, Mul, Sigmoid};
use kiln_npu::{fuse, Device, Error, Node, DDR_BASE, WINDOW};

fn le32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn le64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// One op of a hand-encoded v0.1 transaction (aie-rt's `XAie_*Hdr` layouts, reference B5).
enum HandOp {
    /// WRITE: register, value.
    Write(u64, u32),
    /// MASKPOLL: register, value, mask.
    Poll(u64, u32, u32),
    /// DDR_PATCH: register, argidx, argplus.
    Patch(u64, u64, u64),
    /// KILN_LAUNCH: kernel code, dtype, argument registers, dimensions.
    Launch(u32, u32, Vec<u64>, Vec<u64>),
    /// MERGE_SYNC with its 8 payload bytes.
    MergeSync,
}

/// A v0.1 transaction (DevGen 4, 6 rows, 4 columns, 1 memory-tile row) of `ops`, encoded by
/// hand; the KILN_LAUNCH payload follows the layout documented in the README.
fn hand_txn(ops: &[HandOp]) -> Vec<u8> {
    let mut body = Vec::new();
    for op in ops {
        match op {
            HandOp::Write(reg, value) => {
                body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
                le64(&mut body, *reg);
                le32(&mut body, *value);
                le32(&mut body, 24);
            }
            HandOp::Poll(reg, value, mask) => {
                body.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0]);
                le64(&mut body, *reg);
                le32(&mut body, *value);
                le32(&mut body, *mask);
                le32(&mut body, 32);
                le32(&mut body, 0);
            }
            HandOp::Patch(reg, argidx, argplus) => {
                body.extend_from_slice(&[0x81, 0x86, 0xe2, 0xf9]);
                le32(&mut body, 48);
                for w in [0, 0, 0, 0] {
                    le32(&mut body, w);
                }
                for w in [*reg, *argidx, *argplus] {
                    le64(&mut body, w);
                }
            }
            HandOp::Launch(kernel, dtype, regs, dims) => {
                body.extend_from_slice(&[133, 0, 0, 0]);
                le32(&mut body, 32 + 8 * (regs.len() + dims.len()) as u32);
                body.extend_from_slice(b"KILN");
                for w in [*kernel, *dtype, regs.len() as u32, dims.len() as u32, 0] {
                    le32(&mut body, w);
                }
                for w in regs.iter().chain(dims) {
                    le64(&mut body, *w);
                }
            }
            HandOp::MergeSync => {
                body.extend_from_slice(&[132, 0, 0, 0]);
                le32(&mut body, 16);
                body.extend_from_slice(&[8, 4, 0, 0x11, 0, 0, 0, 0]);
            }
        }
    }
    let mut bytes = vec![0, 1, 4, 6, 4, 1, 0, 0];
    le32(&mut bytes, ops.len() as u32);
    le32(&mut bytes, 16 + body.len() as u32);
    bytes.extend(body);
    bytes
}

#[test]
fn fused_mul_add_sigmoid_equals_plain_loops() {
    let len = 300; // more than one of the elementwise kernel's 256-element blocks
    let a: Vec<f32> = (0..len).map(|i| (i as f32 - 150.0) / 37.0).collect();
    let b: Vec<f32> = (0..len).map(|i| ((i * 13 % 17) as f32 - 8.0) / 5.0).collect();
    let c: Vec<f32> = (0..len).map(|i| (i as f32).sin()).collect();
    let (mul, add, sig) = (Mul, Add, Sigmoid);
    let t = |name: &str| f32_tensor(name, &[len]);
    let nodes = [
        Node {
            name: "mul".into(),
            op: &mul,
            inputs: vec![t("a"), t("b")],
            consts: vec![],
            outputs: vec![t("ab")],
        },
        Node {
            name: "add".into(),
            op: &add,
            inputs: vec![t("ab"), t("c")],
            consts: vec![],
            outputs: vec![t("s")],
        },
        Node {
            name: "sigmoid".into(),
            op: &sig,
            inputs: vec![t("s")],
            consts: vec![],
            outputs: vec![t("y")],
        },
    ];
    let fused = fuse(&nodes).unwrap();
    let input = input_buffer(&fused, &[("a", &a), ("b", &b), ("c", &c)]);
    let mut device = Device::for_fused(&fused, input).unwrap();
    assert_eq!(device.run(&fused.txn).unwrap().launches, 3);
    let got = output(&device, &fused, "y");
    for i in 0..len {
        let s = a[i] * b[i] + c[i];
        let want = 1.0 / (1.0 + (-f64::from(s)).exp());
        let err = (f64::from(got[i]) - want).abs();
        assert!(err <= 2e-7, "element {i}: {} vs {want} (error {err})", got[i]);
    }
}

#[test]
fn patches_write_buffer_addresses_into_registers() {
    let txn = hand_txn(&[
        HandOp::Patch(0x1D004, 0, 8),
        HandOp::Patch(0x201D004, 4, 0x40),
        HandOp::Write(0x1D214, 7),
        HandOp::Poll(0x1D214, 7, 0xf),
    ]);
    let mut device = Device::new([vec![0; 16], vec![], vec![], vec![], vec![0; 0x44]]).unwrap();
    let summary = device.run(&txn).unwrap();
    assert_eq!((summary.ops, summary.launches), (4, 0));
    assert_eq!(device.register(0x1D004), Some(0x8000_0008));
    assert_eq!(device.register(0x201D004), Some(0x8000_0000 + 4 * 0x1000_0000 + 0x40));
    assert_eq!((DDR_BASE, WINDOW), (0x8000_0000, 0x1000_0000));
}

/// Runs `ops` on a device with 16-byte buffers and returns the error.
fn run_err(ops: &[HandOp]) -> Error {
    let mut device = Device::new(std::array::from_fn(|_| vec![0; 16])).unwrap();
    device.run(&hand_txn(ops)).unwrap_err()
}

/// A float32 ADD of shape `[4]` whose arguments are the registers of args 0, 1, 2.
fn add4() -> HandOp {
    HandOp::Launch(1, 6, vec![arg_reg(0), arg_reg(1), arg_reg(2)], vec![1, 4, 1, 4, 1, 4])
}

#[test]
fn every_device_error_names_the_op_offset() {
    // Op offsets: 16, then 16 + 48 per DDR_PATCH.
    let err = run_err(&[HandOp::Write(0x1D000, 1), HandOp::MergeSync]);
    assert!(matches!(&err, Error::UnsupportedOp { offset: 40, name } if name == "MERGE_SYNC"));
    assert!(err.to_string().contains("op at byte 40: MERGE_SYNC"), "{err}");

    let err = run_err(&[HandOp::Write(0x1D220, 0x10), HandOp::Poll(0x1D220, 1, 1)]);
    assert!(
        matches!(
            err,
            Error::PollNeverSucceeds {
                offset: 40,
                reg: 0x1D220,
                value: 1,
                mask: 1,
                found: 0x10,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("never succeeds"), "{err}");

    let err = run_err(&[HandOp::Patch(0x1D004, 5, 0)]);
    assert!(matches!(err, Error::PatchTarget { offset: 16, argidx: 5, .. }), "{err}");
    let err = run_err(&[HandOp::Patch(0x1D004, 0, 0x1000_0000)]);
    assert!(matches!(err, Error::PatchTarget { offset: 16, argplus: 0x1000_0000, .. }), "{err}");

    // Argument 2's register is never written.
    let err = run_err(&[HandOp::Patch(arg_reg(0), 0, 0), HandOp::Patch(arg_reg(1), 1, 0), add4()]);
    assert!(
        matches!(&err, Error::LaunchAddress { offset: 112, arg: 2, reg: 0x1D044, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("no op wrote"), "{err}");
    // A register written with a value that is no buffer's address.
    let err = run_err(&[HandOp::Write(arg_reg(0), 0x1234), add4()]);
    assert!(matches!(&err, Error::LaunchAddress { offset: 40, arg: 0, .. }), "{err}");
    assert!(err.to_string().contains("0x00001234, an address in no buffer"), "{err}");

    // 4 floats at byte 4 of a 16-byte buffer.
    let err = run_err(&[
        HandOp::Patch(arg_reg(0), 0, 0),
        HandOp::Patch(arg_reg(1), 3, 4),
        HandOp::Patch(arg_reg(2), 1, 0),
        add4(),
    ]);
    assert!(
        matches!(
            err,
            Error::LaunchBounds {
                offset: 160,
                arg: 1,
                buffer: 3,
                start: 4,
                len: 16,
                buffer_len: 16
            }
        ),
        "{err}"
    );
    // Shapes whose byte size overflows are a bounds error too, not a panic.
    let huge = vec![2, u64::MAX / 2, 4];
    let err = run_err(&[
        HandOp::Patch(arg_reg(0), 0, 0),
        HandOp::Launch(2, 6, vec![arg_reg(0); 3], [&huge[..], &huge, &huge].concat()),
    ]);
    assert!(matches!(err, Error::LaunchBounds { offset: 64, arg: 0, len: u64::MAX, .. }), "{err}");
    // Words that do not hold a shape per argument.
    let err = run_err(&[HandOp::Launch(4, 6, vec![0; 3], vec![u64::MAX, 2, 1])]);
    assert!(
        matches!(&err, Error::Launch { offset: 16, kernel: "MATMUL", reason } if reason.contains("rank 18446744073709551615")),
        "{err}"
    );
    // Parameters the kernel does not take, and shapes the kernel refuses.
    let patches = || (0..3).map(|i| HandOp::Patch(arg_reg(i), 2, 0));
    let mut ops: Vec<HandOp> = patches().collect();
    ops.push(HandOp::Launch(1, 6, (0..3).map(arg_reg).collect(), vec![1, 1, 1, 1, 1, 1, 9]));
    let err = run_err(&ops);
    assert!(
        matches!(&err, Error::Launch { offset: 160, kernel: "ADD", reason } if reason.contains("takes 0 parameter words, not 1")),
        "{err}"
    );
    let mut ops: Vec<HandOp> = patches().collect();
    ops.push(HandOp::Launch(1, 6, (0..3).map(arg_reg).collect(), vec![1, 2, 1, 3, 1, 2]));
    let err = run_err(&ops);
    assert!(matches!(&err, Error::Launch { offset: 160, kernel: "ADD", .. }), "{err}");

    // A boolean parameter that is neither 0 nor 1 (GELU's tanh flag), and LAYER_NORM with a
    // weight but no bias.
    let mut ops: Vec<HandOp> = patches().take(2).collect();
    ops.push(HandOp::Launch(15, 6, (0..2).map(arg_reg).collect(), vec![1, 2, 1, 2, 2]));
    let err = run_err(&ops);
    assert!(
        matches!(&err, Error::Launch { offset: 112, kernel: "GELU", reason } if reason.contains("neither 0 nor 1")),
        "{err}"
    );
    let mut ops: Vec<HandOp> = patches().collect();
    let eps = 1e-5f64.to_bits();
    ops.push(HandOp::Launch(9, 6, (0..3).map(arg_reg).collect(), vec![1, 2, 1, 2, 1, 2, 1, eps]));
    let err = run_err(&ops);
    assert!(
        matches!(&err, Error::Launch { offset: 160, kernel: "LAYER_NORM", reason } if reason.contains("a weight and a bias or neither")),
        "{err}"
    );

    let err = run_err(&[HandOp::Launch(1, 7, vec![0; 3], vec![4])]);
    assert!(
        matches!(&err, Error::Launch { offset: 16, kernel: "ADD", reason } if reason.contains("element type 7")),
        "{err}"
    );

    let mut bad = hand_txn(&[HandOp::Write(0, 0)]);
    bad[12] += 1; // txn_size no longer the length
    let mut device = Device::new(Default::default()).unwrap();
    assert!(matches!(device.run(&bad).unwrap_err(), Error::Txn { .. }));

    let err =
        Device::new([vec![0; WINDOW as usize + 1], vec![], vec![], vec![], vec![]]).unwrap_err();
    assert!(matches!(err, Error::DeviceBuffer { buffer: 0, .. }), "{err}");
}

#[test]
fn device_keeps_the_effects_before_a_failing_op() {
    let mut device = Device::new(Default::default()).unwrap();
    let txn = hand_txn(&[HandOp::Write(0x1D000, 5), HandOp::MergeSync]);
    assert!(device.run(&txn).is_err());
    assert_eq!(device.register(0x1D000), Some(5));
}

#[test]
fn real_transactions_run_up_to_their_first_unsupported_op() {
    let Some(dir) =
        shared_testdata("aie_txn", "real_transactions_run_up_to_their_first_unsupported_op")
    else {
        return;
    };
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".bin"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 4);
    for name in names {
        let bytes = fs::read(dir.join(&name)).unwrap();
        let num_ops = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let mut device = Device::new(Default::default()).unwrap();
        match (name.as_str(), device.run(&bytes)) {
            // Only register writes, polls that hold and DDR patches (reference B6).
            ("dd_transpose_a16a16_1_49_1024.bin", Ok(summary)) => {
                assert_eq!((summary.ops, summary.launches), (num_ops, 0), "{name}");
            }
            // BLOCKWRITE 0x1D020 [0x40 0 0 0 0x80000000 0 0 0x02000000], DDR_PATCH 0x1D024 ←
            // arg 2 + 0, WRITE 0x1D204 ← 0x80000001, BLOCKWRITE 0x1D000 [...], DDR_PATCH
            // 0x1D004 ← arg 0 + 0, WRITE 0x1D214 ← 0, TCT: the words of insts.txt.
            ("mlir_aie_add_one_two_insts.bin", Ok(summary)) => {
                assert_eq!(summary.ops, 7);
                for (reg, value) in [
                    (0x1D020, 0x40),
                    (0x1D030, 0x8000_0000),
                    (0x1D03C, 0x0200_0000),
                    (0x1D024, 0x8000_0000 + 2 * 0x1000_0000),
                    (0x1D204, 0x8000_0001),
                    (0x1D004, 0x8000_0000),
                    (0x1D214, 0),
                ] {
                    assert_eq!(device.register(reg), Some(value), "{name}: register 0x{reg:x}");
                }
            }
            // The DynamicDispatch files wait on registers the array's cores set (value 1 under
            // mask 1); nothing sets them on the CPU, so the run stops there, naming the op.
            (_, Err(Error::PollNeverSucceeds { offset, name: op, reg, value, mask, found }))
                if name.starts_with("dd_") =>
            {
                let at = offset as usize;
                assert_eq!(bytes[at], 4, "{name}: MASKPOLL opcode at byte {offset}");
                assert_eq!(op, "MASKPOLL");
                assert_eq!(u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()), reg);
                assert_eq!(u32::from_le_bytes(bytes[at + 16..at + 20].try_into().unwrap()), value);
                assert_eq!(u32::from_le_bytes(bytes[at + 20..at + 24].try_into().unwrap()), mask);
                assert_eq!((value & mask, found), (1, 0), "{name}");
            }
            (_, outcome) => panic!("{name}: unexpected outcome {outcome:?}"),
        }
    }
}
