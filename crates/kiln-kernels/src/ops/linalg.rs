//! Matrix products: `mm`, `bmm`, `addmm`, and `linear` (of ExecuTorch's optimized kernel
//! library: `input @ weight.T + bias` over the last dimension of an input of any rank). Any dim
//! order (strides go straight to GEMM). Half and bfloat16 compute in `float32`, integers in
//! `int64` (reference loop).

use std::sync::atomic::{AtomicBool, Ordering};

use crate::compute::gemm::{Gemm, Mat, MatMut};
use crate::compute::strided::broadcast_strides;
use crate::compute::threads::{split, with_pieces, TASKS_PER_THREAD};
use crate::dtype::DType;
use crate::element::Element;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::tensor::{TensorMut, TensorRef};
use crate::value::Scalar;

/// Batch, row and column strides of a matrix operand, in elements.
type Strides3 = (usize, usize, usize);

/// Batch, row and column strides of a rank-3 tensor, or of a rank-2 one as one batch.
fn mat_strides(strides: &[usize]) -> Strides3 {
    match *strides {
        [b, r, c] => (b, r, c),
        [r, c] => (0, r, c),
        _ => (0, 0, 0),
    }
}

/// The sizes `[batch, M, N, K]` of a batched product and the strides of its operands.
struct Geometry {
    dims: [usize; 4],
    a: Strides3,
    b: Strides3,
    out: Strides3,
}

impl Geometry {
    /// `mm`/`bmm`/`addmm`: rank-2 or rank-3 operands, strides as they are.
    fn plain(dims: [usize; 4], a: &TensorRef<'_>, b: &TensorRef<'_>, out: &TensorMut<'_>) -> Self {
        Geometry {
            dims,
            a: mat_strides(&a.shape().strides()[..a.rank()]),
            b: mat_strides(&b.shape().strides()[..b.rank()]),
            out: mat_strides(&out.shape().strides()[..out.rank()]),
        }
    }
}

/// One batched product `out[i] = alpha * a[i] @ b[i] + beta * bias` with `a: [B, M, K]`,
/// `b: [B, K, N]` (rank-2 tensors are one batch): its operands, their geometry and scaling.
struct Product<'t> {
    a: &'t TensorRef<'t>,
    b: &'t TensorRef<'t>,
    geo: Geometry,
    /// The bias and its factor `beta`, if any.
    bias: Option<(&'t TensorRef<'t>, Scalar)>,
    alpha: Scalar,
}

impl<'t> Product<'t> {
    /// `a @ b` over `geo`, unscaled.
    fn new(a: &'t TensorRef<'t>, b: &'t TensorRef<'t>, geo: Geometry) -> Self {
        Product { a, b, geo, bias: None, alpha: Scalar::Int(1) }
    }

    /// Computes the product into `out` in the calc type of the operands' dtype.
    fn run(&self, ctx: &KernelContext, out: &mut TensorMut<'_>) -> Result<(), KernelError> {
        let (a, b) = (self.a, self.b);
        if a.dtype() != b.dtype() {
            let want = format!("{} (the dtype of self)", a.dtype());
            return Err(ctx.dtype_err("mat2", want, b.dtype()));
        }
        match a.dtype() {
            DType::Float | DType::Half | DType::BFloat16 => product::<f32>(ctx, self, out),
            DType::Double => product::<f64>(ctx, self, out),
            d if d.is_int() => product::<i64>(ctx, self, out),
            d => Err(ctx.dtype_err("self", "a numeric dtype", d)),
        }
    }
}

/// Multiply-adds below which a batched product runs on the calling thread: a split costs a
/// few microseconds, about what 100K multiply-adds take.
const PARALLEL_MIN_MACS: usize = 1 << 17;

/// [`Product::run`] in calc type `C`.
fn product<C: Gemm + Element>(
    ctx: &KernelContext,
    p: &Product<'_>,
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let Product { a, b, ref geo, bias, alpha } = *p;
    let [batch, m, n, k] = geo.dims;
    let ((abs, ars, acs), (bbs, brs, bcs), (obs, ors, ocs)) = (geo.a, geo.b, geo.out);
    let av = cast_to::<C>(a);
    let bv = cast_to::<C>(b);
    let biasv = bias.map(|(t, beta)| (cast_to::<C>(t), *t, beta));
    let mut ok = true;
    // Product `i` into `dst`, its output matrix.
    let one = |i: usize, dst: &mut [C]| {
        C::gemm(
            m,
            n,
            k,
            Mat { data: av.get(i * abs..).unwrap_or(&[]), rs: ars, cs: acs },
            Mat { data: bv.get(i * bbs..).unwrap_or(&[]), rs: brs, cs: bcs },
            MatMut { data: dst, rs: ors, cs: ocs },
            false,
        )
    };
    with_out::<C>(ctx, out, true, |dst| {
        // Products whose output matrices are consecutive blocks of `m * n` are split over
        // the threads in runs of whole products (each computed as on one thread).
        let block = m * n;
        let work = batch.saturating_mul(block).saturating_mul(k);
        let threads = &ctx.threads;
        let tasks = if obs == block && work >= PARALLEL_MIN_MACS && dst.len() >= batch * block {
            threads.tasks_for(TASKS_PER_THREAD, batch)
        } else {
            1
        };
        if tasks > 1 {
            let failed = AtomicBool::new(false);
            let runs = with_pieces(split(batch, 1, tasks), &mut dst[..batch * block], block);
            threads.for_each(runs, |(r, d)| {
                for (i, d) in r.zip(d.chunks_exact_mut(block)) {
                    if !one(i, d) {
                        failed.store(true, Ordering::Relaxed);
                    }
                }
            });
            ok = !failed.into_inner();
        } else {
            for i in 0..batch {
                ok &= one(i, dst.get_mut(i * obs..).unwrap_or(&mut []));
            }
        }
        let al = match alpha {
            Scalar::Double(v) => C::of_f64(v),
            s => C::of_i64(s.to_i64()),
        };
        if let Some((bv, bt, beta)) = &biasv {
            let be = match beta {
                Scalar::Double(v) => C::of_f64(*v),
                s => C::of_i64(s.to_i64()),
            };
            let use_bias = beta.to_f64() != 0.0;
            let bstr = broadcast_strides(bt.sizes(), &bt.shape().strides()[..bt.rank()], &[m, n]);
            for r in 0..m {
                for c in 0..n {
                    let d = &mut dst[r * ors + c * ocs];
                    let mut v = d.mul(al);
                    if use_bias {
                        v = v.add(bv[r * bstr[0] + c * bstr[1]].mul(be));
                    }
                    *d = v;
                }
            }
        } else if al.as_f64() != 1.0 {
            for d in dst.iter_mut() {
                *d = d.mul(al);
            }
        }
    })?;
    if ok {
        Ok(())
    } else {
        Err(ctx.invalid("self", "operand data does not cover its shape"))
    }
}

fn check_rank(
    ctx: &KernelContext,
    t: &TensorRef<'_>,
    rank: usize,
    name: &'static str,
) -> Result<(), KernelError> {
    if t.rank() == rank {
        Ok(())
    } else {
        Err(ctx.shape_err(name, format!("a {rank}-D tensor"), t.sizes()))
    }
}

fn mm(
    ctx: &KernelContext,
    a: &TensorRef<'_>,
    b: &TensorRef<'_>,
    out: &mut TensorMut<'_>,
    bias: Option<(&TensorRef<'_>, Scalar)>,
    alpha: Scalar,
) -> Result<(), KernelError> {
    check_rank(ctx, a, 2, "mat1")?;
    check_rank(ctx, b, 2, "mat2")?;
    let (m, k, n) = (a.sizes()[0], a.sizes()[1], b.sizes()[1]);
    if b.sizes()[0] != k {
        return Err(ctx.shape_err(
            "mat2",
            format!("[{k}, N] to multiply {:?}", a.sizes()),
            b.sizes(),
        ));
    }
    resize(ctx, out, "out", &[m, n])?;
    let geo = Geometry::plain([1, m, n, k], a, b, out);
    Product { bias, alpha, ..Product::new(a, b, geo) }.run(ctx, out)
}

/// `aten::linear.out(input [..., K], weight [N, K], bias [N]?)`: `out [..., N]`. The leading
/// dimensions of `input` are its rows, so they must collapse into one row stride (ExecuTorch's
/// kernel requires a contiguous input).
fn linear(
    ctx: &KernelContext,
    x: &TensorRef<'_>,
    w: &TensorRef<'_>,
    bias: Option<&TensorRef<'_>>,
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    check_rank(ctx, w, 2, "weight")?;
    let (n, k) = (w.sizes()[0], w.sizes()[1]);
    let Some((&xk, lead)) = x.sizes().split_last() else {
        return Err(ctx.shape_err("input", format!("[..., {k}]"), x.sizes()));
    };
    if xk != k {
        return Err(ctx.shape_err(
            "input",
            format!("[..., {k}] to match weight [{n}, {k}]"),
            x.sizes(),
        ));
    }
    if x.dtype().is_float() && w.dtype() != x.dtype() {
        // The shape of ExecuTorch 1.5.1's 8da4w export without XNNPACK: its int8 weights lost
        // their scales on the way, so there is nothing correct to compute.
        return Err(ctx.dtype_err(
            "weight",
            format!(
                "{} like the input (a {} weight with a {} input has no scales to dequantize \
                 with; ExecuTorch cannot run it either: export quantized linears with -X)",
                x.dtype(),
                w.dtype(),
                x.dtype()
            ),
            w.dtype(),
        ));
    }
    if let Some(b) = bias {
        if b.sizes() != [n] {
            return Err(ctx.shape_err("bias", format!("[{n}]"), b.sizes()));
        }
    }
    let m: usize = lead.iter().product();
    let xs = x.shape().strides();
    let r = x.rank();
    for d in (0..r.saturating_sub(2)).rev() {
        if x.sizes()[d] != 1 && xs[d] != xs[d + 1] * x.sizes()[d + 1] {
            return Err(ctx.invalid("input", "the leading dimensions are not contiguous"));
        }
    }
    // Row stride of the collapsed [M, K] view (any, for one row).
    let row = if m > 1 && r >= 2 { xs[r - 2] } else { k };
    let mut sizes = lead.to_vec();
    sizes.push(n);
    resize(ctx, out, "out", &sizes)?;
    let (os, or) = (out.shape().strides(), out.rank());
    let oc = if or >= 1 { os[or - 1] } else { 1 };
    let orow = if or >= 2 { os[or - 2] } else { n };
    let ws = w.shape().strides();
    // weight.T is the [K, N] operand.
    let geo = Geometry {
        dims: [1, m, n, k],
        a: (0, row, xs[r - 1]),
        b: (0, ws[1], ws[0]),
        out: (0, orow, oc),
    };
    let bias = bias.map(|b| (b, Scalar::Int(1)));
    Product { bias, ..Product::new(x, w, geo) }.run(ctx, out)
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![
        out1("aten::mm.out", 2, |c, a, o| {
            let r = Args::new(c, a);
            let (x, y) = (r.tensor(0, "self")?, r.tensor(1, "mat2")?);
            mm(c, &x, &y, out_tensor(c, o, 0, "out")?, None, Scalar::Int(1))
        }),
        out1("aten::addmm.out", 5, |c, a, o| {
            let r = Args::new(c, a);
            let bias = r.tensor(0, "self")?;
            let (x, y) = (r.tensor(1, "mat1")?, r.tensor(2, "mat2")?);
            let beta = r.scalar(3, "beta")?;
            let alpha = r.scalar(4, "alpha")?;
            let out = out_tensor(c, o, 0, "out")?;
            if bias.rank() > 2
                || crate::compute::strided::broadcast_shape(
                    bias.sizes(),
                    &[
                        x.sizes().first().copied().unwrap_or(0),
                        y.sizes().get(1).copied().unwrap_or(0),
                    ],
                )
                .is_none()
            {
                return Err(c.shape_err("self", "broadcastable to [M, N]", bias.sizes()));
            }
            mm(c, &x, &y, out, Some((&bias, beta)), alpha)
        }),
        out1("aten::bmm.out", 2, |c, a, o| {
            let r = Args::new(c, a);
            let (x, y) = (r.tensor(0, "self")?, r.tensor(1, "mat2")?);
            check_rank(c, &x, 3, "self")?;
            check_rank(c, &y, 3, "mat2")?;
            let (bt, m, k) = (x.sizes()[0], x.sizes()[1], x.sizes()[2]);
            let n = y.sizes()[2];
            if y.sizes()[0] != bt || y.sizes()[1] != k {
                return Err(c.shape_err("mat2", format!("[{bt}, {k}, N]"), y.sizes()));
            }
            let out = out_tensor(c, o, 0, "out")?;
            resize(c, out, "out", &[bt, m, n])?;
            let geo = Geometry::plain([bt, m, n, k], &x, &y, out);
            Product::new(&x, &y, geo).run(c, out)
        }),
        out1("aten::linear.out", 3, |c, a, o| {
            let r = Args::new(c, a);
            let (x, w) = (r.tensor(0, "input")?, r.tensor(1, "weight")?);
            let bias = r.opt_tensor(2, "bias")?;
            linear(c, &x, &w, bias.as_ref(), out_tensor(c, o, 0, "out")?)
        }),
    ]
}

#[cfg(test)]
mod tests {
    use crate::compute::threads::Threads;
    use crate::testing::{out, run_kernel};
    use crate::{Arg, Capacity, TensorRef};

    /// `bmm` of `[b, m, k] x [b, k, n]` on `threads`.
    fn bmm(threads: &Threads, dims: [usize; 4], x: &[f32], y: &[f32]) -> Vec<f32> {
        let [b, m, n, k] = dims;
        let args = [
            Arg::Tensor(TensorRef::from_slice(&[b, m, k], x).unwrap()),
            Arg::Tensor(TensorRef::from_slice(&[b, k, n], y).unwrap()),
            Arg::Output,
        ];
        let mut data = vec![f32::NAN; b * m * n];
        let mut outs = [out(&mut data, &[b, m, n], &[], Capacity::Static)];
        run_kernel("aten::bmm.out", false, threads, &args, &mut outs).unwrap();
        data
    }

    /// Property test: `bmm` split over three threads gives the bits of one thread, and both
    /// are within `1e-5` of the sum of the products' magnitudes of an `f64` reference, for
    /// batches large enough to split and small ones that are not.
    #[test]
    fn bmm_threads_are_bit_identical_and_close_to_f64() {
        let mut rng = fastrand::Rng::with_seed(41);
        let three = Threads::new(3).unwrap();
        for case in 0..12 {
            let dims = if case % 3 == 0 {
                [rng.usize(1..4), rng.usize(1..9), rng.usize(1..9), rng.usize(1..9)]
            } else {
                [rng.usize(2..8), rng.usize(30..70), rng.usize(30..70), rng.usize(40..90)]
            };
            let [b, m, n, k] = dims;
            let x: Vec<f32> = (0..b * m * k).map(|_| rng.f32() - 0.5).collect();
            let y: Vec<f32> = (0..b * k * n).map(|_| rng.f32() - 0.5).collect();
            let one = bmm(&Threads::default(), dims, &x, &y);
            let split = bmm(&three, dims, &x, &y);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&one), bits(&split), "case {case} {dims:?}");
            for i in 0..b {
                for r in 0..m {
                    for c in 0..n {
                        let terms = (0..k).map(|p| {
                            f64::from(x[(i * m + r) * k + p]) * f64::from(y[(i * k + p) * n + c])
                        });
                        let (sum, mag) = terms.fold((0.0, 0.0), |(s, a), t| (s + t, a + t.abs()));
                        let got = f64::from(one[(i * m + r) * n + c]);
                        assert!((got - sum).abs() <= 1e-5 * mag, "case {case} [{i},{r},{c}]");
                    }
                }
            }
        }
    }
}
