//! Channel planes interleaved pixel by pixel (planar to channels-last): an image's three
//! colour planes copied into `[r, g, b]` pixels, the copy a network's first convolution
//! makes of its NCHW input. AVX-512 permutes 16 pixels at a time (three loads, six
//! permutes, three stores); the rest, and CPUs without it, copy value by value.
#![allow(unsafe_code)]

/// `out[3 * i + c] = [r, g, b][c][i]` for every pixel `i`. Panics unless the three planes
/// have the same length and `out` three times it.
pub(crate) fn interleave3(r: &[f32], g: &[f32], b: &[f32], out: &mut [f32]) {
    let n = r.len();
    assert!(g.len() == n && b.len() == n && out.len() == 3 * n, "interleave3: lengths");
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::compute::cpu::has_avx512() {
        // SAFETY: the CPU has AVX-512F, the only feature the function enables; the lengths
        // were checked above.
        done = unsafe { x86::interleave3_avx512(r, g, b, out) };
    }
    let rgb = r[done..].iter().zip(&g[done..]).zip(&b[done..]);
    for (px, ((&r, &g), &b)) in out[3 * done..].chunks_exact_mut(3).zip(rgb) {
        px.copy_from_slice(&[r, g, b]);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// For output vector `v` (values `16v..16v + 16` of 16 interleaved pixels), lane `l`
    /// holds channel `(16v + l) % 3` of pixel `(16v + l) / 3`: `RG[v]` picks the red and
    /// green ones from the red (index < 16) and green (index 16 + p) vectors, `B[v]` the
    /// pixel of the blue ones, whose lanes `BLUE[v]` marks.
    const fn tables() -> ([[i32; 16]; 3], [[i32; 16]; 3], [u16; 3]) {
        let (mut rg, mut b, mut blue) = ([[0; 16]; 3], [[0; 16]; 3], [0u16; 3]);
        let mut v = 0;
        while v < 3 {
            let mut l = 0;
            while l < 16 {
                let e = 16 * v + l;
                let (p, ch) = ((e / 3) as i32, e % 3);
                b[v][l] = p;
                rg[v][l] = match ch {
                    0 => p,
                    1 => 16 + p,
                    _ => 0,
                };
                if ch == 2 {
                    blue[v] |= 1 << l;
                }
                l += 1;
            }
            v += 1;
        }
        (rg, b, blue)
    }

    const TABLES: ([[i32; 16]; 3], [[i32; 16]; 3], [u16; 3]) = tables();

    /// [`super::interleave3`] of the whole vectors of 16 pixels; returns the pixels done.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `g` and `b` are as long as `r`, `out` three times as long.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn interleave3_avx512(
        r: &[f32],
        g: &[f32],
        b: &[f32],
        out: &mut [f32],
    ) -> usize {
        let whole = r.len() / 16 * 16;
        let (rg, bl, blue) = &TABLES;
        let (mut rg_idx, mut b_idx) = ([_mm512_setzero_si512(); 3], [_mm512_setzero_si512(); 3]);
        for v in 0..3 {
            // SAFETY: each table row is 16 i32 values, the 64 bytes read.
            unsafe {
                rg_idx[v] = _mm512_loadu_si512(rg[v].as_ptr().cast());
                b_idx[v] = _mm512_loadu_si512(bl[v].as_ptr().cast());
            }
        }
        for i in (0..whole).step_by(16) {
            // SAFETY: i + 16 <= whole <= r.len() = g.len() = b.len(), and the three stores
            // write out[3i..3i + 48], inside `out` (3 * r.len() values).
            unsafe {
                let vr = _mm512_loadu_ps(r.as_ptr().add(i));
                let vg = _mm512_loadu_ps(g.as_ptr().add(i));
                let vb = _mm512_loadu_ps(b.as_ptr().add(i));
                for v in 0..3 {
                    let t = _mm512_permutex2var_ps(vr, rg_idx[v], vg);
                    let o = _mm512_mask_permutexvar_ps(t, blue[v], b_idx[v], vb);
                    _mm512_storeu_ps(out.as_mut_ptr().add(3 * i + 16 * v), o);
                }
            }
        }
        whole
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length (whole vectors and tails), NaN payloads kept: the plain loop's bits.
    #[test]
    fn interleave3_matches_the_plain_loop() {
        let mut rng = fastrand::Rng::with_seed(0x3c);
        for n in (0..80).chain([223, 224, 225, 1000]) {
            let plane = |rng: &mut fastrand::Rng| -> Vec<f32> {
                (0..n).map(|_| f32::from_bits(rng.u32(..))).collect()
            };
            let (r, g, b) = (plane(&mut rng), plane(&mut rng), plane(&mut rng));
            let mut want = vec![0u32; 3 * n];
            for i in 0..n {
                want[3 * i] = r[i].to_bits();
                want[3 * i + 1] = g[i].to_bits();
                want[3 * i + 2] = b[i].to_bits();
            }
            let mut out = vec![f32::NAN; 3 * n];
            interleave3(&r, &g, &b, &mut out);
            let got: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, want, "n = {n}");
        }
    }

    #[test]
    #[should_panic(expected = "lengths")]
    fn mismatched_lengths_panic() {
        interleave3(&[0.0; 4], &[0.0; 4], &[0.0; 3], &mut [0.0; 12]);
    }
}
