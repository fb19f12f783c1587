//! Sums of float32 values in `f64` over eight interleaved lanes, added pairwise at the end: a
//! fixed order (so the same bits on every instruction set and whatever the vector width the
//! compiler picks) that still vectorizes, unlike one accumulator in index order. Softmax's
//! sum of exponentials and layer norm's mean and variance.

/// The sum of `v` in `f64`, eight interleaved lanes (so the loop vectorizes) added pairwise.
#[inline(always)]
pub(crate) fn sum_f64(v: &[f32]) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l += f64::from(x);
        }
    }
    for (l, &x) in lanes.iter_mut().zip(tail) {
        *l += f64::from(x);
    }
    ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
        + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
}

/// The sum of `(v - mean)^2` in `f64`, eight interleaved lanes added pairwise (as
/// [`sum_f64`]).
#[inline(always)]
pub(crate) fn sum_sq_dev_f64(v: &[f32], mean: f64) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    let sq = |x: f32| {
        let d = f64::from(x) - mean;
        d * d
    };
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            *l += sq(x);
        }
    }
    for (l, &x) in lanes.iter_mut().zip(tail) {
        *l += sq(x);
    }
    ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
        + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]))
}
