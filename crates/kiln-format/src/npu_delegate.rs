//! The processed data of a `KilnNpuBackend` delegate: what `kiln lower --to npu` stores for
//! each fused chain of operators, and what the backend runs on the NPU (or kiln's reference
//! device).
//!
//! # Layout
//! All integers little-endian. Four blobs follow a 40-byte header, each starting at the next
//! multiple of 16 from the start of the data, with zero bytes between them and nothing after
//! the last:
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `b"KNPU"` |
//! | 4 | `u32` | version, [`VERSION`] |
//! | 8 | `u64` | manifest length |
//! | 16 | `u64` | transaction length |
//! | 24 | `u64` | const buffer length |
//! | 32 | `u64` | super-kernel parameter buffer length |
//! | 40 | | the manifest: UTF-8 JSON, [`Manifest`] |
//! | aligned 16 | | the fused transaction binary (a `txn` every byte of which parses) |
//! | aligned 16 | | the const buffer (fused kernel argument 3) |
//! | aligned 16 | | the super-kernel parameter buffer (fused kernel argument 4) |
//!
//! The manifest says how the delegate call's values map to the fused buffers and where the
//! delegate came from:
//!
//! ```json
//! {
//!   "buffers": {"input": 256, "output": 128, "scratch": 512},
//!   "tensors": [{"name": "v12", "buffer": "input", "offset": 0, "size": 256,
//!                "dtype": "float32", "shape": [1, 64]}, ...],
//!   "inputs": ["v12"], "outputs": ["v40"],
//!   "arg_map": [{"arg_type": "input", "xrt_arg_idx": 0, "onnx_arg_idx": 0,
//!                "offset": 0, "size": 256}, ...],
//!   "nodes": [{"name": "n3", "op": "conv2d", "operators": ["aten::convolution.out"],
//!              "instructions": [3]}, ...]
//! }
//! ```
//!
//! - `buffers`: the sizes of the input (0), output (1) and scratch (2) buffers of one run.
//! - `tensors`: every tensor of the chain and where it lives; `buffer` is `input` (a value the
//!   call passes in), `output` (a value the call returns) or `scratch` (one node makes, a later
//!   one reads). Each lies inside its buffer; its size is its shape's bytes.
//! - `inputs`, `outputs`: the delegate call's arguments, in call order, by tensor name: the
//!   call's values are the inputs followed by the outputs.
//! - `arg_map`: the fused kernel's arg map (`input`, `output`, `scratch`, `const`,
//!   `super_kernel_params`).
//! - `nodes`: the fused operators in execution order: the NPU operator, the program operators
//!   it stands for and their instruction indices in the original method's chain (the origins
//!   kept through lowering).
//!
//! Reading checks every rule above and caps the manifest at [`MAX_MANIFEST`] bytes and each
//! buffer at [`MAX_BUFFER`] bytes, so no allocation follows an unchecked number.

use serde::{Deserialize, Serialize};

use crate::bytes::{align_up, ByteReader};
use crate::error::{Error, Result};
use crate::txn::Txn;

/// The format's name in errors.
pub const FORMAT: &str = "npu delegate";

/// The backend id of the delegates that hold this data (`BackendDelegate.id`).
pub const BACKEND_ID: &str = "KilnNpuBackend";

/// The first four bytes.
pub const MAGIC: [u8; 4] = *b"KNPU";

/// The version this module reads and writes.
pub const VERSION: u32 = 1;

/// Header bytes before the manifest.
pub const HEADER_LEN: u64 = 40;

/// Alignment of each blob after the manifest.
pub const BLOB_ALIGN: u64 = 16;

/// The largest manifest read.
pub const MAX_MANIFEST: u64 = 16 << 20;

/// The largest fused buffer (input, output, scratch, const, params): the reference device's
/// address window per buffer.
pub const MAX_BUFFER: u64 = 0x1000_0000;

/// The only element type delegates hold.
pub const FLOAT32: &str = "float32";

/// A delegate's processed data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpuDelegate {
    /// What maps the call to the buffers, and the origins.
    pub manifest: Manifest,
    /// The fused transaction binary.
    pub txn: Vec<u8>,
    /// The const buffer.
    pub const_buffer: Vec<u8>,
    /// The super-kernel parameter buffer.
    pub super_kernel_params: Vec<u8>,
}

/// The manifest (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Sizes of the per-run buffers.
    pub buffers: BufferSizes,
    /// Every tensor of the chain.
    pub tensors: Vec<TensorSlot>,
    /// The call's inputs, by tensor name.
    pub inputs: Vec<String>,
    /// The call's outputs, by tensor name.
    pub outputs: Vec<String>,
    /// The fused kernel's arg map.
    pub arg_map: Vec<ArgEntry>,
    /// The fused operators.
    pub nodes: Vec<NodeOrigin>,
}

/// Sizes of the buffers one run allocates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BufferSizes {
    /// Buffer 0.
    pub input: u64,
    /// Buffer 1.
    pub output: u64,
    /// Buffer 2.
    pub scratch: u64,
}

/// Which per-run buffer a tensor lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorBuffer {
    /// Buffer 0, filled from the call's inputs.
    Input,
    /// Buffer 1, copied out to the call's outputs.
    Output,
    /// Buffer 2.
    Scratch,
}

/// A tensor and its place.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSlot {
    /// Its name.
    pub name: String,
    /// Its buffer.
    pub buffer: TensorBuffer,
    /// Byte offset in the buffer.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
    /// Element type ([`FLOAT32`]).
    pub dtype: String,
    /// Sizes, row-major contiguous.
    pub shape: Vec<u64>,
}

/// The kind of a fused arg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgKind {
    /// A graph input (fused argument 0).
    Input,
    /// A graph output (argument 1).
    Output,
    /// Scratch (argument 2).
    Scratch,
    /// The const buffer (argument 3).
    Const,
    /// Super-kernel parameters (argument 4).
    SuperKernelParams,
}

/// One entry of the fused arg map (DynamicDispatch's `OpArgMap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgEntry {
    /// What kind of buffer.
    pub arg_type: ArgKind,
    /// The kernel argument.
    pub xrt_arg_idx: u64,
    /// The ONNX argument.
    pub onnx_arg_idx: u64,
    /// Offset in the kernel argument.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

/// One fused operator and where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeOrigin {
    /// The node's name.
    pub name: String,
    /// The NPU operator (`conv2d`, `matmul`, ...).
    pub op: String,
    /// The program operators it stands for (`aten::convolution.out`, ...).
    pub operators: Vec<String>,
    /// Their instruction indices in the original method's chain.
    pub instructions: Vec<u64>,
}

impl NpuDelegate {
    /// Reads and checks a delegate (see the module docs for every rule).
    pub fn parse(data: &[u8]) -> Result<NpuDelegate> {
        let len = data.len() as u64;
        if data.get(..4) != Some(&MAGIC[..]) {
            return Err(Error::BadMagic {
                format: FORMAT,
                offset: 0,
                expected: "KNPU".into(),
                found: printable(data.get(..4).unwrap_or(data)),
            });
        }
        if len < HEADER_LEN {
            return Err(Error::Truncated {
                format: FORMAT,
                field: "header".into(),
                offset: 0,
                end: HEADER_LEN,
                len,
            });
        }
        let r = ByteReader::new(data, FORMAT);
        let version = r.u32(4, "version")?;
        if version != VERSION {
            return Err(Error::Unsupported {
                format: FORMAT,
                field: "version".into(),
                offset: Some(4),
                reason: format!("version {version}; kiln reads {VERSION}"),
            });
        }
        let names = ["manifest", "transaction", "const buffer", "super-kernel params"];
        let mut lens = [0u64; 4];
        for ((i, name), l) in names.iter().enumerate().zip(&mut lens) {
            *l = r.u64(8 + 8 * i as u64, &format!("{name} length"))?;
        }
        let limits = [MAX_MANIFEST, u64::MAX, MAX_BUFFER, MAX_BUFFER];
        for ((name, value), limit) in names.iter().zip(lens).zip(limits) {
            if value > limit {
                return Err(Error::Limit {
                    format: FORMAT,
                    what: format!("{name} length"),
                    value,
                    limit,
                });
            }
        }
        let spans =
            blob_spans(lens).ok_or_else(|| invalid("header", Some(8), "blob lengths overflow"))?;
        let end = spans[3].1;
        if end != len {
            return Err(Error::Invalid {
                format: FORMAT,
                field: "header".into(),
                offset: Some(8),
                reason: format!("the blobs end at byte {end}, but the data is {len} bytes"),
            });
        }
        // Every byte between the blobs is padding and must be zero.
        let mut prev = HEADER_LEN;
        for (name, &(start, stop)) in names.iter().zip(&spans) {
            let padding = r.slice(prev, start - prev, &format!("padding before the {name}"))?;
            if let Some(at) = padding.iter().position(|&b| b != 0) {
                return Err(invalid(
                    &format!("padding before the {name}"),
                    Some(prev + at as u64),
                    "padding bytes must be zero",
                ));
            }
            prev = stop;
        }
        let mut blobs = Vec::with_capacity(names.len());
        for (name, &(start, stop)) in names.iter().zip(&spans) {
            blobs.push(r.slice(start, stop - start, name)?);
        }
        let manifest: Manifest = serde_json::from_slice(blobs[0])
            .map_err(|e| invalid("manifest", Some(HEADER_LEN), &format!("not a manifest: {e}")))?;
        let delegate = NpuDelegate {
            manifest,
            txn: blobs[1].to_vec(),
            const_buffer: blobs[2].to_vec(),
            super_kernel_params: blobs[3].to_vec(),
        };
        delegate.check()?;
        Ok(delegate)
    }

    /// Serializes the delegate, after checking it as [`NpuDelegate::parse`] does.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.check()?;
        let manifest = serde_json::to_vec(&self.manifest)
            .map_err(|e| invalid("manifest", None, &format!("cannot serialize: {e}")))?;
        let blobs = [&manifest[..], &self.txn, &self.const_buffer, &self.super_kernel_params];
        let lens = blobs.map(|b| b.len() as u64);
        let spans =
            blob_spans(lens).ok_or_else(|| invalid("header", None, "blob lengths overflow"))?;
        let mut out = Vec::with_capacity(spans[3].1 as usize);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        for l in lens {
            out.extend_from_slice(&l.to_le_bytes());
        }
        for (b, &(start, _)) in blobs.iter().zip(&spans) {
            out.resize(start as usize, 0);
            out.extend_from_slice(b);
        }
        Ok(out)
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorSlot> {
        self.manifest.tensors.iter().find(|t| t.name == name)
    }

    /// Checks the manifest's rules and that the transaction parses.
    fn check(&self) -> Result<()> {
        let m = &self.manifest;
        let b = m.buffers;
        for (name, size) in [("input", b.input), ("output", b.output), ("scratch", b.scratch)] {
            if size > MAX_BUFFER {
                return Err(Error::Limit {
                    format: FORMAT,
                    what: format!("the {name} buffer's size"),
                    value: size,
                    limit: MAX_BUFFER,
                });
            }
        }
        for (i, t) in m.tensors.iter().enumerate() {
            let field = format!("manifest.tensors[{i}] ({:?})", t.name);
            if m.tensors[..i].iter().any(|o| o.name == t.name) {
                return Err(invalid(&field, None, "a second tensor of this name"));
            }
            if t.dtype != FLOAT32 {
                return Err(Error::Unsupported {
                    format: FORMAT,
                    field,
                    offset: None,
                    reason: format!("element type {:?}; delegates hold {FLOAT32}", t.dtype),
                });
            }
            let bytes = t.shape.iter().try_fold(4u64, |acc, &d| acc.checked_mul(d));
            if bytes != Some(t.size) {
                return Err(invalid(
                    &field,
                    None,
                    &format!("size {} is not the bytes of shape {:?}", t.size, t.shape),
                ));
            }
            let cap = match t.buffer {
                TensorBuffer::Input => b.input,
                TensorBuffer::Output => b.output,
                TensorBuffer::Scratch => b.scratch,
            };
            if t.offset.checked_add(t.size).is_none_or(|end| end > cap) {
                return Err(invalid(
                    &field,
                    None,
                    &format!(
                        "bytes {}..+{} lie outside its {:?} buffer of {cap} bytes",
                        t.offset, t.size, t.buffer
                    ),
                ));
            }
        }
        let io = [
            (&m.inputs, "inputs", TensorBuffer::Input),
            (&m.outputs, "outputs", TensorBuffer::Output),
        ];
        for (names, list, want) in io {
            for (i, name) in names.iter().enumerate() {
                let field = format!("manifest.{list}[{i}]");
                match self.tensor(name) {
                    None => {
                        return Err(invalid(&field, None, &format!("names no tensor {name:?}")))
                    }
                    Some(t) if t.buffer != want => {
                        return Err(invalid(
                            &field,
                            None,
                            &format!(
                                "tensor {name:?} lives in the {:?} buffer, not {want:?}",
                                t.buffer
                            ),
                        ))
                    }
                    Some(_) if names[..i].contains(name) => {
                        return Err(invalid(&field, None, &format!("names {name:?} twice")))
                    }
                    Some(_) => {}
                }
            }
        }
        for (i, a) in m.arg_map.iter().enumerate() {
            if a.offset.checked_add(a.size).is_none() {
                return Err(invalid(
                    &format!("manifest.arg_map[{i}]"),
                    None,
                    "offset + size overflows",
                ));
            }
        }
        Txn::parse(&self.txn)?;
        Ok(())
    }
}

/// `[start, end)` of the manifest, transaction, const and params blobs for these lengths, or
/// `None` on overflow.
fn blob_spans(lens: [u64; 4]) -> Option<[(u64, u64); 4]> {
    let mut spans = [(0, 0); 4];
    let mut end = HEADER_LEN;
    for (i, len) in lens.into_iter().enumerate() {
        let start = if i == 0 { end } else { align_up(end, BLOB_ALIGN)? };
        end = start.checked_add(len)?;
        spans[i] = (start, end);
    }
    Some(spans)
}

fn invalid(field: &str, offset: Option<u64>, reason: &str) -> Error {
    Error::Invalid { format: FORMAT, field: field.into(), offset, reason: reason.into() }
}

/// Bytes as text for an error: ASCII as is, others escaped.
fn printable(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NpuDelegate {
        let txn = crate::txn::Txn::from_ops(
            crate::txn::Header {
                major: 0,
                minor: 1,
                dev_gen: 4,
                num_rows: 6,
                num_cols: 4,
                num_mem_tile_rows: 1,
                padding: 0,
                num_ops: 0,
                txn_size: 0,
            },
            vec![],
        )
        .and_then(|t| t.to_bytes())
        .unwrap();
        let slot = |name: &str, buffer, offset| TensorSlot {
            name: name.into(),
            buffer,
            offset,
            size: 8,
            dtype: FLOAT32.into(),
            shape: vec![2],
        };
        NpuDelegate {
            manifest: Manifest {
                buffers: BufferSizes { input: 8, output: 8, scratch: 8 },
                tensors: vec![
                    slot("x", TensorBuffer::Input, 0),
                    slot("y", TensorBuffer::Output, 0),
                    slot("t", TensorBuffer::Scratch, 0),
                ],
                inputs: vec!["x".into()],
                outputs: vec!["y".into()],
                arg_map: vec![],
                nodes: vec![],
            },
            txn,
            const_buffer: vec![1, 2, 3],
            super_kernel_params: vec![],
        }
    }

    #[test]
    fn round_trips_with_aligned_blobs() {
        let d = sample();
        let bytes = d.to_bytes().unwrap();
        assert_eq!(&bytes[..4], b"KNPU");
        assert_eq!(NpuDelegate::parse(&bytes).unwrap(), d);
        let txn_at =
            align_up(HEADER_LEN + u64::from_le_bytes(bytes[8..16].try_into().unwrap()), 16)
                .unwrap();
        assert_eq!(&bytes[txn_at as usize..txn_at as usize + d.txn.len()], &d.txn[..]);
    }

    #[test]
    fn rejects_trailing_bytes_nonzero_padding_and_bad_tensors() {
        let d = sample();
        let mut bytes = d.to_bytes().unwrap();
        bytes.push(0);
        assert!(NpuDelegate::parse(&bytes).unwrap_err().to_string().contains("blobs end"));
        let bytes = d.to_bytes().unwrap();
        let manifest_end =
            HEADER_LEN as usize + u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        if !manifest_end.is_multiple_of(16) {
            let mut b = bytes.clone();
            b[manifest_end] = 1;
            assert!(NpuDelegate::parse(&b).unwrap_err().to_string().contains("padding"));
        }
        let mut bad = d.clone();
        bad.manifest.tensors[1].offset = 4;
        assert!(bad.to_bytes().unwrap_err().to_string().contains("outside"));
        let mut bad = d.clone();
        bad.manifest.outputs = vec!["x".into()];
        assert!(bad.to_bytes().unwrap_err().to_string().contains("not Output"));
        let mut bad = d;
        bad.manifest.tensors[0].shape = vec![3];
        assert!(bad.to_bytes().unwrap_err().to_string().contains("not the bytes"));
    }
}
