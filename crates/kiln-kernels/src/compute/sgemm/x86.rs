//! x86_64 microkernels: AVX-512F `14 x 32` (two zmm per B row, one broadcast per A row, 28
//! accumulators) and AVX2+FMA `6 x 16` (12 ymm accumulators), each for A packed or strided
//! and for A read through an indirection buffer (one pointer per row and tap). Partial tiles use masked loads
//! and stores, so edge tiles need no temporary buffer; a tile whose columns fit the first
//! vector computes only that one (16-channel layers, the last panel of a product), and on
//! AVX-512 one of 17 to 24 columns computes the rest in a ymm. While the first strip of
//! rows reads a panel of B, the AVX-512 kernel fetches the next panel into L2: a layer's
//! weights arrive from memory once per execute, and the hardware prefetcher alone left the
//! 7x7 layers of MobileNet waiting on them.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::kernel::{Kernel, Tile, ZERO_ROW};
use crate::compute::cpu::{has_avx2, has_avx512, is_amd};

/// Calls `$f::<R, PACKED, WIDE>($t)` for the runtime row count (one of the listed), whether A
/// is a packed panel of `$mr` rows (unit row stride, depth stride `$mr`), and whether the
/// tile has columns in the second of its two vectors (more than `$half`); without `$mr`,
/// `$f::<R, WIDE>($t)`; with `packed` first and no `$half`, `$f::<R, PACKED>($t)`.
macro_rules! by_rows {
    ($t:expr, $f:ident, $half:expr, [$($r:literal)*]) => {
        match ($t.rows, $t.cols > $half) {
            $(($r, true) => $f::<$r, true>($t),)*
            $(($r, false) => $f::<$r, false>($t),)*
            _ => unreachable!("Tile::check bounds the rows"),
        }
    };
    (packed $t:expr, $f:ident, $mr:expr, [$($r:literal)*]) => {
        match ($t.rows, $t.a_rs == 1 && $t.a_ks == $mr) {
            $(($r, true) => $f::<$r, true>($t),)*
            $(($r, false) => $f::<$r, false>($t),)*
            _ => unreachable!("Tile::check bounds the rows"),
        }
    };
    ($t:expr, $f:ident, $mr:expr, $half:expr, [$($r:literal)*]) => {
        match ($t.rows, $t.a_rs == 1 && $t.a_ks == $mr, $t.cols > $half) {
            $(($r, true, true) => $f::<$r, true, true>($t),)*
            $(($r, false, true) => $f::<$r, false, true>($t),)*
            $(($r, true, false) => $f::<$r, true, false>($t),)*
            $(($r, false, false) => $f::<$r, false, false>($t),)*
            _ => unreachable!("Tile::check bounds the rows"),
        }
    };
}

/// The strip function `$f::<R, WIDE>` (called once per strip `s` of the stack as
/// `f(t, s)`) for the runtime row count (one of the listed) and whether the tile has columns
/// in the second of its two vectors (more than `$half`).
macro_rules! strip_fn {
    ($t:expr, $f:ident, $half:expr, [$($r:literal)*]) => {
        match ($t.rows, $t.cols > $half) {
            $(($r, true) => $f::<$r, true> as unsafe fn(&mut Tile<'_>, usize),)*
            $(($r, false) => $f::<$r, false> as unsafe fn(&mut Tile<'_>, usize),)*
            _ => unreachable!("Tile::check bounds the rows"),
        }
    };
}

/// The epilogue of an AVX-512 tile: accumulated C, biases, residual and clamp added to the
/// accumulators of `R` rows, then the masked store.
/// A macro, not a function: accumulators handed to a function are kept in memory through
/// the loop that sums them. Expands in an `unsafe` function with the tile's target features
/// where `t.check` holds and `t.rows == R`; the second vector of columns (`$acc1`) is loaded,
/// summed and stored only when that function's `WIDE` is set.
macro_rules! avx512_store {
    ($acc0:ident, $acc1:ident, $t:ident, $i0:expr, $j0:expr) => {{
        let (m0, m1) = (mask16($t.cols), mask16($t.cols.saturating_sub(16)));
        let c = $t.c.as_mut_ptr().wrapping_add($i0 * $t.ldc + $j0);
        // One pass over the rows per operation, each decided once per tile: every pass unrolls
        // and the accumulators stay in registers (one loop testing each operation per row kept
        // them in memory). Per value the order is that of the definition: accumulated C, row
        // bias, column bias, residual, clamp.
        // Masked loads and stores touch only lanes below `cols`; `wrapping_add` keeps the pointer
        // arithmetic defined when the second half is fully masked off.
        // SAFETY (all blocks below): `$i0` is `s * R` for a strip s of the stack, `$j0` is
        // `q * NR512` for a tile q of the strip, and lanes j < cols of its row i < R are at
        // (i0 + i) * ldc + j0 + j < span, which `check` proved inside `c` and `residual` (and
        // j0 + j < width inside `col_bias`); row_bias has stack * R values.
        let row = |i: usize| c.wrapping_add(i * $t.ldc);
        if $t.accumulate {
            for i in 0..R {
                unsafe {
                    $acc0[i] = _mm512_add_ps($acc0[i], _mm512_maskz_loadu_ps(m0, row(i)));
                    if WIDE {
                        let hi = _mm512_maskz_loadu_ps(m1, row(i).wrapping_add(16));
                        $acc1[i] = _mm512_add_ps($acc1[i], hi);
                    }
                }
            }
        }
        if let Some(rb) = $t.row_bias {
            for i in 0..R {
                let v = _mm512_set1_ps(rb[$i0 + i]);
                $acc0[i] = _mm512_add_ps($acc0[i], v);
                if WIDE {
                    $acc1[i] = _mm512_add_ps($acc1[i], v);
                }
            }
        }
        if let Some(cb) = $t.col_bias {
            let p = cb.as_ptr().wrapping_add($j0);
            let (cb0, cb1) = unsafe {
                (_mm512_maskz_loadu_ps(m0, p), _mm512_maskz_loadu_ps(m1, p.wrapping_add(16)))
            };
            for i in 0..R {
                $acc0[i] = _mm512_add_ps($acc0[i], cb0);
                if WIDE {
                    $acc1[i] = _mm512_add_ps($acc1[i], cb1);
                }
            }
        }
        if let Some(r) = $t.residual {
            for i in 0..R {
                let ri = r.as_ptr().wrapping_add(($i0 + i) * $t.ldc + $j0);
                unsafe {
                    $acc0[i] = _mm512_add_ps($acc0[i], _mm512_maskz_loadu_ps(m0, ri));
                    if WIDE {
                        let hi = _mm512_maskz_loadu_ps(m1, ri.wrapping_add(16));
                        $acc1[i] = _mm512_add_ps($acc1[i], hi);
                    }
                }
            }
        }
        if let Some((lo, hi)) = $t.clamp {
            // max/min return their second operand when one is NaN: NaN propagates.
            let (lo, hi) = (_mm512_set1_ps(lo), _mm512_set1_ps(hi));
            for i in 0..R {
                $acc0[i] = _mm512_min_ps(hi, _mm512_max_ps(lo, $acc0[i]));
                if WIDE {
                    $acc1[i] = _mm512_min_ps(hi, _mm512_max_ps(lo, $acc1[i]));
                }
            }
        }
        for i in 0..R {
            unsafe {
                _mm512_mask_storeu_ps(row(i), m0, $acc0[i]);
                if WIDE {
                    _mm512_mask_storeu_ps(row(i).wrapping_add(16), m1, $acc1[i]);
                }
            }
        }
    }};
}

/// The epilogue of an AVX2 tile: accumulated C, biases, residual and clamp added to the
/// accumulators of `R` rows, then the masked store.
/// A macro, not a function: accumulators handed to a function are kept in memory through
/// the loop that sums them. Expands in an `unsafe` function with the tile's target features
/// where `t.check` holds and `t.rows == R`; the second vector of columns (`$acc1`) is loaded,
/// summed and stored only when that function's `WIDE` is set.
macro_rules! avx2_store {
    ($acc0:ident, $acc1:ident, $t:ident, $i0:expr, $j0:expr) => {{
        // cols <= 16, so the casts cannot wrap.
        let (m0, m1) = (mask8($t.cols as i32), mask8($t.cols as i32 - 8));
        let c = $t.c.as_mut_ptr().wrapping_add($i0 * $t.ldc + $j0);
        // One pass per operation, as in `avx512_store`.
        // SAFETY (all blocks below): maskload/maskstore touch only lanes j < cols; `$i0` is
        // `s * R` for a strip s of the stack, `$j0` is `q * NR256` for a tile q of the strip,
        // and lanes j < cols of its row i < R are at (i0 + i) * ldc + j0 + j < span, which
        // `check` proved inside `c` and `residual` (and j0 + j < width inside `col_bias`);
        // row_bias has stack * R values; `wrapping_add` keeps fully masked-off pointers defined.
        let row = |i: usize| c.wrapping_add(i * $t.ldc);
        if $t.accumulate {
            for i in 0..R {
                unsafe {
                    $acc0[i] = _mm256_add_ps($acc0[i], _mm256_maskload_ps(row(i), m0));
                    if WIDE {
                        let hi = _mm256_maskload_ps(row(i).wrapping_add(8), m1);
                        $acc1[i] = _mm256_add_ps($acc1[i], hi);
                    }
                }
            }
        }
        if let Some(rb) = $t.row_bias {
            for i in 0..R {
                let v = _mm256_set1_ps(rb[$i0 + i]);
                $acc0[i] = _mm256_add_ps($acc0[i], v);
                if WIDE {
                    $acc1[i] = _mm256_add_ps($acc1[i], v);
                }
            }
        }
        if let Some(cb) = $t.col_bias {
            let p = cb.as_ptr().wrapping_add($j0);
            let (cb0, cb1) =
                unsafe { (_mm256_maskload_ps(p, m0), _mm256_maskload_ps(p.wrapping_add(8), m1)) };
            for i in 0..R {
                $acc0[i] = _mm256_add_ps($acc0[i], cb0);
                if WIDE {
                    $acc1[i] = _mm256_add_ps($acc1[i], cb1);
                }
            }
        }
        if let Some(r) = $t.residual {
            for i in 0..R {
                let ri = r.as_ptr().wrapping_add(($i0 + i) * $t.ldc + $j0);
                unsafe {
                    $acc0[i] = _mm256_add_ps($acc0[i], _mm256_maskload_ps(ri, m0));
                    if WIDE {
                        let hi = _mm256_maskload_ps(ri.wrapping_add(8), m1);
                        $acc1[i] = _mm256_add_ps($acc1[i], hi);
                    }
                }
            }
        }
        if let Some((lo, hi)) = $t.clamp {
            // max/min return their second operand when one is NaN: NaN propagates.
            let (lo, hi) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
            for i in 0..R {
                $acc0[i] = _mm256_min_ps(hi, _mm256_max_ps(lo, $acc0[i]));
                if WIDE {
                    $acc1[i] = _mm256_min_ps(hi, _mm256_max_ps(lo, $acc1[i]));
                }
            }
        }
        for i in 0..R {
            unsafe {
                _mm256_maskstore_ps(row(i), m0, $acc0[i]);
                if WIDE {
                    _mm256_maskstore_ps(row(i).wrapping_add(8), m1, $acc1[i]);
                }
            }
        }
    }};
}

const MR512: usize = 14;
const NR512: usize = 32;
/// Rows of an indirect tile: each row's pointer takes a general register, and with 14 of
/// them the accumulators were stored to memory at every step.
const IND_MR512: usize = 7;

/// The AVX-512 kernel.
pub static AVX512: Kernel = Kernel {
    name: "avx512 14x32",
    mr: MR512,
    ind_mr: IND_MR512,
    nr: NR512,
    kc: 256,
    mc: MR512 * 24,
    nc: NR512 * 32,
    run: avx512,
};

fn avx512(t: &mut Tile<'_>) {
    if t.ind.is_some() && t.panels > 1 {
        return t.each_tile(NR512, avx512);
    }
    let mr = if t.ind.is_some() { IND_MR512 } else { MR512 };
    assert!(has_avx512() && t.check(mr, NR512), "sgemm: avx512 tile out of bounds");
    // On AMD's cores, a stack of 14-row strips of an A read in place (rows `a_rs` apart)
    // runs as twice as many strips of 7 rows: 14 accumulators and 7 broadcasts per depth
    // step instead of 28 and 14 measured 2-9% faster on Zen 4 (mobilenet_v2's 1x1
    // convolutions), with the same bits (each value is the same chain of multiply-adds).
    // Tiles of 17-24 columns keep 14 rows (their ymm half makes 7 rows slower).
    let ymm = t.cols > 16 && t.cols <= 24;
    let in_place = t.a_ks == 1 && t.a_stack == MR512 * t.a_rs;
    if is_amd() && !ymm && t.ind.is_none() && t.rows == MR512 && in_place {
        t.rows = MR512 / 2;
        t.stack *= 2;
        t.a_stack /= 2;
        // The same rows, columns and depth as the check above: it still holds.
        assert!(t.check(MR512, NR512), "sgemm: avx512 tile out of bounds");
    }
    // SAFETY: the CPU has AVX-512F (checked above, the only feature the tile function
    // enables) and `check` verified every slice covers the reads and writes of the tile.
    unsafe {
        if t.ind.is_some() {
            // One check for the whole stack, then the strips one after the other.
            let strip = strip_fn!(t, avx512_indirect, 16, [1 2 3 4 5 6 7]);
            for s in 0..t.stack {
                strip(t, s);
            }
        } else if ymm {
            by_rows!(packed t, avx512_tile_ymm, MR512, [1 2 3 4 5 6 7 8 9 10 11 12 13 14])
        } else {
            by_rows!(t, avx512_tile_zmm, MR512, 16, [1 2 3 4 5 6 7 8 9 10 11 12 13 14])
        }
    }
}

/// Lanes `0..n` of a 16-lane mask (`n` clamped to 16).
#[inline]
fn mask16(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// [`avx512_tile`] with its columns in one or two zmm registers.
///
/// # Safety
/// That of [`avx512_tile`] with `YMM` unset.
#[target_feature(enable = "avx512f")]
unsafe fn avx512_tile_zmm<const R: usize, const PACKED: bool, const WIDE: bool>(t: &mut Tile<'_>) {
    // SAFETY: this function's contract.
    unsafe { avx512_tile::<R, PACKED, WIDE, false>(t) }
}

/// [`avx512_tile`] for 17 to 24 columns (one panel), the last 8 in a ymm register.
///
/// # Safety
/// That of [`avx512_tile`] with `WIDE` and `YMM` set.
#[target_feature(enable = "avx512f")]
unsafe fn avx512_tile_ymm<const R: usize, const PACKED: bool>(t: &mut Tile<'_>) {
    // SAFETY: this function's contract.
    unsafe { avx512_tile::<R, PACKED, true, true>(t) }
}

/// The tiles of `t`, `R` rows each, `NR512` columns in two vectors: columns 0..16 in one zmm
/// per row; columns from 16 in a second zmm when `WIDE`, or, when `YMM` is set too, in a ymm
/// (the tile has at most 24 columns). A ymm multiply-add computes 8 lanes of the zmm one
/// with the same bits, and costs half as much on cores that run a zmm operation as two
/// 256-bit halves (AMD Zen 4): layers of 24 output channels (MobileNet's) do a quarter fewer
/// multiply-adds there.
///
/// # Safety
/// AVX-512F available; `t.check(MR512, NR512)` holds, `t.rows == R`, when `PACKED` A is a
/// packed panel (`a_rs == 1`, `a_ks == MR512`), unless `WIDE` `t.cols <= 16` (the second
/// vector of columns is neither computed nor stored), and with `YMM` `WIDE` is set and
/// `t.cols <= 24`.
#[target_feature(enable = "avx512f")]
unsafe fn avx512_tile<const R: usize, const PACKED: bool, const WIDE: bool, const YMM: bool>(
    t: &mut Tile<'_>,
) {
    // A's strides, constants for a packed panel.
    let (rs, ks) = if PACKED { (1, MR512) } else { (t.a_rs, t.a_ks) };
    // The strips of the stack and the tiles of each strip one after the other: no call
    // between them.
    for st in 0..t.stack {
        let a = t.a.as_ptr().wrapping_add(st * t.a_stack);
        for q in 0..t.panels {
            let j0 = q * NR512;
            // SAFETY: `check` proved (panels - 1) * b_stride + kc * NR512 <= b.len().
            let b = unsafe { t.b.as_ptr().add(q * t.b_stride) };
            let mut acc0 = [_mm512_setzero_ps(); R];
            let mut acc1 = [_mm512_setzero_ps(); R];
            let mut acc1y = [_mm256_setzero_ps(); R];
            // The next panel of B, fetched into L2 while the first strip reads this one.
            let next = t.b.as_ptr().wrapping_add((q + 1) * t.b_stride) as *const i8;
            for p in 0..t.kc {
                if R >= 4 && st == 0 {
                    let at = next.wrapping_add(p * NR512 * 4);
                    _mm_prefetch::<_MM_HINT_T1>(at);
                    _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(64));
                }
                // SAFETY: p < kc, and `check` proved panel q's kc * NR512 values inside b and that every
                // st * a_stack + (R - 1) * rs + p * ks (st < stack) lies inside a.
                unsafe {
                    let b0 = _mm512_loadu_ps(b.add(p * NR512));
                    let b1 = if WIDE && !YMM {
                        _mm512_loadu_ps(b.add(p * NR512 + 16))
                    } else {
                        _mm512_setzero_ps()
                    };
                    let b1y = if YMM {
                        _mm256_loadu_ps(b.add(p * NR512 + 16))
                    } else {
                        _mm256_setzero_ps()
                    };
                    let ap = a.add(p * ks);
                    for i in 0..R {
                        let ai = _mm512_set1_ps(*ap.add(i * rs));
                        acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
                        if YMM {
                            let ai = _mm512_castps512_ps256(ai);
                            acc1y[i] = _mm256_fmadd_ps(ai, b1y, acc1y[i]);
                        } else if WIDE {
                            acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
                        }
                    }
                }
            }
            if YMM {
                // Lanes 8..16 are zero, and the epilogue's mask leaves them unstored.
                for i in 0..R {
                    acc1[i] = _mm512_zextps256_ps512(acc1y[i]);
                }
            }
            avx512_store!(acc0, acc1, t, st * R, j0)
        }
    }
}

/// [`avx512_tile`] for A read through `t.ind`: strip `s` of the stack (rows `s * R..` of C,
/// its offsets from [`Indirect::strip`](super::kernel::Indirect::strip)).
///
/// # Safety
/// AVX-512F available; `t.check(IND_MR512, NR512)` holds with `t.ind` set, `t.rows == R`,
/// `s < t.stack`, and unless `WIDE` `t.cols <= 16`.
#[target_feature(enable = "avx512f")]
unsafe fn avx512_indirect<const R: usize, const WIDE: bool>(t: &mut Tile<'_>, s: usize) {
    let Some(ind) = t.ind else { unreachable!("avx512 dispatches only indirect tiles here") };
    let (a, z) = (t.a.as_ptr(), ind.zeros.as_ptr());
    let mut b = t.b.as_ptr();
    let mut acc0 = [_mm512_setzero_ps(); R];
    let mut acc1 = [_mm512_setzero_ps(); R];
    // Per tap: the row pointers, then the tap's `channels` depth steps.
    let taps = t.kc / ind.channels;
    for offsets in ind.offsets[ind.strip(s, t.kc)..].chunks_exact(ind.stride).take(taps) {
        let offsets: &[usize; R] = offsets[..R].try_into().expect("check: rows <= stride");
        // SAFETY: `check` proved each of the first R offsets of every tap of every strip of
        // the stack ZERO_ROW (then `zeros` holds `channels` values) or `channels` values
        // inside `a`.
        let rows = offsets.map(|o| if o == ZERO_ROW { z } else { unsafe { a.add(o) } });
        for c in 0..ind.channels {
            // SAFETY: c < channels; `b` advances NR512 per depth step, kc steps in all, and
            // `check` proved kc * NR512 <= b.len().
            unsafe {
                let b0 = _mm512_loadu_ps(b);
                let b1 = if WIDE { _mm512_loadu_ps(b.add(16)) } else { _mm512_setzero_ps() };
                b = b.add(NR512);
                for i in 0..R {
                    let ai = _mm512_set1_ps(*rows[i].add(c));
                    acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
                    if WIDE {
                        acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
                    }
                }
            }
        }
    }
    avx512_store!(acc0, acc1, t, s * R, 0)
}

const MR256: usize = 6;
const NR256: usize = 16;

/// The AVX2+FMA kernel.
pub static AVX2: Kernel = Kernel {
    name: "avx2 6x16",
    mr: MR256,
    ind_mr: MR256,
    nr: NR256,
    kc: 256,
    mc: MR256 * 40,
    nc: NR256 * 256,
    run: avx2,
};

fn avx2(t: &mut Tile<'_>) {
    if t.ind.is_some() && t.panels > 1 {
        return t.each_tile(NR256, avx2);
    }
    assert!(has_avx2() && t.check(MR256, NR256), "sgemm: avx2 tile out of bounds");
    // SAFETY: the CPU has AVX2 and FMA (checked above) and `check` verified every slice
    // covers the reads and writes of the tile.
    unsafe {
        if t.ind.is_some() {
            // One check for the whole stack, then the strips one after the other.
            let strip = strip_fn!(t, avx2_indirect, 8, [1 2 3 4 5 6]);
            for s in 0..t.stack {
                strip(t, s);
            }
        } else {
            by_rows!(t, avx2_tile, MR256, 8, [1 2 3 4 5 6])
        }
    }
}

/// Lane mask (all bits set in lanes `0..n`) of an 8-lane vector for `n` as i32 (may be <= 0).
#[inline]
#[target_feature(enable = "avx2")]
fn mask8(n: i32) -> __m256i {
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

/// # Safety
/// AVX2 and FMA available; `t.check(MR256, NR256)` holds, `t.rows == R`, when `PACKED` A is
/// a packed panel (`a_rs == 1`, `a_ks == MR256`), and unless `WIDE` `t.cols <= 8` (the second
/// vector of columns is neither computed nor stored).
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_tile<const R: usize, const PACKED: bool, const WIDE: bool>(t: &mut Tile<'_>) {
    // A's strides, constants for a packed panel.
    let (rs, ks) = if PACKED { (1, MR256) } else { (t.a_rs, t.a_ks) };
    // The strips of the stack and the tiles of each strip one after the other: no call
    // between them.
    for st in 0..t.stack {
        let a = t.a.as_ptr().wrapping_add(st * t.a_stack);
        for q in 0..t.panels {
            let j0 = q * NR256;
            // SAFETY: `check` proved (panels - 1) * b_stride + kc * NR256 <= b.len().
            let b = unsafe { t.b.as_ptr().add(q * t.b_stride) };
            let mut acc0 = [_mm256_setzero_ps(); R];
            let mut acc1 = [_mm256_setzero_ps(); R];
            for p in 0..t.kc {
                // SAFETY: p < kc, and `check` proved panel q's kc * NR256 values inside b and that every
                // st * a_stack + (R - 1) * rs + p * ks (st < stack) lies inside a.
                unsafe {
                    let b0 = _mm256_loadu_ps(b.add(p * NR256));
                    let b1 = if WIDE {
                        _mm256_loadu_ps(b.add(p * NR256 + 8))
                    } else {
                        _mm256_setzero_ps()
                    };
                    let ap = a.add(p * ks);
                    for i in 0..R {
                        let ai = _mm256_set1_ps(*ap.add(i * rs));
                        acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
                        if WIDE {
                            acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
                        }
                    }
                }
            }
            avx2_store!(acc0, acc1, t, st * R, j0)
        }
    }
}

/// [`avx2_tile`] for A read through `t.ind`: strip `s` of the stack (rows `s * R..` of C,
/// its offsets from [`Indirect::strip`](super::kernel::Indirect::strip)).
///
/// # Safety
/// AVX2 and FMA available; `t.check(MR256, NR256)` holds with `t.ind` set, `t.rows == R`,
/// `s < t.stack`, and unless `WIDE` `t.cols <= 8`.
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_indirect<const R: usize, const WIDE: bool>(t: &mut Tile<'_>, s: usize) {
    let Some(ind) = t.ind else { unreachable!("avx2 dispatches only indirect tiles here") };
    let (a, z) = (t.a.as_ptr(), ind.zeros.as_ptr());
    let mut b = t.b.as_ptr();
    let mut acc0 = [_mm256_setzero_ps(); R];
    let mut acc1 = [_mm256_setzero_ps(); R];
    // Per tap: the row pointers, then the tap's `channels` depth steps.
    let taps = t.kc / ind.channels;
    for offsets in ind.offsets[ind.strip(s, t.kc)..].chunks_exact(ind.stride).take(taps) {
        let offsets: &[usize; R] = offsets[..R].try_into().expect("check: rows <= stride");
        // SAFETY: `check` proved each of the first R offsets of every tap of every strip of
        // the stack ZERO_ROW (then `zeros` holds `channels` values) or `channels` values
        // inside `a`.
        let rows = offsets.map(|o| if o == ZERO_ROW { z } else { unsafe { a.add(o) } });
        for c in 0..ind.channels {
            // SAFETY: c < channels; `b` advances NR256 per depth step, kc steps in all, and
            // `check` proved kc * NR256 <= b.len().
            unsafe {
                let b0 = _mm256_loadu_ps(b);
                let b1 = if WIDE { _mm256_loadu_ps(b.add(8)) } else { _mm256_setzero_ps() };
                b = b.add(NR256);
                for i in 0..R {
                    let ai = _mm256_set1_ps(*rows[i].add(c));
                    acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
                    if WIDE {
                        acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
                    }
                }
            }
        }
    }
    avx2_store!(acc0, acc1, t, s * R, 0)
}
