//! Float32 activations (`sigmoid`, `tanh`, `gelu`, ...) as straight-line arithmetic the compiler vectorizes, and loops
//! over slices built for AVX-512 and AVX2 (chosen at run time) with a portable fallback.
//!
//! The platform's `expf` and `tanhf` are scalar calls, about 10 ns an element here: an LSTM
//! cell's five activations of 24 lanes cost more than its matrix product. These functions
//! compute the same values in a few vector instructions per 16 lanes.
//!
//! # Numerics
//! - `exp` (internal): Cody-Waite reduction `x = n ln2 + r` (ln2 split in two parts, the first
//!   exact in 9 bits), Cephes' degree-6 polynomial for `e^r`, scaled by `2^n` built in the
//!   exponent bits; about 1 ulp.
//! - `sigmoid(x) = 1 / (1 + e^-x)`; `e^-x` overflows to infinity past `88.38`, so
//!   `sigmoid(-inf) = 0` and `sigmoid(+inf) = 1`, as `1 / (1 + expf(-x))` gives.
//! - `tanh`: Cephes' odd polynomial below `|x| = 0.625`, `1 - 2 / (e^{2|x|} + 1)` above, the
//!   sign of `x` copied on (so `tanh(-0) = -0`, `tanh(±inf) = ±1`).
//! - `erf`, `gelu`, `silu`, `hardswish`: PyTorch's float formulas over these (`erf`'s
//!   absolute error below `6e-7`); the registry's float32 `sigmoid`, `tanh` and `gelu`
//!   kernels and the packed kernels' fused epilogues both use them, so fusing one of those
//!   changes no bits.
//! - NaN in gives NaN out. Tested against `f64` over every float32 in `[-20, 20]` at a fine
//!   step and the special values: within 1 ulp (`tanh`) and 2 ulp (`sigmoid`).
//!
//! Only plain `+ - * /`, comparisons and bit casts are used, never a fused multiply-add, so
//! every build of the loops (AVX-512, AVX2, portable) gives the same bits.
#![allow(unsafe_code)]

/// Reduction to `2^n e^r`: `ln 2 = LN2_HI + LN2_LO`, `LN2_HI` exact in 9 bits so `n * LN2_HI`
/// is exact.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// `1.5 * 2^23`: adding it rounds a float below `2^22` in magnitude to an integer held in the
/// low mantissa bits.
const ROUND: f32 = 12_582_912.0;
/// The range where `2^n` is a normal float (`n` in `-126..=127`).
const EXP_LO: f32 = -87.336_55;
const EXP_HI: f32 = 88.376_26;
/// Below this `|x|`, `tanh` uses its polynomial.
const TANH_POLY: f32 = 0.625;

/// `e^x` for `x` in `[EXP_LO, EXP_HI]` (NaN in, NaN out).
#[inline(always)]
fn exp_in_range(x: f32) -> f32 {
    let t = x.mul_add(std::f32::consts::LOG2_E, ROUND);
    let n = t - ROUND;
    let r = n.mul_add(-LN2_LO, n.mul_add(-LN2_HI, x));
    let p = 1.987_569_1e-4f32.mul_add(r, 1.398_199_9e-3);
    let p = p.mul_add(r, 8.333_452e-3);
    let p = p.mul_add(r, 4.166_579_6e-2);
    let p = p.mul_add(r, 1.666_666_5e-1);
    let p = p.mul_add(r, 0.5);
    let e = p.mul_add(r * r, r) + 1.0;
    // `t`'s low mantissa bits hold n; 2^n has exponent field n + 127.
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(n_bits.wrapping_add(127) << 23);
    e * scale
}

/// `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    let z = -x;
    let clamped = z.clamp(EXP_LO, EXP_HI);
    let e = if z > EXP_HI { f32::INFINITY } else { exp_in_range(clamped) };
    1.0 / (1.0 + e)
}

/// `tanh(x)`.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let s = a * a;
    let poly = (((-5.704_988_7e-3 * s + 2.063_909e-2) * s - 5.373_971_6e-2) * s + 1.333_144_2e-1)
        * s
        - 3.333_328e-1;
    let small = a + a * s * poly;
    // Past 2|x| = EXP_HI the quotient is below half an ulp of 1; NaN compares false and stays.
    let two_a = 2.0 * a;
    let e = exp_in_range(if two_a > EXP_HI { EXP_HI } else { two_a });
    let large = 1.0 - 2.0 / (e + 1.0);
    let y = if a < TANH_POLY { small } else { large };
    y.copysign(x)
}

/// `e^x` over every float: 0 below the normal range (where `expf` gives subnormals), infinity
/// above it, NaN for NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let e = exp_in_range(x.clamp(EXP_LO, EXP_HI));
    if x < EXP_LO {
        0.0
    } else if x > EXP_HI {
        f32::INFINITY
    } else {
        e
    }
}

/// `erf(x)` by the formula of PyTorch's vectorized CPU `erf` (Abramowitz and Stegun 7.1.26:
/// `sign(x) * (1 - t * r(t) * exp(-x * x))` with `t = 1 / (1 + 0.3275911 * |x|)`), absolute
/// error below `6e-7` in `f32` arithmetic (1.5e-7 for the formula itself).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (0.327_591_1 * a + 1.0);
    let r =
        (((1.061_405_4 * t - 1.453_152) * t + 1.421_413_8) * t - 0.284_496_72) * t + 0.254_829_6;
    let e = 1.0 - r * t * exp(-(a * a));
    e.copysign(x)
}

/// `0.5 * x * (1 + erf(x / sqrt(2)))`: `gelu` with `approximate="none"`, as PyTorch's
/// vectorized float kernel computes it.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `sqrt(2 / pi)`.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`: `gelu` with
/// `approximate="tanh"`.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
}

/// `x * sigmoid(x)`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// `x * min(max(x + 3, 0), 6) / 6`, NaN propagating, as PyTorch's vectorized kernel computes
/// it: the division is a product with the nearest float to `1/6`.
#[inline(always)]
pub fn hardswish(x: f32) -> f32 {
    x * (x + 3.0).clamp(0.0, 6.0) * (1.0 / 6.0)
}

/// `x[i] = f(x[i])` for one of this module's functions, in the widest vectors the CPU has.
macro_rules! in_place {
    ($(#[$doc:meta])* $name:ident, $f:path, $avx512:ident, $avx2:ident) => {
        $(#[$doc])*
        pub fn $name(xs: &mut [f32]) {
            #[cfg(target_arch = "x86_64")]
            {
                if super::cpu::has_avx512() {
                    // SAFETY: the CPU has AVX-512F, the only feature the function is built for.
                    return unsafe { $avx512(xs) };
                }
                if super::cpu::has_avx2() {
                    // SAFETY: the CPU has AVX2 and FMA, the features the function is built for.
                    return unsafe { $avx2(xs) };
                }
            }
            xs.iter_mut().for_each(|x| *x = $f(*x));
        }

        /// The loop built for AVX-512.
        ///
        /// # Safety
        /// The CPU has AVX-512F.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx512f")]
        unsafe fn $avx512(xs: &mut [f32]) {
            xs.iter_mut().for_each(|x| *x = $f(*x));
        }

        /// The loop built for AVX2.
        ///
        /// # Safety
        /// The CPU has AVX2 and FMA.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn $avx2(xs: &mut [f32]) {
            xs.iter_mut().for_each(|x| *x = $f(*x));
        }
    };
}

in_place!(
    /// `x[i] = exp(x[i])`.
    exp_in_place,
    exp,
    exp_avx512,
    exp_avx2
);
in_place!(
    /// `x[i] = sigmoid(x[i])`.
    sigmoid_in_place,
    sigmoid,
    sigmoid_avx512,
    sigmoid_avx2
);
in_place!(
    /// `x[i] = tanh(x[i])`.
    tanh_in_place,
    tanh,
    tanh_avx512,
    tanh_avx2
);
in_place!(
    /// `x[i] = gelu(x[i])`.
    gelu_in_place,
    gelu,
    gelu_avx512,
    gelu_avx2
);
in_place!(
    /// `x[i] = gelu_tanh(x[i])`.
    gelu_tanh_in_place,
    gelu_tanh,
    gelu_tanh_avx512,
    gelu_tanh_avx2
);
in_place!(
    /// `x[i] = silu(x[i])`.
    silu_in_place,
    silu,
    silu_avx512,
    silu_avx2
);
in_place!(
    /// `x[i] = hardswish(x[i])`.
    hardswish_in_place,
    hardswish,
    hardswish_avx512,
    hardswish_avx2
);

/// `dst[i] = sigmoid(src[i])`.
///
/// # Panics
/// If `src` and `dst` differ in length.
pub fn sigmoid_slice(src: &[f32], dst: &mut [f32]) {
    dst.copy_from_slice(src);
    sigmoid_in_place(dst);
}

/// `dst[i] = tanh(src[i])`.
///
/// # Panics
/// If `src` and `dst` differ in length.
pub fn tanh_slice(src: &[f32], dst: &mut [f32]) {
    dst.copy_from_slice(src);
    tanh_in_place(dst);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in representable floats (sign-magnitude order), NaNs equal to each other.
    fn ulps(a: f32, b: f32) -> u32 {
        if a.is_nan() || b.is_nan() {
            return if a.is_nan() && b.is_nan() { 0 } else { u32::MAX };
        }
        let key = |x: f32| {
            let b = x.to_bits() as i64;
            if b < 0x8000_0000 {
                b
            } else {
                0x8000_0000 - b
            }
        };
        (key(a) - key(b)).unsigned_abs().min(u64::from(u32::MAX)) as u32
    }

    fn sigmoid_f64(x: f32) -> f32 {
        (1.0 / (1.0 + (-f64::from(x)).exp())) as f32
    }

    fn tanh_f64(x: f32) -> f32 {
        f64::from(x).tanh() as f32
    }

    /// Inputs: a fine sweep of `[-20, 20]` (every 61st float near 0, evenly over the rest),
    /// the points around the branch and range edges, and the special values.
    fn inputs() -> Vec<f32> {
        let mut xs = Vec::new();
        let mut x = 1e-30f32;
        while x < 20.0 {
            xs.extend([x, -x]);
            x = f32::from_bits(x.to_bits() + 61);
        }
        for edge in [TANH_POLY, EXP_HI / 2.0, EXP_HI, -EXP_LO, 9.0, 44.0, 87.0, 88.7, 89.0] {
            for k in -64i32..=64 {
                let e = f32::from_bits((edge.to_bits() as i32 + k) as u32);
                xs.extend([e, -e]);
            }
        }
        xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::MIN_POSITIVE, 1e3, -1e3]);
        xs
    }

    #[test]
    fn sigmoid_is_within_2_ulp_of_f64() {
        let mut worst = (0, 0.0f32);
        for x in inputs() {
            let u = ulps(sigmoid(x), sigmoid_f64(x));
            // Below 1e-37 the f64 result is subnormal in f32: absolute error is what counts.
            let tiny = sigmoid_f64(x).abs() < 1e-37 && sigmoid(x).abs() < 1e-37;
            if u > worst.0 && !tiny {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 2, "sigmoid({:e}) is {} ulp off", worst.1, worst.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(0.0), 0.5);
        assert!(sigmoid(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_is_within_1_ulp_of_f64() {
        let mut worst = (0, 0.0f32);
        for x in inputs() {
            let u = ulps(tanh(x), tanh_f64(x));
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 1, "tanh({:e}) is {} ulp off", worst.1, worst.0);
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert!(tanh(f32::NAN).is_nan());
    }

    /// `erf` stays within 6e-7 of the f64 `erf` over [-6, 6] (every 1e-4) and at the
    /// special values.
    #[test]
    fn erf_is_within_6e7_of_f64_erf() {
        let mut worst = 0f64;
        for i in -60_000..=60_000 {
            let x = i as f32 * 1e-4;
            let d = (f64::from(erf(x)) - crate::compute::special::erf(f64::from(x))).abs();
            worst = worst.max(d);
        }
        assert!(worst < 6e-7, "max error {worst:e}");
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert!(erf(f32::NAN).is_nan());
    }

    /// The vector builds give the bits of the scalar function on every input (all lengths
    /// around a vector's width, so the remainder loops run too).
    #[test]
    fn vector_loops_equal_the_scalar_functions() {
        let xs = inputs();
        type Pair = (fn(&mut [f32]), fn(f32) -> f32, &'static str);
        let pairs: [Pair; 7] = [
            (exp_in_place, exp, "exp"),
            (sigmoid_in_place, sigmoid, "sigmoid"),
            (tanh_in_place, tanh, "tanh"),
            (gelu_in_place, gelu, "gelu"),
            (gelu_tanh_in_place, gelu_tanh, "gelu_tanh"),
            (silu_in_place, silu, "silu"),
            (hardswish_in_place, hardswish, "hardswish"),
        ];
        for (vector, scalar, name) in pairs {
            for len in [0, 1, 7, 8, 15, 16, 17, 33, xs.len()] {
                let mut got = xs[..len].to_vec();
                vector(&mut got);
                for (&g, &x) in got.iter().zip(&xs) {
                    let want = scalar(x);
                    let same = g.to_bits() == want.to_bits() || g.is_nan() && want.is_nan();
                    assert!(same, "{name}({x:e}): {g:e} vs {want:e}");
                }
            }
        }
        let mut dst = vec![0.0; 5];
        sigmoid_slice(&xs[..5], &mut dst);
        assert_eq!(dst, xs[..5].iter().map(|&x| sigmoid(x)).collect::<Vec<_>>());
    }

    /// `gelu`, `silu` and `hardswish` against their `f64` definitions on finite inputs.
    #[test]
    fn gelu_silu_and_hardswish_are_close_to_f64() {
        for x in inputs().into_iter().filter(|x| x.is_finite()) {
            let v = f64::from(x);
            let gelu_ref = 0.5 * v * (1.0 + crate::compute::special::erf(v / 2f64.sqrt()));
            let tol = 1e-6 * (1.0 + v.abs());
            assert!((f64::from(gelu(x)) - gelu_ref).abs() <= tol, "gelu({x:e})");
            let silu_ref = v / (1.0 + (-v).exp());
            let err = (f64::from(silu(x)) - silu_ref).abs();
            // Past x = -87 the exact value is below 1e-35 and the result flushes to zero.
            assert!(err <= 3e-7 * silu_ref.abs() + 1e-35, "silu({x:e})");
            let hs_ref = v * (v + 3.0).clamp(0.0, 6.0) / 6.0;
            let err = (f64::from(hardswish(x)) - hs_ref).abs();
            assert!(err <= 2.4e-7 * hs_ref.abs(), "hardswish({x:e})");
        }
    }
}
