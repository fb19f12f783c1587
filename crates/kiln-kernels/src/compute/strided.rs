//! Walking N strided operands over one logical index space (row-major over `sizes`).

use crate::shape::MAX_RANK;

/// Calls `f(offsets)` for every logical index of `sizes` in row-major order, where
/// `offsets[k]` is the element offset of operand `k` (`sum(index[d] * strides[k][d])`).
///
/// Dimensions of size 1 are skipped and the innermost dimension runs as a tight loop.
#[inline]
pub fn walk<const N: usize>(
    sizes: &[usize],
    strides: [&[usize]; N],
    mut f: impl FnMut([usize; N]),
) {
    let rank = sizes.len();
    if sizes.contains(&0) {
        return;
    }
    // Keep only non-trivial dims.
    let mut dims = [0usize; MAX_RANK];
    let mut nd = 0;
    for (d, &s) in sizes.iter().enumerate() {
        if s != 1 {
            dims[nd] = d;
            nd += 1;
        }
    }
    if nd == 0 || rank == 0 {
        f([0; N]);
        return;
    }
    let inner = dims[nd - 1];
    let inner_len = sizes[inner];
    let mut inner_stride = [0usize; N];
    for k in 0..N {
        inner_stride[k] = strides[k][inner];
    }
    let mut counter = [0usize; MAX_RANK];
    let mut base = [0usize; N];
    loop {
        let mut off = base;
        for _ in 0..inner_len {
            f(off);
            for k in 0..N {
                off[k] += inner_stride[k];
            }
        }
        // Advance the outer dims (odometer).
        let mut level = nd - 1;
        loop {
            if level == 0 {
                return;
            }
            level -= 1;
            let d = dims[level];
            counter[level] += 1;
            for k in 0..N {
                base[k] += strides[k][d];
            }
            if counter[level] < sizes[d] {
                break;
            }
            for k in 0..N {
                base[k] -= strides[k][d] * sizes[d];
            }
            counter[level] = 0;
        }
    }
}

/// The same walk over fewer dimensions: dimensions of size 1 dropped, and each dimension
/// merged into the next where every operand steps over the next one whole (`strides[k][d] ==
/// sizes[d + 1] * strides[k][d + 1]`), so that the element offsets, in order, are unchanged.
/// A channels-last `[1, 14, 14, 116]` read as `[1, 116, 14, 14]` becomes a 116 x 196 matrix
/// rather than 14 matrices of 116 x 14 (too narrow for the transposes' blocks).
pub fn coalesce<const N: usize>(
    sizes: &[usize],
    strides: [&[usize]; N],
) -> (Vec<usize>, [Vec<usize>; N]) {
    let mut out_sizes: Vec<usize> = Vec::with_capacity(sizes.len());
    let mut out_strides: [Vec<usize>; N] = std::array::from_fn(|_| Vec::new());
    for (d, &size) in sizes.iter().enumerate() {
        if size == 1 {
            continue;
        }
        // Merge the dimension before into this one when every operand steps over it whole.
        let merge = out_sizes.last().is_some_and(|_| {
            (0..N).all(|k| out_strides[k].last() == Some(&(size * strides[k][d])))
        });
        if merge {
            let last = out_sizes.len() - 1;
            out_sizes[last] *= size;
            for k in 0..N {
                out_strides[k][last] = strides[k][d];
            }
        } else {
            out_sizes.push(size);
            for k in 0..N {
                out_strides[k].push(strides[k][d]);
            }
        }
    }
    (out_sizes, out_strides)
}

/// Strides of an operand of shape `in_sizes` (with element strides `in_strides`) broadcast to
/// `out_sizes` (right-aligned; broadcast dims get stride 0).
pub fn broadcast_strides(
    in_sizes: &[usize],
    in_strides: &[usize],
    out_sizes: &[usize],
) -> [usize; MAX_RANK] {
    let mut s = [0usize; MAX_RANK];
    let off = out_sizes.len() - in_sizes.len();
    for (d, (&sz, &st)) in in_sizes.iter().zip(in_strides).enumerate() {
        s[off + d] = if sz == 1 { 0 } else { st };
    }
    s
}

/// The broadcast shape of two shapes, or `None` when they are incompatible.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_broadcast() {
        let sizes = [2, 3];
        let a = broadcast_strides(&[3], &[1], &sizes);
        let o = [3usize, 1];
        let mut seen = vec![];
        walk(&sizes, [&a[..2], &o[..]], |[x, y]| seen.push((x, y)));
        assert_eq!(seen, vec![(0, 0), (1, 1), (2, 2), (0, 3), (1, 4), (2, 5)]);
        assert_eq!(broadcast_shape(&[2, 1, 4], &[3, 1]), Some(vec![2, 3, 4]));
        assert_eq!(broadcast_shape(&[2], &[3]), None);
    }

    /// Coalesced dimensions walk the very offsets, in the same order, as the dimensions they
    /// came from: random shapes (sizes 1-4, some of size 1) whose strides are contiguous,
    /// permuted (some dimensions merge, others do not) or broadcast (stride 0).
    #[test]
    fn coalesce_keeps_the_walk() {
        let mut rng = fastrand::Rng::with_seed(5);
        let mut merged = 0;
        for _ in 0..500 {
            let rank = rng.usize(0..6);
            let sizes: Vec<usize> = (0..rank).map(|_| rng.usize(1..5)).collect();
            let contiguous = &crate::Shape::contiguous(&sizes).unwrap().strides()[..rank];
            let mut order: Vec<usize> = (0..rank).collect();
            if rng.bool() {
                rng.shuffle(&mut order);
            }
            let a: Vec<usize> = order.iter().map(|&d| contiguous[d]).collect();
            let b: Vec<usize> =
                contiguous.iter().map(|&s| if rng.u8(..) < 40 { 0 } else { s }).collect();
            let (sizes2, [a2, b2]) = coalesce(&sizes, [&a, &b]);
            merged += usize::from(sizes2.len() < sizes.iter().filter(|&&s| s != 1).count());
            let (mut want, mut got) = (Vec::new(), Vec::new());
            walk(&sizes, [&a, &b], |o| want.push(o));
            walk(&sizes2, [&a2, &b2], |o| got.push(o));
            assert_eq!(got, want, "{sizes:?} {a:?} {b:?}");
        }
        assert!(merged > 100);
    }
}
