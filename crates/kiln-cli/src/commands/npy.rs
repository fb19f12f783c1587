//! The text form of `kiln inspect` and the `kiln dump` arm for NumPy `.npy` arrays (what
//! `kiln run --out-dir`, `kiln params extract` and `kiln edgetpu relayout` write).

use std::process::ExitCode;

use anyhow::{Context, Result};
use kiln_format::npy::Npy;
use kiln_kernels::DType;
use serde_json::{json, Value};

use crate::input::Input;
use crate::output::{human_bytes, print_json};

fn parse(input: &Input) -> Result<Npy<'_>> {
    Npy::parse(input.bytes()).with_context(|| input.file.path().display().to_string())
}

/// `kiln inspect` arm, as text: the header on one line.
pub fn print(input: &Input) -> Result<ExitCode> {
    let npy = parse(input)?;
    outln!(
        "npy array: dtype {}, shape {:?}, {} order, {} elements, {} of data at offset {}",
        npy.descr,
        npy.shape,
        if npy.fortran_order { "Fortran" } else { "C" },
        npy.shape.iter().product::<u64>(),
        human_bytes(npy.data.len() as u64),
        npy.data_offset
    );
    Ok(ExitCode::SUCCESS)
}

/// `kiln dump` arm: the header and, for the numeric dtypes, every value in file order.
pub fn dump(input: &Input) -> Result<ExitCode> {
    let npy = parse(input)?;
    let mut doc = kiln_format::npy::summary::summarize(&npy);
    if let Some(values) = values(&npy.descr, npy.data) {
        doc["values"] = Value::Array(values);
    }
    print_json(&doc)?;
    Ok(ExitCode::SUCCESS)
}

/// The values of little-endian data of a NumPy dtype kiln has a type for (`None` for the
/// others), exactly: integers as integers, booleans as booleans; JSON has no NaN or
/// infinities, so those are written as strings.
fn values(descr: &str, data: &[u8]) -> Option<Vec<Value>> {
    fn each<const N: usize>(data: &[u8], f: impl Fn([u8; N]) -> Value) -> Vec<Value> {
        data.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect()
    }
    let float = |x: f64| if x.is_finite() { json!(x) } else { json!(x.to_string()) };
    Some(match DType::from_npy_descr(descr, None)? {
        DType::Float => each::<4>(data, |b| float(f64::from(f32::from_le_bytes(b)))),
        DType::Double => each::<8>(data, |b| float(f64::from_le_bytes(b))),
        DType::Half => each::<2>(data, |b| float(half::f16::from_le_bytes(b).to_f64())),
        DType::Char => each::<1>(data, |b| json!(i8::from_le_bytes(b))),
        DType::Byte => each::<1>(data, |b| json!(b[0])),
        DType::Bool => each::<1>(data, |b| json!(b[0] != 0)),
        DType::Short => each::<2>(data, |b| json!(i16::from_le_bytes(b))),
        DType::UInt16 => each::<2>(data, |b| json!(u16::from_le_bytes(b))),
        DType::Int => each::<4>(data, |b| json!(i32::from_le_bytes(b))),
        DType::UInt32 => each::<4>(data, |b| json!(u32::from_le_bytes(b))),
        DType::Long => each::<8>(data, |b| json!(i64::from_le_bytes(b))),
        DType::UInt64 => each::<8>(data, |b| json!(u64::from_le_bytes(b))),
        _ => return None,
    })
}
