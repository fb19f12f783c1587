//! Numbers of `kiln run`'s outputs: the min/max/mean/NaN summary, and the comparison with
//! `--expect` arrays.

use kiln_kernels::DType;
use serde::Serialize;

/// The elements of a little-endian array as f64, for the numeric dtypes (`None` otherwise).
pub fn values(dtype: DType, data: &[u8]) -> Option<Vec<f64>> {
    let size = dtype.size();
    let convert: fn(&[u8]) -> f64 = match dtype {
        DType::Float => |c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        DType::Double => |c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
        DType::Half => |c| f64::from(half::f16::from_le_bytes([c[0], c[1]])),
        DType::BFloat16 => |c| f64::from(half::bf16::from_le_bytes([c[0], c[1]])),
        DType::Bool | DType::Byte => |c| f64::from(c[0]),
        DType::Char => |c| f64::from(c[0] as i8),
        DType::Short => |c| f64::from(i16::from_le_bytes([c[0], c[1]])),
        DType::UInt16 => |c| f64::from(u16::from_le_bytes([c[0], c[1]])),
        DType::Int => |c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        DType::UInt32 => |c| f64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        DType::Long => {
            |c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f64
        }
        DType::UInt64 => {
            |c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f64
        }
        _ => return None,
    };
    Some(data.chunks_exact(size).map(convert).collect())
}

/// Minimum, maximum and mean of the values that are not NaN, and how many are NaN.
#[derive(Serialize, Debug, PartialEq)]
pub struct Stats {
    /// Smallest value (`None` when every value is NaN or there are none).
    pub min: Option<f64>,
    /// Largest value.
    pub max: Option<f64>,
    /// Mean of the values that are not NaN.
    pub mean: Option<f64>,
    /// Number of NaN values.
    pub nan: usize,
}

/// The summary of `values`.
pub fn stats(values: &[f64]) -> Stats {
    let (mut min, mut max, mut sum, mut count, mut nan) =
        (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0usize, 0usize);
    for &v in values {
        if v.is_nan() {
            nan += 1;
            continue;
        }
        min = min.min(v);
        max = max.max(v);
        sum += v;
        count += 1;
    }
    let some = |x: f64| (count > 0).then_some(x);
    Stats { min: some(min), max: some(max), mean: some(sum / count.max(1) as f64), nan }
}

/// The worst difference between `got` and `want` when any exceeds `atol` (a NaN on one side
/// only is the worst of all; NaN on both sides matches).
#[derive(Debug, PartialEq)]
pub struct Mismatch {
    /// How many elements differ by more than `atol`.
    pub count: usize,
    /// Flat index of the worst element.
    pub index: usize,
    /// The value kiln computed there.
    pub got: f64,
    /// The expected value there.
    pub want: f64,
}

/// Compares element by element (same length assumed by the caller).
pub fn compare(got: &[f64], want: &[f64], atol: f64) -> Option<Mismatch> {
    let mut worst: Option<(f64, usize)> = None;
    let mut count = 0;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let diff = match (g.is_nan(), w.is_nan()) {
            (true, true) => continue,
            (true, false) | (false, true) => f64::INFINITY,
            _ if g == w => continue,
            _ => (g - w).abs(),
        };
        if diff > atol {
            count += 1;
            if worst.is_none_or(|(d, _)| diff > d) {
                worst = Some((diff, i));
            }
        }
    }
    worst.map(|(_, index)| Mismatch { count, index, got: got[index], want: want[index] })
}

/// A flat index as a multi-dimensional one for `sizes`.
pub fn unravel(mut flat: usize, sizes: &[usize]) -> Vec<usize> {
    let mut index = vec![0; sizes.len()];
    for (i, &s) in sizes.iter().enumerate().rev() {
        if s > 0 {
            index[i] = flat % s;
            flat /= s;
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_skips_nan() {
        let s = stats(&[1.0, f64::NAN, -3.0, 5.0]);
        assert_eq!(s, Stats { min: Some(-3.0), max: Some(5.0), mean: Some(1.0), nan: 1 });
        assert_eq!(stats(&[f64::NAN]).min, None);
    }

    #[test]
    fn comparison_names_the_worst_element() {
        assert_eq!(compare(&[1.0, 2.0], &[1.0, 2.00001], 1e-4), None);
        let m = compare(&[1.0, 2.5, 3.0, f64::NAN], &[1.0, 2.0, 3.2, f64::NAN], 0.1).unwrap();
        assert_eq!(m, Mismatch { count: 2, index: 1, got: 2.5, want: 2.0 });
        let m = compare(&[0.0, f64::NAN], &[9.0, 1.0], 0.1).unwrap();
        assert_eq!((m.count, m.index), (2, 1));
        assert_eq!(unravel(5, &[2, 3]), [1, 2]);
    }
}
