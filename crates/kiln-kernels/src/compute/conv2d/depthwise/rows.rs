//! The inner loops of the direct depthwise convolution ([`crate::compute::conv2d`]): each output value
//! a sum of shifted input rows plus an epilogue. For output row `oy`, column `j`:
//! `s = sum_ky sum_t weights[ky][t] * row(oy * stride + ky * dilation - padding)[taps[t] + j]`
//! over the rows inside the plane, summed in `ky`, `t` order from zero, one fused multiply-add
//! per term; then `out = clamp((s + bias) + residual)` (NaN passes the clamp). The
//! AVX-512F, AVX2 and portable versions give the same bits.
#![allow(unsafe_code)]

/// Outputs per chunk. Every row of the plane must hold `taps[t] + out.len().div_ceil(LANES)
/// * LANES` values from its start, so the last (partial) chunk reads whole vectors.
pub(crate) const LANES: usize = 16;

/// The input rows output row `oy` sums: rows `first, first + dilation, ...` of the plane for
/// taps `ky` in `ky0..ky1` (the others fall in the padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowSpan {
    pub first: usize,
    pub ky0: usize,
    pub ky1: usize,
}

/// The [`RowSpan`] of each of `oh` output rows over a plane of `rows` input rows.
pub(crate) fn row_spans(
    rows: usize,
    oh: usize,
    kh: usize,
    stride: usize,
    dilation: usize,
    padding: usize,
) -> Vec<RowSpan> {
    (0..oh)
        .map(|oy| {
            let (top, d, p) = (oy * stride, dilation, padding);
            let ky0 = if p > top { (p - top).div_ceil(d) } else { 0 }.min(kh);
            let ky1 = if rows + p > top { (rows + p - top).div_ceil(d).min(kh) } else { 0 };
            let ky1 = ky1.max(ky0);
            RowSpan { first: (top + ky0 * d).saturating_sub(p), ky0, ky1 }
        })
        .collect()
}

/// A channel plane laid out for the sums: input rows of `row_len` values each; output row
/// `oy` sums the rows `spans[oy]` names (`weights` holds `taps.len()` weights per `ky`).
#[derive(Clone, Copy)]
pub(crate) struct TapPlane<'a> {
    pub plane: &'a [f32],
    pub row_len: usize,
    pub spans: &'a [RowSpan],
    pub dilation: usize,
    pub weights: &'a [f32],
    pub taps: &'a [usize],
}

impl<'a> TapPlane<'a> {
    /// The rows output row `oy` sums.
    #[inline(always)]
    fn rows_of(&self, oy: usize) -> TapRows<'a> {
        let span = self.spans[oy];
        let kw = self.taps.len();
        TapRows {
            plane: self.plane,
            first: span.first * self.row_len,
            step: self.dilation * self.row_len,
            rows: span.ky1 - span.ky0,
            weights: &self.weights[span.ky0 * kw..span.ky1 * kw],
            taps: self.taps,
        }
    }
}

/// The rows of one output row's sum: row `r < rows` starts at `plane[first + r * step]`,
/// and `weights` holds `taps.len()` weights per row.
#[derive(Clone, Copy)]
struct TapRows<'a> {
    plane: &'a [f32],
    first: usize,
    step: usize,
    rows: usize,
    weights: &'a [f32],
    taps: &'a [usize],
}

/// What is added to each sum, and the clamp after it.
#[derive(Clone, Copy)]
pub(crate) struct TapEpilogue<'a> {
    pub bias: f32,
    /// Shaped as the output.
    pub residual: Option<&'a [f32]>,
    pub clamp: Option<(f32, f32)>,
}

impl TapRows<'_> {
    /// The `LANES` values term `(r, t)` of chunk `c` reads. Panics when the plane is too
    /// short, which [`crate::compute::conv2d`] rules out by sizing each phased row for its taps.
    #[inline(always)]
    fn values(&self, r: usize, tap: usize, c: usize) -> &[f32] {
        &self.plane[self.first + r * self.step + tap + c * LANES..][..LANES]
    }

    #[inline(always)]
    fn row_weights(&self, r: usize) -> &[f32] {
        &self.weights[r * self.taps.len()..][..self.taps.len()]
    }
}

impl TapPlane<'_> {
    /// Whether every value the sums of `rows_out` output rows of `chunks` chunks read lies
    /// inside the plane.
    fn covers(&self, rows_out: usize, chunks: usize) -> bool {
        let kw = self.taps.len();
        let reach = || -> Option<bool> {
            let width = self.taps.iter().max()?.checked_add(chunks.checked_mul(LANES)?)?;
            let mut ok = self.spans.len() >= rows_out;
            for span in self.spans.iter().take(rows_out) {
                ok &= span.ky0 <= span.ky1 && span.ky1.checked_mul(kw)? <= self.weights.len();
                if span.ky1 > span.ky0 {
                    let last_row = span.first + (span.ky1 - span.ky0 - 1) * self.dilation;
                    ok &=
                        last_row.checked_mul(self.row_len)?.checked_add(width)? <= self.plane.len();
                }
            }
            Some(ok)
        };
        kw > 0 && reach() == Some(true)
    }
}

/// Computes the output plane `out` (rows of `ow` values; see the module docs). Panics when a
/// sum would read outside the plane or the residual is shorter than `out` (caller bugs:
/// [`crate::compute::conv2d`] sizes the plane for its taps).
pub(crate) fn sum_taps(out: &mut [f32], ow: usize, plane: TapPlane<'_>, ep: TapEpilogue<'_>) {
    if ow == 0 || out.len() < ow {
        return;
    }
    let ep = TapEpilogue { residual: ep.residual.map(|r| &r[..out.len()]), ..ep };
    assert!(plane.covers(out.len() / ow, ow.div_ceil(LANES)), "depthwise: taps outside the plane");
    #[cfg(target_arch = "x86_64")]
    {
        use crate::compute::cpu::{has_avx2, has_avx512};
        if has_avx512() {
            // SAFETY: the CPU has AVX-512F, the only feature the function enables, and the
            // plane covers the sums (asserted above).
            return unsafe { x86::sum_taps_avx512(out, ow, plane, ep) };
        }
        if has_avx2() {
            // SAFETY: the CPU has AVX2 and FMA, the features the function enables.
            return unsafe { x86::sum_taps_avx2(out, ow, plane, ep) };
        }
    }
    sum_taps_portable(out, ow, plane, ep)
}

/// `min(max(v, lo), hi)` exactly as `_mm512_max_ps(lo, v)` then `_mm512_min_ps(hi, v)`
/// compute it (each returns its second operand when the comparison fails): NaN passes, and
/// the scalar paths give the vector paths' bits, signed zeros included.
#[inline(always)]
pub(crate) fn clamp_as_vectors(v: f32, lo: f32, hi: f32) -> f32 {
    let v = if lo > v { lo } else { v };
    if hi < v {
        hi
    } else {
        v
    }
}

/// The residual of output row `oy`.
#[inline(always)]
fn row_residual<'a>(ep: TapEpilogue<'a>, oy: usize, ow: usize) -> TapEpilogue<'a> {
    TapEpilogue { residual: ep.residual.map(|r| &r[oy * ow..][..ow]), ..ep }
}

/// The epilogue of chunk `c` on its sums, into `out` (at most `LANES` values).
#[inline(always)]
fn finish(sums: &[f32; LANES], c: usize, out: &mut [f32], ep: TapEpilogue<'_>) {
    for (j, (o, &s)) in out.iter_mut().zip(sums).enumerate() {
        let mut v = s + ep.bias;
        if let Some(r) = ep.residual {
            v += r[c * LANES + j];
        }
        if let Some((lo, hi)) = ep.clamp {
            v = clamp_as_vectors(v, lo, hi);
        }
        *o = v;
    }
}

fn sum_taps_portable(out: &mut [f32], ow: usize, plane: TapPlane<'_>, ep: TapEpilogue<'_>) {
    for (oy, out) in out.chunks_exact_mut(ow).enumerate() {
        sum_row_portable(out, plane.rows_of(oy), row_residual(ep, oy, ow));
    }
}

fn sum_row_portable(out: &mut [f32], rows: TapRows<'_>, ep: TapEpilogue<'_>) {
    for (c, out) in out.chunks_mut(LANES).enumerate() {
        let mut v = [0f32; LANES];
        for r in 0..rows.rows {
            for (&tap, &w) in rows.taps.iter().zip(rows.row_weights(r)) {
                for (v, &x) in v.iter_mut().zip(rows.values(r, tap, c)) {
                    *v = w.mul_add(x, *v);
                }
            }
        }
        finish(&v, c, out, ep);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{finish, row_residual, TapEpilogue, TapPlane, TapRows, LANES};

    /// Chunks whose sums run interleaved: one chunk's sum is a chain of dependent adds, so
    /// the AVX-512 version keeps this many chains in flight. Chunks interleave when their
    /// output rows read the same taps `ky` (every row but those near the top and bottom
    /// padding), so one weight broadcast serves them all.
    const CHAINS: usize = 4;

    /// # Safety
    /// The CPU must have AVX-512F, and `plane.covers(out.len() / ow, ow.div_ceil(LANES))`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn sum_taps_avx512(
        out: &mut [f32],
        ow: usize,
        plane: TapPlane<'_>,
        ep: TapEpilogue<'_>,
    ) {
        let (chunks, rows_out, kw) = (ow.div_ceil(LANES), out.len() / ow, plane.taps.len());
        let step = plane.dilation * plane.row_len;
        // The first value chunk `c` of output row `oy` reads (tap offset 0, first row).
        let start = |oy: usize, c: usize| {
            plane.plane.as_ptr().wrapping_add(plane.spans[oy].first * plane.row_len + c * LANES)
        };
        let (mut oy, mut c) = (0, 0);
        while oy < rows_out {
            let span = plane.spans[oy];
            let mut jobs = [(0, 0); CHAINS];
            let mut n = 0;
            while n < CHAINS && oy < rows_out && {
                let s = plane.spans[oy];
                (s.ky0, s.ky1) == (span.ky0, span.ky1)
            } {
                jobs[n] = (oy, c);
                n += 1;
                c += 1;
                if c == chunks {
                    (oy, c) = (oy + 1, 0);
                }
            }
            let weights = &plane.weights[span.ky0 * kw..span.ky1 * kw];
            if n == CHAINS {
                let p: [*const f32; CHAINS] = std::array::from_fn(|k| start(jobs[k].0, jobs[k].1));
                let mut v = [_mm512_setzero_ps(); CHAINS];
                for (r, wr) in weights.chunks_exact(kw).enumerate() {
                    for (&tap, &w) in plane.taps.iter().zip(wr) {
                        let w = _mm512_set1_ps(w);
                        for (v, p) in v.iter_mut().zip(p) {
                            // SAFETY: `covers` checked that row `r` of this span holds
                            // `tap + 16` values from the chunk's start.
                            let x = unsafe { _mm512_loadu_ps(p.add(r * step + tap)) };
                            *v = _mm512_fmadd_ps(w, x, *v);
                        }
                    }
                }
                for (v, (oy, c)) in v.into_iter().zip(jobs) {
                    // SAFETY: the caller's CPU has AVX-512F.
                    unsafe { finish_avx512(v, out, ow, oy, c, ep) };
                }
            } else {
                for &(oy, c) in &jobs[..n] {
                    let p = start(oy, c);
                    let mut v = _mm512_setzero_ps();
                    for (r, wr) in weights.chunks_exact(kw).enumerate() {
                        for (&tap, &w) in plane.taps.iter().zip(wr) {
                            // SAFETY: as above.
                            let x = unsafe { _mm512_loadu_ps(p.add(r * step + tap)) };
                            v = _mm512_fmadd_ps(_mm512_set1_ps(w), x, v);
                        }
                    }
                    // SAFETY: the caller's CPU has AVX-512F.
                    unsafe { finish_avx512(v, out, ow, oy, c, ep) };
                }
            }
        }
    }

    /// The epilogue of chunk `c` of output row `oy`, stored into `out`.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn finish_avx512(
        mut v: __m512,
        out: &mut [f32],
        ow: usize,
        oy: usize,
        c: usize,
        ep: TapEpilogue<'_>,
    ) {
        let at = oy * ow + c * LANES;
        let out = &mut out[at..][..LANES.min(ow - c * LANES)];
        let mask = ((1u32 << out.len()) - 1) as __mmask16;
        v = _mm512_add_ps(v, _mm512_set1_ps(ep.bias));
        if let Some(res) = ep.residual {
            let res = &res[at..][..out.len()];
            // SAFETY: the mask selects the `out.len()` lanes `res` holds.
            v = _mm512_add_ps(v, unsafe { _mm512_maskz_loadu_ps(mask, res.as_ptr()) });
        }
        if let Some((lo, hi)) = ep.clamp {
            v = _mm512_max_ps(_mm512_set1_ps(lo), v);
            v = _mm512_min_ps(_mm512_set1_ps(hi), v);
        }
        // SAFETY: the mask selects the `out.len()` lanes `out` holds.
        unsafe { _mm512_mask_storeu_ps(out.as_mut_ptr(), mask, v) };
    }

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sum_taps_avx2(
        out: &mut [f32],
        ow: usize,
        plane: TapPlane<'_>,
        ep: TapEpilogue<'_>,
    ) {
        for (oy, out) in out.chunks_exact_mut(ow).enumerate() {
            // SAFETY: the caller's CPU has AVX2 and FMA.
            unsafe { row_avx2(out, plane.rows_of(oy), row_residual(ep, oy, ow)) };
        }
    }

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn row_avx2(out: &mut [f32], rows: TapRows<'_>, ep: TapEpilogue<'_>) {
        for (c, out) in out.chunks_mut(LANES).enumerate() {
            let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for r in 0..rows.rows {
                for (&tap, &w) in rows.taps.iter().zip(rows.row_weights(r)) {
                    let x = rows.values(r, tap, c);
                    let w = _mm256_set1_ps(w);
                    // SAFETY: `x` holds 16 values, two loads of 8.
                    let (xl, xh) =
                        unsafe { (_mm256_loadu_ps(x.as_ptr()), _mm256_loadu_ps(x[8..].as_ptr())) };
                    lo = _mm256_fmadd_ps(w, xl, lo);
                    hi = _mm256_fmadd_ps(w, xh, hi);
                }
            }
            let mut sums = [0f32; LANES];
            // SAFETY: `sums` holds 16 values, two stores of 8.
            unsafe {
                _mm256_storeu_ps(sums.as_mut_ptr(), lo);
                _mm256_storeu_ps(sums[8..].as_mut_ptr(), hi);
            }
            finish(&sums, c, out, ep);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal values, NaN equal to NaN (a clamp may return either zero of a `max(-0, +0)`).
    fn same(a: &[f32], b: &[f32]) -> bool {
        a.iter().zip(b).all(|(x, y)| x == y || (x.is_nan() && y.is_nan()))
    }

    #[test]
    fn every_version_gives_the_definitions_values() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..300 {
            let (kh, kw) = (rng.usize(1..5), rng.usize(1..5));
            let (stride, dilation, padding) = (rng.usize(1..3), rng.usize(1..3), rng.usize(0..3));
            let rows = rng.usize(1..9);
            let (oh, ow) = (rng.usize(1..6), rng.usize(1..40));
            let taps: Vec<usize> = (0..kw).map(|_| rng.usize(0..20)).collect();
            let row_len = 20 + ow.div_ceil(LANES) * LANES + rng.usize(0..4);
            let mut plane: Vec<f32> = (0..rows * row_len).map(|_| rng.f32() * 8.0 - 4.0).collect();
            if rng.usize(0..4) == 0 {
                let at = rng.usize(0..plane.len());
                plane[at] = f32::NAN;
            }
            let weights: Vec<f32> = (0..kh * kw).map(|_| rng.f32() - 0.5).collect();
            let residual: Vec<f32> = (0..oh * ow).map(|_| rng.f32() - 0.5).collect();
            let spans = row_spans(rows, oh, kh, stride, dilation, padding);
            let tp = TapPlane {
                plane: &plane,
                row_len,
                spans: &spans,
                dilation,
                weights: &weights,
                taps: &taps,
            };
            let ep = TapEpilogue {
                bias: rng.f32() - 0.5,
                residual: rng.bool().then_some(&residual[..]),
                clamp: rng.bool().then_some((-0.5, 1.5)),
            };
            let mut want = vec![0f32; oh * ow];
            for (i, want) in want.iter_mut().enumerate() {
                let (oy, j) = (i / ow, i % ow);
                let mut s = 0f32;
                for ky in 0..kh {
                    let iy = (oy * stride + ky * dilation) as isize - padding as isize;
                    if iy < 0 || iy as usize >= rows {
                        continue;
                    }
                    for t in 0..kw {
                        let x = plane[iy as usize * row_len + taps[t] + j];
                        s = weights[ky * kw + t].mul_add(x, s);
                    }
                }
                s += ep.bias;
                if let Some(r) = ep.residual {
                    s += r[i];
                }
                if let Some((lo, hi)) = ep.clamp {
                    s = if s.is_nan() { s } else { s.max(lo).min(hi) };
                }
                *want = s;
            }
            let mut got = vec![f32::INFINITY; oh * ow];
            sum_taps(&mut got, ow, tp, ep);
            assert!(same(&got, &want), "{got:?} vs {want:?}");
            got.fill(f32::INFINITY);
            sum_taps_portable(&mut got, ow, tp, ep);
            assert!(same(&got, &want), "{got:?} vs {want:?}");
            #[cfg(target_arch = "x86_64")]
            if crate::compute::cpu::has_avx2() {
                got.fill(f32::INFINITY);
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                unsafe { x86::sum_taps_avx2(&mut got, ow, tp, ep) };
                assert!(same(&got, &want), "{got:?} vs {want:?}");
            }
        }
    }
}
