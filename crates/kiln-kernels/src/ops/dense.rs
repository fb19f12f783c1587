//! Logical (row-major) views of tensors in any dim order, for kernels that index their data by
//! logical position: [`logical`] reads, [`store_logical`] writes.

use crate::element::Element;
use crate::error::KernelError;
use crate::kernel::KernelContext;
use crate::ops::pointwise::{cast_to, with_out};
use crate::tensor::{TensorMut, TensorRef};

/// The elements of `t` converted to `T`, in logical row-major order whatever its dim order.
pub(crate) fn logical<T: Element>(t: &TensorRef<'_>) -> Vec<T> {
    let v = cast_to::<T>(t);
    if t.shape().is_dense_row_major() {
        return v.into_owned();
    }
    let s = t.shape().strides();
    let r = t.rank();
    let mut out = Vec::with_capacity(t.numel());
    crate::compute::strided::walk(t.sizes(), [&s[..r]], |[i]| out.push(v[i]));
    out
}

/// Writes `vals` (logical row-major order, `out.numel()` values) into `out` in its dim order,
/// converting to its dtype; `check_cast` enforces PyTorch's `canCast(T, out.dtype)`.
pub(crate) fn store_logical<T: Element>(
    ctx: &KernelContext,
    out: &mut TensorMut<'_>,
    vals: &[T],
    check_cast: bool,
) -> Result<(), KernelError> {
    if vals.len() != out.numel() {
        return Err(ctx.shape_err("out", format!("{} elements", vals.len()), out.sizes()));
    }
    let shape = *out.shape();
    with_out::<T>(ctx, out, check_cast, |dst| {
        if shape.is_dense_row_major() {
            dst.copy_from_slice(vals);
        } else {
            let s = shape.strides();
            let r = shape.rank();
            let mut k = 0;
            crate::compute::strided::walk(shape.sizes(), [&s[..r]], |[o]| {
                dst[o] = vals[k];
                k += 1;
            });
        }
    })
}
