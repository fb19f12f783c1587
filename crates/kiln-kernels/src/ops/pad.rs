//! Padding ops: `constant_pad_nd` (negative pads crop, as in PyTorch), `reflection_pad{1,2,3}d`
//! and `replication_pad{1,2,3}d`, plus [`remap`], the element-mover they share with other
//! data-movement ops (roll, tril, pixel_unshuffle). Every dim order is accepted; output
//! elements are written at the out tensor's own strides.

use bytemuck::Pod;

use crate::dtype::DType;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::pointwise::resize;
use crate::shape::MAX_RANK;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out, Scalar};

type KResult = Result<(), KernelError>;

/// The bytes of `value` converted to `dtype` (PyTorch's `static_cast`: floats round, integers
/// truncate then wrap, bool is `!= 0`), in the first `dtype.size()` bytes.
pub(crate) fn scalar_bytes(
    ctx: &KernelContext,
    dtype: DType,
    value: Scalar,
    name: &'static str,
) -> Result<[u8; 8], KernelError> {
    let mut b = [0u8; 8];
    crate::dispatch_all!(dtype, T => {
        let v: T = match value {
            Scalar::Double(d) => crate::element::Element::from_f64(d),
            s => crate::element::Element::from_i64(s.to_i64()),
        };
        let bytes = bytemuck::bytes_of(&v);
        b[..bytes.len()].copy_from_slice(bytes);
        Ok(b)
    }, _ => Err(ctx.dtype_err(name, "a computable dtype", dtype)))
}

/// Writes `out` (resized to `sizes`; it must have `x`'s dtype) element by element: the element
/// at output logical index `idx` is `x`'s element at storage offset `src(idx)`, or `fill` when
/// `src` returns `None`. A source offset outside `x` is an error, never a panic.
pub(crate) fn remap(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    sizes: &[usize],
    out: &mut TensorMut<'_>,
    fill: Scalar,
    src: impl FnMut(&[usize]) -> Option<usize>,
) -> KResult {
    if out.dtype() != x.dtype() {
        return Err(ctx.dtype_err(
            "out",
            format!("{} (the dtype of self)", x.dtype()),
            out.dtype(),
        ));
    }
    let fill = scalar_bytes(ctx, x.dtype(), fill, "self")?;
    resize(ctx, out, "out", sizes)?;
    let os = out.shape().strides();
    let xb = x.bytes();
    let ob = out.bytes_mut();
    match x.dtype().size() {
        1 => move_elems::<u8>(ctx, xb, ob, &fill, sizes, &os, src),
        2 => move_elems::<u16>(ctx, xb, ob, &fill, sizes, &os, src),
        4 => move_elems::<u32>(ctx, xb, ob, &fill, sizes, &os, src),
        _ => move_elems::<u64>(ctx, xb, ob, &fill, sizes, &os, src),
    }
}

fn move_elems<P: Pod>(
    ctx: &KernelContext,
    xb: &[u8],
    ob: &mut [u8],
    fill: &[u8; 8],
    sizes: &[usize],
    os: &[usize; MAX_RANK],
    mut src: impl FnMut(&[usize]) -> Option<usize>,
) -> KResult {
    let misaligned = || ctx.invalid("self", "misaligned tensor data");
    let s: &[P] = bytemuck::try_cast_slice(xb).map_err(|_| misaligned())?;
    let d: &mut [P] = bytemuck::try_cast_slice_mut(ob).map_err(|_| misaligned())?;
    let f: P = bytemuck::pod_read_unaligned(&fill[..std::mem::size_of::<P>()]);
    let r = sizes.len();
    let n: usize = sizes.iter().product();
    let mut idx = [0usize; MAX_RANK];
    for _ in 0..n {
        let o: usize = (0..r).map(|k| idx[k] * os[k]).sum();
        let v = match src(&idx[..r]) {
            Some(i) => *s.get(i).ok_or_else(|| {
                ctx.invalid("self", format!("source element {i} outside the input"))
            })?,
            None => f,
        };
        let slot = d.get_mut(o).ok_or_else(|| ctx.invalid("out", "output offset out of range"))?;
        *slot = v;
        for k in (0..r).rev() {
            idx[k] += 1;
            if idx[k] < sizes[k] {
                break;
            }
            idx[k] = 0;
        }
    }
    Ok(())
}

/// Per padded dim: `(dim, before, after)`; dims counted from the last one, as `pad` lists them.
fn pad_pairs(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    pad: &[i64],
    name: &'static str,
) -> Result<Vec<(usize, i64, i64)>, KernelError> {
    if !pad.len().is_multiple_of(2) || pad.len() / 2 > x.rank() {
        return Err(ctx.invalid(
            name,
            format!(
                "{} pad values for a rank-{} tensor (need an even count <= 2*rank)",
                pad.len(),
                x.rank()
            ),
        ));
    }
    Ok(pad.chunks(2).enumerate().map(|(i, p)| (x.rank() - 1 - i, p[0], p[1])).collect())
}

/// Output sizes after padding, checking that no size becomes negative.
fn padded_sizes(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    pairs: &[(usize, i64, i64)],
    name: &'static str,
) -> Result<Vec<usize>, KernelError> {
    let mut sizes = x.sizes().to_vec();
    for &(d, b, a) in pairs {
        let n = (x.sizes()[d] as i64).checked_add(b).and_then(|v| v.checked_add(a));
        sizes[d] = n.and_then(|v| usize::try_from(v).ok()).ok_or_else(|| {
            ctx.invalid(
                name,
                format!("padding ({b}, {a}) makes dim {d} of size {} negative", x.sizes()[d]),
            )
        })?;
    }
    Ok(sizes)
}

fn constant_pad(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let pad = a.int_list(1, "pad")?;
    let value = a.scalar(2, "value")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    let pairs = pad_pairs(ctx, &x, pad, "pad")?;
    let sizes = padded_sizes(ctx, &x, &pairs, "pad")?;
    let mut before = [0i64; MAX_RANK];
    for &(d, b, _) in &pairs {
        before[d] = b;
    }
    let xs = x.shape().strides();
    let xsz = x.sizes().to_vec();
    remap(ctx, &x, &sizes, out, value, |idx| {
        let mut off = 0;
        for (k, &i) in idx.iter().enumerate() {
            let s = i as i128 - before[k] as i128;
            if s < 0 || s >= xsz[k] as i128 {
                return None;
            }
            off += s as usize * xs[k];
        }
        Some(off)
    })
}

/// `reflection_pad{n}d` (`reflect`) and `replication_pad{n}d`.
fn edge_pad(
    ctx: &KernelContext,
    args: &[Arg<'_>],
    outs: &mut [Out<'_, '_>],
    n: usize,
    reflect: bool,
) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let pad = a.int_list(1, "padding")?;
    let out = out_tensor(ctx, outs, 0, "out")?;
    if pad.len() != 2 * n {
        return Err(ctx.invalid("padding", format!("expected {} values, got {}", 2 * n, pad.len())));
    }
    if x.rank() != n + 1 && x.rank() != n + 2 {
        return Err(ctx.shape_err(
            "self",
            format!("a {}-D or {}-D tensor", n + 1, n + 2),
            x.sizes(),
        ));
    }
    let pairs = pad_pairs(ctx, &x, pad, "padding")?;
    let sizes = padded_sizes(ctx, &x, &pairs, "padding")?;
    for &(d, b, af) in &pairs {
        let w = x.sizes()[d] as i64;
        if sizes[d] > 0 && w == 0 {
            return Err(ctx.shape_err("self", format!("a non-empty dim {d} to pad"), x.sizes()));
        }
        if reflect && (b >= w || af >= w) {
            return Err(ctx.invalid(
                "padding",
                format!(
                    "reflection padding ({b}, {af}) must be smaller than the size {w} of dim {d}"
                ),
            ));
        }
    }
    let mut before = [0i64; MAX_RANK];
    for &(d, b, _) in &pairs {
        before[d] = b;
    }
    let xs = x.shape().strides();
    let xsz = x.sizes().to_vec();
    remap(ctx, &x, &sizes, out, Scalar::Int(0), |idx| {
        let mut off = 0;
        for (k, &i) in idx.iter().enumerate() {
            let w = xsz[k] as i128;
            let mut s = i as i128 - before[k] as i128;
            if reflect {
                if s < 0 {
                    s = -s;
                }
                if s >= w {
                    s = 2 * (w - 1) - s;
                }
            } else {
                s = s.min(w - 1).max(0);
            }
            if s < 0 || s >= w {
                return Some(usize::MAX);
            }
            off += s as usize * xs[k];
        }
        Some(off)
    })
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::constant_pad_nd.out", 3, |c, a, o| constant_pad(c, a, o)),
        out1("aten::reflection_pad1d.out", 2, |c, a, o| edge_pad(c, a, o, 1, true)),
        out1("aten::reflection_pad2d.out", 2, |c, a, o| edge_pad(c, a, o, 2, true)),
        out1("aten::reflection_pad3d.out", 2, |c, a, o| edge_pad(c, a, o, 3, true)),
        out1("aten::replication_pad1d.out", 2, |c, a, o| edge_pad(c, a, o, 1, false)),
        out1("aten::replication_pad2d.out", 2, |c, a, o| edge_pad(c, a, o, 2, false)),
        out1("aten::replication_pad3d.out", 2, |c, a, o| edge_pad(c, a, o, 3, false)),
    ]
}
