//! Pairwise p-norm distances: `_cdist_forward` (between the rows of two batched matrices,
//! batch dims broadcast) and `_pdist_forward` (between the rows of one matrix, upper triangle
//! in row-major order). Floating dtypes, any dim order, accumulation in `f64`.
//!
//! Distances are always computed directly (`(sum |a - b|^p)^(1/p)`, with the special cases
//! p = 0 (count of differing coordinates), 1, 2 and infinity), as ExecuTorch's portable kernel
//! does. PyTorch eager switches to a matrix-multiplication formula for p = 2 when a matrix has
//! more than 25 rows and `compute_mode` allows it; that formula loses precision for close
//! points, so `compute_mode` is accepted and ignored.

use crate::compute::strided::broadcast_shape;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::dense::{logical, store_logical};
use crate::ops::pointwise::resize;
use crate::tensor::TensorRef;
use crate::value::{Arg, Out};

type KResult = Result<(), KernelError>;

/// The p-norm of the coordinate differences of two rows.
fn dist(a: &[f64], b: &[f64], p: f64) -> f64 {
    let diffs = a.iter().zip(b).map(|(x, y)| (x - y).abs());
    if p == 0.0 {
        diffs.filter(|d| *d != 0.0).count() as f64
    } else if p == 1.0 {
        diffs.sum()
    } else if p == 2.0 {
        diffs.map(|d| d * d).sum::<f64>().sqrt()
    } else if p == f64::INFINITY {
        diffs.fold(0.0, |m, d| if d > m || d.is_nan() { d } else { m })
    } else {
        diffs.map(|d| d.powf(p)).sum::<f64>().powf(1.0 / p)
    }
}

fn check_p(ctx: &KernelContext, p: f64) -> KResult {
    if p >= 0.0 {
        Ok(())
    } else {
        Err(ctx.invalid("p", format!("{p} is not a non-negative number")))
    }
}

fn float_same(
    ctx: &KernelContext,
    t: &TensorRef<'_>,
    name: &'static str,
    dt: crate::DType,
) -> KResult {
    if !t.dtype().is_float() {
        return Err(ctx.dtype_err(name, "a floating dtype", t.dtype()));
    }
    if t.dtype() != dt {
        return Err(ctx.dtype_err(name, format!("{dt} (the x1 dtype)"), t.dtype()));
    }
    Ok(())
}

fn cdist(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x1 = a.tensor(0, "x1")?;
    let x2 = a.tensor(1, "x2")?;
    let p = a.double(2, "p")?;
    let mode = a.opt_int(3, "compute_mode")?;
    check_p(ctx, p)?;
    if let Some(m) = mode {
        if !(0..=2).contains(&m) {
            return Err(ctx.invalid("compute_mode", format!("{m} is not 0, 1 or 2")));
        }
    }
    float_same(ctx, &x1, "x1", x1.dtype())?;
    float_same(ctx, &x2, "x2", x1.dtype())?;
    let (r1, r2) = (x1.rank(), x2.rank());
    if r1 < 2 || r2 < 2 {
        let bad = if r1 < 2 { x1.sizes() } else { x2.sizes() };
        return Err(ctx.shape_err(if r1 < 2 { "x1" } else { "x2" }, "at least 2 dimensions", bad));
    }
    let (pr, m) = (x1.sizes()[r1 - 2], x1.sizes()[r1 - 1]);
    let (rr, m2) = (x2.sizes()[r2 - 2], x2.sizes()[r2 - 1]);
    if m != m2 {
        return Err(ctx.shape_err("x2", format!("[..., R, {m}] (x1's column count)"), x2.sizes()));
    }
    let batch = broadcast_shape(&x1.sizes()[..r1 - 2], &x2.sizes()[..r2 - 2]).ok_or_else(|| {
        ctx.shape_err("x2", format!("batch dims broadcastable with {:?}", x1.sizes()), x2.sizes())
    })?;
    let mut out_sizes = batch.clone();
    out_sizes.extend([pr, rr]);
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != x1.dtype() {
        return Err(ctx.dtype_err("out", format!("{} (the x1 dtype)", x1.dtype()), out.dtype()));
    }
    resize(ctx, out, "out", &out_sizes)?;
    let v1 = logical::<f64>(&x1);
    let v2 = logical::<f64>(&x2);
    // Batch index of each operand for each output batch (right-aligned broadcasting).
    let nb: usize = batch.iter().product();
    let b1 = &x1.sizes()[..r1 - 2];
    let b2 = &x2.sizes()[..r2 - 2];
    let batch_index = |mut flat: usize, own: &[usize]| {
        let off = batch.len() - own.len();
        let (mut idx, mut mul) = (0usize, 1usize);
        for d in (0..batch.len()).rev() {
            let i = flat % batch[d];
            flat /= batch[d];
            if d >= off {
                let s = own[d - off];
                idx += if s == 1 { 0 } else { i * mul };
                mul *= s;
            }
        }
        idx
    };
    let mut res = Vec::with_capacity(nb * pr * rr);
    for b in 0..nb {
        let o1 = batch_index(b, b1) * pr * m;
        let o2 = batch_index(b, b2) * rr * m;
        for i in 0..pr {
            let row_i = &v1[o1 + i * m..o1 + (i + 1) * m];
            for j in 0..rr {
                res.push(dist(row_i, &v2[o2 + j * m..o2 + (j + 1) * m], p));
            }
        }
    }
    store_logical(ctx, out, &res, true)
}

fn pdist(ctx: &KernelContext, args: &[Arg<'_>], outs: &mut [Out<'_, '_>]) -> KResult {
    let a = Args::new(ctx, args);
    let x = a.tensor(0, "self")?;
    let p = a.double(1, "p")?;
    check_p(ctx, p)?;
    float_same(ctx, &x, "self", x.dtype())?;
    let (n, m) = match x.sizes() {
        &[n, m] => (n, m),
        other => return Err(ctx.shape_err("self", "[N, M]", other)),
    };
    let out = out_tensor(ctx, outs, 0, "out")?;
    if out.dtype() != x.dtype() {
        return Err(ctx.dtype_err("out", format!("{} (the input dtype)", x.dtype()), out.dtype()));
    }
    let pairs = n
        .checked_mul(n.saturating_sub(1))
        .map(|v| v / 2)
        .ok_or_else(|| ctx.shape_err("self", "a row count whose pair count fits", x.sizes()))?;
    resize(ctx, out, "out", &[pairs])?;
    let v = logical::<f64>(&x);
    let mut res = Vec::with_capacity(pairs);
    for i in 0..n {
        for j in i + 1..n {
            res.push(dist(&v[i * m..(i + 1) * m], &v[j * m..(j + 1) * m], p));
        }
    }
    store_logical(ctx, out, &res, true)
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::_cdist_forward.out", 4, |c, a, o| cdist(c, a, o)),
        out1("aten::_pdist_forward.out", 2, |c, a, o| pdist(c, a, o)),
    ]
}
