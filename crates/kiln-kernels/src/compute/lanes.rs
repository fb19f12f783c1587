//! One register of f32 lanes per instruction set, so a loop is written once over [`F32x`]
//! and compiled for each: [`Avx512`] (16 lanes, mask registers) and [`Avx2`] (8 lanes, lane
//! masks), both with fused multiply-add. The loop is an `#[inline(always)]` generic function
//! called from one `#[target_feature]` function per set, which the kernel's table picks once
//! ([`cpu`](super::cpu)); inlined there, every method below becomes its one instruction.

#![allow(unsafe_code)]

use std::arch::x86_64::*;

/// A vector of f32 lanes and the operations the GEMM microkernels use. Every operation rounds
/// as its scalar counterpart, lane by lane, so the sets give the same bits.
///
/// # Safety
/// Every method may use the instructions of its implementation: call them only on a CPU that
/// has those (checked once through [`cpu`](super::cpu) before the calling kernel is chosen).
pub(crate) trait F32x: Copy {
    /// Lanes in one vector.
    const LANES: usize;
    /// Which lanes a masked load or store touches.
    type Mask: Copy;
    /// All lanes zero.
    unsafe fn zero() -> Self;
    /// `x` in every lane.
    unsafe fn splat(x: f32) -> Self;
    /// `LANES` values from `p` (unaligned).
    ///
    /// # Safety
    /// `p..p + LANES` is readable.
    unsafe fn load(p: *const f32) -> Self;
    /// `v` to `p..p + LANES` (unaligned).
    ///
    /// # Safety
    /// `p..p + LANES` is writable.
    unsafe fn store(p: *mut f32, v: Self);
    /// `a * b + c`, rounded once.
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self;
    /// `a + b`.
    unsafe fn add(a: Self, b: Self) -> Self;
    /// `v` clamped to `[lo, hi]`; a NaN lane stays NaN (max, then min, each returning its
    /// second operand when one is NaN).
    unsafe fn clamp(v: Self, lo: Self, hi: Self) -> Self;
    /// The first `n` lanes (all of them when `n >= LANES`).
    unsafe fn first(n: usize) -> Self::Mask;
    /// The lanes of `m` from `p`, zero elsewhere.
    ///
    /// # Safety
    /// The lanes of `m` are readable at `p` (the others are not touched).
    unsafe fn load_masked(p: *const f32, m: Self::Mask) -> Self;
    /// The lanes of `m` of `v` to `p`.
    ///
    /// # Safety
    /// The lanes of `m` are writable at `p` (the others are not touched).
    unsafe fn store_masked(p: *mut f32, m: Self::Mask, v: Self);
    /// [`load_masked`](F32x::load_masked), or one plain load when `full` (every lane of `m`
    /// set): AMD's AVX2 cores run `vmaskmovps` as a long microcoded sequence, where a
    /// vector all of whose lanes are wanted needs no mask.
    ///
    /// # Safety
    /// The lanes of `m` (all `LANES` when `full`) are readable at `p`.
    #[inline(always)]
    unsafe fn load_part(p: *const f32, m: Self::Mask, full: bool) -> Self {
        // SAFETY: this method's contract.
        unsafe {
            match full {
                true => Self::load(p),
                false => Self::load_masked(p, m),
            }
        }
    }
    /// [`store_masked`](F32x::store_masked), or one plain store when `full` (every lane of
    /// `m` set), for the reason of [`load_part`](F32x::load_part).
    ///
    /// # Safety
    /// The lanes of `m` (all `LANES` when `full`) are writable at `p`.
    #[inline(always)]
    unsafe fn store_part(p: *mut f32, m: Self::Mask, full: bool, v: Self) {
        // SAFETY: this method's contract.
        unsafe {
            match full {
                true => Self::store(p, v),
                false => Self::store_masked(p, m, v),
            }
        }
    }
}

/// One `zmm` register (AVX-512F).
#[derive(Clone, Copy)]
pub(crate) struct Avx512(pub(crate) __m512);

impl F32x for Avx512 {
    const LANES: usize = 16;
    type Mask = __mmask16;
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn zero() -> Self {
        Self(_mm512_setzero_ps())
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn splat(x: f32) -> Self {
        Self(_mm512_set1_ps(x))
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: this method's contract.
        Self(unsafe { _mm512_loadu_ps(p) })
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: this method's contract.
        unsafe { _mm512_storeu_ps(p, v.0) }
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        Self(_mm512_fmadd_ps(a.0, b.0, c.0))
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn add(a: Self, b: Self) -> Self {
        Self(_mm512_add_ps(a.0, b.0))
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn clamp(v: Self, lo: Self, hi: Self) -> Self {
        Self(_mm512_min_ps(hi.0, _mm512_max_ps(lo.0, v.0)))
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn first(n: usize) -> __mmask16 {
        ((1u32 << n.min(16)) - 1) as __mmask16
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load_masked(p: *const f32, m: __mmask16) -> Self {
        // SAFETY: this method's contract.
        Self(unsafe { _mm512_maskz_loadu_ps(m, p) })
    }
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn store_masked(p: *mut f32, m: __mmask16, v: Self) {
        // SAFETY: this method's contract.
        unsafe { _mm512_mask_storeu_ps(p, m, v.0) }
    }
}

/// One `ymm` register (AVX2 and FMA).
#[derive(Clone, Copy)]
pub(crate) struct Avx2(__m256);

impl F32x for Avx2 {
    const LANES: usize = 8;
    type Mask = __m256i;
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn zero() -> Self {
        Self(_mm256_setzero_ps())
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn splat(x: f32) -> Self {
        Self(_mm256_set1_ps(x))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: this method's contract.
        Self(unsafe { _mm256_loadu_ps(p) })
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store(p: *mut f32, v: Self) {
        // SAFETY: this method's contract.
        unsafe { _mm256_storeu_ps(p, v.0) }
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn mul_add(a: Self, b: Self, c: Self) -> Self {
        Self(_mm256_fmadd_ps(a.0, b.0, c.0))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn add(a: Self, b: Self) -> Self {
        Self(_mm256_add_ps(a.0, b.0))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn clamp(v: Self, lo: Self, hi: Self) -> Self {
        Self(_mm256_min_ps(hi.0, _mm256_max_ps(lo.0, v.0)))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn first(n: usize) -> __m256i {
        // At most 8, so the cast cannot wrap.
        let n = _mm256_set1_epi32(n.min(8) as i32);
        _mm256_cmpgt_epi32(n, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn load_masked(p: *const f32, m: __m256i) -> Self {
        // SAFETY: this method's contract.
        Self(unsafe { _mm256_maskload_ps(p, m) })
    }
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store_masked(p: *mut f32, m: __m256i, v: Self) {
        // SAFETY: this method's contract.
        unsafe { _mm256_maskstore_ps(p, m, v.0) }
    }
}
