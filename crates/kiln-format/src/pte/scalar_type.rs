//! ExecuTorch's element types, with ExecuTorch's numbering (`schema/scalar_type.fbs` and the
//! C++ `ScalarType` enum, which also defines the complex and bit types 8..10 and 18..21).

use serde::Serialize;

/// An ExecuTorch scalar (element) type. The discriminant is ExecuTorch's number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[repr(i8)]
pub enum ScalarType {
    /// `u8`.
    Byte = 0,
    /// `i8`.
    Char = 1,
    /// `i16`.
    Short = 2,
    /// `i32`.
    Int = 3,
    /// `i64`.
    Long = 4,
    /// IEEE half precision.
    Half = 5,
    /// `f32`.
    Float = 6,
    /// `f64`.
    Double = 7,
    /// Complex of two halves (runtime enum only).
    ComplexHalf = 8,
    /// Complex of two `f32` (runtime enum only).
    ComplexFloat = 9,
    /// Complex of two `f64` (runtime enum only).
    ComplexDouble = 10,
    /// One byte per boolean.
    Bool = 11,
    /// Quantized `i8`.
    QInt8 = 12,
    /// Quantized `u8`.
    QUInt8 = 13,
    /// Quantized `i32`.
    QInt32 = 14,
    /// bfloat16.
    BFloat16 = 15,
    /// Two 4-bit unsigned values per byte.
    QUInt4x2 = 16,
    /// Four 2-bit unsigned values per byte.
    QUInt2x4 = 17,
    /// Eight 1-bit values per byte (runtime enum only).
    Bits1x8 = 18,
    /// Four 2-bit values per byte (runtime enum only).
    Bits2x4 = 19,
    /// Two 4-bit values per byte (runtime enum only).
    Bits4x2 = 20,
    /// 8 opaque bits (runtime enum only).
    Bits8 = 21,
    /// 16 opaque bits.
    Bits16 = 22,
    /// float8 e5m2.
    Float8E5M2 = 23,
    /// float8 e4m3fn.
    Float8E4M3FN = 24,
    /// float8 e5m2fnuz.
    Float8E5M2FNUZ = 25,
    /// float8 e4m3fnuz.
    Float8E4M3FNUZ = 26,
    /// `u16`.
    UInt16 = 27,
    /// `u32`.
    UInt32 = 28,
    /// `u64`.
    UInt64 = 29,
}

/// Every scalar type, in numbering order.
const ALL: [ScalarType; 30] = [
    ScalarType::Byte,
    ScalarType::Char,
    ScalarType::Short,
    ScalarType::Int,
    ScalarType::Long,
    ScalarType::Half,
    ScalarType::Float,
    ScalarType::Double,
    ScalarType::ComplexHalf,
    ScalarType::ComplexFloat,
    ScalarType::ComplexDouble,
    ScalarType::Bool,
    ScalarType::QInt8,
    ScalarType::QUInt8,
    ScalarType::QInt32,
    ScalarType::BFloat16,
    ScalarType::QUInt4x2,
    ScalarType::QUInt2x4,
    ScalarType::Bits1x8,
    ScalarType::Bits2x4,
    ScalarType::Bits4x2,
    ScalarType::Bits8,
    ScalarType::Bits16,
    ScalarType::Float8E5M2,
    ScalarType::Float8E4M3FN,
    ScalarType::Float8E5M2FNUZ,
    ScalarType::Float8E4M3FNUZ,
    ScalarType::UInt16,
    ScalarType::UInt32,
    ScalarType::UInt64,
];

impl ScalarType {
    /// The type with ExecuTorch number `value`, or `None` for a number ExecuTorch's `isValid`
    /// rejects (anything outside 0..=29).
    pub fn from_i8(value: i8) -> Option<ScalarType> {
        usize::try_from(value).ok().and_then(|i| ALL.get(i).copied())
    }

    /// ExecuTorch's number for this type.
    pub fn to_i8(self) -> i8 {
        self as i8
    }

    /// Bytes per element (`elementSize` in ExecuTorch; sub-byte packed types count one byte).
    pub fn element_size(self) -> usize {
        use ScalarType::*;
        match self {
            Byte | Char | Bool | QInt8 | QUInt8 | QUInt4x2 | QUInt2x4 | Bits1x8 | Bits2x4
            | Bits4x2 | Bits8 | Float8E5M2 | Float8E4M3FN | Float8E5M2FNUZ | Float8E4M3FNUZ => 1,
            Short | Half | BFloat16 | Bits16 | UInt16 => 2,
            Int | Float | QInt32 | UInt32 | ComplexHalf => 4,
            Long | Double | UInt64 | ComplexFloat => 8,
            ComplexDouble => 16,
        }
    }

    /// ExecuTorch's name in lower case (`float`, `long`, `half`, `bfloat16`, `bool`, ...).
    pub fn name(self) -> &'static str {
        use ScalarType::*;
        match self {
            Byte => "byte",
            Char => "char",
            Short => "short",
            Int => "int",
            Long => "long",
            Half => "half",
            Float => "float",
            Double => "double",
            ComplexHalf => "complexhalf",
            ComplexFloat => "complexfloat",
            ComplexDouble => "complexdouble",
            Bool => "bool",
            QInt8 => "qint8",
            QUInt8 => "quint8",
            QInt32 => "qint32",
            BFloat16 => "bfloat16",
            QUInt4x2 => "quint4x2",
            QUInt2x4 => "quint2x4",
            Bits1x8 => "bits1x8",
            Bits2x4 => "bits2x4",
            Bits4x2 => "bits4x2",
            Bits8 => "bits8",
            Bits16 => "bits16",
            Float8E5M2 => "float8e5m2",
            Float8E4M3FN => "float8e4m3fn",
            Float8E5M2FNUZ => "float8e5m2fnuz",
            Float8E4M3FNUZ => "float8e4m3fnuz",
            UInt16 => "uint16",
            UInt32 => "uint32",
            UInt64 => "uint64",
        }
    }
}

impl std::fmt::Display for ScalarType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_matches_executorch() {
        for (i, t) in ALL.iter().enumerate() {
            assert_eq!(t.to_i8() as usize, i);
            assert_eq!(ScalarType::from_i8(i as i8), Some(*t));
        }
        assert_eq!(ScalarType::from_i8(30), None);
        assert_eq!(ScalarType::from_i8(-1), None);
        // Values from the schema's enum (kiln-schema is generated from scalar_type.fbs).
        use kiln_schema::program::executorch_flatbuffer::ScalarType as Fb;
        for fb in Fb::ENUM_VALUES {
            let t = ScalarType::from_i8(fb.0).unwrap();
            assert_eq!(t.name(), fb.variant_name().unwrap().to_ascii_lowercase());
        }
        assert_eq!(ScalarType::Float.element_size(), 4);
        assert_eq!(ScalarType::BFloat16.element_size(), 2);
        assert_eq!(ScalarType::Long.name(), "long");
    }
}
