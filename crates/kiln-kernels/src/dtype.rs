//! Element types with ExecuTorch's `ScalarType` numbering.

use std::fmt;

/// An element type, numbered like ExecuTorch's `ScalarType` (`scalar_type.fbs`).
///
/// Complex types and the sub-byte `BITS*` types are not represented: no kernel handles them and
/// [`DType::from_code`] rejects them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
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
    /// IEEE binary16.
    Half = 5,
    /// `float32`.
    Float = 6,
    /// `float64`.
    Double = 7,
    /// `bool`, one byte per element (0 or 1).
    Bool = 11,
    /// Quantized `int8` (storage only).
    QInt8 = 12,
    /// Quantized `uint8` (storage only).
    QUInt8 = 13,
    /// Quantized `int32` (storage only).
    QInt32 = 14,
    /// bfloat16.
    BFloat16 = 15,
    /// Two 4-bit unsigned values per byte (storage only).
    QUInt4x2 = 16,
    /// Four 2-bit unsigned values per byte (storage only).
    QUInt2x4 = 17,
    /// 16 raw bits (storage only).
    Bits16 = 22,
    /// float8 e5m2 (storage only).
    Float8E5M2 = 23,
    /// float8 e4m3fn (storage only).
    Float8E4M3FN = 24,
    /// float8 e5m2fnuz (storage only).
    Float8E5M2FNUZ = 25,
    /// float8 e4m3fnuz (storage only).
    Float8E4M3FNUZ = 26,
    /// `uint16`.
    UInt16 = 27,
    /// `uint32`.
    UInt32 = 28,
    /// `uint64`.
    UInt64 = 29,
}

impl DType {
    /// The dtype with ExecuTorch `ScalarType` number `code`, if kiln represents it.
    pub fn from_code(code: i64) -> Option<DType> {
        use DType::*;
        Some(match code {
            0 => Byte,
            1 => Char,
            2 => Short,
            3 => Int,
            4 => Long,
            5 => Half,
            6 => Float,
            7 => Double,
            11 => Bool,
            12 => QInt8,
            13 => QUInt8,
            14 => QInt32,
            15 => BFloat16,
            16 => QUInt4x2,
            17 => QUInt2x4,
            22 => Bits16,
            23 => Float8E5M2,
            24 => Float8E4M3FN,
            25 => Float8E5M2FNUZ,
            26 => Float8E4M3FNUZ,
            27 => UInt16,
            28 => UInt32,
            29 => UInt64,
            _ => return None,
        })
    }

    /// The ExecuTorch `ScalarType` number.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        use DType::*;
        match self {
            Byte | Char | Bool | QInt8 | QUInt8 | QUInt4x2 | QUInt2x4 | Float8E5M2
            | Float8E4M3FN | Float8E5M2FNUZ | Float8E4M3FNUZ => 1,
            Short | Half | BFloat16 | Bits16 | UInt16 => 2,
            Int | Float | QInt32 | UInt32 => 4,
            Long | Double | UInt64 => 8,
        }
    }

    /// The PyTorch name (`float32`, `int64`, ...).
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            Byte => "uint8",
            Char => "int8",
            Short => "int16",
            Int => "int32",
            Long => "int64",
            Half => "float16",
            Float => "float32",
            Double => "float64",
            Bool => "bool",
            QInt8 => "qint8",
            QUInt8 => "quint8",
            QInt32 => "qint32",
            BFloat16 => "bfloat16",
            QUInt4x2 => "quint4x2",
            QUInt2x4 => "quint2x4",
            Bits16 => "bits16",
            Float8E5M2 => "float8_e5m2",
            Float8E4M3FN => "float8_e4m3fn",
            Float8E5M2FNUZ => "float8_e5m2fnuz",
            Float8E4M3FNUZ => "float8_e4m3fnuz",
            UInt16 => "uint16",
            UInt32 => "uint32",
            UInt64 => "uint64",
        }
    }

    /// The element type of a little-endian or byte-wide NumPy `descr` (`<f4`, `|u1`, ...),
    /// `None` for dtypes kiln has no type for; `want`, the type a reader expects, decides how
    /// 16-bit unsigned data is read (bfloat16 has no NumPy dtype: its bits travel as uint16).
    pub fn from_npy_descr(descr: &str, want: Option<DType>) -> Option<DType> {
        use DType::*;
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

    /// Floating point (half, bfloat16, float, double).
    pub fn is_float(self) -> bool {
        matches!(self, DType::Half | DType::Float | DType::Double | DType::BFloat16)
    }

    /// Integer types kernels compute with (not bool, not quantized storage types).
    pub fn is_int(self) -> bool {
        matches!(self, DType::Byte | DType::Char | DType::Short | DType::Int | DType::Long)
    }

    /// Types arithmetic kernels handle: the integer types, bool and the float types.
    pub fn is_computable(self) -> bool {
        self.is_float() || self.is_int() || self == DType::Bool
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// PyTorch's `promoteTypes` for two tensor dtypes that kernels compute with.
///
/// Returns `None` for pairs PyTorch rejects or kiln does not compute with (quantized types,
/// unsigned 16/32/64-bit).
pub fn promote_types(a: DType, b: DType) -> Option<DType> {
    use DType::*;
    if !a.is_computable() || !b.is_computable() {
        return None;
    }
    if a == b {
        return Some(a);
    }
    // Floats.
    if a.is_float() || b.is_float() {
        if !(a.is_float() && b.is_float()) {
            return Some(if a.is_float() { a } else { b });
        }
        return Some(match (a, b) {
            (Double, _) | (_, Double) => Double,
            (Float, _) | (_, Float) => Float,
            // Half with BFloat16.
            _ => Float,
        });
    }
    if a == Bool {
        return Some(b);
    }
    if b == Bool {
        return Some(a);
    }
    // Integers: uint8 with a signed type gives the next signed type that holds both.
    let rank = |t: DType| match t {
        Char => 1,
        Short => 2,
        Int => 3,
        Long => 4,
        _ => 0,
    };
    Some(match (a, b) {
        (Byte, Char) | (Char, Byte) => Short,
        (Byte, o) | (o, Byte) => o,
        _ => {
            if rank(a) >= rank(b) {
                a
            } else {
                b
            }
        }
    })
}

/// Whether PyTorch's `canCast(from, to)` allows writing a `from` result into a `to` tensor:
/// no float into an integral type, no non-bool into bool.
pub fn can_cast(from: DType, to: DType) -> bool {
    !(from.is_float() && !to.is_float() || from != DType::Bool && to == DType::Bool)
}
