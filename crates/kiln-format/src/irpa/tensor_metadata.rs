//! Element type and shape of an archive entry, kept in its opaque metadata.
//!
//! The archive format leaves entry metadata undefined and IREE's runtime ignores it. IREE's
//! Python helpers (`iree.runtime.io.parameter_index_add_numpy_ndarray`) store a tensor's type
//! as `TENSORv0:` followed by JSON, and `parameter_index_entry_as_numpy_ndarray` reads it back
//! (as it does iree-turbine's older `PYTORCH:` prefix). kiln writes that same form:
//!
//! ```text
//! TENSORv0:{"type": "Tensor", "dtype": "float32", "shape": [5, 6], "dtype_desc": {"class_name": "Float32DType", "is_complex": false, "is_floating_point": true, "is_signed": false, "itemsize": 4}}
//! ```
//!
//! byte for byte as IREE's helper does for the 14 NumPy types IREE knows. Other types keep
//! their name (`bfloat16`, `float8_e4m3fn`, GGUF's `Q4_K`, ...) and have no `dtype_desc`:
//! `{"type": "Tensor", "dtype": "bfloat16", "shape": [4]}`. IREE's Python helper refuses to
//! turn those into arrays, as it does for any dtype it lacks; kiln reads them all.

/// Element type and shape of a tensor, when the source records them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorType {
    /// The source format's name for the element type (`F32`, `Q4_K`, `float32`, ...).
    pub dtype: String,
    /// The NumPy `descr` of the element type (`<f4`), when NumPy has one.
    pub npy_descr: Option<&'static str>,
    /// Dimensions, outermost first.
    pub shape: Vec<u64>,
}

/// The prefix IREE's Python helpers write.
pub const PREFIX: &str = "TENSORv0:";
/// The prefix iree-turbine wrote before `TENSORv0`.
pub const PYTORCH_PREFIX: &str = "PYTORCH:";

/// A NumPy type as IREE's helper describes it.
struct NumpyType {
    descr: &'static str,
    name: &'static str,
    class_name: &'static str,
    is_complex: bool,
    is_floating_point: bool,
    is_signed: bool,
    itemsize: u8,
}

const fn np(
    descr: &'static str,
    name: &'static str,
    class_name: &'static str,
    kind: u8,
    itemsize: u8,
) -> NumpyType {
    // kind: b'f' float, b'i' signed integer, b'u' unsigned integer or bool, b'c' complex.
    NumpyType {
        descr,
        name,
        class_name,
        is_complex: kind == b'c',
        is_floating_point: kind == b'f',
        is_signed: kind == b'i',
        itemsize,
    }
}

/// The dtypes of `iree.runtime.dtypes`, with their NumPy descr and class name.
const NUMPY_TYPES: &[NumpyType] = &[
    np("<f2", "float16", "Float16DType", b'f', 2),
    np("<f4", "float32", "Float32DType", b'f', 4),
    np("<f8", "float64", "Float64DType", b'f', 8),
    np("|i1", "int8", "Int8DType", b'i', 1),
    np("|u1", "uint8", "UInt8DType", b'u', 1),
    np("<i2", "int16", "Int16DType", b'i', 2),
    np("<u2", "uint16", "UInt16DType", b'u', 2),
    np("<i4", "int32", "Int32DType", b'i', 4),
    np("<u4", "uint32", "UInt32DType", b'u', 4),
    np("<i8", "int64", "Int64DType", b'i', 8),
    np("<u8", "uint64", "UInt64DType", b'u', 8),
    np("|b1", "bool", "BoolDType", b'u', 1),
    np("<c8", "complex64", "Complex64DType", b'c', 8),
    np("<c16", "complex128", "Complex128DType", b'c', 16),
];

/// The static NumPy descr equal to `descr`, when IREE's helpers know that type.
pub fn known_descr(descr: &str) -> Option<&'static str> {
    NUMPY_TYPES.iter().find(|n| n.descr == descr).map(|n| n.descr)
}

/// The `TENSORv0:` metadata for `t`.
pub fn encode(t: &TensorType) -> Vec<u8> {
    let shape = t.shape.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    let known = t.npy_descr.and_then(|d| NUMPY_TYPES.iter().find(|n| n.descr == d));
    let text = match known {
        Some(n) => format!(
            "{PREFIX}{{\"type\": \"Tensor\", \"dtype\": \"{}\", \"shape\": [{shape}], \
             \"dtype_desc\": {{\"class_name\": \"{}\", \"is_complex\": {}, \
             \"is_floating_point\": {}, \"is_signed\": {}, \"itemsize\": {}}}}}",
            n.name, n.class_name, n.is_complex, n.is_floating_point, n.is_signed, n.itemsize
        ),
        None => format!(
            "{PREFIX}{{\"type\": \"Tensor\", \"dtype\": {}, \"shape\": [{shape}]}}",
            serde_json::Value::from(other_name(&t.dtype))
        ),
    };
    text.into_bytes()
}

/// The ml_dtypes / PyTorch name of a type NumPy lacks, or the source's own name.
fn other_name(name: &str) -> &str {
    match name {
        "BF16" | "bfloat16" => "bfloat16",
        "F8_E4M3" | "float8e4m3fn" => "float8_e4m3fn",
        "F8_E5M2" | "float8e5m2" => "float8_e5m2",
        "F8_E4M3FNUZ" | "float8e4m3fnuz" => "float8_e4m3fnuz",
        "F8_E5M2FNUZ" | "float8e5m2fnuz" => "float8_e5m2fnuz",
        "F8_E8M0" => "float8_e8m0fnu",
        other => other,
    }
}

/// The dtype and shape in `TENSORv0:` (or `PYTORCH:`) metadata, when present and understood.
pub fn decode(metadata: &[u8]) -> Option<TensorType> {
    let json = metadata
        .strip_prefix(PREFIX.as_bytes())
        .or_else(|| metadata.strip_prefix(PYTORCH_PREFIX.as_bytes()))?;
    let value: serde_json::Value = serde_json::from_slice(json).ok()?;
    let dtype = value.get("dtype")?.as_str()?.trim_start_matches("torch.").to_string();
    let shape =
        value.get("shape")?.as_array()?.iter().map(|d| d.as_u64()).collect::<Option<Vec<u64>>>()?;
    let npy_descr = npy_descr_for_name(&dtype);
    Some(TensorType { dtype, npy_descr, shape })
}

/// The NumPy `descr` for a NumPy/PyTorch dtype name.
fn npy_descr_for_name(name: &str) -> Option<&'static str> {
    if let Some(n) = NUMPY_TYPES.iter().find(|n| n.name == name) {
        return Some(n.descr);
    }
    Some(match name {
        "half" => "<f2",
        "float" => "<f4",
        "double" => "<f8",
        "short" => "<i2",
        "int" => "<i4",
        "long" => "<i8",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tensor_metadata_of_iree_helpers() {
        let md = br#"TENSORv0:{"type": "Tensor", "dtype": "float32", "shape": [2, 3]}"#;
        let t = decode(md).unwrap();
        assert_eq!((t.dtype.as_str(), t.npy_descr, t.shape), ("float32", Some("<f4"), vec![2, 3]));
        let md = br#"PYTORCH:{"dtype": "torch.bfloat16", "shape": [4]}"#;
        let t = decode(md).unwrap();
        assert_eq!((t.dtype.as_str(), t.npy_descr), ("bfloat16", None));
        assert_eq!(decode(b"hello"), None);
        assert_eq!(decode(b"TENSORv0:{\"dtype\": 3}"), None);
    }

    #[test]
    fn writes_what_iree_python_writes() {
        // iree.runtime.io._make_tensor_metadata(np.zeros((2, 3), np.float32)), 3.13.0.
        let t = TensorType { dtype: "F32".into(), npy_descr: Some("<f4"), shape: vec![2, 3] };
        assert_eq!(
            String::from_utf8(encode(&t)).unwrap(),
            "TENSORv0:{\"type\": \"Tensor\", \"dtype\": \"float32\", \"shape\": [2, 3], \
             \"dtype_desc\": {\"class_name\": \"Float32DType\", \"is_complex\": false, \
             \"is_floating_point\": true, \"is_signed\": false, \"itemsize\": 4}}"
        );
        let t = TensorType { dtype: "Q4_K".into(), npy_descr: None, shape: vec![256] };
        assert_eq!(
            encode(&t),
            b"TENSORv0:{\"type\": \"Tensor\", \"dtype\": \"Q4_K\", \"shape\": [256]}"
        );
        for t in [
            TensorType { dtype: "bool".into(), npy_descr: Some("|b1"), shape: vec![] },
            TensorType { dtype: "BF16".into(), npy_descr: None, shape: vec![3, 1] },
        ] {
            let back = decode(&encode(&t)).unwrap();
            assert_eq!((back.npy_descr, back.shape), (t.npy_descr, t.shape));
        }
    }
}
