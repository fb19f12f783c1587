//! The elementwise engine shared by unary, binary and ternary ops: dtype casts, broadcasting,
//! output resizing and layout-aware loops.
//!
//! Operators whose element function is the same for many dtypes compute on [`Lane`]s: each
//! operand cast to the common dtype, widened to a wider type (its calc type, or `f64`/`i64`)
//! and laid out in the output's storage order by code instantiated once per dtype; the
//! operator's loop runs on the wide type, once per wide type rather than once per dtype, and
//! [`store_via`] narrows the results into the output. This keeps the library's code small
//! (ten dtypes times every operator was half of the kernels' code in the C library).

use std::any::TypeId;
use std::borrow::Cow;

use bytemuck::Pod;

use crate::compute::strided::{broadcast_shape, broadcast_strides, walk};
use crate::dtype::{promote_types, DType};
use crate::element::{Calc, Element};
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
fn in_out_order<'a, T: Pod>(
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
fn relayout<T: Pod>(t: &TensorRef<'_>, x: &[T], shape: &[usize], out: &Shape) -> Vec<T> {
    let r = shape.len();
    let st = broadcast_strides(t.sizes(), &t.shape().strides()[..t.rank()], shape);
    let so = out.strides();
    let mut dst = vec![T::zeroed(); shape.iter().product()];
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

/// One operand of a binary elementwise operator in a calc type: its elements broadcast to the
/// output's shape in the output's storage order, or the one element that stands for all.
pub(crate) enum Lane<'a, C: Clone> {
    Elems(Cow<'a, [C]>),
    Splat(C),
}

impl<C: Copy> Lane<'_, C> {
    /// Element `i`.
    pub(crate) fn at(&self, i: usize) -> C {
        match self {
            Lane::Elems(x) => x[i],
            Lane::Splat(v) => *v,
        }
    }
}

impl<C: Calc> Lane<'_, C> {
    /// Whether any element is zero.
    pub(crate) fn has_zero(&self) -> bool {
        match self {
            Lane::Elems(x) => x.contains(&C::ZERO),
            Lane::Splat(v) => *v == C::ZERO,
        }
    }
}

/// `s` in the calc type `C`.
pub(crate) fn scalar_calc<C: Calc>(s: Scalar) -> C {
    match s {
        Scalar::Int(v) => C::of_i64(v),
        Scalar::Double(v) => C::of_f64(v),
        Scalar::Bool(v) => C::of_i64(v as i64),
    }
}

/// `x` converted by `to` (borrowed when `T` and `C` are one type, whose `to` is the identity).
fn convert<'a, T: Element, C: Pod>(x: Cow<'a, [T]>, to: fn(T) -> C) -> Cow<'a, [C]> {
    match x {
        Cow::Borrowed(s) if TypeId::of::<T>() == TypeId::of::<C>() => {
            Cow::Borrowed(bytemuck::cast_slice(s))
        }
        x => Cow::Owned(x.iter().map(|&v| to(v)).collect()),
    }
}

/// The elements of `t` cast to `T` in `T`'s calc type, in `t`'s storage order.
pub(crate) fn calc_values<'a, T: Element>(t: &TensorRef<'a>) -> Cow<'a, [T::Calc]> {
    convert(cast_to::<T>(t), T::to_calc)
}

/// The elements of `t` cast to `T` and converted by `to`, broadcast to `shape` in `out`'s
/// storage order; one element when `t` has one.
pub(crate) fn lane_of<'a, T: Element, C: Pod>(
    t: &TensorRef<'a>,
    shape: &[usize],
    out: &Shape,
    to: fn(T) -> C,
) -> Lane<'a, C> {
    let x = cast_to::<T>(t);
    match x.first() {
        Some(&v) if x.len() == 1 => Lane::Splat(to(v)),
        _ => Lane::Elems(in_out_order(t, convert(x, to), shape, out)),
    }
}

/// The two operands of a binary elementwise operator computed in `T`'s calc type: tensors cast to
/// `T` (PyTorch's common dtype) and laid out in `out`'s storage order, after `out` is resized
/// to their broadcast shape (to the tensor's against a scalar). A scalar is taken in the calc
/// type, and with `narrow` first as `T` holds it (an integer wraps to `T`'s width).
pub(crate) fn calc_lanes<'a, T: Element>(
    ctx: &KernelContext,
    a: Operand<'a>,
    b: Operand<'a>,
    out: &mut TensorMut<'_>,
    narrow: bool,
) -> Result<[Lane<'a, T::Calc>; 2], KernelError> {
    let shape = match (&a, &b) {
        (Operand::Tensor(x), Operand::Tensor(y)) => broadcast_shape(x.sizes(), y.sizes())
            .ok_or_else(|| {
                ctx.shape_err("other", format!("broadcastable with {:?}", x.sizes()), y.sizes())
            })?,
        (Operand::Tensor(t), Operand::Scalar(_)) | (Operand::Scalar(_), Operand::Tensor(t)) => {
            t.sizes().to_vec()
        }
        (Operand::Scalar(_), Operand::Scalar(_)) => {
            return Err(ctx.invalid("self", "two scalar operands"))
        }
    };
    resize(ctx, out, "out", &shape)?;
    let out_shape = *out.shape();
    let lane = |o: Operand<'a>| match o {
        Operand::Scalar(s) => {
            let c = scalar_calc::<T::Calc>(s);
            Lane::Splat(if narrow { T::from_calc(c).to_calc() } else { c })
        }
        Operand::Tensor(t) => lane_of(&t, &shape, &out_shape, T::to_calc),
    };
    Ok([lane(a), lane(b)])
}

/// `dst[i] = f(a[i])` over a lane of `dst`'s length.
pub(crate) fn map_lane<C: Copy, O: Copy>(dst: &mut [O], a: &Lane<'_, C>, f: impl Fn(C) -> O) {
    match a {
        Lane::Elems(x) => {
            for (d, &x) in dst.iter_mut().zip(x.iter()) {
                *d = f(x);
            }
        }
        Lane::Splat(x) => dst.fill(f(*x)),
    }
}

/// `dst[i] = f(a[i], b[i])` over two lanes of `dst`'s length.
pub(crate) fn zip_lanes<C: Copy, O: Copy>(
    dst: &mut [O],
    a: &Lane<'_, C>,
    b: &Lane<'_, C>,
    f: impl Fn(C, C) -> O,
) {
    match (a, b) {
        (Lane::Elems(x), Lane::Elems(y)) => {
            for ((d, &x), &y) in dst.iter_mut().zip(x.iter()).zip(y.iter()) {
                *d = f(x, y);
            }
        }
        (Lane::Elems(x), Lane::Splat(y)) => {
            for (d, &x) in dst.iter_mut().zip(x.iter()) {
                *d = f(x, *y);
            }
        }
        (Lane::Splat(x), Lane::Elems(y)) => {
            for (d, &y) in dst.iter_mut().zip(y.iter()) {
                *d = f(*x, y);
            }
        }
        (Lane::Splat(x), Lane::Splat(y)) => dst.fill(f(*x, *y)),
    }
}

/// Runs `f` on `out`'s elements as `C` and stores them as `T` (converted by `from`), converted
/// to `out`'s dtype (`check_cast`: PyTorch's `canCast(T, out.dtype)`). `f` writes into `out`
/// itself when `out` holds `T` and `T` is `C` (whose `from` is the identity), else into a
/// temporary. `f` is a trait object so that this is one function per `T` and `C`, not one per
/// operator.
pub(crate) fn store_via<T: Element, C: Pod>(
    ctx: &KernelContext,
    out: &mut TensorMut<'_>,
    check_cast: bool,
    from: fn(C) -> T,
    f: &dyn Fn(&mut [C]),
) -> Result<(), KernelError> {
    if out.dtype() == T::DTYPE && TypeId::of::<T>() == TypeId::of::<C>() {
        let s = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        f(bytemuck::cast_slice_mut(s));
        return Ok(());
    }
    let mut vals = vec![C::zeroed(); out.numel()];
    f(&mut vals);
    with_out::<T>(ctx, out, check_cast, |dst| {
        for (d, &c) in dst.iter_mut().zip(&vals) {
            *d = from(c);
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
