//! The elementwise engine shared by unary, binary and ternary ops: dtype casts, broadcasting,
//! output resizing and layout-aware loops.

use std::borrow::Cow;

use crate::compute::strided::{broadcast_shape, broadcast_strides, walk};
use crate::dtype::{promote_types, DType};
use crate::element::Element;
use crate::error::KernelError;
use crate::kernel::KernelContext;
use crate::shape::Shape;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::Scalar;

/// The elements of `t` converted to `T`, in `t`'s storage order (borrowed when no conversion
/// is needed).
pub(crate) fn cast_to<'a, T: Element>(t: &TensorRef<'a>) -> Cow<'a, [T]> {
    if let Ok(s) = t.as_slice::<T>() {
        return Cow::Borrowed(s);
    }
    crate::dispatch_all!(t.dtype(), S => {
        match t.as_slice::<S>() {
            Ok(src) => Cow::Owned(src.iter().map(|&v| T::cast_from(v)).collect()),
            Err(_) => Cow::Owned(vec![T::default(); t.numel()]),
        }
    }, _ => Cow::Owned(vec![T::default(); t.numel()]))
}

/// Copies `src` (in `out`'s storage order) into `out`, converting to its dtype.
pub(crate) fn store_cast<T: Element>(
    ctx: &KernelContext,
    src: &[T],
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let dt = out.dtype();
    crate::dispatch_all!(dt, U => {
        let dst = out.as_mut_slice::<U>().map_err(|e| ctx.tensor_err("out", e))?;
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = U::cast_from(s);
        }
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

/// Runs `f` on `out`'s elements typed as `O`, through a temporary when the dtype differs.
/// `check_cast` enforces PyTorch's `canCast(O, out.dtype)`.
pub(crate) fn with_out<O: Element>(
    ctx: &KernelContext,
    out: &mut TensorMut<'_>,
    check_cast: bool,
    f: impl FnOnce(&mut [O]),
) -> Result<(), KernelError> {
    if out.dtype() == O::DTYPE {
        let s = out.as_mut_slice::<O>().map_err(|e| ctx.tensor_err("out", e))?;
        f(s);
        return Ok(());
    }
    if !out.dtype().is_computable() || check_cast && !crate::dtype::can_cast(O::DTYPE, out.dtype())
    {
        return Err(ctx.dtype_err(
            "out",
            format!("a dtype {} can be cast to", O::DTYPE),
            out.dtype(),
        ));
    }
    let mut tmp = vec![O::default(); out.numel()];
    f(&mut tmp);
    store_cast(ctx, &tmp, out)
}

/// Resizes `out` to `sizes`, naming the argument on failure.
pub(crate) fn resize(
    ctx: &KernelContext,
    out: &mut TensorMut<'_>,
    name: &'static str,
    sizes: &[usize],
) -> Result<(), KernelError> {
    out.resize(sizes).map_err(|e| ctx.tensor_err(name, e))
}

/// Whether `t`'s elements, in its storage order, are those of `out` in its storage order at
/// `shape` (the same sizes, and the same dim order or both dense row-major).
fn lines_up(t: &TensorRef<'_>, shape: &[usize], out: &Shape) -> bool {
    t.sizes() == shape
        && (t.shape().dim_order() == out.dim_order()
            || t.shape().is_dense_row_major() && out.is_dense_row_major())
}

/// `x` (the elements of `t` cast to `T`, in `t`'s storage order) broadcast to `shape` and laid
/// out in `out`'s storage order, so that one dense loop serves every operand layout (the
/// loops of each operator stay one per element function: the strided walk is here, once per
/// element type, not once per function).
fn in_out_order<'a, T: Element>(
    t: &TensorRef<'_>,
    x: Cow<'a, [T]>,
    shape: &[usize],
    out: &Shape,
) -> Cow<'a, [T]> {
    if lines_up(t, shape, out) {
        return x;
    }
    Cow::Owned(relayout(t, &x, shape, out))
}

#[inline(never)]
fn relayout<T: Element>(t: &TensorRef<'_>, x: &[T], shape: &[usize], out: &Shape) -> Vec<T> {
    let r = shape.len();
    let st = broadcast_strides(t.sizes(), &t.shape().strides()[..t.rank()], shape);
    let so = out.strides();
    let mut dst = vec![T::default(); shape.iter().product()];
    walk(shape, [&st[..r], &so[..r]], |[i, o]| dst[o] = x[i]);
    dst
}

/// Elementwise `out[i] = f(a[i])` with `a` cast to `T` and results of type `O` cast to the out
/// dtype. Handles any dim orders.
pub(crate) fn map1<T: Element, O: Element>(
    ctx: &KernelContext,
    a: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    check_cast: bool,
    f: impl Fn(T) -> O,
) -> Result<(), KernelError> {
    resize(ctx, out, "out", a.sizes())?;
    let out_shape = *out.shape();
    let src = in_out_order(a, cast_to::<T>(a), a.sizes(), &out_shape);
    with_out::<O>(ctx, out, check_cast, |dst| {
        for (d, &s) in dst.iter_mut().zip(src.iter()) {
            *d = f(s);
        }
    })
}

/// Elementwise `out = f(a, b)` over the broadcast shape, both inputs cast to `T`.
pub(crate) fn map2<T: Element, O: Element>(
    ctx: &KernelContext,
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    check_cast: bool,
    f: impl Fn(T, T) -> O,
) -> Result<(), KernelError> {
    let shape = broadcast_shape(a.sizes(), b.sizes()).ok_or_else(|| {
        ctx.shape_err("other", format!("broadcastable with {:?}", a.sizes()), b.sizes())
    })?;
    resize(ctx, out, "out", &shape)?;
    let out_shape = *out.shape();
    let xa = in_out_order(a, cast_to::<T>(a), &shape, &out_shape);
    let xb = cast_to::<T>(b);
    // One element against a whole tensor needs no broadcast copy.
    let splat = (b.numel() == 1 && !xb.is_empty()).then(|| xb[0]);
    let xb = if splat.is_some() { xb } else { in_out_order(b, xb, &shape, &out_shape) };
    with_out::<O>(ctx, out, check_cast, |dst| match splat {
        Some(y) => {
            for (d, &x) in dst.iter_mut().zip(xa.iter()) {
                *d = f(x, y);
            }
        }
        None => {
            for ((d, &x), &y) in dst.iter_mut().zip(xa.iter()).zip(xb.iter()) {
                *d = f(x, y);
            }
        }
    })
}

/// Elementwise `out = f(a, b, c)` over the broadcast shape; `a` cast to `A`, `b` and `c` to `T`.
pub(crate) fn map3<A: Element, T: Element, O: Element>(
    ctx: &KernelContext,
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    c: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    f: impl Fn(A, T, T) -> O,
) -> Result<(), KernelError> {
    let ab = broadcast_shape(a.sizes(), b.sizes()).ok_or_else(|| {
        ctx.shape_err("self", format!("broadcastable with {:?}", a.sizes()), b.sizes())
    })?;
    let shape = broadcast_shape(&ab, c.sizes())
        .ok_or_else(|| ctx.shape_err("other", format!("broadcastable with {ab:?}"), c.sizes()))?;
    resize(ctx, out, "out", &shape)?;
    let out_shape = *out.shape();
    let xa = in_out_order(a, cast_to::<A>(a), &shape, &out_shape);
    let xb = in_out_order(b, cast_to::<T>(b), &shape, &out_shape);
    let xc = in_out_order(c, cast_to::<T>(c), &shape, &out_shape);
    with_out::<O>(ctx, out, true, |dst| {
        for (((d, &x), &y), &z) in dst.iter_mut().zip(xa.iter()).zip(xb.iter()).zip(xc.iter()) {
            *d = f(x, y, z);
        }
    })
}

/// A tensor or a scalar operand.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Operand<'a> {
    Tensor(TensorRef<'a>),
    Scalar(Scalar),
}

/// The dtype PyTorch gives a Python scalar in promotion (default float dtype for doubles).
fn scalar_dtype(s: Scalar) -> DType {
    match s {
        Scalar::Int(_) => DType::Long,
        Scalar::Double(_) => DType::Float,
        Scalar::Bool(_) => DType::Bool,
    }
}

/// PyTorch's `combine_categories(higher, lower)`.
fn combine(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (h, None) => h,
        (Some(h), Some(l)) => {
            if h.is_float() {
                Some(h)
            } else if h == DType::Bool || l.is_float() {
                promote_types(h, l)
            } else {
                Some(h)
            }
        }
    }
}

/// PyTorch's `result_type` over operands: dimensioned tensors, then 0-dim tensors, then
/// scalars, each lower class only raising the category.
pub(crate) fn result_type(ops: &[Operand<'_>]) -> Option<DType> {
    let mut dim: Option<DType> = None;
    let mut zero: Option<DType> = None;
    let mut wrapped: Option<DType> = None;
    for op in ops {
        let (slot, t) = match op {
            Operand::Tensor(t) if t.rank() > 0 => (&mut dim, t.dtype()),
            Operand::Tensor(t) => (&mut zero, t.dtype()),
            Operand::Scalar(s) => (&mut wrapped, scalar_dtype(*s)),
        };
        *slot = match *slot {
            None => Some(t),
            Some(prev) => Some(promote_types(prev, t)?),
        };
    }
    combine(dim, combine(zero, wrapped))
}
