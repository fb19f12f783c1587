//! A strided block of a matrix transposed: the packing of a product's right operand from a
//! channels-last image, whose pixels (the operand's columns) each hold their channels (its
//! depth) side by side. AVX moves 8 x 8 blocks through registers (eight loads, 24 shuffles,
//! eight stores), bytes go in 16 x 16 blocks, and three byte planes (an RGB image) are
//! interleaved by `pshufb`; the edges, and CPUs without those, copy value by value. Read by
//! column and written down the rows value by value, the same copy took a cycle a value (a store
//! each).
#![allow(unsafe_code)]

/// A value a transpose moves: 32-bit values go through AVX registers in 8 x 8 blocks, bytes
/// through SSE2 registers in 16 x 16 blocks, others are copied in 8 x 8 tiles value by value
/// (each tile's reads and writes stay in a few cache lines).
pub(crate) trait Moved: Copy {
    /// [`transpose`] of the whole blocks; returns the columns and the depth they cover. The
    /// slices are long enough (checked by [`transpose`]).
    fn blocks(
        src: &[Self],
        ld_src: usize,
        cols: usize,
        depth: usize,
        dst: &mut [Self],
        ld_dst: usize,
    ) -> [usize; 2] {
        let (whole_cols, whole_depth) = (cols / 8 * 8, depth / 8 * 8);
        tiles(src, ld_src, whole_cols, whole_depth, dst, ld_dst);
        [whole_cols, whole_depth]
    }
}

/// [`transpose`] of `cols x depth` (multiples of 8) in 8 x 8 tiles, value by value.
fn tiles<T: Copy>(
    src: &[T],
    ld_src: usize,
    cols: usize,
    depth: usize,
    dst: &mut [T],
    ld_dst: usize,
) {
    for j in (0..cols).step_by(8) {
        for k in (0..depth).step_by(8) {
            for r in k..k + 8 {
                let row = &mut dst[r * ld_dst + j..][..8];
                for (c, d) in row.iter_mut().enumerate() {
                    *d = src[(j + c) * ld_src + r];
                }
            }
        }
    }
}

impl Moved for u16 {}
impl Moved for u64 {}

impl Moved for u8 {
    fn blocks(
        src: &[u8],
        ld_src: usize,
        cols: usize,
        depth: usize,
        dst: &mut [u8],
        ld_dst: usize,
    ) -> [usize; 2] {
        #[cfg(target_arch = "x86_64")]
        if cols == 3 && ld_dst == 3 && depth >= 16 && crate::compute::cpu::features().ssse3 {
            // Three planes into pixels of three (an RGB image made channels-last: 87 us a
            // 224 x 224 image a byte at a time, the first step of every int8 CNN export).
            let whole = depth / 16 * 16;
            let planes = [0, 1, 2].map(|j| &src[j * ld_src..][..whole]);
            // SAFETY: the CPU has SSSE3; each plane holds `whole` bytes and `dst` (checked by
            // `transpose`) at least `3 * whole`.
            unsafe { x86::interleave3_u8(planes, &mut dst[..3 * whole]) };
            return [3, whole];
        }
        #[cfg(target_arch = "x86_64")]
        {
            // Blocks at every multiple of 16, and a last one ending at the edge that overlaps
            // the one before (it writes the very values again): no value-by-value edge, which
            // with 58 channels moved a sixth of an image a byte at a time, across rows.
            let starts = |n: usize| {
                let last = (n >= 16 && !n.is_multiple_of(16)).then(|| n - 16);
                (0..n / 16 * 16).step_by(16).chain(last)
            };
            let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
            for j in starts(cols) {
                for k in starts(depth) {
                    // SAFETY: the block reads `src[(j + c) * ld_src + k..][..16]` for `c < 16`,
                    // within the length `transpose` checked since `j + 16 <= cols` and
                    // `k + 16 <= depth`, and writes `dst[(k + r) * ld_dst + j..][..16]` for
                    // `r < 16`, likewise. SSE2 is part of every x86-64 CPU.
                    unsafe {
                        x86::block_u8(s.add(j * ld_src + k), ld_src, d.add(k * ld_dst + j), ld_dst)
                    };
                }
            }
            let covered = |n: usize| if n >= 16 { n } else { 0 };
            [covered(cols), covered(depth)]
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let (whole_cols, whole_depth) = (cols / 8 * 8, depth / 8 * 8);
            tiles(src, ld_src, whole_cols, whole_depth, dst, ld_dst);
            [whole_cols, whole_depth]
        }
    }
}

impl Moved for f32 {
    fn blocks(
        src: &[f32],
        ld_src: usize,
        cols: usize,
        depth: usize,
        dst: &mut [f32],
        ld_dst: usize,
    ) -> [usize; 2] {
        #[cfg(target_arch = "x86_64")]
        if crate::compute::cpu::has_avx2() {
            // SAFETY: the CPU has AVX2, so AVX, the only feature the function enables;
            // `transpose` checked the lengths.
            return unsafe { x86::blocks(src, ld_src, cols, depth, dst, ld_dst) };
        }
        let (whole_cols, whole_depth) = (cols / 8 * 8, depth / 8 * 8);
        tiles(src, ld_src, whole_cols, whole_depth, dst, ld_dst);
        [whole_cols, whole_depth]
    }
}

/// `dst[k * ld_dst + j] = src[j * ld_src + k]` for every column `j < cols` and depth
/// `k < depth`; nothing else of `dst` is written. Panics when a slice is too short for that.
pub(crate) fn transpose<T: Moved>(
    src: &[T],
    ld_src: usize,
    cols: usize,
    depth: usize,
    dst: &mut [T],
    ld_dst: usize,
) {
    if cols == 0 || depth == 0 {
        return;
    }
    assert!(src.len() >= (cols - 1) * ld_src + depth, "transpose: source too short");
    assert!(dst.len() >= (depth - 1) * ld_dst + cols, "transpose: destination too short");
    let [whole_cols, whole_depth] = T::blocks(src, ld_src, cols, depth, dst, ld_dst);
    // The depth past the blocks, for the columns they covered; then the columns past them.
    for j in 0..whole_cols {
        for k in whole_depth..depth {
            dst[k * ld_dst + j] = src[j * ld_src + k];
        }
    }
    for j in whole_cols..cols {
        let column = &src[j * ld_src..][..depth];
        for (row, &v) in dst.chunks_mut(ld_dst).zip(column) {
            row[j] = v;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// [`super::transpose`] of the whole 8 x 8 blocks; returns the columns and the depth they
    /// cover (multiples of 8).
    ///
    /// # Safety
    /// The CPU has AVX; `src` holds `(cols - 1) * ld_src + depth` values and `dst`
    /// `(depth - 1) * ld_dst + cols`.
    #[target_feature(enable = "avx")]
    pub(super) unsafe fn blocks(
        src: &[f32],
        ld_src: usize,
        cols: usize,
        depth: usize,
        dst: &mut [f32],
        ld_dst: usize,
    ) -> [usize; 2] {
        let (whole_cols, whole_depth) = (cols / 8 * 8, depth / 8 * 8);
        let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
        for j in (0..whole_cols).step_by(8) {
            for k in (0..whole_depth).step_by(8) {
                // SAFETY: the block reads `src[(j + c) * ld_src + k..][..8]` for `c < 8`, within
                // the caller's length since `j + 8 <= cols` and `k + 8 <= depth`, and writes
                // `dst[(k + r) * ld_dst + j..][..8]` for `r < 8`, likewise.
                unsafe { block(s.add(j * ld_src + k), ld_src, d.add(k * ld_dst + j), ld_dst) };
            }
        }
        [whole_cols, whole_depth]
    }

    /// `dst[3 * k + j] = planes[j][k]`: 16 pixels at a time, each 16-byte output the OR of
    /// one `pshufb` of each plane (the bytes of the other planes' lanes zeroed).
    ///
    /// # Safety
    /// The CPU has SSSE3; the planes hold a multiple of 16 bytes, all as many, and `dst`
    /// three times that.
    #[target_feature(enable = "ssse3")]
    pub(super) unsafe fn interleave3_u8(planes: [&[u8]; 3], dst: &mut [u8]) {
        // Lane `i` of output vector `v` is byte `16 v + i` of 48: pixel `(16 v + i) / 3` of
        // plane `(16 v + i) % 3`; -1 (bit 7 set) zeroes the lane.
        const fn mask(v: usize, plane: usize) -> [i8; 16] {
            let mut m = [-1i8; 16];
            let mut i = 0;
            while i < 16 {
                let g = 16 * v + i;
                if g % 3 == plane {
                    m[i] = (g / 3) as i8;
                }
                i += 1;
            }
            m
        }
        const MASKS: [[[i8; 16]; 3]; 3] = {
            let mut all = [[[0i8; 16]; 3]; 3];
            let mut v = 0;
            while v < 3 {
                let mut p = 0;
                while p < 3 {
                    all[v][p] = mask(v, p);
                    p += 1;
                }
                v += 1;
            }
            all
        };
        let n = planes[0].len();
        assert!(planes.iter().all(|p| p.len() == n) && n.is_multiple_of(16) && dst.len() >= 3 * n);
        // SAFETY: every load reads 16 bytes at `k < n` of a plane of `n` bytes, every store 16
        // at `3 k + 16 v < 3 n`, inside `dst`.
        unsafe {
            let masks = MASKS.map(|v| v.map(|m| _mm_loadu_si128(m.as_ptr().cast())));
            for k in (0..n).step_by(16) {
                let x = planes.map(|p| _mm_loadu_si128(p.as_ptr().add(k).cast()));
                for (v, m) in masks.iter().enumerate() {
                    let a = _mm_shuffle_epi8(x[0], m[0]);
                    let b = _mm_shuffle_epi8(x[1], m[1]);
                    let c = _mm_shuffle_epi8(x[2], m[2]);
                    let out = _mm_or_si128(_mm_or_si128(a, b), c);
                    _mm_storeu_si128(dst.as_mut_ptr().add(3 * k + 16 * v).cast(), out);
                }
            }
        }
    }

    /// One 16 x 16 block of bytes: row `c` of the source (16 bytes from `s + c * ld_s`) becomes
    /// column `c` of the destination. Four rounds of interleaving row `i` with row `i + 8`
    /// (`unpacklo` / `unpackhi` bytes into rows `2i` and `2i + 1`): each round moves the top
    /// bit of the column index into the row index and the top bit of the row index into the
    /// column index, so four rounds exchange them.
    ///
    /// # Safety
    /// Those 256 bytes are readable and writable.
    #[inline]
    pub(super) unsafe fn block_u8(s: *const u8, ld_s: usize, d: *mut u8, ld_d: usize) {
        // SAFETY: the caller's contract covers every load and store.
        let mut r: [__m128i; 16] =
            std::array::from_fn(|c| unsafe { _mm_loadu_si128(s.add(c * ld_s).cast()) });
        for _ in 0..4 {
            r = std::array::from_fn(|i| {
                let (x, y) = (r[i / 2], r[i / 2 + 8]);
                if i % 2 == 0 {
                    _mm_unpacklo_epi8(x, y)
                } else {
                    _mm_unpackhi_epi8(x, y)
                }
            });
        }
        for (row, v) in r.into_iter().enumerate() {
            // SAFETY: as above.
            unsafe { _mm_storeu_si128(d.add(row * ld_d).cast(), v) };
        }
    }

    /// One 8 x 8 block: row `c` of the source (8 values from `s + c * ld_s`) becomes column
    /// `c` of the destination (value `r` at `d + r * ld_d + c`).
    ///
    /// # Safety
    /// The CPU has AVX; those 64 values are readable and writable.
    #[inline]
    #[target_feature(enable = "avx")]
    unsafe fn block(s: *const f32, ld_s: usize, d: *mut f32, ld_d: usize) {
        // SAFETY: the caller's contract covers every load and store below.
        unsafe {
            let r: [__m256; 8] = std::array::from_fn(|c| _mm256_loadu_ps(s.add(c * ld_s)));
            // Pairs of rows interleaved (low and high halves of each 128-bit lane), then pairs
            // of those, then the 128-bit halves exchanged.
            let t: [__m256; 8] = std::array::from_fn(|i| {
                let (x, y) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
                if i % 2 == 0 {
                    _mm256_unpacklo_ps(x, y)
                } else {
                    _mm256_unpackhi_ps(x, y)
                }
            });
            let q: [__m256; 8] = std::array::from_fn(|i| {
                let (x, y) = (t[i / 4 * 4 + i % 4 / 2], t[i / 4 * 4 + i % 4 / 2 + 2]);
                if i % 2 == 0 {
                    _mm256_shuffle_ps::<0x44>(x, y)
                } else {
                    _mm256_shuffle_ps::<0xEE>(x, y)
                }
            });
            let out: [__m256; 8] = std::array::from_fn(|i| {
                if i < 4 {
                    _mm256_permute2f128_ps::<0x20>(q[i], q[i + 4])
                } else {
                    _mm256_permute2f128_ps::<0x31>(q[i - 4], q[i])
                }
            });
            for (r, v) in out.into_iter().enumerate() {
                _mm256_storeu_ps(d.add(r * ld_d), v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::transpose;

    /// Every shape around the block size, with padding in both strides: each value lands
    /// where the definition puts it and nothing else of the destination is touched.
    #[test]
    fn transposes_every_value_and_nothing_else() {
        for cols in [0, 1, 7, 8, 9, 16, 23, 40] {
            for depth in [1, 5, 8, 13, 24, 58] {
                let (ld_src, ld_dst) = (depth + 3, cols + 5);
                let src: Vec<f32> = (0..cols * ld_src).map(|i| i as f32).collect();
                let mut dst = vec![-1.0; depth * ld_dst];
                transpose(&src, ld_src, cols, depth, &mut dst, ld_dst);
                // Bytes take 16 x 16 blocks (the last one of a row or column overlapping the
                // one before) where both sides reach 16, else values one by one.
                let bytes: Vec<u8> = (0..cols * ld_src).map(|i| (i % 251) as u8).collect();
                let mut moved = vec![255u8; depth * ld_dst];
                transpose(&bytes, ld_src, cols, depth, &mut moved, ld_dst);
                for k in 0..depth {
                    for j in 0..ld_dst {
                        let want = if j < cols { src[j * ld_src + k] } else { -1.0 };
                        assert_eq!(dst[k * ld_dst + j], want, "{cols}x{depth} at ({k}, {j})");
                        let want = if j < cols { bytes[j * ld_src + k] } else { 255 };
                        assert_eq!(moved[k * ld_dst + j], want, "u8 {cols}x{depth} at ({k}, {j})");
                    }
                }
            }
        }
    }

    /// Three byte planes into pixels of three (the SSSE3 interleave on CPUs that have it, then
    /// the tail), at lengths around its 16-pixel step.
    #[test]
    fn interleaves_three_planes() {
        for depth in [1, 15, 16, 17, 47, 48, 50, 1000] {
            let ld_src = depth + 7;
            let planes: Vec<u8> = (0..3 * ld_src).map(|i| (i * 7 % 253) as u8).collect();
            let mut pixels = vec![0u8; 3 * depth];
            transpose(&planes, ld_src, 3, depth, &mut pixels, 3);
            for (k, px) in pixels.chunks_exact(3).enumerate() {
                let want = [0, 1, 2].map(|j| planes[j * ld_src + k]);
                assert_eq!(px, want, "depth {depth} pixel {k}");
            }
        }
    }
}
