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
use crate::compute::lanes::{Avx2, Avx512, F32x};

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

/// The epilogue of a tile of `R` rows: accumulated C, biases, residual and clamp added to
/// the accumulators, then the masked store of rows `i0..i0 + R`, columns `j0..` of C. The
/// second vector of columns (`acc1`) is loaded, summed and stored only when `WIDE`.
///
/// One pass over the rows per operation, each decided once per tile: every pass unrolls and
/// the accumulators stay in registers (one loop testing each operation per row kept them in
/// memory). Per value the order is that of the definition: accumulated C, row bias, column
/// bias, residual, clamp.
///
/// # Safety
/// The CPU has `L`'s instructions; `t.check` holds for `L`'s tile with `t.rows == R`; `i0` is
/// `s * R` for a strip `s` of the stack and `j0` the first column of a tile of the strip.
#[inline(always)]
unsafe fn store<L: F32x, const R: usize, const WIDE: bool>(
    acc0: &mut [L; R],
    acc1: &mut [L; R],
    t: &mut Tile<'_>,
    i0: usize,
    j0: usize,
) {
    // SAFETY (all blocks below): the masks cover lanes j < cols only (a vector read or
    // written whole, `full0`/`full1`, has all its lanes below cols), and lanes j < cols of
    // row i < R are at (i0 + i) * ldc + j0 + j < span, which `check` proved inside `c` and
    // `residual` (and j0 + j < width inside `col_bias`); row_bias has stack * R values.
    // `wrapping_add` keeps the pointer arithmetic defined where the second vector's lanes
    // are all masked off.
    unsafe {
        let (m0, m1) = (L::first(t.cols), L::first(t.cols.saturating_sub(L::LANES)));
        // Vectors whose lanes are all columns of the tile are loaded and stored whole
        // ([`F32x::load_part`]: on Zen 3, masked stores took most of mobilenet_v2's 16-deep
        // 1x1 convolutions).
        let (full0, full1) = (t.cols >= L::LANES, t.cols >= 2 * L::LANES);
        let c = t.c.as_mut_ptr().wrapping_add(i0 * t.ldc + j0);
        let row = |i: usize| c.wrapping_add(i * t.ldc);
        if t.accumulate {
            for i in 0..R {
                acc0[i] = L::add(acc0[i], L::load_part(row(i), m0, full0));
                if WIDE {
                    acc1[i] =
                        L::add(acc1[i], L::load_part(row(i).wrapping_add(L::LANES), m1, full1));
                }
            }
        }
        if let Some(rb) = t.row_bias {
            for i in 0..R {
                let v = L::splat(rb[i0 + i]);
                acc0[i] = L::add(acc0[i], v);
                if WIDE {
                    acc1[i] = L::add(acc1[i], v);
                }
            }
        }
        if let Some(cb) = t.col_bias {
            let p = cb.as_ptr().wrapping_add(j0);
            let (cb0, cb1) = (L::load_masked(p, m0), L::load_masked(p.wrapping_add(L::LANES), m1));
            for i in 0..R {
                acc0[i] = L::add(acc0[i], cb0);
                if WIDE {
                    acc1[i] = L::add(acc1[i], cb1);
                }
            }
        }
        if let Some(r) = t.residual {
            for i in 0..R {
                let ri = r.as_ptr().wrapping_add((i0 + i) * t.ldc + j0);
                acc0[i] = L::add(acc0[i], L::load_part(ri, m0, full0));
                if WIDE {
                    acc1[i] = L::add(acc1[i], L::load_part(ri.wrapping_add(L::LANES), m1, full1));
                }
            }
        }
        if let Some((lo, hi)) = t.clamp {
            let (lo, hi) = (L::splat(lo), L::splat(hi));
            for i in 0..R {
                acc0[i] = L::clamp(acc0[i], lo, hi);
                if WIDE {
                    acc1[i] = L::clamp(acc1[i], lo, hi);
                }
            }
        }
        store_rows(c, t.ldc, m0, full0, acc0);
        if WIDE {
            store_rows(c.wrapping_add(L::LANES), t.ldc, m1, full1, acc1);
        }
    }
}

/// `acc[i]` to `c + i * ldc` for every row `i`: the lanes of `m`, or whole vectors when
/// `full`. One loop per kind of store, decided once per tile, so each unrolls (a loop, not a
/// closure: a closure would not have the caller's target features, and each store would be a
/// call).
///
/// # Safety
/// The CPU has `L`'s instructions; the lanes of `m` (all `L::LANES` when `full`) are writable
/// at `c + i * ldc` for every `i < R`.
#[inline(always)]
unsafe fn store_rows<L: F32x, const R: usize>(
    c: *mut f32,
    ldc: usize,
    m: L::Mask,
    full: bool,
    acc: &[L; R],
) {
    // SAFETY: this function's contract.
    unsafe {
        if full {
            for (i, &v) in acc.iter().enumerate() {
                L::store(c.wrapping_add(i * ldc), v);
            }
        } else {
            for (i, &v) in acc.iter().enumerate() {
                L::store_masked(c.wrapping_add(i * ldc), m, v);
            }
        }
    }
}

/// The tiles of `t`, `R` rows each, columns in two vectors of `L` per row (the second one only
/// when `WIDE`), A packed (`PACKED`: unit row stride, depth stride `MR`) or strided. With
/// `prefetch`, while the first strip of rows reads a panel of B the next panel is fetched
/// into L2 ([`prefetch_row`]).
///
/// # Safety
/// The CPU has `L`'s instructions; `t.check(MR, 2 * L::LANES)` holds, `t.rows == R`, when
/// `PACKED` A is a packed panel, and unless `WIDE` `t.cols <= L::LANES`.
#[inline(always)]
unsafe fn tile<L: F32x, const MR: usize, const R: usize, const PACKED: bool, const WIDE: bool>(
    t: &mut Tile<'_>,
    prefetch: bool,
) {
    let nr = 2 * L::LANES;
    // A's strides, constants for a packed panel.
    let (rs, ks) = if PACKED { (1, MR) } else { (t.a_rs, t.a_ks) };
    // The strips of the stack and the tiles of each strip one after the other: no call
    // between them.
    for st in 0..t.stack {
        let a = t.a.as_ptr().wrapping_add(st * t.a_stack);
        for q in 0..t.panels {
            // SAFETY: `check` proved (panels - 1) * b_stride + kc * nr <= b.len().
            let b = unsafe { t.b.as_ptr().add(q * t.b_stride) };
            // SAFETY: the CPU has `L`'s instructions (this function's contract).
            let (mut acc0, mut acc1) = unsafe { ([L::zero(); R], [L::zero(); R]) };
            let next = t.b.as_ptr().wrapping_add((q + 1) * t.b_stride);
            for p in 0..t.kc {
                if prefetch && R >= 4 && st == 0 {
                    prefetch_row(next, p, nr);
                }
                if R < 4 {
                    prefetch_row(b, p + GEMV_AHEAD, nr);
                }
                // SAFETY: p < kc, and `check` proved panel q's kc * nr values inside b and that
                // every st * a_stack + (R - 1) * rs + p * ks (st < stack) lies inside a.
                unsafe {
                    let b0 = L::load(b.add(p * nr));
                    let b1 = if WIDE { L::load(b.add(p * nr + L::LANES)) } else { L::zero() };
                    let ap = a.add(p * ks);
                    for i in 0..R {
                        let ai = L::splat(*ap.add(i * rs));
                        acc0[i] = L::mul_add(ai, b0, acc0[i]);
                        if WIDE {
                            acc1[i] = L::mul_add(ai, b1, acc1[i]);
                        }
                    }
                }
            }
            // SAFETY: this function's contract; st * R and q * nr name a tile of the stack.
            unsafe { store::<L, R, WIDE>(&mut acc0, &mut acc1, t, st * R, q * nr) }
        }
    }
}

/// Depth steps ahead of a strip of fewer than 4 rows (a matrix-vector product: a batch of
/// one through a linear layer) its panel of B is fetched from: each step uses its values
/// once, and the product runs as fast as memory brings B in.
const GEMV_AHEAD: usize = 8;

/// Fetches depth step `p` of the panel of B at `next` (`nr` values a step) into L2: two
/// cache lines, the first 32 columns. A hint only: the address need not be inside B.
#[inline(always)]
fn prefetch_row(next: *const f32, p: usize, nr: usize) {
    let at = next.wrapping_add(p * nr) as *const i8;
    // SAFETY: SSE is part of every x86_64 target, and a prefetch reads nothing into the
    // program and never faults, whatever the address.
    unsafe {
        _mm_prefetch::<_MM_HINT_T1>(at);
        _mm_prefetch::<_MM_HINT_T1>(at.wrapping_add(64));
    }
}

/// [`tile`] for A read through `t.ind`: strip `s` of the stack (rows `s * R..` of C, its
/// offsets from [`Indirect::strip`](super::kernel::Indirect::strip)).
///
/// # Safety
/// The CPU has `L`'s instructions; `t.check(_, 2 * L::LANES)` holds with `t.ind` set,
/// `t.rows == R`, `s < t.stack`, and unless `WIDE` `t.cols <= L::LANES`.
#[inline(always)]
unsafe fn indirect<L: F32x, const R: usize, const WIDE: bool>(t: &mut Tile<'_>, s: usize) {
    let Some(ind) = t.ind else { unreachable!("only indirect tiles come here") };
    let nr = 2 * L::LANES;
    let (a, z) = (t.a.as_ptr(), ind.zeros.as_ptr());
    let mut b = t.b.as_ptr();
    // SAFETY: the CPU has `L`'s instructions (this function's contract).
    let (mut acc0, mut acc1) = unsafe { ([L::zero(); R], [L::zero(); R]) };
    // Per tap: the row pointers, then the tap's `channels` depth steps.
    let taps = t.kc / ind.channels;
    for offsets in ind.offsets[ind.strip(s, t.kc)..].chunks_exact(ind.stride).take(taps) {
        let offsets: &[usize; R] = offsets[..R].try_into().expect("check: rows <= stride");
        // SAFETY: `check` proved each of the first R offsets of every tap of every strip of
        // the stack ZERO_ROW (then `zeros` holds `channels` values) or `channels` values
        // inside `a`.
        let rows = offsets.map(|o| if o == ZERO_ROW { z } else { unsafe { a.add(o) } });
        for c in 0..ind.channels {
            // SAFETY: c < channels; `b` advances nr per depth step, kc steps in all, and
            // `check` proved kc * nr <= b.len().
            unsafe {
                let b0 = L::load(b);
                let b1 = if WIDE { L::load(b.add(L::LANES)) } else { L::zero() };
                b = b.add(nr);
                for i in 0..R {
                    let ai = L::splat(*rows[i].add(c));
                    acc0[i] = L::mul_add(ai, b0, acc0[i]);
                    if WIDE {
                        acc1[i] = L::mul_add(ai, b1, acc1[i]);
                    }
                }
            }
        }
    }
    // SAFETY: this function's contract; s * R names a strip of the stack.
    unsafe { store::<L, R, WIDE>(&mut acc0, &mut acc1, t, s * R, 0) }
}

/// [`tile`] on AVX-512, prefetching the next panel of B.
///
/// # Safety
/// That of [`tile`] for [`Avx512`] with `MR512` rows.
#[target_feature(enable = "avx512f")]
unsafe fn avx512_tile_zmm<const R: usize, const PACKED: bool, const WIDE: bool>(t: &mut Tile<'_>) {
    // SAFETY: this function's contract.
    unsafe { tile::<Avx512, MR512, R, PACKED, WIDE>(t, true) }
}

/// [`indirect`] on AVX-512.
///
/// # Safety
/// That of [`indirect`] for [`Avx512`].
#[target_feature(enable = "avx512f")]
unsafe fn avx512_indirect<const R: usize, const WIDE: bool>(t: &mut Tile<'_>, s: usize) {
    // SAFETY: this function's contract.
    unsafe { indirect::<Avx512, R, WIDE>(t, s) }
}

/// The tiles of `t`, `R` rows each, for 17 to 24 columns (one panel): columns 0..16 in a zmm
/// per row, the last 8 in a ymm. A ymm multiply-add computes 8 lanes of the zmm one with the
/// same bits, and costs half as much on cores that run a zmm operation as two 256-bit halves
/// (AMD Zen 4): layers of 24 output channels (MobileNet's) do a quarter fewer multiply-adds
/// there. This one stays apart from [`tile`]: its rows mix two register widths, which one
/// [`F32x`] does not hold, and only the AVX-512 kernel has it.
///
/// # Safety
/// AVX-512F available; `t.check(MR512, NR512)` holds, `t.rows == R`, `t.panels == 1`,
/// `t.cols <= 24`, and when `PACKED` A is a packed panel (`a_rs == 1`, `a_ks == MR512`).
#[target_feature(enable = "avx512f")]
unsafe fn avx512_tile_ymm<const R: usize, const PACKED: bool>(t: &mut Tile<'_>) {
    let (rs, ks) = if PACKED { (1, MR512) } else { (t.a_rs, t.a_ks) };
    for st in 0..t.stack {
        let a = t.a.as_ptr().wrapping_add(st * t.a_stack);
        let b = t.b.as_ptr();
        let mut acc0 = [Avx512(_mm512_setzero_ps()); R];
        let mut acc1y = [_mm256_setzero_ps(); R];
        // B's next panel, fetched into L2 while the first strip reads this one, as in [`tile`].
        let next = t.b.as_ptr().wrapping_add(t.b_stride);
        for p in 0..t.kc {
            if R >= 4 && st == 0 {
                prefetch_row(next, p, NR512);
            }
            // SAFETY: p < kc, and `check` proved the panel's kc * NR512 values inside b and
            // that every st * a_stack + (R - 1) * rs + p * ks (st < stack) lies inside a.
            unsafe {
                let b0 = _mm512_loadu_ps(b.add(p * NR512));
                let b1y = _mm256_loadu_ps(b.add(p * NR512 + 16));
                let ap = a.add(p * ks);
                for i in 0..R {
                    let ai = _mm512_set1_ps(*ap.add(i * rs));
                    acc0[i] = Avx512(_mm512_fmadd_ps(ai, b0, acc0[i].0));
                    acc1y[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(ai), b1y, acc1y[i]);
                }
            }
        }
        // Lanes 8..16 are zero, and the epilogue's mask leaves them unstored.
        // (A loop, not `map`: a closure would not have this function's target features, and
        // each conversion would be a call.)
        let mut acc1 = [Avx512(_mm512_setzero_ps()); R];
        for i in 0..R {
            acc1[i] = Avx512(_mm512_zextps256_ps512(acc1y[i]));
        }
        // SAFETY: this function's contract; st * R names a strip of the stack.
        unsafe { store::<Avx512, R, true>(&mut acc0, &mut acc1, t, st * R, 0) }
    }
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

/// [`tile`] on AVX2 and FMA.
///
/// # Safety
/// That of [`tile`] for [`Avx2`] with `MR256` rows.
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_tile<const R: usize, const PACKED: bool, const WIDE: bool>(t: &mut Tile<'_>) {
    // SAFETY: this function's contract.
    unsafe { tile::<Avx2, MR256, R, PACKED, WIDE>(t, false) }
}

/// [`indirect`] on AVX2 and FMA.
///
/// # Safety
/// That of [`indirect`] for [`Avx2`].
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_indirect<const R: usize, const WIDE: bool>(t: &mut Tile<'_>, s: usize) {
    // SAFETY: this function's contract.
    unsafe { indirect::<Avx2, R, WIDE>(t, s) }
}
