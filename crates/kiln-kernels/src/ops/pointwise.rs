//! The elementwise engine shared by unary, binary and ternary ops: dtype casts, broadcasting,
//! output resizing and layout-aware loops.

use std::borrow::Cow;

use crate::compute::strided::{broadcast_shape, broadcast_strides, walk};
use crate::dtype::{promote_types, Category, DType};
use crate::element::Element;
use crate::error::KernelError;
use crate::kernel::KernelContext;
use crate::shape::{Shape, MAX_RANK};
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
    let src = cast_to::<T>(a);
    let out_shape = *out.shape();
    with_out::<O>(ctx, out, check_cast, |dst| {
        if out_shape.dim_order() == a.shape().dim_order()
            || a.shape().is_dense_row_major() && out_shape.is_dense_row_major()
        {
            for (d, &s) in dst.iter_mut().zip(src.iter()) {
                *d = f(s);
            }
        } else {
            let sa = a.shape().strides();
            let so = out_shape.strides();
            let r = a.rank();
            walk(a.sizes(), [&sa[..r], &so[..r]], |[ia, io]| dst[io] = f(src[ia]));
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
    let xa = cast_to::<T>(a);
    let xb = cast_to::<T>(b);
    let out_shape = *out.shape();
    with_out::<O>(ctx, out, check_cast, |dst| {
        let same = |t: &TensorRef<'_>| {
            t.sizes() == &shape[..]
                && (t.shape().dim_order() == out_shape.dim_order()
                    || t.shape().is_dense_row_major() && out_shape.is_dense_row_major())
        };
        if same(a) && same(b) {
            for ((d, &x), &y) in dst.iter_mut().zip(xa.iter()).zip(xb.iter()) {
                *d = f(x, y);
            }
        } else if same(a) && b.numel() == 1 {
            let y = xb[0];
            for (d, &x) in dst.iter_mut().zip(xa.iter()) {
                *d = f(x, y);
            }
        } else {
            let r = shape.len();
            let sa = broadcast_strides(a.sizes(), &a.shape().strides()[..a.rank()], &shape);
            let sb = broadcast_strides(b.sizes(), &b.shape().strides()[..b.rank()], &shape);
            let so = out_shape.strides();
            walk(&shape, [&sa[..r], &sb[..r], &so[..r]], |[ia, ib, io]| {
                dst[io] = f(xa[ia], xb[ib])
            });
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
    let xa = cast_to::<A>(a);
    let xb = cast_to::<T>(b);
    let xc = cast_to::<T>(c);
    let out_shape = *out.shape();
    with_out::<O>(ctx, out, true, |dst| {
        let r = shape.len();
        let sa = broadcast_strides(a.sizes(), &a.shape().strides()[..a.rank()], &shape);
        let sb = broadcast_strides(b.sizes(), &b.shape().strides()[..b.rank()], &shape);
        let sc = broadcast_strides(c.sizes(), &c.shape().strides()[..c.rank()], &shape);
        let so = out_shape.strides();
        walk(&shape, [&sa[..r], &sb[..r], &sc[..r], &so[..r]], |[ia, ib, ic, io]| {
            dst[io] = f(xa[ia], xb[ib], xc[ic])
        });
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

/// A scalar as a one-element array of `T` (viewable as a 0-dim tensor).
pub(crate) fn scalar_elem<T: Element>(s: Scalar) -> [T; 1] {
    [match s {
        Scalar::Int(v) => T::from_i64(v),
        Scalar::Double(v) => T::from_f64(v),
        Scalar::Bool(v) => T::from_i64(v as i64),
    }]
}

/// A 0-dim tensor view over a one-element array.
pub(crate) fn scalar_view<T: Element>(v: &[T; 1]) -> TensorRef<'_> {
    TensorRef::new(T::DTYPE, Shape::scalar(), bytemuck::cast_slice(v))
        .unwrap_or_else(|_| unreachable_view())
}

/// Used only where a view over a local, correctly sized array cannot fail.
fn unreachable_view<'a>() -> TensorRef<'a> {
    TensorRef::new(DType::Byte, Shape::scalar(), &[0u8])
        .unwrap_or_else(|_| unreachable!("1-byte scalar view"))
}

/// Category check helper: the lowest category among dtypes.
pub(crate) fn category(d: DType) -> Category {
    d.category()
}

/// Contiguous element strides of `sizes`.
pub(crate) fn contiguous_strides(sizes: &[usize]) -> [usize; MAX_RANK] {
    let mut s = [0usize; MAX_RANK];
    let mut acc = 1;
    for d in (0..sizes.len()).rev() {
        s[d] = acc;
        acc *= sizes[d];
    }
    s
}
