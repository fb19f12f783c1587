//! Tensor shapes: sizes plus dim order, stored inline (no allocation), strides derived.

use std::fmt;

/// Largest rank a tensor may have: 8, half ExecuTorch's `kTensorDimensionLimit` (16). The
/// sizes are stored inline, and every argument, output and shape write-back of a call copies
/// them: on the small calls of an LLM decode step the 16-dimension shape (152 bytes) made
/// those copies a quarter of the time (`bench/RESULTS.md`). No program of the test data or
/// of the exporters kiln is measured against has a tensor of more than 6 dimensions;
/// a program that has one is refused at load as not supported, naming the value.
pub const MAX_RANK: usize = 8;

/// Why a [`Shape`] could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// More than [`MAX_RANK`] dimensions.
    #[error("rank {0} exceeds the limit of {MAX_RANK}")]
    Rank(usize),
    /// `dim_order` has a different length than `sizes`.
    #[error("dim_order has {dim_order} entries for {rank} sizes")]
    DimOrderLength {
        /// Number of sizes.
        rank: usize,
        /// Number of dim order entries.
        dim_order: usize,
    },
    /// `dim_order` is not a permutation of `0..rank`.
    #[error("dim_order {0:?} is not a permutation of 0..rank")]
    DimOrder(Vec<u8>),
    /// A size is negative.
    #[error("negative size {0}")]
    Negative(i64),
    /// The element count or byte size overflows `usize`.
    #[error("element count overflows")]
    Overflow,
}

/// Sizes and dim order of a tensor, inline and `Copy`.
///
/// `dim_order` lists dimensions from outermost to innermost in memory: `[0, 1, .., n-1]` is
/// contiguous, `[0, 2, 3, 1]` is channels-last for a 4-D tensor. Strides are derived from it
/// ([`Shape::strides`]), as ExecuTorch does (`dim_order_to_stride`). Construction checks that the
/// element count fits `usize`, so [`Shape::numel`] never overflows.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    rank: u8,
    sizes: [usize; MAX_RANK],
    dim_order: [u8; MAX_RANK],
}

impl Shape {
    /// A contiguous shape.
    pub fn contiguous(sizes: &[usize]) -> Result<Shape, ShapeError> {
        let rank = sizes.len();
        if rank > MAX_RANK {
            return Err(ShapeError::Rank(rank));
        }
        let mut order = [0u8; MAX_RANK];
        for (i, o) in order.iter_mut().enumerate().take(rank) {
            *o = i as u8;
        }
        Shape::new(sizes, &order[..rank])
    }

    /// A shape with the given dim order (checked to be a permutation).
    pub fn new(sizes: &[usize], dim_order: &[u8]) -> Result<Shape, ShapeError> {
        let rank = sizes.len();
        if rank > MAX_RANK {
            return Err(ShapeError::Rank(rank));
        }
        if dim_order.len() != rank {
            return Err(ShapeError::DimOrderLength { rank, dim_order: dim_order.len() });
        }
        let mut seen = [false; MAX_RANK];
        for &d in dim_order {
            let d = d as usize;
            if d >= rank || seen[d] {
                return Err(ShapeError::DimOrder(dim_order.to_vec()));
            }
            seen[d] = true;
        }
        let mut numel: usize = 1;
        for &s in sizes {
            numel = numel.checked_mul(s).ok_or(ShapeError::Overflow)?;
        }
        // Keep byte sizes of the widest element (8 bytes) representable.
        if numel > (isize::MAX as usize) / 8 {
            return Err(ShapeError::Overflow);
        }
        let mut shape = Shape { rank: rank as u8, sizes: [0; MAX_RANK], dim_order: [0; MAX_RANK] };
        shape.sizes[..rank].copy_from_slice(sizes);
        shape.dim_order[..rank].copy_from_slice(dim_order);
        Ok(shape)
    }

    /// A shape from signed sizes (as stored in programs), rejecting negative ones.
    pub fn from_i64(sizes: &[i64], dim_order: &[u8]) -> Result<Shape, ShapeError> {
        if sizes.len() > MAX_RANK {
            return Err(ShapeError::Rank(sizes.len()));
        }
        let mut s = [0usize; MAX_RANK];
        for (dst, &v) in s.iter_mut().zip(sizes) {
            *dst = usize::try_from(v).map_err(|_| ShapeError::Negative(v))?;
        }
        Shape::new(&s[..sizes.len()], dim_order)
    }

    /// A 0-dimensional (scalar) shape.
    pub fn scalar() -> Shape {
        Shape { rank: 0, sizes: [0; MAX_RANK], dim_order: [0; MAX_RANK] }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.rank as usize
    }

    /// The sizes.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes[..self.rank()]
    }

    /// The dim order.
    pub fn dim_order(&self) -> &[u8] {
        &self.dim_order[..self.rank()]
    }

    /// Number of elements (1 for a 0-dimensional tensor).
    pub fn numel(&self) -> usize {
        self.sizes().iter().product()
    }

    /// Element strides derived from the dim order (innermost dimension has stride 1).
    pub fn strides(&self) -> [usize; MAX_RANK] {
        let mut strides = [0usize; MAX_RANK];
        let mut acc = 1usize;
        for &d in self.dim_order().iter().rev() {
            strides[d as usize] = acc;
            acc *= self.sizes[d as usize];
        }
        strides
    }

    /// Whether the dim order is `[0, 1, .., n-1]`.
    pub fn is_contiguous(&self) -> bool {
        self.dim_order().iter().enumerate().all(|(i, &d)| d as usize == i)
    }

    /// Whether the memory layout equals the contiguous one (true for contiguous dim orders and
    /// for dim orders that only move size-1 dimensions).
    pub fn is_dense_row_major(&self) -> bool {
        if self.is_contiguous() {
            return true;
        }
        let order = self.dim_order();
        let nontrivial = order.iter().filter(|&&d| self.sizes[d as usize] != 1);
        let mut last = None;
        for &d in nontrivial {
            if let Some(l) = last {
                if d < l {
                    return false;
                }
            }
            last = Some(d);
        }
        true
    }

    /// Whether this is a 4-D channels-last (`[0, 2, 3, 1]`) dim order.
    pub fn is_channels_last(&self) -> bool {
        self.dim_order() == [0, 2, 3, 1]
    }

    /// The same dim order with new sizes of the same rank.
    pub fn with_sizes(&self, sizes: &[usize]) -> Result<Shape, ShapeError> {
        Shape::new(sizes, self.dim_order())
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_contiguous() {
            write!(f, "{:?}", self.sizes())
        } else {
            write!(f, "{:?} dim_order {:?}", self.sizes(), self.dim_order())
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A PyTorch `int[2]` argument (kernel size, stride, padding, dilation) as (rows, columns):
/// one value stands for both, an empty list for `default` (`None`: not allowed). `None` for
/// any other length or a value below `min`.
pub fn int_pair(list: &[i64], default: Option<[usize; 2]>, min: i64) -> Option<[usize; 2]> {
    let p = match (list, default) {
        ([], Some(d)) => return Some(d),
        ([a], _) => [*a, *a],
        ([a, b], _) => [*a, *b],
        _ => return None,
    };
    let axis = |x: i64| if x < min { None } else { usize::try_from(x).ok() };
    Some([axis(p[0])?, axis(p[1])?])
}

/// Canonical dimension index for `dim` in a tensor of rank `rank` (negative counts from the end).
/// A 0-dimensional tensor accepts dims `-1` and `0`.
pub fn normalize_dim(dim: i64, rank: usize) -> Option<usize> {
    let r = rank.max(1) as i64;
    let d = if dim < 0 { dim + r } else { dim };
    (0..r).contains(&d).then_some(d as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_strides() {
        let s = Shape::new(&[2, 3, 4, 5], &[0, 2, 3, 1]).unwrap();
        assert_eq!(&s.strides()[..4], &[60, 1, 15, 3]);
        assert!(s.is_channels_last());
        assert!(!s.is_dense_row_major());
        let c = Shape::new(&[2, 1, 4, 5], &[0, 2, 3, 1]).unwrap();
        assert!(c.is_dense_row_major());
    }

    #[test]
    fn rejects_bad_dim_order() {
        assert!(Shape::new(&[2, 3], &[0, 0]).is_err());
        assert!(Shape::new(&[2, 3], &[0]).is_err());
        assert!(Shape::from_i64(&[2, -3], &[0, 1]).is_err());
        assert!(Shape::contiguous(&[usize::MAX, 2]).is_err());
    }
}
