//! safetensors files: `u64` header length, a JSON header, then the data.
//!
//! The header is read with an order-preserving JSON map so tensors come out in document order,
//! which is the order IREE converts them in. Data offsets are relative to the end of the
//! header. Real writers pad the header with spaces to a multiple of 8, so tensor data is only
//! 8-byte aligned; that is accepted. Parsing checks every tensor's dtype, shape and offsets
//! (`begin <= end <= data length`, `end - begin` = elements x dtype size); [`SafeTensors::verify`]
//! also refuses overlapping tensors.

use std::borrow::Cow;

use crate::bytes::{first_overlap, ByteReader};
use crate::error::{Error, Result};
use crate::irpa::source::{ParamSource, SourceEntry, TensorType};

/// The format name used in errors.
pub const FORMAT: &str = "safetensors";
/// Largest header accepted (the limit of the reference implementation).
pub const MAX_HEADER: u64 = 100_000_000;

/// A safetensors element type: name, bits per element, NumPy descr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dtype {
    /// The name in the header (`F32`).
    pub name: &'static str,
    /// Bits per element.
    pub bits: u64,
    /// NumPy descr, when NumPy has the type.
    pub npy_descr: Option<&'static str>,
}

/// Every dtype of the safetensors 0.8 specification.
pub const DTYPES: &[Dtype] = &[
    Dtype { name: "BOOL", bits: 8, npy_descr: Some("|b1") },
    Dtype { name: "U8", bits: 8, npy_descr: Some("|u1") },
    Dtype { name: "I8", bits: 8, npy_descr: Some("|i1") },
    Dtype { name: "F8_E5M2", bits: 8, npy_descr: None },
    Dtype { name: "F8_E4M3", bits: 8, npy_descr: None },
    Dtype { name: "F8_E8M0", bits: 8, npy_descr: None },
    Dtype { name: "F8_E4M3FNUZ", bits: 8, npy_descr: None },
    Dtype { name: "F8_E5M2FNUZ", bits: 8, npy_descr: None },
    Dtype { name: "I16", bits: 16, npy_descr: Some("<i2") },
    Dtype { name: "U16", bits: 16, npy_descr: Some("<u2") },
    Dtype { name: "F16", bits: 16, npy_descr: Some("<f2") },
    Dtype { name: "BF16", bits: 16, npy_descr: None },
    Dtype { name: "I32", bits: 32, npy_descr: Some("<i4") },
    Dtype { name: "U32", bits: 32, npy_descr: Some("<u4") },
    Dtype { name: "F32", bits: 32, npy_descr: Some("<f4") },
    Dtype { name: "I64", bits: 64, npy_descr: Some("<i8") },
    Dtype { name: "U64", bits: 64, npy_descr: Some("<u8") },
    Dtype { name: "F64", bits: 64, npy_descr: Some("<f8") },
    Dtype { name: "C64", bits: 64, npy_descr: Some("<c8") },
    Dtype { name: "F4", bits: 4, npy_descr: None },
    Dtype { name: "F6_E2M3", bits: 6, npy_descr: None },
    Dtype { name: "F6_E3M2", bits: 6, npy_descr: None },
];

/// The dtype called `name`.
pub fn dtype(name: &str) -> Option<Dtype> {
    DTYPES.iter().copied().find(|d| d.name == name)
}

/// One tensor of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor<'a> {
    /// Its name.
    pub name: String,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Absolute file offset of its bytes.
    pub offset: u64,
    /// Its bytes.
    pub data: &'a [u8],
}

/// A parsed safetensors file.
#[derive(Clone, Debug)]
pub struct SafeTensors<'a> {
    /// Length of the JSON header.
    pub header_len: u64,
    /// `__metadata__`, in document order.
    pub metadata: Vec<(String, String)>,
    /// Tensors in document order.
    pub tensors: Vec<Tensor<'a>>,
}

impl<'a> SafeTensors<'a> {
    /// Parses a safetensors file.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let r = ByteReader::new(bytes, FORMAT);
        let header_len = r.u64(0, "header_len")?;
        if header_len > MAX_HEADER {
            return Err(Error::Limit {
                format: FORMAT,
                what: "header length".into(),
                value: header_len,
                limit: MAX_HEADER,
            });
        }
        let json = r.slice(8, header_len, "header")?;
        let base = 8 + header_len;
        let data_len = bytes.len() as u64 - base;
        let value: serde_json::Value = serde_json::from_slice(json)
            .map_err(|e| Error::invalid(FORMAT, "header", Some(8), format!("not JSON: {e}")))?;
        let serde_json::Value::Object(map) = value else {
            return Err(Error::invalid(FORMAT, "header", Some(8), "not a JSON object"));
        };
        let mut metadata = Vec::new();
        let mut tensors = Vec::with_capacity(map.len());
        for (name, v) in &map {
            let field = |f: &str| format!("{name}.{f}");
            let bad =
                |f: &str, why: &str| Error::invalid(FORMAT, field(f), Some(8), why.to_string());
            if name == "__metadata__" {
                let obj = v.as_object().ok_or_else(|| bad("", "is not an object"))?;
                for (k, v) in obj {
                    let v = v.as_str().ok_or_else(|| bad(k, "is not a string"))?;
                    metadata.push((k.clone(), v.to_string()));
                }
                continue;
            }
            let obj = v.as_object().ok_or_else(|| bad("", "is not an object"))?;
            let dname =
                obj.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| bad("dtype", "missing"))?;
            let dt = dtype(dname).ok_or_else(|| {
                Error::unsupported(
                    FORMAT,
                    field("dtype"),
                    Some(8),
                    format!("unknown dtype {dname:?}"),
                )
            })?;
            let shape = obj
                .get("shape")
                .and_then(|s| s.as_array())
                .and_then(|a| a.iter().map(|d| d.as_u64()).collect::<Option<Vec<u64>>>())
                .ok_or_else(|| bad("shape", "is not a list of non-negative integers"))?;
            let offsets = obj
                .get("data_offsets")
                .and_then(|s| s.as_array())
                .and_then(|a| a.iter().map(|d| d.as_u64()).collect::<Option<Vec<u64>>>())
                .filter(|a| a.len() == 2)
                .ok_or_else(|| bad("data_offsets", "is not a pair of non-negative integers"))?;
            let (begin, end) = (offsets[0], offsets[1]);
            if begin > end || end > data_len {
                return Err(bad(
                    "data_offsets",
                    &format!("[{begin}, {end}] is not a range within the {data_len} data bytes"),
                ));
            }
            let bits = shape
                .iter()
                .try_fold(dt.bits, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| bad("shape", "size overflows 64 bits"))?;
            if bits % 8 != 0 || bits / 8 != end - begin {
                return Err(bad(
                    "data_offsets",
                    &format!("{} bytes do not hold {shape:?} x {dname} ({bits} bits)", end - begin),
                ));
            }
            let data = r.slice(base + begin, end - begin, &field("data"))?;
            tensors.push(Tensor {
                name: name.clone(),
                dtype: dt,
                shape,
                offset: base + begin,
                data,
            });
        }
        Ok(SafeTensors { header_len, metadata, tensors })
    }

    /// Fails when two tensors share bytes.
    pub fn verify(&self) -> Result<()> {
        let mut ranges: Vec<(u64, u64, &str)> = self
            .tensors
            .iter()
            .map(|t| (t.offset, t.offset + t.data.len() as u64, t.name.as_str()))
            .collect();
        match first_overlap(&mut ranges) {
            Some((later, earlier, at)) => Err(Error::invalid(
                FORMAT,
                format!("{later}.data_offsets"),
                Some(at),
                format!("overlaps {earlier}"),
            )),
            None => Ok(()),
        }
    }
}

impl ParamSource for SafeTensors<'_> {
    fn format_name(&self) -> &'static str {
        FORMAT
    }

    fn param_entries(&self) -> Result<Vec<SourceEntry<'_>>> {
        Ok(self
            .tensors
            .iter()
            .map(|t| {
                let tensor = TensorType {
                    dtype: t.dtype.name.to_string(),
                    npy_descr: t.dtype.npy_descr,
                    shape: t.shape.clone(),
                };
                SourceEntry {
                    key: Cow::Borrowed(t.name.as_bytes()),
                    ..SourceEntry::data(&[], t.offset, t.data, Some(tensor))
                }
            })
            .collect())
    }
}
