//! Direct depthwise 2-D convolution (every group has one input and one output channel), the
//! fast path of `convolution` for MobileNet-style layers: im2col + GEMM would run one tiny
//! GEMM per channel.

use std::ops::{AddAssign, Mul};

use crate::compute::conv::Geometry;

/// Largest element index touched by a `[c, h, w]` operand with these strides, plus one.
fn extent(dims: [usize; 3], strides: [usize; 3]) -> Option<usize> {
    if dims.contains(&0) {
        return Some(0);
    }
    let mut last = 0usize;
    for (d, s) in dims.iter().zip(strides) {
        last = last.checked_add((d - 1).checked_mul(s)?)?;
    }
    last.checked_add(1)
}

/// Output columns `ox` whose tap `kx` reads inside the input row: `lo..hi`.
fn valid_cols(g: &Geometry, kx: usize) -> (usize, usize) {
    let (s, p, off) = (g.stride[1], g.pad[1], kx * g.dil[1]);
    let lo = if p > off { (p - off).div_ceil(s) } else { 0 };
    let hi = if g.w + p > off { ((g.w - 1 + p - off) / s + 1).min(g.ow) } else { 0 };
    (lo.min(g.ow), hi.max(lo.min(g.ow)))
}

/// `out[c, oy, ox] = sum_{ky, kx} weight[c, ky, kx] * input[c, oy*s + ky*d - p, ox*s + kx*d - p]`
/// for the `g.c` channels, summed in `ky`, `kx` order. `weight` is contiguous
/// `[g.c, g.kh, g.kw]`; input and output take (channel, row, column) element strides; `acc` is
/// a reusable row buffer. Returns `false`, writing nothing, when an operand does not cover its
/// geometry.
#[allow(clippy::too_many_arguments)]
pub fn depthwise<T: Copy + Default + Mul<Output = T> + AddAssign>(
    g: &Geometry,
    input: &[T],
    [cs, hs, ws]: [usize; 3],
    weight: &[T],
    out: &mut [T],
    [ocs, ohs, ows]: [usize; 3],
    acc: &mut Vec<T>,
) -> bool {
    let fits = |e: Option<usize>, len: usize| e.is_some_and(|e| e <= len);
    if !fits(extent([g.c, g.h, g.w], [cs, hs, ws]), input.len())
        || !fits(extent([g.c, g.oh, g.ow], [ocs, ohs, ows]), out.len())
        || !fits(g.c.checked_mul(g.kh).and_then(|v| v.checked_mul(g.kw)), weight.len())
    {
        return false;
    }
    let kk = g.kh * g.kw;
    acc.clear();
    acc.resize(g.ow, T::default());
    let cols: Vec<(usize, usize)> = (0..g.kw).map(|kx| valid_cols(g, kx)).collect();
    for c in 0..g.c {
        let wc = &weight[c * kk..(c + 1) * kk];
        for oy in 0..g.oh {
            acc.fill(T::default());
            for ky in 0..g.kh {
                let iy = (oy * g.stride[0] + ky * g.dil[0]) as isize - g.pad[0] as isize;
                if iy < 0 || iy as usize >= g.h {
                    continue;
                }
                let row = c * cs + iy as usize * hs;
                for (kx, &(lo, hi)) in cols.iter().enumerate() {
                    if lo >= hi {
                        continue;
                    }
                    let wv = wc[ky * g.kw + kx];
                    // Input column of output column `lo`; in range by `valid_cols`.
                    let first = lo * g.stride[1] + kx * g.dil[1] - g.pad[1];
                    let step = g.stride[1] * ws;
                    let src = &input[row + first * ws..];
                    if step == 1 {
                        for (a, &x) in acc[lo..hi].iter_mut().zip(src) {
                            *a += wv * x;
                        }
                    } else {
                        for (a, x) in acc[lo..hi].iter_mut().zip(src.iter().step_by(step)) {
                            *a += wv * *x;
                        }
                    }
                }
            }
            let base = c * ocs + oy * ohs;
            if ows == 1 {
                out[base..base + g.ow].copy_from_slice(acc);
            } else {
                for (ox, &a) in acc.iter().enumerate() {
                    out[base + ox * ows] = a;
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::conv::conv_ref;

    /// Property test: equals the direct reference (one channel per group) on random geometry,
    /// contiguous and channels-last strides.
    #[test]
    fn depthwise_equals_reference() {
        let mut rng = fastrand::Rng::with_seed(11);
        for case in 0..200 {
            let c = rng.usize(1..6);
            let (h, w) = (rng.usize(1..10), rng.usize(1..10));
            let (kh, kw) = (rng.usize(1..4), rng.usize(1..4));
            let st = [rng.usize(1..3), rng.usize(1..3)];
            let pd = [rng.usize(0..3), rng.usize(0..3)];
            let dl = [rng.usize(1..3), rng.usize(1..3)];
            let oh = (h + 2 * pd[0]).checked_sub((kh - 1) * dl[0] + 1).map(|v| v / st[0] + 1);
            let ow = (w + 2 * pd[1]).checked_sub((kw - 1) * dl[1] + 1).map(|v| v / st[1] + 1);
            let (Some(oh), Some(ow)) = (oh, ow) else { continue };
            let g = Geometry { c, h, w, kh, kw, oh, ow, stride: st, pad: pd, dil: dl };
            let x: Vec<f64> = (0..c * h * w).map(|_| rng.f64() - 0.5).collect();
            let wt: Vec<f64> = (0..c * kh * kw).map(|_| rng.f64() - 0.5).collect();
            let channels_last = case % 2 == 1;
            // Input in the chosen layout.
            let (is, os) = if channels_last {
                ([1, w * c, c], [1, ow * c, c])
            } else {
                ([h * w, w, 1], [oh * ow, ow, 1])
            };
            let mut xin = vec![0.0; c * h * w];
            for ci in 0..c {
                for y in 0..h {
                    for xx in 0..w {
                        xin[ci * is[0] + y * is[1] + xx * is[2]] = x[(ci * h + y) * w + xx];
                    }
                }
            }
            let mut out = vec![f64::NAN; c * oh * ow];
            let mut acc = Vec::new();
            assert!(depthwise(&g, &xin, is, &wt, &mut out, os, &mut acc));
            for ci in 0..c {
                let g1 = Geometry { c: 1, ..g };
                let mut r = vec![0.0; oh * ow];
                conv_ref(&g1, 1, &x[ci * h * w..][..h * w], &wt[ci * kh * kw..][..kh * kw], &mut r);
                for y in 0..oh {
                    for xx in 0..ow {
                        let got = out[ci * os[0] + y * os[1] + xx * os[2]];
                        let want = r[y * ow + xx];
                        assert!(
                            (got - want).abs() < 1e-12,
                            "{g:?} c{ci} ({y},{xx}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn short_operands_are_refused() {
        let g = Geometry {
            c: 2,
            h: 3,
            w: 3,
            kh: 3,
            kw: 3,
            oh: 1,
            ow: 1,
            stride: [1, 1],
            pad: [0, 0],
            dil: [1, 1],
        };
        let mut out = [0f32; 2];
        assert!(!depthwise(
            &g,
            &[0f32; 17],
            [9, 3, 1],
            &[0f32; 18],
            &mut out,
            [1, 1, 1],
            &mut Vec::new()
        ));
        assert!(!depthwise(
            &g,
            &[0f32; 18],
            [9, 3, 1],
            &[0f32; 17],
            &mut out,
            [1, 1, 1],
            &mut Vec::new()
        ));
        assert!(depthwise(
            &g,
            &[1f32; 18],
            [9, 3, 1],
            &[1f32; 18],
            &mut out,
            [1, 1, 1],
            &mut Vec::new()
        ));
        assert_eq!(out, [9.0, 9.0]);
    }
}
