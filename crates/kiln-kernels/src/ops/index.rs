//! Indexing and creation ops: `embedding`, `index_select`, `gather`, `index.Tensor`,
//! `index_put`, `scatter` (src/value), `scatter_add`, `where`, `masked_fill`, `full`,
//! `full_like`, `zeros`, `ones`, `fill`, `scalar_tensor`, `arange`.

use crate::compute::strided::{broadcast_shape, broadcast_strides, walk};
use crate::dtype::DType;
use crate::element::{Bool, Element};
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::fast_pointwise::select;
use crate::ops::pointwise::{cast_to, lane_of, resize, result_type, with_out, Lane, Operand};
use crate::ops::shape::{copy_view, gather_index};
use crate::shape::normalize_dim;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out, Scalar};

type KResult = Result<(), KernelError>;

/// Index tensor values (int32/int64) in logical order, wrapped for negatives and checked
/// against `size`.
fn indices(
    ctx: &KernelContext,
    t: &TensorRef<'_>,
    size: usize,
    name: &'static str,
) -> Result<Vec<usize>, KernelError> {
    if !matches!(t.dtype(), DType::Long | DType::Int) {
        return Err(ctx.dtype_err(name, "int64 or int32", t.dtype()));
    }
    let v = cast_to::<i64>(t);
    let s = t.shape().strides();
    let r = t.rank();
    let mut out = Vec::with_capacity(t.numel());
    let mut bad = None;
    walk(t.sizes(), [&s[..r]], |[i]| {
        let x = v[i];
        let w = if x < 0 { x + size as i64 } else { x };
        if w < 0 || w >= size as i64 {
            bad.get_or_insert(x);
        }
        out.push(w.max(0) as usize);
    });
    match bad {
        Some(x) => Err(ctx.invalid(name, format!("index {x} is out of bounds for size {size}"))),
        None => Ok(out),
    }
}

fn fill_scalar(ctx: &KernelContext, out: &mut TensorMut<'_>, value: Scalar) -> KResult {
    let dt = out.dtype();
    crate::dispatch_all!(dt, T => {
        let v = match value {
            Scalar::Int(i) => T::from_i64(i),
            Scalar::Double(d) => T::from_f64(d),
            Scalar::Bool(b) => T::from_i64(b as i64),
        };
        out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?.fill(v);
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

fn embedding(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let w = a.tensor(0, "weight")?;
    let idx = a.tensor(1, "indices")?;
    if w.rank() != 2 {
        return Err(ctx.shape_err("weight", "[num_embeddings, dim]", w.sizes()));
    }
    let (rows, dim) = (w.sizes()[0], w.sizes()[1]);
    let ids = indices(ctx, &idx, rows, "indices")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let mut sizes = idx.sizes().to_vec();
    sizes.push(dim);
    resize(ctx, out, "out", &sizes)?;
    let ws = w.shape().strides();
    let os = out.shape().strides();
    let r = sizes.len();
    let dt = out.dtype();
    crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(&w);
        let dst = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        let mut k = 0;
        walk(&sizes[..r - 1], [&os[..r - 1]], |[o]| {
            let row = ids[k];
            k += 1;
            for j in 0..dim {
                dst[o + j * os[r - 1]] = v[row * ws[0] + j * ws[1]];
            }
        });
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

fn index_select(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let d = normalize_dim(a.int(1, "dim")?, x.rank())
        .ok_or_else(|| ctx.invalid("dim", "out of range"))?;
    let idx = a.tensor(2, "index")?;
    if idx.rank() > 1 {
        return Err(ctx.shape_err("index", "a 0-D or 1-D tensor", idx.sizes()));
    }
    let size = x.sizes().get(d).copied().unwrap_or(1);
    let ids = indices(ctx, &idx, size, "index")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let mut sizes = x.sizes().to_vec();
    if !sizes.is_empty() {
        sizes[d] = ids.len();
    }
    gather_along(ctx, &x, d, &sizes, out, |o_idx_d, _| ids[o_idx_d])
}

/// `out[i] = x[i with dim d replaced by pick(i[d], flat position)]`.
fn gather_along(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    d: usize,
    sizes: &[usize],
    out: &mut TensorMut<'_>,
    pick: impl Fn(usize, usize) -> usize,
) -> KResult {
    gather_index(ctx, x, sizes, out, |idx, flat, src| {
        src.copy_from_slice(idx);
        if let Some(s) = src.get_mut(d) {
            *s = pick(idx[d], flat);
        }
    })
}

fn gather(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let d = normalize_dim(a.int(1, "dim")?, x.rank())
        .ok_or_else(|| ctx.invalid("dim", "out of range"))?;
    let idx = a.tensor(2, "index")?;
    if idx.rank() != x.rank() || (0..x.rank()).any(|k| k != d && idx.sizes()[k] > x.sizes()[k]) {
        return Err(ctx.shape_err(
            "index",
            format!("rank {} and sizes <= {:?} outside dim {d}", x.rank(), x.sizes()),
            idx.sizes(),
        ));
    }
    let size = x.sizes().get(d).copied().unwrap_or(1);
    let ids = indices(ctx, &idx, size, "index")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let sizes = idx.sizes().to_vec();
    gather_along(ctx, &x, d, &sizes, out, |_, flat| ids[flat])
}

/// scatter / scatter_add: `out = self; out[idx with d = index[idx]] (op)= src[idx]`.
fn scatter(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    value: bool,
    add: bool,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let d = normalize_dim(a.int(1, "dim")?, x.rank())
        .ok_or_else(|| ctx.invalid("dim", "out of range"))?;
    let idx = a.tensor(2, "index")?;
    let src = if value { None } else { Some(a.tensor(3, "src")?) };
    let val = if value { Some(a.scalar(3, "value")?) } else { None };
    if idx.rank() != x.rank() {
        return Err(ctx.shape_err("index", format!("rank {}", x.rank()), idx.sizes()));
    }
    let size = x.sizes().get(d).copied().unwrap_or(1);
    let ids = indices(ctx, &idx, size, "index")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let xs = x.shape().strides();
    copy_view(ctx, &x, x.sizes(), &xs[..x.rank()], 0, out)?;
    let os = out.shape().strides();
    let r = x.rank();
    let dt = out.dtype();
    if let Some(s) = &src {
        if s.rank() != r || (0..r).any(|k| idx.sizes()[k] > s.sizes()[k]) {
            return Err(ctx.shape_err(
                "src",
                format!("sizes >= index sizes {:?}", idx.sizes()),
                s.sizes(),
            ));
        }
    }
    if (0..r).any(|k| k != d && idx.sizes()[k] > x.sizes()[k]) {
        return Err(ctx.shape_err(
            "index",
            format!("sizes <= {:?} outside dim {d}", x.sizes()),
            idx.sizes(),
        ));
    }
    crate::dispatch_all!(dt, T => {
        let sv: Vec<T> = match (&src, val) {
            (Some(s), _) => {
                let v = cast_to::<T>(s);
                let ss = s.shape().strides();
                let mut out_v = Vec::with_capacity(idx.numel());
                walk(idx.sizes(), [&ss[..r]], |[i]| out_v.push(v[i]));
                out_v
            }
            (None, Some(Scalar::Double(f))) => vec![T::from_f64(f); idx.numel()],
            (None, Some(s)) => vec![T::from_i64(s.to_i64()); idx.numel()],
            (None, None) => Vec::new(),
        };
        let dst = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        let mut it = vec![0usize; r];
        for (flat, &v) in sv.iter().enumerate() {
            let mut o = 0;
            for k in 0..r {
                o += if k == d { ids[flat] } else { it[k] } * os[k];
            }
            if add {
                dst[o] = T::from_calc(crate::element::Calc::add(dst[o].to_calc(), v.to_calc()));
            } else {
                dst[o] = v;
            }
            for k in (0..r).rev() {
                it[k] += 1;
                if it[k] < idx.sizes()[k] {
                    break;
                }
                it[k] = 0;
            }
        }
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

/// Advanced indexing plan for `index.Tensor` / `index_put`: the indexed dims (a contiguous
/// run starting at `first`), the broadcast index shape and per-position source offsets.
pub(crate) struct IndexPlan {
    pub(crate) out_sizes: Vec<usize>,
    /// For each output logical position: the input element offset.
    pub(crate) offsets: Vec<usize>,
}

pub(crate) fn index_plan(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    idx: &[Option<TensorRef<'_>>],
) -> Result<IndexPlan, KernelError> {
    let r = x.rank();
    if idx.len() > r {
        return Err(ctx.invalid("indices", format!("{} indices for a rank-{r} tensor", idx.len())));
    }
    // Bool masks expand to their nonzero coordinates (one index tensor per mask dim).
    let mut expanded: Vec<Option<(Vec<usize>, Vec<usize>)>> = Vec::new(); // (sizes, values)
    let mut dim = 0;
    for t in idx {
        match t {
            None => {
                expanded.push(None);
                dim += 1;
            }
            Some(t) if matches!(t.dtype(), DType::Bool | DType::Byte) => {
                let m = cast_to::<Bool>(t);
                let ts = t.shape().strides();
                let tr = t.rank();
                let mut coords: Vec<Vec<usize>> = vec![Vec::new(); tr];
                let mut pos = vec![0usize; tr];
                let n = t.numel();
                for _ in 0..n {
                    let off: usize = pos.iter().zip(&ts).map(|(p, s)| p * s).sum();
                    if m[off].is_true() {
                        for k in 0..tr {
                            coords[k].push(pos[k]);
                        }
                    }
                    for k in (0..tr).rev() {
                        pos[k] += 1;
                        if pos[k] < t.sizes()[k] {
                            break;
                        }
                        pos[k] = 0;
                    }
                }
                for k in 0..tr {
                    if dim + k >= r || t.sizes()[k] != x.sizes()[dim + k] {
                        return Err(ctx.shape_err(
                            "indices",
                            format!("a mask matching {:?}", x.sizes()),
                            t.sizes(),
                        ));
                    }
                    let c = std::mem::take(&mut coords[k]);
                    expanded.push(Some((vec![c.len()], c)));
                }
                dim += tr;
            }
            Some(t) => {
                if dim >= r {
                    return Err(ctx.invalid("indices", "too many indices"));
                }
                let v = indices(ctx, t, x.sizes()[dim], "indices")?;
                expanded.push(Some((t.sizes().to_vec(), v)));
                dim += 1;
            }
        }
    }
    while expanded.len() < r {
        expanded.push(None);
    }
    let defined: Vec<usize> = (0..r).filter(|&k| expanded[k].is_some()).collect();
    let Some(&first) = defined.first() else {
        return Err(ctx.invalid("indices", "at least one index tensor is required"));
    };
    let adjacent = defined.windows(2).all(|w| w[1] == w[0] + 1);
    let mut bshape: Vec<usize> = Vec::new();
    for &k in &defined {
        let s = &expanded[k].as_ref().map(|e| e.0.clone()).unwrap_or_default();
        bshape = broadcast_shape(&bshape, s)
            .ok_or_else(|| ctx.invalid("indices", "index shapes do not broadcast"))?;
    }
    let bn: usize = bshape.iter().product();
    // Per index tensor: its value at each broadcast position.
    let mut per: Vec<Vec<usize>> = Vec::new();
    for &k in &defined {
        let (s, v) = expanded[k].as_ref().map(|e| (e.0.clone(), e.1.clone())).unwrap_or_default();
        let mut cs = vec![0usize; s.len()];
        let mut acc = 1;
        for i in (0..s.len()).rev() {
            cs[i] = acc;
            acc *= s[i];
        }
        let st = broadcast_strides(&s, &cs, &bshape);
        let mut vals = Vec::with_capacity(bn);
        walk(&bshape, [&st[..bshape.len()]], |[i]| vals.push(v[i]));
        if bshape.is_empty() {
            vals = vec![v.first().copied().unwrap_or(0)];
        }
        per.push(vals);
    }
    let xs = x.shape().strides();
    let rest: Vec<usize> = (0..r).filter(|k| !defined.contains(k)).collect();
    // Output dims: if adjacent, [before..., bshape..., after...] else [bshape..., rest...].
    let before: Vec<usize> =
        if adjacent { rest.iter().copied().filter(|&k| k < first).collect() } else { Vec::new() };
    let after: Vec<usize> = rest.iter().copied().filter(|k| !before.contains(k)).collect();
    let mut out_sizes: Vec<usize> = before.iter().map(|&k| x.sizes()[k]).collect();
    out_sizes.extend(&bshape);
    out_sizes.extend(after.iter().map(|&k| x.sizes()[k]));
    let n: usize = out_sizes.iter().product();
    let mut offsets = Vec::with_capacity(n);
    let mut pos = vec![0usize; out_sizes.len()];
    let nb = before.len();
    let bl = bshape.len();
    for _ in 0..n {
        let mut off = 0;
        for (i, &k) in before.iter().enumerate() {
            off += pos[i] * xs[k];
        }
        let mut b = 0;
        for i in 0..bl {
            b = b * bshape[i] + pos[nb + i];
        }
        for (j, &k) in defined.iter().enumerate() {
            off += per[j][b] * xs[k];
        }
        for (i, &k) in after.iter().enumerate() {
            off += pos[nb + bl + i] * xs[k];
        }
        offsets.push(off);
        for k in (0..pos.len()).rev() {
            pos[k] += 1;
            if pos[k] < out_sizes[k] {
                break;
            }
            pos[k] = 0;
        }
    }
    Ok(IndexPlan { out_sizes, offsets })
}

fn index_tensor(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let idx = a.opt_tensor_list(1, "indices")?;
    let p = index_plan(ctx, &x, idx)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    resize(ctx, out, "out", &p.out_sizes)?;
    let os = out.shape().strides();
    let r = p.out_sizes.len();
    let dt = out.dtype();
    crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(&x);
        let dst = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        let mut k = 0;
        walk(&p.out_sizes, [&os[..r]], |[o]| {
            dst[o] = v[p.offsets[k]];
            k += 1;
        });
        if r == 0 {
            if let (Some(d), Some(&off)) = (dst.first_mut(), p.offsets.first()) {
                *d = v[off];
            }
        }
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

fn index_put(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let idx = a.opt_tensor_list(1, "indices")?;
    let values = a.tensor(2, "values")?;
    let accumulate = a.bool(3, "accumulate")?;
    let p = index_plan(ctx, &x, idx)?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let xs = x.shape().strides();
    copy_view(ctx, &x, x.sizes(), &xs[..x.rank()], 0, out)?;
    if !out.shape().is_dense_row_major() && out.dtype() != x.dtype()
        || out.shape().dim_order() != x.shape().dim_order()
    {
        return Err(ctx.invalid("out", "index_put needs out with the dim order of self"));
    }
    put_indexed(ctx, out, &p, &values, accumulate, "out")
}

/// Writes (or with `accumulate` adds) `values`, broadcast to the plan's shape, at the plan's
/// offsets of `out`: the shared tail of `index_put.out` and `index_put_`. `out_name` names
/// `out` in errors.
pub(crate) fn put_indexed(
    ctx: &KernelContext,
    out: &mut TensorMut<'_>,
    p: &IndexPlan,
    values: &TensorRef<'_>,
    accumulate: bool,
    out_name: &'static str,
) -> KResult {
    if broadcast_shape(values.sizes(), &p.out_sizes).as_deref() != Some(&p.out_sizes[..]) {
        return Err(ctx.shape_err(
            "values",
            format!("broadcastable to {:?}", p.out_sizes),
            values.sizes(),
        ));
    }
    let vs = values.shape().strides();
    let st = broadcast_strides(values.sizes(), &vs[..values.rank()], &p.out_sizes);
    let dt = out.dtype();
    crate::dispatch_all!(dt, T => {
        let v = cast_to::<T>(values);
        let dst = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err(out_name, e))?;
        let mut k = 0;
        let mut put = |i: usize| {
            if let (Some(&o), Some(&val)) = (p.offsets.get(k), v.get(i)) {
                if let Some(slot) = dst.get_mut(o) {
                    *slot = if accumulate { T::from_calc(crate::element::Calc::add(slot.to_calc(), val.to_calc())) } else { val };
                }
            }
            k += 1;
        };
        if p.out_sizes.is_empty() {
            put(0);
        } else {
            walk(&p.out_sizes, [&st[..p.out_sizes.len()]], |[i]| put(i));
        }
        Ok(())
    }, _ => Err(ctx.dtype_err(out_name, "a computable dtype", dt)))
}

fn where_(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let c = a.tensor(0, "condition")?;
    let x = a.tensor(1, "self")?;
    let y = a.tensor(2, "other")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let ct = result_type(&[Operand::Tensor(x), Operand::Tensor(y)])
        .ok_or_else(|| ctx.dtype_err("other", "a dtype promotable with self", y.dtype()))?;
    if !ctx.general_only && ct == DType::Float {
        let shape =
            broadcast_shape(x.sizes(), y.sizes()).and_then(|s| broadcast_shape(&s, c.sizes()));
        if shape.is_some_and(|s| select::<f32>(&c, &x, &y, &s, out)) {
            return Ok(());
        }
    }
    crate::dispatch_all!(ct, T => select_typed::<T>(ctx, &c, [Choice::Tensor("self", x), Choice::Tensor("other", y)], out),
        _ => Err(ctx.dtype_err("self", "a computable dtype", ct)))
}

/// What a selection takes where its condition holds or does not.
enum Choice<'a, T> {
    /// A named tensor argument (cast to `T`).
    Tensor(&'static str, TensorRef<'a>),
    /// One value.
    Value(T),
}

/// `out = if cond { choices[0] } else { choices[1] }` elementwise over their broadcast shape,
/// tensors cast to `T`: the general path of `where` and `masked_fill`.
fn select_typed<T: Element>(
    ctx: &KernelContext,
    cond: &TensorRef<'_>,
    choices: [Choice<'_, T>; 2],
    out: &mut TensorMut<'_>,
) -> KResult {
    let mut shape = cond.sizes().to_vec();
    for choice in &choices {
        if let Choice::Tensor(name, t) = choice {
            shape = broadcast_shape(&shape, t.sizes()).ok_or_else(|| {
                ctx.shape_err(name, format!("broadcastable with {shape:?}"), t.sizes())
            })?;
        }
    }
    resize(ctx, out, "out", &shape)?;
    let out_shape = *out.shape();
    let when = lane_of::<Bool, u8>(cond, &shape, &out_shape, |b| b.is_true() as u8);
    let [yes, no] = choices.map(|choice| match choice {
        Choice::Tensor(_, t) => lane_of::<T, T>(&t, &shape, &out_shape, |v| v),
        Choice::Value(v) => Lane::Splat(v),
    });
    with_out::<T>(ctx, out, true, |dst| {
        for (i, d) in dst.iter_mut().enumerate() {
            *d = if when.at(i) != 0 { yes.at(i) } else { no.at(i) };
        }
    })
}

fn masked_fill(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let m = a.tensor(1, "mask")?;
    let v = a.scalar(2, "value")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if m.dtype() != DType::Bool {
        return Err(ctx.dtype_err("mask", "bool", m.dtype()));
    }
    let dt = x.dtype();
    crate::dispatch_all!(dt, T => {
        let fill = match v { Scalar::Double(d) => T::from_f64(d), s => T::from_i64(s.to_i64()) };
        select_typed::<T>(ctx, &m, [Choice::Value(fill), Choice::Tensor("self", x)], out)
    }, _ => Err(ctx.dtype_err("self", "a computable dtype", dt)))
}

fn arange(
    ctx: &KernelContext,
    start: Scalar,
    end: Scalar,
    step: Scalar,
    out: &mut TensorMut<'_>,
) -> KResult {
    let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
    if st == 0.0 || !st.is_finite() || !s.is_finite() || !e.is_finite() {
        return Err(ctx.invalid("step", "step must be nonzero and bounds finite"));
    }
    if (st > 0.0 && e < s) || (st < 0.0 && e > s) {
        return Err(ctx.invalid("end", "upper bound and step sign are inconsistent"));
    }
    let all_int = !start.is_float() && !end.is_float() && !step.is_float();
    let n = if all_int {
        let (s, e, st) = (start.to_i64() as i128, end.to_i64() as i128, step.to_i64() as i128);
        ((e - s + st - st.signum()) / st).max(0) as f64
    } else {
        ((e - s) / st).ceil()
    };
    if n > (isize::MAX as f64) / 8.0 {
        return Err(ctx.invalid("end", "too many elements"));
    }
    resize(ctx, out, "out", &[n as usize])?;
    let dt = out.dtype();
    crate::dispatch_all!(dt, T => {
        let dst = out.as_mut_slice::<T>().map_err(|e| ctx.tensor_err("out", e))?;
        for (i, d) in dst.iter_mut().enumerate() {
            *d = if all_int { T::from_i64(start.to_i64() + i as i64 * step.to_i64()) } else { T::from_f64(s + i as f64 * st) };
        }
        Ok(())
    }, _ => Err(ctx.dtype_err("out", "a computable dtype", dt)))
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::embedding.out", 5, |c, a, o| embedding(c, a, o)),
        out1("aten::index_select.out", 3, |c, a, o| index_select(c, a, o)),
        out1("aten::gather.out", 4, |c, a, o| gather(c, a, o)),
        out1("aten::scatter.src_out", 4, |c, a, o| scatter(c, a, o, false, false)),
        out1("aten::scatter.value_out", 4, |c, a, o| scatter(c, a, o, true, false)),
        out1("aten::scatter_add.out", 4, |c, a, o| scatter(c, a, o, false, true)),
        out1("aten::index.Tensor_out", 2, |c, a, o| index_tensor(c, a, o)),
        out1("aten::index_put.out", 4, |c, a, o| index_put(c, a, o)),
        out1("aten::where.self_out", 3, |c, a, o| where_(c, a, o)),
        out1("aten::masked_fill.Scalar_out", 3, |c, a, o| masked_fill(c, a, o)),
        out1("aten::full.out", 2, |c, a, o| {
            let r = Args::new(c, a);
            let size = r.sizes(0, "size")?;
            let v = r.scalar(1, "fill_value")?;
            let out = out_tensor(c, o, 0, "out")?;
            resize(c, out, "out", &size)?;
            fill_scalar(c, out, v)
        }),
        out1("aten::full_like.out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let v = r.scalar(1, "fill_value")?;
            let out = out_tensor(c, o, 0, "out")?;
            resize(c, out, "out", x.sizes())?;
            fill_scalar(c, out, v)
        }),
        out1("aten::zeros.out", 1, |c, a, o| {
            let size = Args::new(c, a).sizes(0, "size")?;
            let out = out_tensor(c, o, 0, "out")?;
            resize(c, out, "out", &size)?;
            fill_scalar(c, out, Scalar::Int(0))
        }),
        out1("aten::ones.out", 1, |c, a, o| {
            let size = Args::new(c, a).sizes(0, "size")?;
            let out = out_tensor(c, o, 0, "out")?;
            resize(c, out, "out", &size)?;
            fill_scalar(c, out, Scalar::Int(1))
        }),
        out1("aten::fill.Scalar_out", 2, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let v = r.scalar(1, "value")?;
            let out = out_tensor(c, o, 0, "out")?;
            resize(c, out, "out", x.sizes())?;
            fill_scalar(c, out, v)
        }),
        out1("aten::fill.Tensor_out", 2, |c, a, o| {
            let r = Args::new(c, a);
            let x = r.tensor(0, "self")?;
            let v = r.tensor(1, "value")?;
            if v.rank() != 0 {
                return Err(c.shape_err("value", "a 0-dim tensor", v.sizes()));
            }
            let val = cast_to::<f64>(&v)[0];
            let s = if v.dtype().is_float() {
                Scalar::Double(val)
            } else {
                Scalar::Int(cast_to::<i64>(&v)[0])
            };
            let out = out_tensor(c, o, 0, "out")?;
            resize(c, out, "out", x.sizes())?;
            fill_scalar(c, out, s)
        }),
        out1("aten::scalar_tensor.out", 1, |c, a, o| {
            let v = Args::new(c, a).scalar(0, "s")?;
            let out = out_tensor(c, o, 0, "out")?;
            resize(c, out, "out", &[])?;
            fill_scalar(c, out, v)
        }),
        out1("aten::arange.out", 1, |c, a, o| {
            let end = Args::new(c, a).scalar(0, "end")?;
            arange(c, Scalar::Int(0), end, Scalar::Int(1), out_tensor(c, o, 0, "out")?)
        }),
        out1("aten::arange.start_out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let (s, e, st) = (r.scalar(0, "start")?, r.scalar(1, "end")?, r.scalar(2, "step")?);
            arange(c, s, e, st, out_tensor(c, o, 0, "out")?)
        }),
    ]
}
