//! NPU delegate data (`kiln_format::npu_delegate`) as `kiln_npu::lower` writes it for programs
//! ExecuTorch exported (`tests/fixtures/pte`): every byte is accounted for (header, manifest,
//! zero padding, a transaction that parses whole, const and parameter buffers), what is read
//! writes back identically, each node names its original instructions and their operators as
//! the unlowered program has them, and mutated data ends in a delegate or an error (and, run
//! on the reference device, in outputs or an error), never a panic.
//!
//! With `KILN_NPU_SEEDS=DIR` the delegates are also written to DIR, as seeds for the
//! `npu_delegate` fuzz target.

use std::path::PathBuf;

use kiln_format::npu_delegate::{NpuDelegate, BLOB_ALIGN, HEADER_LEN};
use kiln_format::pte::model::{InstructionModel, ProgramModel, SegmentModel};
use kiln_format::pte::{DelegateData, Program};
use kiln_format::txn::Txn;
use kiln_npu::lower::{lower, BACKEND_ID};
use kiln_npu::{Device, OpArgType};

const PROGRAMS: [&str; 3] = ["tiny_cnn", "resnet_stem", "transformer_block"];

/// The program `name` of `tests/fixtures/pte` as a model.
fn model(name: &str) -> ProgramModel {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/pte")
        .join(format!("{name}.pte"));
    let bytes = std::fs::read(path).unwrap();
    ProgramModel::from_program(&Program::open(&bytes).unwrap()).unwrap()
}

/// `name.overload` of each instruction of the first chain of the first method.
fn instruction_operators(m: &ProgramModel) -> Vec<Option<String>> {
    let method = &m.methods[0];
    method.chains[0]
        .instructions
        .iter()
        .map(|i| match i {
            InstructionModel::Kernel { op_index, .. } => {
                let (n, o) = &method.operators[*op_index as usize];
                Some(format!("{n}.{o}"))
            }
            _ => None,
        })
        .collect()
}

/// Every NPU delegate's data in the lowered programs, with the program it came from.
fn delegates() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for name in PROGRAMS {
        let original = model(name);
        let lowered = lower(&original).unwrap().model;
        for (k, d) in lowered.methods[0].delegates.iter().enumerate() {
            assert_eq!(d.id, BACKEND_ID);
            let DelegateData::Segment(s) = d.data else { panic!("{name}: inline data") };
            let SegmentModel::Raw(bytes) = &lowered.segments[s as usize] else { panic!() };
            out.push((format!("{name}.{k}"), bytes.clone()));
        }
    }
    if let Some(dir) = std::env::var_os("KILN_NPU_SEEDS") {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &out {
            std::fs::write(PathBuf::from(&dir).join(format!("{name}.knpu")), bytes).unwrap();
        }
    }
    out
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn every_byte_is_accounted_for_and_origins_are_the_programs() {
    let originals: Vec<(String, Vec<Option<String>>)> =
        PROGRAMS.iter().map(|n| (n.to_string(), instruction_operators(&model(n)))).collect();
    let all = delegates();
    assert!(all.len() >= PROGRAMS.len());
    for (name, bytes) in all {
        let d = NpuDelegate::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        // The header's lengths, read here by hand, tile the data exactly.
        let lens = [u64_at(&bytes, 8), u64_at(&bytes, 16), u64_at(&bytes, 24), u64_at(&bytes, 32)];
        let mut at = HEADER_LEN;
        for (i, len) in lens.into_iter().enumerate() {
            if i > 0 {
                at = at.next_multiple_of(BLOB_ALIGN);
            }
            at += len;
        }
        assert_eq!(at, bytes.len() as u64, "{name}");
        assert_eq!(lens[1], d.txn.len() as u64, "{name}");
        assert_eq!(lens[2], d.const_buffer.len() as u64, "{name}");
        // The transaction parses whole, its header's size is its length, and it rewrites
        // byte for byte.
        let txn = Txn::parse(&d.txn).unwrap();
        assert_eq!(u64::from(txn.header.txn_size), d.txn.len() as u64, "{name}");
        assert_eq!(txn.to_bytes().unwrap(), d.txn, "{name}");
        assert_eq!(d.to_bytes().unwrap(), bytes, "{name}: writes back identically");
        // Each node's origins are instructions of the unlowered program with those operators.
        let program = name.split('.').next().unwrap();
        let ops = &originals.iter().find(|(n, _)| n == program).unwrap().1;
        assert!(!d.manifest.nodes.is_empty(), "{name}");
        for n in &d.manifest.nodes {
            assert_eq!(n.operators.len(), n.instructions.len(), "{name}");
            for (op, &i) in n.operators.iter().zip(&n.instructions) {
                assert_eq!(ops[i as usize].as_deref(), Some(op.as_str()), "{name}: {}", n.name);
            }
        }
    }
}

#[test]
fn damaged_data_is_refused_naming_what_is_wrong() {
    let (_, bytes) = delegates().remove(0);
    let refused = |b: &[u8], what: &str| {
        let e = NpuDelegate::parse(b).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    };
    let mut b = bytes.clone();
    b[0] = b'X';
    refused(&b, "magic");
    let mut b = bytes.clone();
    b[4] = 9;
    refused(&b, "version");
    refused(&bytes[..bytes.len() - 1], "blobs end");
    let mut b = bytes.clone();
    b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    refused(&b, "manifest length");
    let mut b = bytes.clone();
    b[HEADER_LEN as usize] = b'[';
    refused(&b, "manifest");
}

/// A copy of `data` with a few bytes or words overwritten, or cut short, chosen by `seed`.
fn damage(data: &[u8], seed: &mut u64) -> Vec<u8> {
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let mut b = data.to_vec();
    for _ in 0..1 + next() % 3 {
        let at = (next() % b.len().max(1) as u64) as usize;
        match next() % 8 {
            0 => b.truncate(at),
            1 | 2 => {
                let word = [0xffff_ffffu32, 0x8000_0000, 0x7fff_ffff, next() as u32]
                    [(next() % 4) as usize];
                for (k, v) in word.to_le_bytes().into_iter().enumerate() {
                    if let Some(x) = b.get_mut(at + k) {
                        *x = v;
                    }
                }
            }
            _ => {
                if let Some(x) = b.get_mut(at) {
                    *x = next() as u8;
                }
            }
        }
    }
    b
}

#[test]
fn mutated_data_never_panics_in_the_reader_or_on_the_device() {
    let all = delegates();
    let mut seed = 0x6b6e_7075_u64;
    let (mut parsed, mut refused, mut ran) = (0, 0, 0);
    for i in 0..2000 {
        let m = damage(&all[i % all.len()].1, &mut seed);
        let Ok(d) = NpuDelegate::parse(&m) else {
            refused += 1;
            continue;
        };
        parsed += 1;
        assert_eq!(NpuDelegate::parse(&d.to_bytes().unwrap()).unwrap(), d);
        let b = d.manifest.buffers;
        if [b.input, b.output, b.scratch].iter().all(|&n| n <= 1 << 20) {
            if let Ok(mut device) = Device::for_delegate(&d) {
                device.buffer_mut(OpArgType::Input).fill(0x3e);
                let _ = device.run(&d.txn);
                ran += 1;
            }
        }
    }
    assert!(parsed > 0 && refused > 0 && ran > 0, "parsed {parsed}, refused {refused}, ran {ran}");
}
