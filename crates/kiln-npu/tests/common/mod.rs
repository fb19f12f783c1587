//! Helpers of the kiln-npu tests: an operator that replays a recorded arg map, transaction and
//! parameters; v0.1 transactions encoded by hand from aie-rt's struct layouts (independently
//! of kiln's writer); the expected bytes of a fusion; the shared test data; float32 tensors in
//! and out of a fused run on the device; one operator fused alone and run; ExecuTorch's `.npy`
//! op fixtures and the constants of their `.pte`; comparisons within a tolerance.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kiln_format::npy::Npy;
use kiln_format::txn::{opcode, CustomPayload, OpKind, Txn};
use kiln_npu::{
    fuse, ConstBufferIo, ConstTensor, Device, Fused, Node, NpuOp, OpArgMap, OpArgType, Result,
    TensorDesc, ARG_ALIGN,
};

/// `../shared/testdata/<sub>` beside the repository, or `None` (after printing a visible skip
/// message naming `test`) when that folder is absent.
pub fn shared_testdata(sub: &str, test: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/testdata").join(sub);
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIPPED {test}: {} is absent", dir.display());
        None
    }
}

/// An operator with a fixed arg map, transaction and super-kernel parameters, whose
/// `initialize_const_params` is the plain copy the interface describes: each constant input at
/// the next 4-byte boundary of its slice.
pub struct RecordedOp {
    pub maps: Vec<OpArgMap>,
    pub txn: Vec<u8>,
    pub params: Vec<u8>,
}

impl NpuOp for RecordedOp {
    fn buffer_reqs(&self, _: &[TensorDesc], _: &[TensorDesc]) -> Result<Vec<OpArgMap>> {
        Ok(self.maps.clone())
    }

    fn transaction_bin(&self, _: &[TensorDesc], _: &[TensorDesc]) -> Result<Vec<u8>> {
        Ok(self.txn.clone())
    }

    fn super_kernel_params(&self, _: &[TensorDesc], _: &[TensorDesc]) -> Result<Vec<u8>> {
        Ok(self.params.clone())
    }

    fn initialize_const_params(
        &self,
        io: &mut ConstBufferIo<'_>,
        consts: &[ConstTensor],
    ) -> Result<()> {
        let mut at = 0usize;
        for c in consts {
            at = at.next_multiple_of(ARG_ALIGN as usize);
            io.write(at, &c.data)?;
            at += c.data.len();
        }
        Ok(())
    }
}

/// An arg map entry.
pub fn arg(arg_type: OpArgType, xrt: usize, onnx: usize, offset: u64, size: u64) -> OpArgMap {
    OpArgMap { arg_type, xrt_arg_idx: xrt, onnx_arg_idx: onnx, offset, size }
}

/// A uint16 tensor of `bytes` bytes called `name`.
pub fn tensor(name: &str, bytes: usize) -> TensorDesc {
    TensorDesc { name: name.into(), shape: vec![bytes / 2], dtype: "uint16".into() }
}

/// A uint8 constant called `name` holding `data`.
pub fn constant(name: &str, data: Vec<u8>) -> ConstTensor {
    ConstTensor {
        desc: TensorDesc { name: name.into(), shape: vec![data.len()], dtype: "uint8".into() },
        data,
    }
}

fn le32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn le64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// A v0.1 transaction (DevGen 4, 6 rows, 4 columns, 1 memory-tile row) that, for each
/// `(regaddr, argidx, argplus)`, writes an 8-word shim BD with a BLOCKWRITE at `regaddr - 4`
/// and patches its address word with a DDR_PATCH, then pushes a queue entry (WRITE) and waits
/// (MASKPOLL). Byte layouts from aie-rt's `XAie_*Hdr` structs (reference B5).
pub fn hand_txn(patches: &[(u64, u64, u64)]) -> Vec<u8> {
    let mut body = Vec::new();
    for &(regaddr, argidx, argplus) in patches {
        // BLOCKWRITE: op, col, row, col, row, 3 pad, u32 reg, u32 size (16 + 4·8), data.
        body.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        le32(&mut body, (regaddr - 4) as u32);
        le32(&mut body, 16 + 32);
        for w in 0..8 {
            le32(&mut body, 0x100 + w);
        }
        // DDR_PATCH: op, 3 junk bytes, u32 size 48, op_base, action, pad, regaddr, argidx,
        // argplus.
        body.extend_from_slice(&[0x81, 0x86, 0xe2, 0xf9]);
        le32(&mut body, 48);
        for w in [0, 0, 0, 0] {
            le32(&mut body, w);
        }
        for w in [regaddr, argidx, argplus] {
            le64(&mut body, w);
        }
    }
    // WRITE: op, col, row, 5 pad, u64 reg, u32 value, u32 size 24.
    body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0]);
    le64(&mut body, 0x1D214);
    le32(&mut body, 0x8000_0000);
    le32(&mut body, 24);
    // MASKPOLL: op, col, row, 5 pad, u64 reg, u32 value, u32 mask, u32 size 32, u32 pad.
    body.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0]);
    le64(&mut body, 0x1D220);
    le32(&mut body, 0);
    le32(&mut body, 0x00F8_0000);
    le32(&mut body, 32);
    le32(&mut body, 0);
    let num_ops = 2 * patches.len() as u32 + 2;
    let mut bytes = vec![0, 1, 4, 6, 4, 1, 0, 0];
    le32(&mut bytes, num_ops);
    le32(&mut bytes, 16 + body.len() as u32);
    bytes.extend(body);
    bytes
}

/// The bytes DD's fusion gives for `sources`: the first header with the summed op count and
/// `16 + Σ(size - 16)`, every body after it, and in each v0.1 DDR_PATCH (in order) the
/// `argidx` (op byte 32) and `argplus` (op byte 40) of the next of `patches`.
pub fn expected_fusion(sources: &[&[u8]], patches: &[(u64, u64)]) -> Vec<u8> {
    let mut out = sources[0][..16].to_vec();
    let num_ops: u32 =
        sources.iter().map(|s| u32::from_le_bytes(s[8..12].try_into().unwrap())).sum();
    let size: usize = 16 + sources.iter().map(|s| s.len() - 16).sum::<usize>();
    out[8..12].copy_from_slice(&num_ops.to_le_bytes());
    out[12..16].copy_from_slice(&(size as u32).to_le_bytes());
    let mut next = patches.iter();
    for src in sources {
        let base = out.len() - 16;
        out.extend_from_slice(&src[16..]);
        for op in Txn::parse(src).unwrap().ops {
            if op.kind.opcode() == opcode::DDR_PATCH {
                let (argidx, argplus) = *next.next().expect("more DDR_PATCH ops than expected");
                let at = base + op.offset as usize;
                out[at + 32..at + 40].copy_from_slice(&argidx.to_le_bytes());
                out[at + 40..at + 48].copy_from_slice(&argplus.to_le_bytes());
            }
        }
    }
    assert!(next.next().is_none(), "fewer DDR_PATCH ops than expected");
    out
}

/// The `(argidx, argplus)` of every DDR_PATCH of `txn`, in order.
pub fn patches_of(txn: &Txn) -> Vec<(u64, u64)> {
    txn.ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Custom { payload: CustomPayload::DdrPatch(p), .. } => {
                Some((p.argidx(), p.argplus()))
            }
            _ => None,
        })
        .collect()
}

/// A float32 tensor of shape `shape` called `name`.
pub fn f32_tensor(name: &str, shape: &[usize]) -> TensorDesc {
    TensorDesc { name: name.into(), shape: shape.to_vec(), dtype: "float32".into() }
}

/// A float32 constant of shape `shape` called `name` holding `values`.
pub fn f32_const(name: &str, shape: &[usize], values: &[f32]) -> ConstTensor {
    ConstTensor { desc: f32_tensor(name, shape), data: bytes_of(values) }
}

/// Little-endian bytes of `values`.
pub fn bytes_of(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The little-endian float32 values of `bytes`.
pub fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|w| f32::from_le_bytes(w.try_into().unwrap())).collect()
}

/// The input buffer of `fused` with each named graph input's values in place.
pub fn input_buffer(fused: &Fused, values: &[(&str, &[f32])]) -> Vec<u8> {
    let inputs = fused.tensors.iter().filter(|t| t.buffer == OpArgType::Input);
    let len = inputs.map(|t| t.offset + t.size).max().unwrap() as usize;
    let mut buf = vec![0; len];
    for (name, v) in values {
        let t = fused.tensors.iter().find(|t| t.name == *name).unwrap();
        assert_eq!(t.buffer, OpArgType::Input, "{name}");
        let at = t.offset as usize;
        buf[at..at + v.len() * 4].copy_from_slice(&bytes_of(v));
    }
    buf
}

/// The values of graph output `name` after a run.
pub fn output(device: &Device, fused: &Fused, name: &str) -> Vec<f32> {
    let t = fused.tensors.iter().find(|t| t.name == name).unwrap();
    assert_eq!(t.buffer, OpArgType::Output);
    floats(&device.buffer(OpArgType::Output)[t.offset as usize..(t.offset + t.size) as usize])
}

/// An array of an ExecuTorch op fixture, as float32 values with its shape.
pub struct Fixture {
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
}

/// Reads `tests/fixtures/ops/<name>.npy` (written by ExecuTorch's runtime or as its input),
/// converting float32, int32 and bool elements to float32 (exact for the fixtures' values).
pub fn fixture(name: &str) -> Fixture {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/ops")
        .join(format!("{name}.npy"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = Npy::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!npy.fortran_order, "{}: Fortran order", path.display());
    let values = match npy.descr.as_str() {
        "<f4" => floats(npy.data),
        "<i4" => npy
            .data
            .chunks_exact(4)
            .map(|w| i32::from_le_bytes(w.try_into().unwrap()) as f32)
            .collect(),
        "|b1" => npy.data.iter().map(|&b| f32::from(b)).collect(),
        other => panic!("{}: dtype {other} not handled by the test", path.display()),
    };
    Fixture { shape: npy.shape.iter().map(|&d| d as usize).collect(), values }
}

/// Fuses `op` as the one node of a chain with tensor inputs `inputs` (name, shape, values) and
/// constants `consts`, runs it on the device, and returns output `y` of shape `out_shape`.
pub fn run_one(
    op: &dyn NpuOp,
    inputs: &[(&str, &[usize], &[f32])],
    consts: Vec<ConstTensor>,
    out_shape: &[usize],
) -> Vec<f32> {
    let nodes = [Node {
        name: "node".into(),
        op,
        inputs: inputs.iter().map(|(name, shape, _)| f32_tensor(name, shape)).collect(),
        consts,
        outputs: vec![f32_tensor("y", out_shape)],
    }];
    let fused = fuse(&nodes).unwrap();
    let values: Vec<(&str, &[f32])> = inputs.iter().map(|(n, _, v)| (*n, *v)).collect();
    let mut device = Device::for_fused(&fused, input_buffer(&fused, &values)).unwrap();
    assert_eq!(device.run(&fused.txn).unwrap().launches, 1);
    output(&device, &fused, "y")
}

/// `values` of shape `from` broadcast to `to` (same rank; `from`'s dimensions 1 or equal, or a
/// lower rank aligned to the right), as ExecuTorch's broadcasting reads it.
pub fn expand(values: &[f32], from: &[usize], to: &[usize]) -> Vec<f32> {
    let pad = to.len() - from.len();
    let from: Vec<usize> = std::iter::repeat_n(1, pad).chain(from.iter().copied()).collect();
    let total: usize = to.iter().product();
    (0..total)
        .map(|mut flat| {
            let mut src = 0;
            let mut stride = 1;
            for d in (0..to.len()).rev() {
                let i = flat % to[d];
                flat /= to[d];
                if from[d] != 1 {
                    src += i * stride;
                }
                stride *= from[d];
            }
            values[src]
        })
        .collect()
}

/// Deterministic values in about [-2, 2] with fractional parts.
pub fn values(len: usize, seed: usize) -> Vec<f32> {
    (0..len).map(|i| ((i * 37 + seed * 11) % 101) as f32 / 25.0 - 2.0).collect()
}

/// Asserts `got` is within `tol · max(1, |want|)` of `want`, element by element, and NaN
/// where `want` is.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}: element {i}: {g} vs NaN");
            continue;
        }
        if f64::from(g) == w {
            continue; // equal, infinities included
        }
        let err = (f64::from(g) - w).abs();
        assert!(err <= tol * w.abs().max(1.0), "{what}: element {i}: {g} vs {w} (error {err})");
    }
}

pub fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

/// The float32 constants (weights) of method `case` of ExecuTorch's fixture program
/// `tests/fixtures/ops/<file>.pte`, in value-table order, each with its shape.
pub fn fixture_consts(file: &str, case: &str) -> Vec<Fixture> {
    use kiln_format::pte::{Program, TensorData, Value};
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/ops")
        .join(format!("{file}.pte"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let program = Program::open(&bytes).unwrap();
    let method = program.method_by_name(case).unwrap();
    (0..method.num_values())
        .filter_map(|i| match method.value(i).unwrap() {
            Value::Tensor(t) => match t.data() {
                TensorData::Constant(idx) => {
                    let data = program.constant_data(idx as usize, t.numel() * 4).unwrap();
                    Some(Fixture { shape: t.shape(), values: floats(data) })
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}
