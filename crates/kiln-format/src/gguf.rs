//! GGUF files (versions 2 and 3, little-endian): metadata key/values, tensor infos and tensor
//! data, with the full current ggml type table (gguf-py 0.19.0) for tensor sizes.
//!
//! Layout: magic `GGUF`, `u32` version, `u64` tensor count, `u64` key/value count, the key/values,
//! the tensor infos (name, `u32` rank, `u64` dims, `u32` type, `u64` offset relative to the data
//! section), then the data section at the next multiple of `general.alignment` (default 32).
//! Every count is bounded by the bytes left in the file before anything is allocated. Unlike
//! IREE, which still uses the pre-2024 numbering for ids 16-18 and refuses every id from 19 on,
//! kiln sizes every current type correctly.

use std::borrow::Cow;

use crate::bytes::{align_up, first_overlap, ByteReader};
use crate::error::{Error, Result};
use crate::irpa::source::{ParamSource, SourceEntry, TensorType};

/// The format name used in errors.
pub const FORMAT: &str = "gguf";
/// Default data alignment.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Deepest nesting of arrays accepted.
const MAX_DEPTH: u32 = 8;
/// Most dimensions of a tensor (ggml's `GGML_MAX_DIMS` is 4; allow headroom).
const MAX_DIMS: u32 = 16;

/// A ggml tensor type: id, name, elements per block, bytes per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    /// The numeric id stored in tensor infos.
    pub id: u32,
    /// Its name (`Q4_K`).
    pub name: &'static str,
    /// Elements per block.
    pub block_elems: u64,
    /// Bytes per block.
    pub block_bytes: u64,
    /// NumPy descr, for the unquantized types NumPy has.
    pub npy_descr: Option<&'static str>,
}

const fn t(
    id: u32,
    name: &'static str,
    block_elems: u64,
    block_bytes: u64,
    npy_descr: Option<&'static str>,
) -> GgmlType {
    GgmlType { id, name, block_elems, block_bytes, npy_descr }
}

/// The current ggml type table (ids 4, 5, 31-33 and 36-38 were removed from ggml).
pub const GGML_TYPES: &[GgmlType] = &[
    t(0, "F32", 1, 4, Some("<f4")),
    t(1, "F16", 1, 2, Some("<f2")),
    t(2, "Q4_0", 32, 18, None),
    t(3, "Q4_1", 32, 20, None),
    t(6, "Q5_0", 32, 22, None),
    t(7, "Q5_1", 32, 24, None),
    t(8, "Q8_0", 32, 34, None),
    t(9, "Q8_1", 32, 40, None),
    t(10, "Q2_K", 256, 84, None),
    t(11, "Q3_K", 256, 110, None),
    t(12, "Q4_K", 256, 144, None),
    t(13, "Q5_K", 256, 176, None),
    t(14, "Q6_K", 256, 210, None),
    t(15, "Q8_K", 256, 292, None),
    t(16, "IQ2_XXS", 256, 66, None),
    t(17, "IQ2_XS", 256, 74, None),
    t(18, "IQ3_XXS", 256, 98, None),
    t(19, "IQ1_S", 256, 50, None),
    t(20, "IQ4_NL", 32, 18, None),
    t(21, "IQ3_S", 256, 110, None),
    t(22, "IQ2_S", 256, 82, None),
    t(23, "IQ4_XS", 256, 136, None),
    t(24, "I8", 1, 1, Some("|i1")),
    t(25, "I16", 1, 2, Some("<i2")),
    t(26, "I32", 1, 4, Some("<i4")),
    t(27, "I64", 1, 8, Some("<i8")),
    t(28, "F64", 1, 8, Some("<f8")),
    t(29, "IQ1_M", 256, 56, None),
    t(30, "BF16", 1, 2, None),
    t(34, "TQ1_0", 256, 54, None),
    t(35, "TQ2_0", 256, 66, None),
    t(39, "MXFP4", 32, 17, None),
    t(40, "NVFP4", 64, 36, None),
    t(41, "Q1_0", 128, 18, None),
];

/// The type with numeric id `id`.
pub fn ggml_type(id: u32) -> Option<GgmlType> {
    GGML_TYPES.iter().copied().find(|t| t.id == id)
}

/// A metadata value. Arrays of numbers are kept as their raw bytes; strings are borrowed.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    /// Unsigned integer (UINT8/16/32/64).
    U64(u64),
    /// Signed integer (INT8/16/32/64).
    I64(i64),
    /// FLOAT32 or FLOAT64.
    F64(f64),
    /// BOOL.
    Bool(bool),
    /// STRING (bytes as stored).
    Str(&'a [u8]),
    /// ARRAY: element type code, element count, and (for string or nested arrays) nothing more.
    Array {
        /// Element value type code.
        elem_type: u32,
        /// Number of elements.
        count: u64,
    },
}

/// One metadata key/value.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyValue<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value type code.
    pub value_type: u32,
    /// The value (arrays summarised).
    pub value: Value<'a>,
}

/// One tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor<'a> {
    /// Its name.
    pub name: &'a [u8],
    /// Dimensions as stored (innermost first, ggml order).
    pub dims: Vec<u64>,
    /// Its type.
    pub ggml_type: GgmlType,
    /// Offset relative to the data section.
    pub relative_offset: u64,
    /// Absolute file offset of its bytes.
    pub offset: u64,
    /// Its bytes.
    pub data: &'a [u8],
}

/// A parsed GGUF file.
#[derive(Clone, Debug)]
pub struct Gguf<'a> {
    /// The version (2 or 3).
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<KeyValue<'a>>,
    /// Tensors in file order.
    pub tensors: Vec<Tensor<'a>>,
    /// Data alignment.
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

struct Cursor<'a> {
    r: ByteReader<'a>,
    at: u64,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> u64 {
        (self.r.len() as u64).saturating_sub(self.at)
    }
    fn u8(&mut self, f: &str) -> Result<u8> {
        let v = self.r.u8(self.at, f)?;
        self.at += 1;
        Ok(v)
    }
    fn u16(&mut self, f: &str) -> Result<u16> {
        let v = self.r.u16(self.at, f)?;
        self.at += 2;
        Ok(v)
    }
    fn u32(&mut self, f: &str) -> Result<u32> {
        let v = self.r.u32(self.at, f)?;
        self.at += 4;
        Ok(v)
    }
    fn u64(&mut self, f: &str) -> Result<u64> {
        let v = self.r.u64(self.at, f)?;
        self.at += 8;
        Ok(v)
    }
    fn bytes(&mut self, n: u64, f: &str) -> Result<&'a [u8]> {
        let v = self.r.slice(self.at, n, f)?;
        self.at += n;
        Ok(v)
    }
    fn string(&mut self, f: &str) -> Result<&'a [u8]> {
        let n = self.u64(&format!("{f}.length"))?;
        self.bytes(n, f)
    }
    /// Bounds a count read from the file by the bytes left, each item taking at least `min`.
    fn count(&self, n: u64, min: u64, f: &str) -> Result<u64> {
        if n > self.left() / min.max(1) {
            return Err(Error::invalid(
                FORMAT,
                f,
                Some(self.at),
                format!(
                    "{n} items of at least {min} bytes cannot fit the {} bytes left",
                    self.left()
                ),
            ));
        }
        Ok(n)
    }

    fn value(&mut self, ty: u32, f: &str, depth: u32) -> Result<Value<'a>> {
        Ok(match ty {
            0 => Value::U64(u64::from(self.u8(f)?)),
            1 => Value::I64(i64::from(self.u8(f)? as i8)),
            2 => Value::U64(u64::from(self.u16(f)?)),
            3 => Value::I64(i64::from(self.u16(f)? as i16)),
            4 => Value::U64(u64::from(self.u32(f)?)),
            5 => Value::I64(i64::from(self.u32(f)? as i32)),
            6 => Value::F64(f64::from(f32::from_bits(self.u32(f)?))),
            7 => Value::Bool(self.u8(f)? != 0),
            8 => Value::Str(self.string(f)?),
            9 => {
                if depth >= MAX_DEPTH {
                    return Err(Error::Limit {
                        format: FORMAT,
                        what: format!("array nesting at {f}"),
                        value: u64::from(depth + 1),
                        limit: u64::from(MAX_DEPTH),
                    });
                }
                let elem_type = self.u32(&format!("{f}.type"))?;
                let count = self.u64(&format!("{f}.count"))?;
                let min = match elem_type {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    _ => return Err(bad_type(elem_type, f, self.at)),
                };
                let count = self.count(count, min, &format!("{f}.count"))?;
                if matches!(elem_type, 8 | 9) {
                    for i in 0..count {
                        self.value(elem_type, &format!("{f}[{i}]"), depth + 1)?;
                    }
                } else {
                    self.bytes(count * min, f)?;
                }
                Value::Array { elem_type, count }
            }
            10 => Value::U64(self.u64(f)?),
            11 => Value::I64(self.u64(f)? as i64),
            12 => Value::F64(f64::from_bits(self.u64(f)?)),
            other => return Err(bad_type(other, f, self.at)),
        })
    }
}

fn bad_type(ty: u32, f: &str, at: u64) -> Error {
    Error::invalid(FORMAT, format!("{f}.type"), Some(at), format!("unknown value type {ty}"))
}

impl<'a> Gguf<'a> {
    /// Parses a GGUF file.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let mut c = Cursor { r: ByteReader::new(bytes, FORMAT), at: 0 };
        let magic = c.bytes(4, "magic")?;
        if magic != b"GGUF" {
            return Err(Error::BadMagic {
                format: FORMAT,
                offset: 0,
                expected: "GGUF".into(),
                found: format!("{magic:02x?}"),
            });
        }
        let version = c.u32("version")?;
        if !(2..=3).contains(&version) {
            let why = if version.swap_bytes() <= 3 {
                "a big-endian file".to_string()
            } else {
                format!("version {version}")
            };
            return Err(Error::unsupported(FORMAT, "version", Some(4), why));
        }
        let tensor_count = c.u64("tensor_count")?;
        let kv_count = c.u64("metadata_kv_count")?;
        // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info 8 + 4 + 4 + 8.
        let kv_count = c.count(kv_count, 13, "metadata_kv_count")?;
        let mut metadata = Vec::with_capacity(kv_count as usize);
        let mut alignment = DEFAULT_ALIGNMENT;
        for i in 0..kv_count {
            let key = c.string(&format!("metadata[{i}].key"))?;
            let f = format!("metadata[{i}] ({})", String::from_utf8_lossy(key));
            let value_type = c.u32(&format!("{f}.type"))?;
            let at = c.at;
            let value = c.value(value_type, &f, 0)?;
            if key == b"general.alignment" {
                alignment = match value {
                    Value::U64(a) if a.is_power_of_two() => a,
                    _ => {
                        return Err(Error::invalid(
                            FORMAT,
                            f,
                            Some(at),
                            format!("{value:?} is not a power-of-two integer"),
                        ))
                    }
                };
            }
            metadata.push(KeyValue { key, value_type, value });
        }
        let tensor_count = c.count(tensor_count, 24, "tensor_count")?;
        let mut infos = Vec::with_capacity(tensor_count as usize);
        for i in 0..tensor_count {
            let name = c.string(&format!("tensors[{i}].name"))?;
            let f = format!("tensors[{i}] ({})", String::from_utf8_lossy(name));
            let at = c.at;
            let n_dims = c.u32(&format!("{f}.n_dims"))?;
            if n_dims > MAX_DIMS {
                return Err(Error::Limit {
                    format: FORMAT,
                    what: format!("{f}.n_dims"),
                    value: u64::from(n_dims),
                    limit: u64::from(MAX_DIMS),
                });
            }
            let dims = (0..n_dims)
                .map(|d| c.u64(&format!("{f}.dims[{d}]")))
                .collect::<Result<Vec<u64>>>()?;
            let type_at = c.at;
            let type_id = c.u32(&format!("{f}.type"))?;
            let ty = ggml_type(type_id).ok_or_else(|| {
                Error::unsupported(
                    FORMAT,
                    format!("{f}.type"),
                    Some(type_at),
                    format!("ggml type {type_id} is not in the current type table"),
                )
            })?;
            let rel = c.u64(&format!("{f}.offset"))?;
            infos.push((name, f, at, dims, ty, rel));
        }
        let data_offset = align_up(c.at, alignment).unwrap_or(u64::MAX);
        let data_len = (bytes.len() as u64).saturating_sub(data_offset);
        let mut tensors = Vec::with_capacity(infos.len());
        for (name, f, at, dims, ty, rel) in infos {
            let elems =
                dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)).ok_or_else(|| {
                    Error::invalid(
                        FORMAT,
                        format!("{f}.dims"),
                        Some(at),
                        "element count overflows 64 bits",
                    )
                })?;
            if elems % ty.block_elems != 0 {
                return Err(Error::invalid(
                    FORMAT,
                    format!("{f}.dims"),
                    Some(at),
                    format!(
                        "{elems} elements are not whole {}-element {} blocks",
                        ty.block_elems, ty.name
                    ),
                ));
            }
            let size = (elems / ty.block_elems).checked_mul(ty.block_bytes).ok_or_else(|| {
                Error::invalid(FORMAT, format!("{f}.dims"), Some(at), "size overflows 64 bits")
            })?;
            if rel.checked_add(size).is_none_or(|end| end > data_len) {
                return Err(Error::invalid(
                    FORMAT,
                    format!("{f}.offset"),
                    Some(at),
                    format!("{size} bytes at {rel} are outside the {data_len}-byte data section"),
                ));
            }
            let offset = data_offset + rel;
            let data = c.r.slice(offset, size, &f)?;
            tensors.push(Tensor { name, dims, ggml_type: ty, relative_offset: rel, offset, data });
        }
        Ok(Gguf { version, metadata, tensors, alignment, data_offset })
    }

    /// Fails when a tensor is not aligned to the file's alignment or two tensors share bytes.
    pub fn verify(&self) -> Result<()> {
        let mut ranges = Vec::with_capacity(self.tensors.len());
        for (i, t) in self.tensors.iter().enumerate() {
            if t.relative_offset % self.alignment != 0 {
                return Err(Error::invalid(
                    FORMAT,
                    format!("tensors[{i}].offset"),
                    Some(t.offset),
                    format!(
                        "{} is not a multiple of the alignment {}",
                        t.relative_offset, self.alignment
                    ),
                ));
            }
            ranges.push((t.offset, t.offset + t.data.len() as u64, i));
        }
        match first_overlap(&mut ranges) {
            Some((later, earlier, at)) => Err(Error::invalid(
                FORMAT,
                format!("tensors[{later}]"),
                Some(at),
                format!("overlaps tensors[{earlier}]"),
            )),
            None => Ok(()),
        }
    }
}

impl ParamSource for Gguf<'_> {
    fn format_name(&self) -> &'static str {
        FORMAT
    }

    fn param_entries(&self) -> Result<Vec<SourceEntry<'_>>> {
        Ok(self
            .tensors
            .iter()
            .map(|t| {
                // NumPy shapes are outermost first; ggml stores innermost first.
                let shape = t.dims.iter().rev().copied().collect();
                let tensor = TensorType {
                    dtype: t.ggml_type.name.to_string(),
                    npy_descr: t.ggml_type.npy_descr,
                    shape,
                };
                SourceEntry {
                    key: Cow::Borrowed(t.name),
                    ..SourceEntry::data(&[], t.offset, t.data, Some(tensor))
                }
            })
            .collect())
    }
}
