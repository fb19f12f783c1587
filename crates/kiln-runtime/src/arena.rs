//! The memory of a loaded method: buffers of zeroed pages taken from the OS on demand.
//!
//! A buffer is an anonymous memory map, not a vector filled with zeros: the OS hands out its
//! pages zeroed the first time they are touched, so a plan that claims gigabytes for a method
//! that touches a few hundred bytes costs a few pages of memory, and allocating costs no time
//! (a vector resized with zeros writes every page of it at load).

use std::io;

/// Bytes of a [`Line`].
pub(crate) const LINE: usize = 64;

/// One cache line of a method's memory: buffers are vectors of these, so a tensor the memory
/// plan places at a multiple of 64 bytes starts on a cache line and a kernel's 64-byte vector
/// loads do not straddle two lines (with 16-byte alignment, three tensors in four were split:
/// a channels-last depthwise layer ran 25% slower).
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(crate) struct Line([u8; LINE]);

/// One buffer of cache lines, zeroed until written.
pub(crate) struct Arena {
    /// `None` for an empty buffer (a map cannot be empty).
    map: Option<memmap2::MmapMut>,
}

impl Arena {
    /// An empty buffer.
    pub fn empty() -> Arena {
        Arena { map: None }
    }

    /// A zeroed buffer of `lines` cache lines, mapped but not yet committed.
    pub fn zeroed(lines: usize) -> io::Result<Arena> {
        if lines == 0 {
            return Ok(Arena::empty());
        }
        let len = lines
            .checked_mul(LINE)
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "buffer size overflows"))?;
        Ok(Arena { map: Some(memmap2::MmapMut::map_anon(len)?) })
    }

    /// Its lines (a map starts on a page boundary, so the cast to 64-byte lines holds).
    pub fn as_slice(&self) -> &[Line] {
        self.map.as_deref().map_or(&[], bytemuck::cast_slice)
    }

    /// Its lines, writable.
    pub fn as_mut_slice(&mut self) -> &mut [Line] {
        self.map.as_deref_mut().map_or(&mut [], bytemuck::cast_slice_mut)
    }

    /// Its length in lines.
    pub fn len(&self) -> usize {
        self.map.as_ref().map_or(0, |m| m.len() / LINE)
    }
}

/// One buffer of a method's constants ([`Storage::Const`](crate::value::Storage::Const)),
/// which its execution states share: made at load (an aligned copy of an unaligned constant),
/// or the bytes a delegate's lowering made when the program was decoded, shared with the
/// program's plan rather than copied again.
pub(crate) enum ConstBuf {
    /// Made at load.
    Made(Arena),
    /// Shared with the decoded plan (aligned for the dtype of the tensor it holds).
    Shared(std::sync::Arc<[u8]>),
}

impl ConstBuf {
    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            ConstBuf::Made(a) => bytemuck::cast_slice(a.as_slice()),
            ConstBuf::Shared(b) => b,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_aligned_and_writable() {
        let mut a = Arena::zeroed(3).unwrap();
        assert_eq!(a.len(), 3);
        let bytes: &[u8] = bytemuck::cast_slice(a.as_slice());
        assert_eq!(bytes.len(), 3 * LINE);
        assert!(bytes.iter().all(|&b| b == 0));
        assert_eq!(bytes.as_ptr() as usize % LINE, 0);
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(a.as_mut_slice());
        bytes[3 * LINE - 1] = 7;
        assert_eq!(bytemuck::cast_slice::<Line, u8>(a.as_slice())[3 * LINE - 1], 7);
        let empty = Arena::zeroed(0).unwrap();
        assert_eq!((empty.len(), empty.as_slice().len()), (0, 0));
    }
}
