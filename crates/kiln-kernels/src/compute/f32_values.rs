//! A float operand's values as a prepared kernel takes them at load: borrowed where they lie
//! (a constant's bytes in the mapped program), or a copy laid out for the kernel, which lives
//! in a mapping of its own when large.
//!
//! A copy made only to be packed is dropped right after; on the allocator's heap a freed
//! multi-megabyte buffer stays resident as long as anything allocated after it lives above it
//! (glibc raises its mapping threshold to the size of the last mapped block freed), so each
//! such copy of resnet50's filters added 9 MB to the process for good. In its own mapping it
//! goes back to the OS when dropped.

use std::ops::Deref;

use crate::compute::sgemm::{GemmError, PackedBuf};

/// `f32` values, borrowed or owned ([`F32Values::filled`]).
#[derive(Debug)]
pub enum F32Values<'a> {
    /// Values where they lie.
    Borrowed(&'a [f32]),
    /// A copy (in its own mapping from 2 MiB on).
    Owned(OwnedF32),
}

/// A copy's values (see [`F32Values::Owned`]).
#[derive(Debug)]
pub struct OwnedF32(PackedBuf);

impl<'a> F32Values<'a> {
    /// `len` values written by `fill` (into zeros); an error when the size overflows.
    pub fn filled(len: usize, fill: impl FnOnce(&mut [f32])) -> Result<Self, GemmError> {
        let mut buf = PackedBuf::zeroed(len)?;
        fill(buf.values_mut());
        Ok(F32Values::Owned(OwnedF32(buf)))
    }

    /// The values, to change in place: borrowed ones are copied first.
    pub fn to_mut(&mut self) -> Result<&mut [f32], GemmError> {
        match self {
            F32Values::Owned(OwnedF32(buf)) => Ok(buf.values_mut()),
            F32Values::Borrowed(values) => {
                let values: &'a [f32] = values;
                *self = F32Values::filled(values.len(), |dst| dst.copy_from_slice(values))?;
                self.to_mut()
            }
        }
    }
}

impl Deref for F32Values<'_> {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match self {
            F32Values::Borrowed(values) => values,
            F32Values::Owned(OwnedF32(buf)) => buf.values(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_values_are_copied_only_to_change() {
        let src = [1.0f32, 2.0, 3.0];
        let mut v = F32Values::Borrowed(&src);
        assert_eq!(&*v, &src);
        v.to_mut().unwrap()[1] = 5.0;
        assert!(matches!(v, F32Values::Owned(_)));
        assert_eq!(&*v, &[1.0, 5.0, 3.0]);
        assert_eq!(src, [1.0, 2.0, 3.0]);
        // Large copies too (their own mapping).
        let n = (4 << 20) / 4 + 3;
        let big =
            F32Values::filled(n, |d| d.iter_mut().enumerate().for_each(|(i, x)| *x = i as f32))
                .unwrap();
        assert_eq!(big.len(), n);
        assert_eq!(big[n - 1], (n - 1) as f32);
    }
}
