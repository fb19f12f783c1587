//! Copies between contiguous (row-major) order and a tensor's dim-order layout.

use kiln_kernels::Shape;

/// Calls `f(logical_index, storage_index)` for every element of `shape`, in row-major order.
fn for_each_offset(shape: &Shape, mut f: impl FnMut(usize, usize)) {
    let sizes = shape.sizes();
    let strides = shape.strides();
    let rank = sizes.len();
    let n = shape.numel();
    let mut idx = [0usize; kiln_kernels::MAX_RANK];
    let mut off = 0usize;
    for logical in 0..n {
        f(logical, off);
        for d in (0..rank).rev() {
            idx[d] += 1;
            off += strides[d];
            if idx[d] < sizes[d] {
                break;
            }
            off -= strides[d] * sizes[d];
            idx[d] = 0;
        }
    }
}

/// Copies row-major `src` into `dst` laid out by `shape`'s dim order (elements of `elem` bytes).
pub(crate) fn contiguous_to_strided(src: &[u8], dst: &mut [u8], shape: &Shape, elem: usize) {
    for_each_offset(shape, |l, o| {
        if let (Some(s), Some(d)) =
            (src.get(l * elem..(l + 1) * elem), dst.get_mut(o * elem..(o + 1) * elem))
        {
            d.copy_from_slice(s);
        }
    });
}

/// Copies `src` laid out by `shape`'s dim order into row-major `dst`.
pub(crate) fn strided_to_contiguous(src: &[u8], dst: &mut [u8], shape: &Shape, elem: usize) {
    for_each_offset(shape, |l, o| {
        if let (Some(s), Some(d)) =
            (src.get(o * elem..(o + 1) * elem), dst.get_mut(l * elem..(l + 1) * elem))
        {
            d.copy_from_slice(s);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_round_trip() {
        // [1, 2, 2, 3] NCHW values 0..12; channels-last storage puts C innermost.
        let shape = Shape::new(&[1, 2, 2, 3], &[0, 2, 3, 1]).unwrap();
        let src: Vec<u8> = (0..12).collect();
        let mut stored = vec![0u8; 12];
        contiguous_to_strided(&src, &mut stored, &shape, 1);
        // Storage index of (n, c, h, w) = h*6 + w*2 + c.
        assert_eq!(stored, vec![0, 6, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11]);
        let mut back = vec![0u8; 12];
        strided_to_contiguous(&stored, &mut back, &shape, 1);
        assert_eq!(back, src);
    }
}
