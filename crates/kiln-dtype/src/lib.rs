//! ExecuTorch's element types with ExecuTorch's numbering (`schema/scalar_type.fbs` and the
//! C++ `ScalarType` enum, which also defines the complex and bit types 8..10 and 18..21).
//!
//! One enum for both sides of kiln: `kiln-format` reads and writes the numbers in programs
//! and data files (as `kiln_format::pte::ScalarType`), `kiln-kernels` computes on the types
//! (as `kiln_kernels::DType`, with PyTorch's promotion rules). It is a crate of its own so
//! that neither of those two depends on the other.
#![forbid(unsafe_code)]

use std::fmt;

/// An element type, numbered as ExecuTorch numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[repr(i8)]
pub enum ScalarType {
    /// `uint8`.
    Byte = 0,
    /// `int8`.
    Char = 1,
    /// `int16`.
    Short = 2,
    /// `int32`.
    Int = 3,
    /// `int64`.
    Long = 4,
    /// `float16`.
    Half = 5,
    /// `float32`.
    Float = 6,
    /// `float64`.
    Double = 7,
    /// Two `float16`s.
    ComplexHalf = 8,
    /// Two `float32`s.
    ComplexFloat = 9,
    /// Two `float64`s.
    ComplexDouble = 10,
    /// One byte, 0 or 1.
    Bool = 11,
    /// Quantized `int8` (PyTorch's legacy quantized tensors).
    QInt8 = 12,
    /// Quantized `uint8`.
    QUInt8 = 13,
    /// Quantized `int32`.
    QInt32 = 14,
    /// `bfloat16`.
    BFloat16 = 15,
    /// Two quantized 4-bit values per byte.
    QUInt4x2 = 16,
    /// Four quantized 2-bit values per byte.
    QUInt2x4 = 17,
    /// Eight 1-bit values per byte.
    Bits1x8 = 18,
    /// Four 2-bit values per byte.
    Bits2x4 = 19,
    /// Two 4-bit values per byte.
    Bits4x2 = 20,
    /// Eight opaque bits.
    Bits8 = 21,
    /// Sixteen opaque bits.
    Bits16 = 22,
    /// 8-bit float, 5 exponent and 2 mantissa bits.
    Float8E5M2 = 23,
    /// 8-bit float, 4 exponent and 3 mantissa bits, finite.
    Float8E4M3FN = 24,
    /// `Float8E5M2` with one zero and no negative zero.
    Float8E5M2FNUZ = 25,
    /// `Float8E4M3FN` with one zero and no negative zero.
    Float8E4M3FNUZ = 26,
    /// `uint16`.
    UInt16 = 27,
    /// `uint32`.
    UInt32 = 28,
    /// `uint64`.
    UInt64 = 29,
}

impl ScalarType {
    /// Every type, in ExecuTorch's numbering (`ALL[n].code() == n`).
    pub const ALL: [ScalarType; 30] = [
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

    /// The type ExecuTorch numbers `code`, if any.
    pub fn from_code(code: i64) -> Option<ScalarType> {
        usize::try_from(code).ok().and_then(|i| Self::ALL.get(i).copied())
    }

    /// ExecuTorch's number.
    pub fn code(self) -> i8 {
        self as i8
    }

    /// Bytes per element (one for the packed sub-byte types, whose bytes hold several).
    pub fn size(self) -> usize {
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

    /// The name in ExecuTorch's schema, lower case (`float`, `long`): what kiln's file
    /// summaries print.
    pub fn schema_name(self) -> &'static str {
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

    /// PyTorch's name (`float32`, `int64`): what kiln prints for tensors, and
    /// [`fmt::Display`].
    pub fn name(self) -> &'static str {
        use ScalarType::*;
        match self {
            Byte => "uint8",
            Char => "int8",
            Short => "int16",
            Int => "int32",
            Long => "int64",
            Half => "float16",
            Float => "float32",
            Double => "float64",
            ComplexHalf => "complex32",
            ComplexFloat => "complex64",
            ComplexDouble => "complex128",
            Float8E5M2 => "float8_e5m2",
            Float8E4M3FN => "float8_e4m3fn",
            Float8E5M2FNUZ => "float8_e5m2fnuz",
            Float8E4M3FNUZ => "float8_e4m3fnuz",
            // The rest are named alike in both.
            other => other.schema_name(),
        }
    }

    /// The element type of a little-endian or byte-wide NumPy `descr` (`<f4`, `|u1`, ...),
    /// `None` for dtypes kiln has no type for; `want`, the type a reader expects, decides how
    /// 16-bit unsigned data is read (bfloat16 has no NumPy dtype: its bits travel as uint16).
    pub fn from_npy_descr(descr: &str, want: Option<ScalarType>) -> Option<ScalarType> {
        use ScalarType::*;
        Some(match descr.trim_start_matches(['<', '|', '=']) {
            "f4" => Float,
            "f8" => Double,
            "f2" => Half,
            "i8" => Long,
            "i4" => Int,
            "i2" => Short,
            "i1" => Char,
            "u1" => Byte,
            "b1" => Bool,
            "u2" if want == Some(BFloat16) => BFloat16,
            "u2" => UInt16,
            "u4" => UInt32,
            "u8" => UInt64,
            _ => return None,
        })
    }

    /// Whether kiln's tensors hold this type: all but the complex types and the bit types
    /// `Bits1x8` to `Bits8`, which no ExecuTorch kernel computes on.
    pub fn is_supported(self) -> bool {
        use ScalarType::*;
        !matches!(
            self,
            ComplexHalf | ComplexFloat | ComplexDouble | Bits1x8 | Bits2x4 | Bits4x2 | Bits8
        )
    }

    /// Whether this is a floating type kernels compute on (half, bfloat16, float, double).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            ScalarType::Half | ScalarType::Float | ScalarType::Double | ScalarType::BFloat16
        )
    }

    /// Whether this is an integer type kernels compute on (uint8, int8 to int64).
    pub fn is_int(self) -> bool {
        use ScalarType::*;
        matches!(self, Byte | Char | Short | Int | Long)
    }

    /// Whether kernels compute on this type: the floating and integer types and bool.
    pub fn is_computable(self) -> bool {
        self.is_float() || self.is_int() || self == ScalarType::Bool
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_stop_at_the_numbering() {
        for (i, t) in ScalarType::ALL.iter().enumerate() {
            assert_eq!(t.code() as usize, i);
            assert_eq!(ScalarType::from_code(i as i64), Some(*t));
        }
        assert_eq!(ScalarType::from_code(30), None);
        assert_eq!(ScalarType::from_code(-1), None);
    }

    #[test]
    fn names_tell_every_type_apart() {
        for names in [ScalarType::name, ScalarType::schema_name] {
            let mut seen: Vec<&str> = ScalarType::ALL.iter().map(|t| names(*t)).collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), ScalarType::ALL.len());
        }
    }
}
