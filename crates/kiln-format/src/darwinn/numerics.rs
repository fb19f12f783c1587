//! Numerics of layer data: the signed-type transform and dequantization with a layer's
//! `NumericsConstants`.
//!
//! libedgetpu never dequantizes; it only exposes `zero_point` and `dequantization_factor`.
//! In real files the zero point of a signed layer is stored in the unsigned device domain
//! (TFLite int8 zero point + 128, int16 + 32768), so on raw device bytes the one consistent
//! formula is `real = (raw_unsigned - zero_point) * dequantization_factor`.

use super::data_type_size;
use super::schema::{DataType, Layer};
use crate::error::{Error, Result};

const FORMAT: &str = "darwinn.numerics";

/// True for the types whose host data is two's complement while the device's is offset by
/// half the range (libedgetpu `SignedDataType`: only SIGNED_FIXED_POINT8 and 16; it notes that
/// SIGNED_FIXED_POINT32 returning false "looks like a bug").
pub fn is_signed_transformed(t: DataType) -> bool {
    matches!(t, DataType::SIGNED_FIXED_POINT8 | DataType::SIGNED_FIXED_POINT16)
}

/// libedgetpu `TransformSignedDataType`: XOR 0x80 into the last (most significant, data being
/// little-endian) byte of every element of dense data. A no-op for other types. The same
/// transform converts device data to host data and back.
pub fn transform_signed(data: &mut [u8], t: DataType) -> Result<()> {
    if !is_signed_transformed(t) {
        return Ok(());
    }
    let dts = data_type_size(t).unwrap_or(1);
    if !data.len().is_multiple_of(dts) {
        return Err(Error::invalid(
            FORMAT,
            "data",
            None,
            format!("{} bytes is not a whole number of {dts}-byte elements", data.len()),
        ));
    }
    for element in data.chunks_exact_mut(dts) {
        if let Some(msb) = element.last_mut() {
            *msb ^= 0x80;
        }
    }
    Ok(())
}

/// Dequantizes dense device data (before the signed transform) of `layer` to `f32`:
/// fixed-point types give `(raw_unsigned - zero_point) * dequantization_factor`,
/// SIGNED_FIXED_POINT32 gives `raw * dequantization_factor`, and the float types convert.
pub fn dequantize(layer: &Layer<'_>, data: &[u8]) -> Result<Vec<f32>> {
    let t = layer.data_type();
    let dts = data_type_size(t).ok_or_else(|| {
        Error::invalid(FORMAT, "data_type", None, format!("unknown data type {}", t.0))
    })?;
    if !data.len().is_multiple_of(dts) {
        return Err(Error::invalid(
            FORMAT,
            "data",
            None,
            format!("{} bytes is not a whole number of {dts}-byte elements", data.len()),
        ));
    }
    let numerics = layer.numerics();
    let zp = f64::from(numerics.map_or(0, |n| n.zero_point()));
    let scale = f64::from(numerics.map_or(0.0, |n| n.dequantization_factor()));
    let affine = |q: f64| ((q - zp) * scale) as f32;
    let out = data
        .chunks_exact(dts)
        .map(|c| {
            let b = |i: usize| c.get(i).copied().unwrap_or(0);
            match t {
                DataType::FIXED_POINT8 | DataType::SIGNED_FIXED_POINT8 => affine(f64::from(b(0))),
                DataType::FIXED_POINT16 | DataType::SIGNED_FIXED_POINT16 => {
                    affine(f64::from(u16::from_le_bytes([b(0), b(1)])))
                }
                DataType::SIGNED_FIXED_POINT32 => {
                    (f64::from(i32::from_le_bytes([b(0), b(1), b(2), b(3)])) * scale) as f32
                }
                DataType::HALF => half::f16::from_le_bytes([b(0), b(1)]).to_f32(),
                DataType::BFLOAT => half::bf16::from_le_bytes([b(0), b(1)]).to_f32(),
                _ => f32::from_le_bytes([b(0), b(1), b(2), b(3)]),
            }
        })
        .collect();
    Ok(out)
}
