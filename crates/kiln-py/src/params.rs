//! `kiln.params`: parameter files (.irpa, .safetensors, .gguf, .ptd, .pte) read into arrays,
//! and arrays written as an .irpa (with IREE's `TENSORv0:` type metadata) or a .safetensors.

use std::path::PathBuf;

use kiln_format::irpa::builder::Plan;
use kiln_format::irpa::source::TensorType;
use kiln_format::irpa::{BuildEntry, ParamFile, Payload, DEFAULT_DATA_ALIGNMENT};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::errors::{self, FileError, InputError, MemoryLimitError, NotSupportedError};

/// One entry as the Python layer takes it: key, NumPy descr and shape when the file records a
/// type NumPy has (and they match the length), and the bytes as a uint8 array.
type Loaded<'py> = (String, Option<&'static str>, Option<Vec<u64>>, Bound<'py, PyArray1<u8>>);

/// Every entry of the parameter file `path`, in file order. Splat entries are expanded (at
/// most `max_bytes` each); external entries are an error naming their file.
#[pyfunction]
#[pyo3(signature = (path, max_bytes))]
pub fn params_load(py: Python<'_>, path: PathBuf, max_bytes: u64) -> PyResult<Vec<Loaded<'_>>> {
    let file =
        kiln_runtime::MappedFile::open(&path).map_err(|e| FileError::new_err(e.to_string()))?;
    let invalid = |e: kiln_format::Error| errors::format(&e, format!("{}: {e}", path.display()));
    let kind = kiln_format::detect(file.bytes()).ok_or_else(|| {
        errors::InvalidFileError::new_err(format!(
            "{}: {}",
            path.display(),
            kiln_format::detect::unrecognised(file.bytes())
        ))
    })?;
    let parsed = ParamFile::parse(kind, file.bytes()).map_err(invalid)?.ok_or_else(|| {
        InputError::new_err(format!(
            "{}: {kind} files are not a parameter source (irpa, safetensors, gguf, ptd and pte \
             are)",
            path.display()
        ))
    })?;
    let entries = parsed.source().param_entries().map_err(invalid)?;
    let mut out = Vec::with_capacity(entries.len());
    for e in &entries {
        let key = e.key_str().into_owned();
        let bytes = match &e.payload {
            Payload::Data(bytes) => bytes.to_vec(),
            Payload::Splat { pattern, length } => {
                if *length > max_bytes {
                    return Err(MemoryLimitError::new_err(format!(
                        "{}: `{key}` is a splat of {length} bytes, over the limit of \
                         {max_bytes} (max_bytes)",
                        path.display()
                    )));
                }
                pattern.iter().copied().cycle().take(*length as usize).collect()
            }
            Payload::External { path: other, .. } => {
                return Err(NotSupportedError::new_err(format!(
                    "{}: `{key}` is an external entry stored in {}; load that file",
                    path.display(),
                    String::from_utf8_lossy(other)
                )))
            }
        };
        // The recorded type when NumPy has it and it matches the length (as `kiln params
        // extract` writes .npy files), else flat bytes.
        let (descr, shape) = e.numpy_type().map(|(d, s)| (d, s.to_vec())).unzip();
        out.push((key, descr, shape, PyArray1::from_vec(py, bytes)));
    }
    Ok(out)
}

/// One entry to write: key, NumPy descr (little-endian or byte-wide), shape and the bytes.
type ToSave<'py> = (String, String, Vec<u64>, PyReadonlyArray1<'py, u8>);

/// Writes `entries` to `path` as an .irpa or a .safetensors (by the extension), atomically:
/// nothing is left at `path` when writing fails. `metadata` goes into a safetensors header.
#[pyfunction]
#[pyo3(signature = (path, entries, metadata))]
pub fn params_save(
    py: Python<'_>,
    path: PathBuf,
    entries: Vec<ToSave<'_>>,
    metadata: Vec<(String, String)>,
) -> PyResult<()> {
    let extension = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    let slices = entries
        .iter()
        .map(|(_, _, _, data)| data.as_slice())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| InputError::new_err(format!("an array's bytes: {e}")))?;
    let bytes = match extension.as_deref() {
        Some("irpa") => {
            if !metadata.is_empty() {
                return Err(InputError::new_err(
                    "an .irpa file has no file metadata; metadata is for .safetensors",
                ));
            }
            let mut build = Vec::with_capacity(entries.len());
            for ((key, descr, shape, _), data) in entries.iter().zip(&slices) {
                let npy_descr =
                    kiln_format::irpa::tensor_metadata::known_descr(descr).ok_or_else(|| {
                        InputError::new_err(format!("`{key}`: IREE has no type for {descr:?}"))
                    })?;
                let tensor = TensorType {
                    dtype: String::new(),
                    npy_descr: Some(npy_descr),
                    shape: shape.clone(),
                };
                build.push(BuildEntry {
                    name: key.as_bytes().into(),
                    metadata: kiln_format::irpa::tensor_metadata::encode(&tensor).into(),
                    payload: Payload::Data(data),
                });
            }
            py.detach(|| Plan::new(&build, DEFAULT_DATA_ALIGNMENT).map(|plan| plan.to_vec()))
                .map_err(|e| InputError::new_err(e.to_string()))?
        }
        Some("safetensors") => {
            let mut tensors = Vec::with_capacity(entries.len());
            for ((key, descr, shape, _), data) in entries.iter().zip(&slices) {
                let dtype = kiln_format::safetensors::DTYPES
                    .iter()
                    .find(|d| d.npy_descr == Some(descr.as_str()))
                    .ok_or_else(|| {
                        InputError::new_err(format!(
                            "`{key}`: safetensors has no type for {descr:?}"
                        ))
                    })?;
                tensors.push(kiln_format::safetensors::WriteTensor {
                    name: key,
                    dtype: *dtype,
                    shape,
                    data,
                });
            }
            py.detach(|| kiln_format::safetensors::write(&tensors, &metadata))
                .map_err(|e| InputError::new_err(e.to_string()))?
        }
        _ => {
            return Err(InputError::new_err(format!(
                "{}: kiln writes .irpa and .safetensors files; name the file with one of those \
                 extensions",
                path.display()
            )))
        }
    };
    py.detach(|| kiln_format::io::write_bytes_atomic(&path, &bytes))
        .map_err(|e| errors::format(&e, e.to_string()))
}
