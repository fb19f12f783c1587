//! `convolution` (1-D and 2-D, grouped, dilated, transposed) by im2col/col2im + GEMM.
//! Inputs and outputs may be contiguous or channels-last; half and bfloat16 compute in float32.

use crate::compute::conv::{col2im, im2col, Geometry};
use crate::compute::conv2d::depthwise::depthwise;
use crate::compute::gemm::{Gemm, Mat, MatMut};
use crate::dtype::DType;
use crate::element::Element;
use crate::error::KernelError;
use crate::kernel::{KernelContext, KernelDef};
use crate::ops::args::{out_tensor, Args};
use crate::ops::defs::out1;
use crate::ops::pointwise::{cast_to, resize, with_out};
use crate::tensor::{TensorMut, TensorRef};

/// Calc types with a scratch buffer in the context.
pub(crate) trait ConvCalc:
    Gemm + Element + Default + std::ops::AddAssign + std::ops::Mul<Output = Self>
{
    fn scratch(ctx: &mut KernelContext) -> &mut Vec<Self>;
}

impl ConvCalc for f32 {
    fn scratch(ctx: &mut KernelContext) -> &mut Vec<f32> {
        &mut ctx.scratch_f32
    }
}

impl ConvCalc for f64 {
    fn scratch(ctx: &mut KernelContext) -> &mut Vec<f64> {
        &mut ctx.scratch_f64
    }
}

/// Decoded convolution parameters.
struct Params {
    n: usize,
    groups: usize,
    c_in: usize,
    c_out: usize,
    g: Geometry,
    transposed: bool,
    /// Input strides (n, c, h, w), output strides (n, c, h, w).
    is: [usize; 4],
    os: [usize; 4],
}

/// (n, c, h, w) strides of a rank-3 or rank-4 tensor.
fn nchw_strides(shape: &crate::Shape) -> [usize; 4] {
    let s = shape.strides();
    if shape.rank() == 3 {
        [s[0], s[1], 0, s[2]]
    } else {
        [s[0], s[1], s[2], s[3]]
    }
}

fn param(
    ctx: &KernelContext,
    list: &[i64],
    i: usize,
    name: &'static str,
    min: i64,
) -> Result<usize, KernelError> {
    let v = match list.len() {
        1 => list[0],
        _ => *list.get(i).ok_or_else(|| {
            ctx.invalid(name, format!("expected 1 or {} values, got {:?}", i + 1, list))
        })?,
    };
    if v < min {
        return Err(ctx.invalid(name, format!("value {v} is below {min}")));
    }
    usize::try_from(v).map_err(|_| ctx.invalid(name, format!("value {v} out of range")))
}

#[allow(clippy::too_many_arguments)]
fn compute<C: ConvCalc>(
    ctx: &mut KernelContext,
    p: &Params,
    input: &TensorRef<'_>,
    weight: &TensorRef<'_>,
    bias: Option<&TensorRef<'_>>,
    out: &mut TensorMut<'_>,
) -> Result<(), KernelError> {
    let g = p.g;
    let x = cast_to::<C>(input);
    // Weight as a contiguous [rows, C*KH*KW] matrix (borrowed when it already is one).
    let w: std::borrow::Cow<'_, [C]> = {
        let wv = cast_to::<C>(weight);
        if weight.shape().is_dense_row_major() {
            wv
        } else {
            let s = weight.shape().strides();
            let sz = weight.sizes();
            let mut v = Vec::with_capacity(weight.numel());
            let r = weight.rank();
            crate::compute::strided::walk(sz, [&s[..r]], |[i]| v.push(wv[i]));
            std::borrow::Cow::Owned(v)
        }
    };
    let fast = !ctx.general_only;
    let bv = bias.map(|b| cast_to::<C>(b));
    let mut scratch = std::mem::take(C::scratch(ctx));
    let (cg_in, cg_out) = (p.c_in / p.groups, p.c_out / p.groups);
    let kk = g.kh * g.kw;
    let mut ok = true;
    let res = with_out::<C>(ctx, out, true, |dst| {
        let [isn, isc, ish, isw] = p.is;
        let [osn, osc, osh, osw] = p.os;
        if p.transposed {
            let plane = g.h * g.w;
            let rows = cg_out * kk;
            scratch.clear();
            scratch.resize(rows * plane, C::default());
            let in_uniform = g.h == 1 || ish == isw * g.w;
            for n in 0..p.n {
                for gi in 0..p.groups {
                    // Input group as [cg_in, H*W].
                    let xin: Vec<C>;
                    let (xdata, xcs, xps) = if in_uniform {
                        (x.get(n * isn + gi * cg_in * isc..).unwrap_or(&[]), isc, isw)
                    } else {
                        let mut v = Vec::with_capacity(cg_in * plane);
                        for c in 0..cg_in {
                            for yy in 0..g.h {
                                for xx in 0..g.w {
                                    v.push(
                                        x[n * isn + (gi * cg_in + c) * isc + yy * ish + xx * isw],
                                    );
                                }
                            }
                        }
                        xin = v;
                        (&xin[..], plane, 1)
                    };
                    // col = W_g^T [rows, cg_in] @ X_g [cg_in, plane]
                    let wg = w.get(gi * cg_in * rows..).unwrap_or(&[]);
                    ok &= C::gemm(
                        rows,
                        plane,
                        cg_in,
                        Mat { data: wg, rs: 1, cs: rows },
                        Mat { data: xdata, rs: xcs, cs: xps },
                        MatMut { data: &mut scratch, rs: plane, cs: 1 },
                        false,
                    );
                    let base = n * osn + gi * cg_out * osc;
                    let Some(region) = dst.get_mut(base..) else {
                        ok = false;
                        continue;
                    };
                    for o in 0..cg_out {
                        for yy in 0..g.oh {
                            for xx in 0..g.ow {
                                if let Some(d) = region.get_mut(o * osc + yy * osh + xx * osw) {
                                    *d = C::default();
                                }
                            }
                        }
                    }
                    let geo = Geometry { c: cg_out, ..g };
                    col2im(&geo, &scratch, region, [osc, osh, osw]);
                }
            }
        } else if fast && cg_in == 1 && cg_out == 1 && p.groups > 1 {
            // Depthwise: one direct loop per channel instead of a GEMM per group.
            let geo = Geometry { c: p.groups, ..g };
            for n in 0..p.n {
                let xn = x.get(n * isn..).unwrap_or(&[]);
                let on = dst.get_mut(n * osn..).unwrap_or(&mut []);
                ok &= depthwise(&geo, xn, [isc, ish, isw], &w, on, [osc, osh, osw], &mut scratch);
            }
        } else {
            let plane = g.oh * g.ow;
            let rows = cg_in * kk;
            let direct =
                kk == 1 && g.stride == [1, 1] && g.pad == [0, 0] && (g.h == 1 || ish == isw * g.w);
            if !direct {
                scratch.clear();
                scratch.resize(rows * plane, C::default());
            }
            let out_uniform = g.oh == 1 || osh == osw * g.ow;
            let mut tmp: Vec<C> =
                if out_uniform { Vec::new() } else { vec![C::default(); cg_out * plane] };
            for n in 0..p.n {
                for gi in 0..p.groups {
                    let xbase = n * isn + gi * cg_in * isc;
                    let xg = x.get(xbase..).unwrap_or(&[]);
                    let (bdata, brs, bcs): (&[C], usize, usize) = if direct {
                        (xg, isc, isw)
                    } else {
                        let geo = Geometry { c: cg_in, ..g };
                        if geo.c > 0 && xg.len() < (geo.c - 1) * isc + 1 {
                            ok = false;
                            continue;
                        }
                        im2col(&geo, xg, [isc, ish, isw], &mut scratch);
                        (&scratch[..], plane, 1)
                    };
                    let wg = w.get(gi * cg_out * rows..).unwrap_or(&[]);
                    let a = Mat { data: wg, rs: rows, cs: 1 };
                    let b = Mat { data: bdata, rs: brs, cs: bcs };
                    let obase = n * osn + gi * cg_out * osc;
                    if out_uniform {
                        let region = dst.get_mut(obase..).unwrap_or(&mut []);
                        ok &= C::gemm(
                            cg_out,
                            plane,
                            rows,
                            a,
                            b,
                            MatMut { data: region, rs: osc, cs: osw },
                            false,
                        );
                    } else {
                        ok &= C::gemm(
                            cg_out,
                            plane,
                            rows,
                            a,
                            b,
                            MatMut { data: &mut tmp, rs: plane, cs: 1 },
                            false,
                        );
                        for o in 0..cg_out {
                            for yy in 0..g.oh {
                                for xx in 0..g.ow {
                                    dst[obase + o * osc + yy * osh + xx * osw] =
                                        tmp[o * plane + yy * g.ow + xx];
                                }
                            }
                        }
                    }
                }
            }
        }
        if let Some(bv) = &bv {
            for n in 0..p.n {
                for (o, &b) in bv.iter().enumerate().take(p.c_out) {
                    for yy in 0..g.oh {
                        for xx in 0..g.ow {
                            let d = &mut dst[n * osn + o * osc + yy * osh + xx * osw];
                            *d = d.add(b);
                        }
                    }
                }
            }
        }
    });
    *C::scratch(ctx) = scratch;
    res?;
    if ok {
        Ok(())
    } else {
        Err(ctx.invalid("input", "operand data does not cover its shape"))
    }
}

fn convolution(
    ctx: &mut KernelContext,
    args: &[crate::Arg<'_>],
    outs: &mut [crate::Out<'_, '_>],
) -> Result<(), KernelError> {
    let r = Args::new(ctx, args);
    let input = r.tensor(0, "input")?;
    let weight = r.tensor(1, "weight")?;
    let bias = r.opt_tensor(2, "bias")?;
    let stride = r.int_list(3, "stride")?;
    let padding = r.int_list(4, "padding")?;
    let dilation = r.int_list(5, "dilation")?;
    let transposed = r.bool(6, "transposed")?;
    let output_padding = r.int_list(7, "output_padding")?;
    let groups = r.int(8, "groups")?;
    let rank = input.rank();
    if rank != 3 && rank != 4 {
        return Err(ctx.shape_err(
            "input",
            "a 3-D (N, C, L) or 4-D (N, C, H, W) tensor",
            input.sizes(),
        ));
    }
    if weight.rank() != rank {
        return Err(ctx.shape_err("weight", format!("a {rank}-D tensor"), weight.sizes()));
    }
    let groups = usize::try_from(groups)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| ctx.invalid("groups", format!("{groups} is not positive")))?;
    let sp = rank - 2;
    let mut st = [1usize; 2];
    let mut pd = [0usize; 2];
    let mut dl = [1usize; 2];
    let mut op = [0usize; 2];
    for i in 0..sp {
        let j = i + 2 - sp;
        st[j] = param(ctx, stride, i, "stride", 1)?;
        pd[j] = param(ctx, padding, i, "padding", 0)?;
        dl[j] = param(ctx, dilation, i, "dilation", 1)?;
        if transposed {
            op[j] = param(ctx, output_padding, i, "output_padding", 0)?;
        }
    }
    let is = input.sizes();
    let ws = weight.sizes();
    let (n, c_in) = (is[0], is[1]);
    let (h, w) = if rank == 4 { (is[2], is[3]) } else { (1, is[2]) };
    let (kh, kw) = if rank == 4 { (ws[2], ws[3]) } else { (1, ws[2]) };
    if c_in % groups != 0 {
        return Err(
            ctx.invalid("groups", format!("{groups} does not divide the {c_in} input channels"))
        );
    }
    let (c_out, w_in) = if transposed { (ws[1] * groups, ws[0]) } else { (ws[0], ws[1] * groups) };
    if w_in != c_in || c_out % groups != 0 {
        return Err(ctx.shape_err(
            "weight",
            format!("a weight for {c_in} input channels in {groups} groups"),
            ws,
        ));
    }
    let span = |k: usize, d: usize| (k.max(1) - 1) * d;
    let (oh, ow) = if transposed {
        let o = |i: usize, k: usize, j: usize| {
            ((i.max(1) - 1) * st[j] + span(k, dl[j]) + op[j] + 1).checked_sub(2 * pd[j])
        };
        (o(h, kh, 0), o(w, kw, 1))
    } else {
        let o = |i: usize, k: usize, j: usize| {
            (i + 2 * pd[j]).checked_sub(span(k, dl[j]) + 1).map(|v| v / st[j] + 1)
        };
        (o(h, kh, 0), o(w, kw, 1))
    };
    let (Some(oh), Some(ow)) = (oh, ow) else {
        return Err(ctx.invalid(
            "input",
            format!("input {is:?} is smaller than the kernel {ws:?} after padding"),
        ));
    };
    if let Some(b) = &bias {
        if b.numel() != c_out {
            return Err(ctx.shape_err("bias", format!("[{c_out}]"), b.sizes()));
        }
    }
    let out = out_tensor(ctx, outs, 0, "out")?;
    let sizes: Vec<usize> = if rank == 4 { vec![n, c_out, oh, ow] } else { vec![n, c_out, ow] };
    resize(ctx, out, "out", &sizes)?;
    let p = Params {
        n,
        groups,
        c_in,
        c_out,
        g: Geometry { c: c_in, h, w, kh, kw, oh, ow, stride: st, pad: pd, dil: dl },
        transposed,
        is: nchw_strides(input.shape()),
        os: nchw_strides(out.shape()),
    };
    if weight.dtype() != input.dtype() {
        return Err(ctx.dtype_err(
            "weight",
            format!("{} (the input dtype)", input.dtype()),
            weight.dtype(),
        ));
    }
    let mut ctx2 = std::mem::take(ctx);
    let r = match input.dtype() {
        DType::Float | DType::Half | DType::BFloat16 => {
            compute::<f32>(&mut ctx2, &p, &input, &weight, bias.as_ref(), out)
        }
        DType::Double => compute::<f64>(&mut ctx2, &p, &input, &weight, bias.as_ref(), out),
        d => Err(ctx2.dtype_err("input", "a floating dtype", d)),
    };
    *ctx = ctx2;
    r
}

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    vec![out1("aten::convolution.out", 9, convolution)]
}

#[cfg(test)]
mod tests {
    use crate::compute::conv::{conv_ref, Geometry};
    use crate::compute::threads::Threads;
    use crate::testing::{out, run_kernel};
    use crate::{
        find_kernel, Arg, Capacity, DType, KernelContext, Out, Shape, TensorMut, TensorRef,
    };

    /// A random kernel size (1-3), stride (1-2), padding (0-1) and dilation (1-2) per axis.
    fn random_window(rng: &mut fastrand::Rng) -> [[usize; 2]; 4] {
        let mut pair = |lo, hi| [rng.usize(lo..hi), rng.usize(lo..hi)];
        [pair(1, 4), pair(1, 3), pair(0, 2), pair(1, 3)]
    }

    /// The output length of an axis of `len` under axis `a` of `win`, if the kernel fits.
    fn out_len(len: usize, win: &[[usize; 2]; 4], a: usize) -> Option<usize> {
        let [k, st, pd, dl] = win;
        (len + 2 * pd[a]).checked_sub((k[a] - 1) * dl[a] + 1).map(|v| v / st[a] + 1)
    }

    /// Property test: the depthwise fast path equals the general im2col + GEMM path through
    /// the kernel (grouped, one channel per group), contiguous and channels-last.
    #[test]
    fn depthwise_fast_path_equals_general_path() {
        let mut rng = fastrand::Rng::with_seed(5);
        let def = find_kernel("aten::convolution.out").expect("conv");
        let mut checked = 0;
        for case in 0..60 {
            let (n, c) = (rng.usize(1..3), rng.usize(2..7));
            let (h, w) = (rng.usize(2..10), rng.usize(2..10));
            let win = random_window(&mut rng);
            let [[kh, kw], st, pd, dl] = win;
            let (Some(oh), Some(ow)) = (out_len(h, &win, 0), out_len(w, &win, 1)) else { continue };
            let x: Vec<f32> = (0..n * c * h * w).map(|_| rng.f32() - 0.5).collect();
            let wt: Vec<f32> = (0..c * kh * kw).map(|_| rng.f32() - 0.5).collect();
            let bias: Vec<f32> = (0..c).map(|_| rng.f32() - 0.5).collect();
            let cl = case % 2 == 1;
            let order: &[u8] = if cl { &[0, 2, 3, 1] } else { &[0, 1, 2, 3] };
            let ints = |v: [usize; 2]| v.map(|x| x as i64);
            let (s, p, d) = (ints(st), ints(pd), ints(dl));
            let run = |general: bool| {
                let mut data = vec![0f32; n * c * oh * ow];
                let xs = Shape::new(&[n, c, h, w], order).unwrap();
                let xr = TensorRef::new(DType::Float, xs, bytemuck::cast_slice(&x)).unwrap();
                let args = [
                    Arg::Tensor(xr),
                    Arg::Tensor(TensorRef::from_slice(&[c, 1, kh, kw], &wt).unwrap()),
                    Arg::Tensor(TensorRef::from_slice(&[c], &bias).unwrap()),
                    Arg::IntList(&s),
                    Arg::IntList(&p),
                    Arg::IntList(&d),
                    Arg::Bool(false),
                    Arg::IntList(&[0, 0]),
                    Arg::Int(c as i64),
                    Arg::Output,
                    Arg::Output,
                ];
                let mut outs = [out(&mut data, &[n, c, oh, ow], order, Capacity::Static)];
                run_kernel(def.name, general, &Threads::default(), &args, &mut outs).unwrap();
                data
            };
            let (fast, general) = (run(false), run(true));
            for (a, b) in fast.iter().zip(&general) {
                assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "case {case}: {a} vs {b}");
            }
            checked += 1;
        }
        assert!(checked > 20);
    }

    /// Property test: the im2col + GEMM path equals the direct reference convolution.
    #[test]
    fn im2col_gemm_equals_reference() {
        let mut rng = fastrand::Rng::with_seed(3);
        let def = find_kernel("aten::convolution.out").expect("conv");
        for _ in 0..25 {
            let (c, oc) = (rng.usize(1..5), rng.usize(1..5));
            let (h, w) = (rng.usize(3..9), rng.usize(3..9));
            let win = random_window(&mut rng);
            let [[kh, kw], st, pd, dl] = win;
            let (Some(oh), Some(ow)) = (out_len(h, &win, 0), out_len(w, &win, 1)) else { continue };
            let x: Vec<f32> = (0..c * h * w).map(|_| rng.f32() - 0.5).collect();
            let wt: Vec<f32> = (0..oc * c * kh * kw).map(|_| rng.f32() - 0.5).collect();
            let mut out = vec![0f32; oc * oh * ow];
            let ints = |v: [usize; 2]| v.map(|x| x as i64);
            let (s, p, d) = (ints(st), ints(pd), ints(dl));
            let args = [
                Arg::Tensor(TensorRef::from_slice(&[1, c, h, w], &x).unwrap()),
                Arg::Tensor(TensorRef::from_slice(&[oc, c, kh, kw], &wt).unwrap()),
                Arg::None,
                Arg::IntList(&s),
                Arg::IntList(&p),
                Arg::IntList(&d),
                Arg::Bool(false),
                Arg::IntList(&[0, 0]),
                Arg::Int(1),
                Arg::Output,
                Arg::Output,
            ];
            let mut outs =
                [Out::Tensor(TensorMut::from_slice(&[1, oc, oh, ow], &mut out).unwrap())];
            (def.run)(&mut KernelContext::new(def.name), &args, &mut outs).unwrap();
            let g = Geometry { c, h, w, kh, kw, oh, ow, stride: st, pad: pd, dil: dl };
            let mut r = vec![0f64; oc * oh * ow];
            let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            let wd: Vec<f64> = wt.iter().map(|&v| v as f64).collect();
            conv_ref(&g, oc, &xd, &wd, &mut r);
            for (a, b) in out.iter().zip(&r) {
                assert!((*a as f64 - b).abs() < 1e-4, "{g:?}: {a} vs {b}");
            }
        }
    }
}
