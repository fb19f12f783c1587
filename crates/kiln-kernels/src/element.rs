//! Element types kernels compute with, and their arithmetic ("calc") types.
//!
//! Every computable [`DType`] has one Rust element type implementing [`Element`]. Arithmetic is
//! done in the element's [`Element::Calc`] type, as PyTorch does with its "opmath" type: `f32`
//! for half, bfloat16 and float, `f64` for double, `i64` (wrapping) for the integer types and
//! bool. Results are converted back with [`Element::from_calc`].

use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};
use std::fmt::Debug;

use crate::dtype::DType;

/// A `bool` element as stored in tensors: one byte, 0 for false and anything else for true.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Pod, Zeroable)]
#[repr(transparent)]
pub struct Bool(pub u8);

/// An arithmetic type elements are computed in: `f32`, `f64` or `i64`.
pub trait Calc: Pod + PartialOrd + Debug + Send + Sync {
    /// Whether this is a floating type.
    const FLOAT: bool;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// From an `f64` (integers truncate toward zero).
    fn of_f64(v: f64) -> Self;
    /// From an `i64` (floats round to nearest).
    fn of_i64(v: i64) -> Self;
    /// To `f64`.
    fn as_f64(self) -> f64;
    /// To `i64` (floats truncate toward zero, saturating).
    fn as_i64(self) -> i64;
    /// Sum (wrapping for integers).
    fn add(self, o: Self) -> Self;
    /// Difference (wrapping for integers).
    fn sub(self, o: Self) -> Self;
    /// Product (wrapping for integers).
    fn mul(self, o: Self) -> Self;
    /// Whether the value is NaN (never for integers).
    fn is_nan(self) -> bool;
}

/// Implements [`Calc`] for a floating type.
macro_rules! float_calc {
    ($t:ty) => {
        impl Calc for $t {
            const FLOAT: bool = true;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn of_f64(v: f64) -> Self {
                v as $t
            }
            fn of_i64(v: i64) -> Self {
                v as $t
            }
            fn as_f64(self) -> f64 {
                self as f64
            }
            fn as_i64(self) -> i64 {
                self as i64
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
        }
    };
}

float_calc!(f32);
float_calc!(f64);

impl Calc for i64 {
    const FLOAT: bool = false;
    const ZERO: Self = 0;
    const ONE: Self = 1;
    fn of_f64(v: f64) -> Self {
        v as i64
    }
    fn of_i64(v: i64) -> Self {
        v
    }
    fn as_f64(self) -> f64 {
        self as f64
    }
    fn as_i64(self) -> i64 {
        self
    }
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    fn sub(self, o: Self) -> Self {
        self.wrapping_sub(o)
    }
    fn mul(self, o: Self) -> Self {
        self.wrapping_mul(o)
    }
    fn is_nan(self) -> bool {
        false
    }
}

/// A tensor element type.
pub trait Element: Pod + Default + PartialEq + Debug + Send + Sync + 'static {
    /// The dtype this element type stores.
    const DTYPE: DType;
    /// The arithmetic type.
    type Calc: Calc;
    /// Widen to the arithmetic type.
    fn to_calc(self) -> Self::Calc;
    /// Narrow from the arithmetic type (wrapping for integers, `!= 0` for bool, rounding to
    /// nearest for floats).
    fn from_calc(v: Self::Calc) -> Self;
    /// As `f64` (bool is 0 or 1).
    fn to_f64(self) -> f64;
    /// As `i64` (floats truncate toward zero, saturating).
    fn to_i64(self) -> i64;
    /// From `f64`: floats round, integers truncate toward zero then wrap (the x86 behaviour of
    /// PyTorch's `static_cast`), bool is `v != 0`.
    fn from_f64(v: f64) -> Self;
    /// From `i64`: integers wrap, floats round, bool is `v != 0`.
    fn from_i64(v: i64) -> Self;
    /// Truthiness (`!= 0`; NaN is true).
    fn is_true(self) -> bool;
    /// PyTorch's `static_cast` from another element type.
    #[inline]
    fn cast_from<S: Element>(s: S) -> Self {
        if S::DTYPE.is_float() {
            Self::from_f64(s.to_f64())
        } else {
            Self::from_i64(s.to_i64())
        }
    }
}

macro_rules! int_element {
    ($t:ty, $d:ident) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            type Calc = i64;
            #[inline]
            fn to_calc(self) -> i64 {
                self as i64
            }
            #[inline]
            fn from_calc(v: i64) -> Self {
                v as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                (v as i64) as $t
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            #[inline]
            fn is_true(self) -> bool {
                self != 0
            }
        }
    };
}

int_element!(u8, Byte);
int_element!(i8, Char);
int_element!(i16, Short);
int_element!(i32, Int);
int_element!(i64, Long);

impl Element for Bool {
    const DTYPE: DType = DType::Bool;
    type Calc = i64;
    #[inline]
    fn to_calc(self) -> i64 {
        (self.0 != 0) as i64
    }
    #[inline]
    fn from_calc(v: i64) -> Self {
        Bool((v != 0) as u8)
    }
    #[inline]
    fn to_f64(self) -> f64 {
        (self.0 != 0) as u8 as f64
    }
    #[inline]
    fn to_i64(self) -> i64 {
        (self.0 != 0) as i64
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        Bool((v != 0.0) as u8)
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        Bool((v != 0) as u8)
    }
    #[inline]
    fn is_true(self) -> bool {
        self.0 != 0
    }
}

macro_rules! float_element {
    ($t:ty, $d:ident, $calc:ty, $to:expr, $from:expr, $from64:expr, $to64:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            type Calc = $calc;
            #[inline]
            fn to_calc(self) -> $calc {
                $to(self)
            }
            #[inline]
            fn from_calc(v: $calc) -> Self {
                $from(v)
            }
            #[inline]
            fn to_f64(self) -> f64 {
                $to64(self)
            }
            #[inline]
            fn to_i64(self) -> i64 {
                $to64(self) as i64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                $from64(v)
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                $from64(v as f64)
            }
            #[inline]
            fn is_true(self) -> bool {
                $to64(self) != 0.0
            }
        }
    };
}

float_element!(f32, Float, f32, |v| v, |v| v, |v: f64| v as f32, |v: f32| v as f64);
float_element!(f64, Double, f64, |v| v, |v| v, |v: f64| v, |v: f64| v);
float_element!(f16, Half, f32, |v: f16| v.to_f32(), f16::from_f32, f16::from_f64, |v: f16| v
    .to_f64());
float_element!(
    bf16,
    BFloat16,
    f32,
    |v: bf16| v.to_f32(),
    bf16::from_f32,
    bf16::from_f64,
    |v: bf16| v.to_f64()
);

/// The match behind the `dispatch_*` macros: one arm per listed `Variant = type`, each binding
/// `$T` to that type and evaluating `$body`; `$other` for every other dtype.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_types {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr; $($variant:ident = $ty:ty),+) => {
        match $dtype {
            $(
                $crate::DType::$variant => {
                    type $T = $ty;
                    $body
                }
            )+
            #[allow(unreachable_patterns)]
            _ => $other,
        }
    };
}

/// Calls `$body` with `$T` bound to the element type of `$dtype`, for every computable dtype;
/// evaluates `$other` for the rest.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_all {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::dispatch_types!($dtype, $T => $body, _ => $other;
            Byte = u8, Char = i8, Short = i16, Int = i32, Long = i64,
            Bool = $crate::element::Bool, Half = half::f16, BFloat16 = half::bf16,
            Float = f32, Double = f64)
    };
}

/// Like [`dispatch_all!`] for the floating dtypes only.
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::dispatch_types!($dtype, $T => $body, _ => $other;
            Half = half::f16, BFloat16 = half::bf16, Float = f32, Double = f64)
    };
}

/// Like [`dispatch_all!`] for the integer dtypes (not bool).
#[macro_export]
#[doc(hidden)]
macro_rules! dispatch_int {
    ($dtype:expr, $T:ident => $body:expr, _ => $other:expr) => {
        $crate::dispatch_types!($dtype, $T => $body, _ => $other;
            Byte = u8, Char = i8, Short = i16, Int = i32, Long = i64)
    };
}
