//! ExecuTorch files as parameter sources: the named tensors of a `.ptd` and the named
//! constants of a `.pte`.
//!
//! - `.ptd` ([`FlatTensor`]): every `named_data` entry, in file order, becomes a DATA entry
//!   keyed by its key. The payload is the entry's whole segment, as ExecuTorch's
//!   `FlatTensorDataMap::get_data` returns it; the layout (when present) gives dtype and shape.
//! - `.pte` ([`Program`]): first every `Program.named_data` entry in file order (backend
//!   blobs such as XNNPACK weights keyed by their SHA-256, payload = the whole segment), then
//!   every constant-segment tensor that carries `extra_tensor_info.fully_qualified_name`, in
//!   method then value order, keyed by that name with exactly `nbytes` bytes. Those are the
//!   tensors ExecuTorch itself can look up by name; unnamed constants are left out because an
//!   archive entry needs a key and the buffer index is not a stable one. EXTERNAL tensors are
//!   left out too (their data is not in the `.pte`). A name met again (another method sharing
//!   the constant) is taken once when its bytes are equal and rejected otherwise.
//!
//! Metadata is empty, as for the safetensors and GGUF importers; every payload is borrowed.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ptd::FlatTensor;
use crate::pte::{Program, ScalarType, TensorData, Value};

use super::builder::Payload;
use super::source::{ParamSource, SourceEntry, TensorType};

/// Absolute offset of `sub` in `whole` (0 for an empty slice that is not inside it).
fn offset_in(whole: &[u8], sub: &[u8]) -> u64 {
    let start = whole.as_ptr() as usize;
    let at = sub.as_ptr() as usize;
    match at.checked_sub(start) {
        Some(off) if off <= whole.len() => off as u64,
        _ => 0,
    }
}

/// The NumPy `descr` of an ExecuTorch element type, when NumPy has one.
fn npy_descr(t: ScalarType) -> Option<&'static str> {
    use ScalarType::*;
    Some(match t {
        Byte => "|u1",
        Char => "|i1",
        Short => "<i2",
        Int => "<i4",
        Long => "<i8",
        Half => "<f2",
        Float => "<f4",
        Double => "<f8",
        ComplexFloat => "<c8",
        ComplexDouble => "<c16",
        Bool => "|b1",
        _ => return None,
    })
}

/// Element type and shape of an ExecuTorch tensor.
fn tensor_type(t: ScalarType, sizes: impl Iterator<Item = i32>) -> TensorType {
    TensorType {
        dtype: t.schema_name().to_string(),
        npy_descr: npy_descr(t),
        shape: sizes.map(|s| u64::try_from(s).unwrap_or(0)).collect(),
    }
}

impl ParamSource for FlatTensor<'_> {
    fn format_name(&self) -> &'static str {
        "ptd"
    }

    fn param_entries(&self) -> Result<Vec<SourceEntry<'_>>> {
        let mut out = Vec::with_capacity(self.len());
        for e in self.entries() {
            let e = e?;
            let tensor =
                e.layout.as_ref().map(|l| tensor_type(l.scalar_type, l.sizes.iter().copied()));
            out.push(SourceEntry {
                key: Cow::Borrowed(e.key.as_bytes()),
                ..SourceEntry::data(&[], offset_in(self.bytes(), e.data), e.data, tensor)
            });
        }
        Ok(out)
    }
}

impl ParamSource for Program<'_> {
    fn format_name(&self) -> &'static str {
        "pte"
    }

    fn param_entries(&self) -> Result<Vec<SourceEntry<'_>>> {
        let whole = self.bytes();
        let mut out: Vec<SourceEntry<'_>> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, (key, seg)) in self.named_data().enumerate() {
            let data = self.segment_bytes(seg as usize).map_err(|e| {
                Error::invalid("pte", format!("named_data[{i}] ({key:?})"), None, e.to_string())
            })?;
            seen.entry(key).or_insert(out.len());
            out.push(SourceEntry {
                key: Cow::Borrowed(key.as_bytes()),
                ..SourceEntry::data(&[], offset_in(whole, data), data, None)
            });
        }
        for method in self.methods() {
            for v in 0..method.num_values() {
                let Value::Tensor(t) = method.value(v)? else { continue };
                let (TensorData::Constant(idx), Some(fqn)) = (t.data(), t.fully_qualified_name())
                else {
                    continue;
                };
                if fqn.is_empty() {
                    continue;
                }
                let data = self.constant_data(idx as usize, t.nbytes())?;
                if let Some(&prev) = seen.get(fqn) {
                    let same = out
                        .get(prev)
                        .is_some_and(|p| matches!(&p.payload, Payload::Data(b) if *b == data));
                    if same {
                        continue;
                    }
                    return Err(Error::invalid(
                        "pte",
                        format!(
                            "{}.values[{v}].tensor.extra_tensor_info.fully_qualified_name",
                            method.name()
                        ),
                        None,
                        format!("{fqn:?} names another parameter with different data"),
                    ));
                }
                seen.insert(fqn, out.len());
                out.push(SourceEntry {
                    key: Cow::Borrowed(fqn.as_bytes()),
                    ..SourceEntry::data(
                        &[],
                        offset_in(whole, data),
                        data,
                        Some(tensor_type(t.dtype(), t.sizes().iter())),
                    )
                });
            }
        }
        Ok(out)
    }
}
