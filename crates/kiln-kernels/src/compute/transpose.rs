//! A strided block of a matrix transposed: the packing of a product's right operand from a
//! channels-last image, whose pixels (the operand's columns) each hold their channels (its
//! depth) side by side. AVX moves 8 x 8 blocks through registers (eight loads, 24 shuffles,
//! eight stores); the edges, and CPUs without AVX, copy value by value. Read by column and
//! written down the rows value by value, the same copy took a cycle a value (a store each).
#![allow(unsafe_code)]

/// `dst[k * ld_dst + j] = src[j * ld_src + k]` for every column `j < cols` and depth
/// `k < depth`; nothing else of `dst` is written. Panics when a slice is too short for that.
pub(crate) fn transpose(
    src: &[f32],
    ld_src: usize,
    cols: usize,
    depth: usize,
    dst: &mut [f32],
    ld_dst: usize,
) {
    if cols == 0 || depth == 0 {
        return;
    }
    assert!(src.len() >= (cols - 1) * ld_src + depth, "transpose: source too short");
    assert!(dst.len() >= (depth - 1) * ld_dst + cols, "transpose: destination too short");
    #[allow(unused_mut)]
    let mut done = [0, 0];
    #[cfg(target_arch = "x86_64")]
    if crate::compute::cpu::has_avx2() {
        // SAFETY: the CPU has AVX2, so AVX, the only feature the function enables; the lengths
        // were checked above.
        done = unsafe { x86::blocks(src, ld_src, cols, depth, dst, ld_dst) };
    }
    let [whole_cols, whole_depth] = done;
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
        for cols in [0, 1, 7, 8, 9, 16, 23] {
            for depth in [1, 5, 8, 13, 24] {
                let (ld_src, ld_dst) = (depth + 3, cols + 5);
                let src: Vec<f32> = (0..cols * ld_src).map(|i| i as f32).collect();
                let mut dst = vec![-1.0; depth * ld_dst];
                transpose(&src, ld_src, cols, depth, &mut dst, ld_dst);
                for k in 0..depth {
                    for j in 0..ld_dst {
                        let want = if j < cols { src[j * ld_src + k] } else { -1.0 };
                        assert_eq!(dst[k * ld_dst + j], want, "{cols}x{depth} at ({k}, {j})");
                    }
                }
            }
        }
    }
}
