//! The quad loops of [`super::xnn_qgemm`] and [`super::xnn_qd8`] for `Isa::AvxVnni`: AVX2
//! with AVX-VNNI's 256-bit `vpdpbusd`, the int8 dot product of the client cores without
//! AVX-512 (Alder Lake and later, Zen 5's desktop parts run the 512-bit form too).
//!
//! They read the very panels the AVX-512 VNNI loops read (`[k / 4][NR][4]` `i8`, 64 bytes a
//! quad): the first 32 bytes of a quad are channels 0-7, the next 32 channels 8-15, so each
//! panel is two 256-bit halves and each row two accumulators. With 16 vector registers a call
//! takes at most [`ROWS`] rows (8 accumulators, 2 weight vectors, a broadcast); more rows are
//! split into two calls of nearly equal size. The sums are the same wrapping `i32` of the
//! scalar loops (see [`super::xnn_qgemm`]'s exactness), the requantization the same float
//! operations in the same order as `requantize16`, so every output is bit-identical to the
//! AVX-512 and portable loops'.
#![allow(unsafe_code)]

use std::arch::x86_64::*;

use super::xnn_qmath::{Qs8Out, MAGIC_BIAS, MAGIC_BIAS_BITS};
use super::xnn_qpanel::{TapSrc, VnniOut, NR, PADDED};

/// The most rows one call takes (two accumulators each).
pub(crate) const ROWS: usize = 4;

/// The row counts of the calls that cover `rows` rows: one call up to [`ROWS`], else two of
/// nearly equal size (8 as 4 + 4, 5 as 3 + 2).
pub(crate) fn row_calls(rows: usize) -> impl Iterator<Item = (usize, usize)> {
    let first = match rows <= ROWS {
        true => rows,
        false => rows.div_ceil(2),
    };
    [(0, first), (first, rows - first)].into_iter().filter(|&(_, r)| r > 0)
}

/// A row-count-generic kernel, picked by row count minus one.
macro_rules! by_rows4 {
    ($f:ident) => {
        [$f::<1>, $f::<2>, $f::<3>, $f::<4>]
    };
}

/// The quad products of `R` rows (see `quad_product`), by row count minus one.
pub(crate) type QuadFn = unsafe fn(*const u8, usize, usize, *const i8, &VnniOut, *mut i8, usize);
pub(crate) const QUADS: [QuadFn; ROWS] = by_rows4!(quads);

/// The tap products (see `tap_product`) of `R` rows from row `r0` of the `src.rows` rows whose
/// offsets `src` holds, by row count minus one.
pub(crate) type TapFn = unsafe fn(&TapSrc, usize, *const i8, &VnniOut, *mut i8, usize);
pub(crate) const TAPS: [TapFn; ROWS] = by_rows4!(taps);

/// The raw quad sums of `R` rows (see `quad_sums_u8`): `(a, lda, w, k, acc)`, `acc` rows of
/// `NR` sums.
pub(crate) type SumFn = unsafe fn(*const u8, usize, *const i8, usize, *mut i32);
pub(crate) const SUMS: [SumFn; ROWS] = by_rows4!(sums);

/// The quad product of `R` rows, requantized.
///
/// # Safety
/// The CPU has AVX2 and AVX-VNNI; `a` holds `R` rows of `k` (a multiple of 4) values `lda`
/// apart, `w` holds `k * NR` values for each panel of `q.n` channels, `q`'s bias and scales
/// hold `q.n` values and `dst` `R` rows of them `ldd` apart.
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn quads<const R: usize>(
    a: *const u8,
    lda: usize,
    k: usize,
    w: *const i8,
    q: &VnniOut,
    dst: *mut i8,
    ldd: usize,
) {
    for c0 in (0..q.n).step_by(NR) {
        let (b, s) = panel_requant(q, c0);
        let rows: [*const u8; R] = std::array::from_fn(|r| a.wrapping_add(r * lda));
        // SAFETY: the caller's contract, for this panel.
        let c = unsafe { quad_loop(rows, k / 4, w.wrapping_add(c0 * k), b) };
        // SAFETY: `dst` holds the `R` rows (the caller's contract).
        unsafe { store_panel(&c, s, q, c0, dst, ldd) };
    }
}

/// The tap product of `R` rows, requantized.
///
/// # Safety
/// The CPU has AVX2 and AVX-VNNI; `src` holds `taps * src_rows` offsets (`src_rows` its row
/// count, `r0 + R` at most that), each [`PADDED`] or the start of `c` (a multiple of 4) values
/// of `x`, and `zp_row` `c` values; `w` holds `taps * c * NR` values for each panel of `q.n`
/// channels, `q`'s bias and scales `q.n` values and `dst` `R` rows of them `ldd` apart.
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn taps<const R: usize>(
    src: &TapSrc,
    r0: usize,
    w: *const i8,
    q: &VnniOut,
    dst: *mut i8,
    ldd: usize,
) {
    let k = src.taps * src.c;
    for c0 in (0..q.n).step_by(NR) {
        let (mut acc, s) = panel_requant(q, c0);
        let mut wp = w.wrapping_add(c0 * k);
        for t in 0..src.taps {
            // SAFETY: tap `t`'s offsets of rows `r0..r0 + R` are inside `offsets` (the
            // caller's contract).
            let rows: [*const u8; R] = std::array::from_fn(|r| {
                match unsafe { src.offsets.add(t * src.rows + r0 + r).read() } {
                    PADDED => src.zp_row,
                    at => src.x.wrapping_add(at),
                }
            });
            // SAFETY: each row's tap holds `c` values and the panel `c / 4` quads here.
            acc = unsafe { quad_loop(rows, src.c / 4, wp, acc) };
            wp = wp.wrapping_add(src.c * NR);
        }
        // SAFETY: `dst` holds the `R` rows (the caller's contract).
        unsafe { store_panel(&acc, s, q, c0, dst, ldd) };
    }
}

/// The unrequantized quad sums of `R` rows into `acc` (`R` rows of [`NR`]).
///
/// # Safety
/// The CPU has AVX2 and AVX-VNNI; `a` holds `R` rows of `k` (a multiple of 4) values `lda`
/// apart, `w` holds `k * NR` values and `acc` `R * NR` sums.
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn sums<const R: usize>(a: *const u8, lda: usize, w: *const i8, k: usize, acc: *mut i32) {
    let rows: [*const u8; R] = std::array::from_fn(|r| a.wrapping_add(r * lda));
    // SAFETY: the caller's contract.
    let c = unsafe { quad_loop(rows, k / 4, w, [[_mm256_setzero_si256(); 2]; R]) };
    for (r, [lo, hi]) in c.iter().enumerate() {
        // SAFETY: `acc` holds `R * NR` sums.
        unsafe {
            _mm256_storeu_si256(acc.wrapping_add(r * NR).cast(), *lo);
            _mm256_storeu_si256(acc.wrapping_add(r * NR + 8).cast(), *hi);
        }
    }
}

/// The biases and scales of the panel of channels from `c0` (`c0 < q.n`) as two halves each,
/// zero past the last channel.
#[inline]
#[target_feature(enable = "avx2")]
fn panel_requant<const R: usize>(q: &VnniOut, c0: usize) -> ([[__m256i; 2]; R], [__m256; 2]) {
    let live = (q.n - c0).min(NR);
    let (mut b, mut s) = ([0i32; NR], [0f32; NR]);
    // SAFETY: `q`'s bias and scales hold `q.n` values, so `live` from `c0` are readable.
    unsafe {
        std::ptr::copy_nonoverlapping(q.bias.wrapping_add(c0), b.as_mut_ptr(), live);
        std::ptr::copy_nonoverlapping(q.scales.wrapping_add(c0), s.as_mut_ptr(), live);
    }
    // SAFETY: the arrays hold 16 values, two vectors each.
    unsafe {
        let bias =
            [_mm256_loadu_si256(b.as_ptr().cast()), _mm256_loadu_si256(b.as_ptr().add(8).cast())];
        ([bias; R], [_mm256_loadu_ps(s.as_ptr()), _mm256_loadu_ps(s.as_ptr().add(8))])
    }
}

/// The `vpdpbusd` sums of `R` rows of `quads * 4` unsigned activations (`rows`) by a panel's
/// weights `[quads][NR][4]` at `w`, each row's two halves starting from its `init`.
///
/// # Safety
/// The CPU has AVX2 and AVX-VNNI; each row holds `quads * 4` values and `w` `quads * 4 * NR`.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn quad_loop<const R: usize>(
    mut rows: [*const u8; R],
    quads: usize,
    w: *const i8,
    init: [[__m256i; 2]; R],
) -> [[__m256i; 2]; R] {
    let mut c = init;
    let mut wp = w;
    for _ in 0..quads {
        // SAFETY: the current quad of each row and the current panel row are inside the
        // buffers (the caller's contract).
        unsafe {
            let (w0, w1) = (_mm256_loadu_si256(wp.cast()), _mm256_loadu_si256(wp.add(32).cast()));
            for (cr, ar) in c.iter_mut().zip(rows.iter_mut()) {
                let x = _mm256_set1_epi32(ar.cast::<i32>().read_unaligned());
                cr[0] = _mm256_dpbusd_avx_epi32(cr[0], x, w0);
                cr[1] = _mm256_dpbusd_avx_epi32(cr[1], x, w1);
                *ar = ar.add(4);
            }
        }
        wp = wp.wrapping_add(4 * NR);
    }
    c
}

/// Requantizes `R` rows of one panel's sums (bias added) and stores the live channels at
/// column `c0`: `requantize16`'s operations on two halves, then packed to 16 bytes with
/// saturating packs that change nothing (every value is already in `[qmin, qmax]`).
///
/// # Safety
/// The CPU has AVX2; `dst` holds `R` rows of `q.n` values `ldd` apart.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn store_panel<const R: usize>(
    c: &[[__m256i; 2]; R],
    scales: [__m256; 2],
    q: &VnniOut,
    c0: usize,
    dst: *mut i8,
    ldd: usize,
) {
    let live = (q.n - c0).min(NR);
    for (r, [lo, hi]) in c.iter().enumerate() {
        let (lo, hi) = (requantize8(*lo, scales[0], &q.o), requantize8(*hi, scales[1], &q.o));
        // i16 lanes [lo 0-3, hi 0-3 | lo 4-7, hi 4-7], reordered to [lo | hi].
        let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(lo, hi));
        let bytes =
            _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256::<1>(words));
        let d = dst.wrapping_add(r * ldd + c0);
        // SAFETY: row `r` of `dst` holds the live channels from `c0` (the caller's contract);
        // a partial panel goes through a local copy so that only they are written.
        unsafe {
            match live {
                NR => _mm_storeu_si128(d.cast(), bytes),
                _ => {
                    let mut t = [0i8; NR];
                    _mm_storeu_si128(t.as_mut_ptr().cast(), bytes);
                    std::ptr::copy_nonoverlapping(t.as_ptr(), d, live);
                }
            }
        }
    }
}

/// `requantize16` of 8 sums: the same float operations in the same order.
#[inline]
#[target_feature(enable = "avx2")]
fn requantize8(acc: __m256i, scales: __m256, o: &Qs8Out) -> __m256i {
    let (lo, hi) = ((o.qmin - o.zero_point) as f32, (o.qmax - o.zero_point) as f32);
    let v = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scales);
    let v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
    let bits = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(MAGIC_BIAS)));
    _mm256_sub_epi32(bits, _mm256_set1_epi32(MAGIC_BIAS_BITS.wrapping_sub(o.zero_point)))
}
