//! Splitting one memory arena into the disjoint borrows a kernel call needs, without `unsafe`
//! and without allocation.
//!
//! A planned arena is one `&mut [u8]`; a call needs shared slices for its inputs and mutable
//! slices for its outputs. [`split_regions`] walks the regions in address order with
//! `split_at_mut`, hands out each written region mutably and each run of read regions as shared
//! sub-slices of one downgraded chunk (so the same tensor may be read twice). A written region
//! that overlaps any other region of the call is in-place aliasing and is reported as
//! [`AliasError`] instead of being borrowed. A zero-length region borrows nothing: it gets an
//! empty slice of its own access kind wherever it lies, even inside a run of reads.

use std::ops::Range;

/// How a call uses a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read only (an input).
    Read,
    /// Written (an output).
    Write,
}

/// A byte range of the arena and how the call uses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// Byte range in the arena.
    pub range: Range<usize>,
    /// Read or write.
    pub access: Access,
}

/// One borrowed region.
#[derive(Debug)]
pub enum Borrowed<'a> {
    /// A shared borrow of a read region.
    Read(&'a [u8]),
    /// An exclusive borrow of a written region.
    Write(&'a mut [u8]),
}

/// Why regions could not be split.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AliasError {
    /// A written region overlaps another region of the same call.
    #[error("region {written} ({written_range:?}) is written and overlaps region {other} ({other_range:?})")]
    Overlap {
        /// Index of the written region.
        written: usize,
        /// Its range.
        written_range: Range<usize>,
        /// Index of the other region.
        other: usize,
        /// Its range.
        other_range: Range<usize>,
    },
    /// A region lies outside the arena.
    #[error("region {index} ({range:?}) is outside the arena of {arena_len} bytes")]
    OutOfBounds {
        /// Index of the region.
        index: usize,
        /// Its range.
        range: Range<usize>,
        /// Arena length.
        arena_len: usize,
    },
    /// `order` or `out` does not match `regions`.
    #[error("order must be a permutation of the region indices sorted by start, and out as long as regions")]
    BadOrder,
}

/// Checks the regions of one call: all inside an arena of `arena_len` bytes, no written region
/// overlapping another. `order` lists region indices sorted by range start.
pub fn check_regions(
    arena_len: usize,
    regions: &[Region],
    order: &[usize],
) -> Result<(), AliasError> {
    if order.len() != regions.len() {
        return Err(AliasError::BadOrder);
    }
    let mut prev_start = 0;
    for (k, &i) in order.iter().enumerate() {
        let r = regions.get(i).ok_or(AliasError::BadOrder)?;
        if r.range.start < prev_start {
            return Err(AliasError::BadOrder);
        }
        prev_start = r.range.start;
        if r.range.start > r.range.end || r.range.end > arena_len {
            return Err(AliasError::OutOfBounds { index: i, range: r.range.clone(), arena_len });
        }
        // Compare with later regions that start before this one ends.
        for &j in &order[k + 1..] {
            let o = &regions[j];
            if o.range.start >= r.range.end {
                break;
            }
            let overlap = !r.range.is_empty() && !o.range.is_empty();
            if overlap && (r.access == Access::Write || o.access == Access::Write) {
                let (w, other) = if r.access == Access::Write { (i, j) } else { (j, i) };
                return Err(AliasError::Overlap {
                    written: w,
                    written_range: regions[w].range.clone(),
                    other,
                    other_range: regions[other].range.clone(),
                });
            }
        }
    }
    Ok(())
}

/// Borrows every region of `regions` from `arena` into `out[i]` (same index as the region).
///
/// `order` lists the region indices sorted by range start. Fails, without
/// borrowing anything, when [`check_regions`] fails.
pub fn split_regions<'a>(
    arena: &'a mut [u8],
    regions: &[Region],
    order: &[usize],
    out: &mut [Option<Borrowed<'a>>],
) -> Result<(), AliasError> {
    check_regions(arena.len(), regions, order)?;
    if out.len() != regions.len() {
        return Err(AliasError::BadOrder);
    }
    let mut rest: &'a mut [u8] = arena;
    let mut rest_start = 0usize;
    let mut k = 0;
    while k < order.len() {
        let first = &regions[order[k]];
        if first.range.is_empty() {
            // An empty region borrows nothing, wherever it lies.
            out[order[k]] = Some(empty(first.access));
            k += 1;
            continue;
        }
        // Gather the run of regions overlapping the first one: reads, or empty regions of
        // either kind (by the check, a non-empty written region overlaps nothing else).
        let mut end = first.range.end;
        let mut k_end = k + 1;
        while k_end < order.len() && regions[order[k_end]].range.start < end {
            end = end.max(regions[order[k_end]].range.end);
            k_end += 1;
        }
        let start = first.range.start.max(rest_start);
        let taken = std::mem::take(&mut rest);
        let (_, tail) = taken.split_at_mut(start - rest_start);
        let (chunk, tail) = tail.split_at_mut(end.max(start) - start);
        rest = tail;
        rest_start = end.max(start);
        for &i in &order[k + 1..k_end] {
            if regions[i].range.is_empty() {
                out[i] = Some(empty(regions[i].access));
            }
        }
        if first.access == Access::Write {
            out[order[k]] = Some(Borrowed::Write(chunk));
        } else {
            let shared: &'a [u8] = chunk;
            for &i in &order[k..k_end] {
                let r = &regions[i].range;
                if !r.is_empty() {
                    out[i] = Some(Borrowed::Read(&shared[r.start - start..r.end - start]));
                }
            }
        }
        k = k_end;
    }
    Ok(())
}

/// An empty borrow of the given kind.
fn empty<'a>(access: Access) -> Borrowed<'a> {
    match access {
        Access::Read => Borrowed::Read(&[]),
        Access::Write => Borrowed::Write(&mut []),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(a: usize, b: usize, w: bool) -> Region {
        Region { range: a..b, access: if w { Access::Write } else { Access::Read } }
    }

    #[test]
    fn splits_reads_and_writes() {
        let mut arena: Vec<u8> = (0..32).collect();
        // x read twice, y written.
        let regions = [reg(0, 8, false), reg(0, 8, false), reg(16, 24, true), reg(4, 12, false)];
        let order = [0, 1, 3, 2];
        let mut out: [Option<Borrowed<'_>>; 4] = Default::default();
        split_regions(&mut arena, &regions, &order, &mut out).unwrap();
        let [o0, _, o2, o3] = &mut out;
        match (o0, o3, o2) {
            (Some(Borrowed::Read(a)), Some(Borrowed::Read(c)), Some(Borrowed::Write(w))) => {
                assert_eq!(a[0], 0);
                assert_eq!(c[0], 4);
                w[0] = a[1] + c[1];
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(arena[16], 1 + 5);
    }

    #[test]
    fn empty_regions_get_empty_borrows_of_their_kind() {
        let mut arena: Vec<u8> = (0..32).collect();
        // An empty write inside a read run, an empty read inside a written region, an empty
        // write at the start of a read and one at the arena's end.
        let regions = [
            reg(0, 16, false),
            reg(8, 8, true),
            reg(4, 12, false),
            reg(16, 24, true),
            reg(20, 20, false),
            reg(24, 24, true),
            reg(24, 32, false),
            reg(32, 32, true),
        ];
        let order = [0, 2, 1, 3, 4, 5, 6, 7];
        let mut out: [Option<Borrowed<'_>>; 8] = Default::default();
        split_regions(&mut arena, &regions, &order, &mut out).unwrap();
        let lens: Vec<(bool, usize)> = out
            .iter()
            .map(|b| match b {
                Some(Borrowed::Read(d)) => (false, d.len()),
                Some(Borrowed::Write(d)) => (true, d.len()),
                None => panic!("region not borrowed"),
            })
            .collect();
        assert_eq!(
            lens,
            [
                (false, 16),
                (true, 0),
                (false, 8),
                (true, 8),
                (false, 0),
                (true, 0),
                (false, 8),
                (true, 0)
            ]
        );
        match (&out[2], &out[6]) {
            (Some(Borrowed::Read(a)), Some(Borrowed::Read(b))) => {
                assert_eq!((a[0], b[0]), (4, 24));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn detects_in_place_aliasing() {
        let regions = [reg(0, 8, false), reg(4, 12, true)];
        let err = check_regions(16, &regions, &[0, 1]).unwrap_err();
        assert!(matches!(err, AliasError::Overlap { written: 1, other: 0, .. }));
        assert!(check_regions(8, &[reg(0, 9, true)], &[0]).is_err());
        assert!(check_regions(16, &regions, &[1, 0]).is_err());
    }
}
