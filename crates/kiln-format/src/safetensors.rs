//! safetensors files: `u64` header length, a JSON header, then the data.
//!
//! The header is read and checked by the `safetensors` crate (the reference implementation's
//! loader): the header must be UTF-8 JSON of at most 100 MB, every dtype known, every
//! tensor's byte length equal to its elements times its dtype size, and the tensors must cover
//! the data exactly, back to back from offset 0 to the end of the file (no holes, no
//! overlaps, no trailing bytes). Its errors are mapped into [`Error`] here, naming the tensor
//! where the crate does. Tensors come out in data order, which is the header's order in files
//! the reference writer made; data offsets are relative to the end of the header, so tensor
//! data is only as aligned as the header length makes it (real writers pad it to 8).

use std::borrow::Cow;

use ::safetensors::SafeTensorError;

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
    /// `__metadata__`, sorted by key (the header's JSON object has no order that survives).
    pub metadata: Vec<(String, String)>,
    /// Tensors in data order.
    pub tensors: Vec<Tensor<'a>>,
}

impl<'a> SafeTensors<'a> {
    /// Parses and checks a safetensors file with the `safetensors` crate.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let (header_len, meta) =
            ::safetensors::SafeTensors::read_metadata(bytes).map_err(|e| map_error(e, bytes))?;
        let base = 8 + header_len as u64;
        let mut metadata: Vec<(String, String)> =
            meta.metadata().iter().flatten().map(|(k, v)| (k.clone(), v.clone())).collect();
        metadata.sort();
        let names = meta.offset_keys();
        let mut tensors = Vec::with_capacity(names.len());
        for name in names {
            let Some(info) = meta.info(&name) else { continue };
            // The crate's dtype names are the header's (its enum derives them through serde).
            let dname = format!("{:?}", info.dtype);
            let dt = dtype(&dname).ok_or_else(|| {
                Error::unsupported(
                    FORMAT,
                    format!("{name}.dtype"),
                    Some(8),
                    format!("unknown dtype {dname:?}"),
                )
            })?;
            let (begin, end) = info.data_offsets;
            // read_metadata checked that the tensors cover the data up to the end of the file.
            let data = bytes.get(base as usize + begin..base as usize + end).ok_or_else(|| {
                Error::invalid(FORMAT, format!("{name}.data_offsets"), Some(8), "out of range")
            })?;
            tensors.push(Tensor {
                name,
                dtype: dt,
                shape: info.shape.iter().map(|&d| d as u64).collect(),
                offset: base + begin as u64,
                data,
            });
        }
        Ok(SafeTensors { header_len: header_len as u64, metadata, tensors })
    }
}

/// The crate's error as a kiln error with the field and offset it concerns.
/// One tensor to write: name, dtype, shape and its bytes (little-endian, row-major).
#[derive(Clone, Copy, Debug)]
pub struct WriteTensor<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its dtype.
    pub dtype: Dtype,
    /// Its shape.
    pub shape: &'a [u64],
    /// Its bytes: the shape's element count times the dtype's size.
    pub data: &'a [u8],
}

/// A safetensors file of `tensors` and the `__metadata__` map `metadata`, laid out by the
/// `safetensors` crate (the reference writer: tensors sorted by alignment then name, the
/// header padded to 8 bytes), so the bytes equal what the reference package writes. A tensor
/// whose byte length does not match its shape and dtype, or a repeated name, is an error.
pub fn write(tensors: &[WriteTensor<'_>], metadata: &[(String, String)]) -> Result<Vec<u8>> {
    let mut views = Vec::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        let field = || format!("tensors[{i}] ({:?})", t.name);
        // Every name of DTYPES is a variant name of the crate's enum (serde derives both).
        let crate_dtype: ::safetensors::Dtype =
            serde_json::from_value(serde_json::Value::from(t.dtype.name)).map_err(|_| {
                Error::unsupported(FORMAT, field(), None, format!("dtype {:?}", t.dtype.name))
            })?;
        let bits = t.shape.iter().try_fold(t.dtype.bits, |a, &d| a.checked_mul(d));
        if bits.is_none_or(|b| b % 8 != 0 || b / 8 != t.data.len() as u64) {
            return Err(Error::invalid(
                FORMAT,
                field(),
                None,
                format!(
                    "{} bytes do not hold a {} tensor of shape {:?}",
                    t.data.len(),
                    t.dtype.name,
                    t.shape
                ),
            ));
        }
        if tensors[..i].iter().any(|o| o.name == t.name) {
            return Err(Error::invalid(FORMAT, field(), None, "the name is repeated"));
        }
        let shape = t
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::invalid(FORMAT, field(), None, "a dimension is too large"))?;
        views.push((t.name, View { dtype: crate_dtype, shape, data: t.data }));
    }
    let info = (!metadata.is_empty()).then(|| metadata.iter().cloned().collect());
    ::safetensors::serialize(views, info).map_err(|e| {
        Error::invalid(FORMAT, "header", None, format!("the reference writer refused it: {e}"))
    })
}

/// A tensor as the reference writer takes it.
struct View<'a> {
    dtype: ::safetensors::Dtype,
    shape: Vec<usize>,
    data: &'a [u8],
}

impl ::safetensors::View for View<'_> {
    fn dtype(&self) -> ::safetensors::Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn map_error(e: SafeTensorError, bytes: &[u8]) -> Error {
    let header = |reason: String| Error::invalid(FORMAT, "header", Some(8), reason);
    match e {
        SafeTensorError::HeaderTooSmall | SafeTensorError::InvalidHeaderLength => {
            let declared = bytes.get(..8).map_or(0, |b| {
                u64::from_le_bytes(b.try_into().unwrap_or([0; 8])).saturating_add(8)
            });
            Error::Truncated {
                format: FORMAT,
                field: "header".into(),
                offset: 0,
                end: declared.max(8),
                len: bytes.len() as u64,
            }
        }
        SafeTensorError::HeaderTooLarge => Error::Limit {
            format: FORMAT,
            what: "header length".into(),
            value: bytes.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
            limit: MAX_HEADER,
        },
        SafeTensorError::InvalidHeader(e) => header(format!("not UTF-8: {e}")),
        SafeTensorError::InvalidHeaderDeserialization(e) | SafeTensorError::JsonError(e) => {
            header(format!("not a safetensors header: {e}"))
        }
        SafeTensorError::InvalidOffset(name) => Error::invalid(
            FORMAT,
            format!("{name}.data_offsets"),
            Some(8),
            "tensors must lie back to back from data offset 0 (a hole or an overlap is here)",
        ),
        SafeTensorError::MetadataIncompleteBuffer => header(
            "the tensors do not cover the data exactly: the file has bytes after the last tensor \
             or the last tensor ends past the file"
                .into(),
        ),
        SafeTensorError::TensorInvalidInfo => tensor_error(
            bytes,
            "data_offsets",
            "the byte range does not hold its shape x dtype size",
        ),
        SafeTensorError::ValidationOverflow => {
            tensor_error(bytes, "shape", "shape x dtype size overflows")
        }
        SafeTensorError::MisalignedSlice => tensor_error(
            bytes,
            "shape",
            "the tensor of a sub-byte dtype does not end on a byte boundary",
        ),
        other => header(other.to_string()),
    }
}

/// An error about one tensor's own fields, naming the tensor when it can be found.
fn tensor_error(bytes: &[u8], field: &str, reason: &str) -> Error {
    let field = match first_bad_tensor(bytes) {
        Some(name) => format!("{name}.{field}"),
        None => format!("header (a tensor's {field})"),
    };
    Error::invalid(FORMAT, field, Some(8), reason)
}

/// The first tensor (by name) that the crate's validation refuses on its own, with its data
/// moved to offset 0: the one whose shape, dtype and byte length disagree. The crate reports
/// such errors without a name; this only runs once a file has already been refused.
fn first_bad_tensor(bytes: &[u8]) -> Option<String> {
    use ::safetensors::tensor::{Metadata, TensorInfo};
    let len = usize::try_from(u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?)).ok()?;
    let json = bytes.get(8..8usize.checked_add(len)?)?;
    let header: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(json).ok()?;
    header.into_iter().filter(|(name, _)| name != "__metadata__").find_map(|(name, v)| {
        let info: TensorInfo = serde_json::from_value(v).ok()?;
        let (begin, end) = info.data_offsets;
        let Some(size) = end.checked_sub(begin) else { return Some(name) };
        let alone = TensorInfo { data_offsets: (0, size), ..info };
        Metadata::new(None, vec![(name.clone(), alone)]).is_err().then_some(name)
    })
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
