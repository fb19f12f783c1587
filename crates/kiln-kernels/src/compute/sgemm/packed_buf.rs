//! Where an operand packed once keeps its values: on the heap, or, when large, in a mapping
//! of its own that the kernel may back with transparent huge pages.
//!
//! A product streams its packed weights once per call, and a classifier's (mobilenet_v2's
//! 1280x1000 linear layer, 5 MB) spans over a thousand 4 KiB pages; each costs a TLB miss,
//! in a virtual machine a two-level page walk. On 2 MiB pages the layer took 170-190 us
//! instead of 216-237 us on one thread (standalone, weights not in cache, this project's
//! AMD EPYC development machine).

use super::error::GemmError;
use super::pack::{aligned_offset, aligned_window};

/// Smallest packed operand (bytes) given its own mapping: one huge page.
const HUGE_BYTES: usize = 2 << 20;

/// A small page, the unit the tail of a mapping past its huge pages is committed in.
const SMALL_PAGE: usize = 4096;

/// Packed values: a 64-byte aligned run of `f32`s.
#[derive(Debug)]
pub(crate) enum PackedBuf {
    /// On the heap, the values from `off` on.
    Heap { buf: Vec<f32>, off: usize, len: usize },
    /// The first `len` values of an anonymous mapping (page aligned) advised for huge
    /// pages.
    Mapped { map: memmap2::MmapMut, len: usize },
}

impl PackedBuf {
    /// Bytes it holds (the heap allocation, or the pages of the mapping its values touch).
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            PackedBuf::Heap { buf, .. } => buf.capacity() * 4,
            PackedBuf::Mapped { len, .. } => (len * 4).div_ceil(SMALL_PAGE) * SMALL_PAGE,
        }
    }

    /// `len` zeros: mapped from [`HUGE_BYTES`] on (on the heap if the system refuses the
    /// mapping), else on the heap. An error when the size overflows.
    pub(crate) fn zeroed(len: usize) -> Result<PackedBuf, GemmError> {
        let bytes = len.checked_mul(4).ok_or(GemmError::Overflow("packed operand"))?;
        if bytes > isize::MAX as usize / 2 {
            return Err(GemmError::Overflow("packed operand"));
        }
        if bytes >= HUGE_BYTES {
            // A whole number of huge pages: Linux places such a mapping on a huge page
            // boundary. The huge pages the values fill are advised huge; the last, partial
            // one stays on small pages, so what is resident ends within a small page of the
            // values (a huge page is committed whole at its first touch: advised over the
            // whole mapping, vit_b_16's 48 linear layers held 62 MiB of zeros past their
            // weights, 392 MiB for 330).
            let mapped = bytes.div_ceil(HUGE_BYTES).saturating_mul(HUGE_BYTES);
            if let Ok(map) = memmap2::MmapMut::map_anon(mapped) {
                // Advice only: without transparent huge pages the mapping works as it is.
                #[cfg(target_os = "linux")]
                {
                    let whole = bytes / HUGE_BYTES * HUGE_BYTES;
                    let _ = map.advise_range(memmap2::Advice::HugePage, 0, whole);
                    if mapped > whole {
                        let tail = mapped - whole;
                        let _ = map.advise_range(memmap2::Advice::NoHugePage, whole, tail);
                    }
                }
                // A mapping starts on a page, so the cast cannot fail; checked all the same
                // (`values` casts without a fallback).
                if bytemuck::try_cast_slice::<u8, f32>(&map).is_ok() {
                    return Ok(PackedBuf::Mapped { map, len });
                }
            }
        }
        let mut buf = Vec::new();
        aligned_window(&mut buf, len);
        let off = aligned_offset(&buf);
        Ok(PackedBuf::Heap { buf, off, len })
    }

    /// The values.
    pub(crate) fn values(&self) -> &[f32] {
        match self {
            PackedBuf::Heap { buf, off, len } => &buf[*off..][..*len],
            PackedBuf::Mapped { map, len } => &bytemuck::cast_slice(map)[..*len],
        }
    }

    /// The values, to fill.
    pub(crate) fn values_mut(&mut self) -> &mut [f32] {
        match self {
            PackedBuf::Heap { buf, off, len } => &mut buf[*off..][..*len],
            PackedBuf::Mapped { map, len } => &mut bytemuck::cast_slice_mut(map)[..*len],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_buffers_hold_aligned_zeros() {
        for len in [0, 1, 1000, HUGE_BYTES / 4 - 1, HUGE_BYTES / 4, HUGE_BYTES / 4 + 17] {
            let mut b = PackedBuf::zeroed(len).unwrap();
            assert_eq!(matches!(b, PackedBuf::Mapped { .. }), len * 4 >= HUGE_BYTES, "{len}");
            assert_eq!(b.values().len(), len);
            assert!(b.values().iter().all(|&v| v == 0.0));
            assert!(b.values().as_ptr().align_offset(64) == 0 || len == 0);
            b.values_mut().iter_mut().enumerate().for_each(|(i, v)| *v = i as f32);
            assert!(b.values().iter().enumerate().all(|(i, &v)| v == i as f32));
        }
        assert!(PackedBuf::zeroed(usize::MAX / 2).is_err());
    }
}
