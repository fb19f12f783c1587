//! Shared helpers: fixture paths and `.npy` <-> runtime values.
#![allow(dead_code)]

use std::path::PathBuf;

use kiln_format::npy::Npy;
use kiln_kernels::DType;
use kiln_runtime::{Input, Method, Output, OutputTensor, TensorInput, ValueMeta};

/// `tests/fixtures/pte` of the repository.
pub fn pte_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pte")
}

/// The dtype of an `.npy` descr (bfloat16 fixtures store uint16 bits: `want` resolves that).
pub fn npy_dtype(descr: &str, want: Option<DType>) -> DType {
    DType::from_npy_descr(descr, want)
        .unwrap_or_else(|| panic!("npy descr {descr} not handled by the test"))
}

/// An owned array read from a `.npy`.
pub struct Array {
    pub dtype: DType,
    pub sizes: Vec<usize>,
    pub data: Vec<u8>,
}

pub fn read_npy(path: &std::path::Path, want: Option<DType>) -> Array {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let npy = Npy::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!npy.fortran_order, "{}: Fortran order", path.display());
    Array {
        dtype: npy_dtype(&npy.descr, want),
        sizes: npy.shape.iter().map(|&d| d as usize).collect(),
        data: npy.data.to_vec(),
    }
}

pub fn f64s(dtype: DType, data: &[u8]) -> Vec<f64> {
    match dtype {
        DType::Float => {
            data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect()
        }
        DType::Double => {
            data.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
        }
        DType::Half => data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes(c.try_into().unwrap()).to_f64())
            .collect(),
        DType::BFloat16 => data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes(c.try_into().unwrap()).to_f64())
            .collect(),
        DType::Byte | DType::Bool => data.iter().map(|&b| f64::from(b)).collect(),
        DType::Char => data.iter().map(|&b| f64::from(b as i8)).collect(),
        DType::Short => {
            data.chunks_exact(2).map(|c| i16::from_le_bytes(c.try_into().unwrap()).into()).collect()
        }
        DType::Int => {
            data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()).into()).collect()
        }
        DType::Long => {
            data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64).collect()
        }
        other => panic!("no numeric reading of {other:?}"),
    }
}

/// Compares one output with the recorded ExecuTorch array: float32 within `tol` max abs diff
/// (NaN equal to NaN), everything else exactly. Returns the max abs diff.
pub fn compare(what: &str, got: &Output, want: &Array, tol: f64) -> Result<f64, String> {
    let t = match got {
        Output::Tensor(t) => t.clone(),
        Output::Int(x) => {
            OutputTensor { dtype: DType::Long, sizes: vec![], data: x.to_le_bytes().to_vec() }
        }
        Output::Double(x) => {
            OutputTensor { dtype: DType::Double, sizes: vec![], data: x.to_le_bytes().to_vec() }
        }
        Output::Bool(x) => OutputTensor { dtype: DType::Bool, sizes: vec![], data: vec![*x as u8] },
        other => return Err(format!("{what}: unexpected output {other:?}")),
    };
    if t.dtype != want.dtype || t.sizes != want.sizes {
        return Err(format!(
            "{what}: got {} {:?}, ExecuTorch gave {} {:?}",
            t.dtype.name(),
            t.sizes,
            want.dtype.name(),
            want.sizes
        ));
    }
    if t.dtype.is_float() {
        let (a, b) = (f64s(t.dtype, &t.data), f64s(want.dtype, &want.data));
        let mut max = 0f64;
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            if x.is_nan() && y.is_nan() {
                continue;
            }
            let d = if x == y { 0.0 } else { (x - y).abs() };
            if d.is_nan() || d > tol {
                return Err(format!("{what}: element {i}: kiln {x}, ExecuTorch {y}"));
            }
            max = max.max(d);
        }
        Ok(max)
    } else if t.data == want.data {
        Ok(0.0)
    } else {
        let i = t.data.iter().zip(&want.data).position(|(a, b)| a != b).unwrap_or(0);
        Err(format!("{what}: bytes differ from byte {i}"))
    }
}

/// Executes `method` once with every input a tensor of zeros of its declared shape.
pub fn run_on_zeros(method: &mut Method) {
    let zeros: Vec<(kiln_runtime::TensorMeta, Vec<u8>)> = method
        .inputs()
        .into_iter()
        .map(|m| match m {
            ValueMeta::Tensor(t) => {
                let n = t.sizes.iter().product::<usize>() * t.dtype.size();
                (t, vec![0u8; n])
            }
            other => panic!("the method takes tensors, not {other:?}"),
        })
        .collect();
    let inputs: Vec<Input<'_>> = zeros
        .iter()
        .map(|(t, data)| Input::Tensor(TensorInput { dtype: t.dtype, sizes: &t.sizes, data }))
        .collect();
    method.execute(&inputs).unwrap();
}
