//! Prepared 2-D convolution (NCHW, f32): weights packed once at construction, fused bias,
//! residual and activation. Lowering per image and group:
//! `out[Cout_g x OH*OW] = W[Cout_g x Cin_g*kh*kw] * B[Cin_g*kh*kw x OH*OW]`, so the packed
//! weights are the A operand and the output rows are exactly the NCHW planes. `B` is the input
//! itself for 1x1 / stride 1 / no padding, else the implicit im2col matrix packed straight from
//! the input. Depthwise layers (`groups == Cin == Cout`) use a direct kernel per channel plane.

use crate::compute::conv::{im2col, Geometry};
use crate::compute::sgemm::{
    gemm_packed_a, gemm_packed_b, out_len, Activation, Bias, Epilogue, GemmError, GemmScratch,
    Im2col, MatRef, PackB, PackedA, PackedB,
};
use crate::compute::taps::{row_spans, sum_taps, RowSpan, TapEpilogue, TapPlane, LANES};

/// Shape parameters of a convolution (PyTorch `conv2d` arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dGeometry {
    /// Input channels.
    pub in_channels: usize,
    /// Input height.
    pub in_h: usize,
    /// Input width.
    pub in_w: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Stride (height, width).
    pub stride: [usize; 2],
    /// Zero padding on both sides (height, width).
    pub padding: [usize; 2],
    /// Dilation (height, width).
    pub dilation: [usize; 2],
    /// Groups; divides both channel counts.
    pub groups: usize,
}

/// Reusable buffers of [`PackedConv2d::run`].
#[derive(Debug, Default)]
pub struct ConvScratch {
    gemm: GemmScratch,
    row: Vec<f32>,
    /// The im2col matrix and the transposed product of [`Plan::FewPixels`].
    col: Vec<f32>,
    product: Vec<f32>,
}

/// How the convolution runs.
#[derive(Debug)]
enum Plan {
    /// One packed weight matrix per group; `pointwise` when B is the input itself.
    Gemm { groups: Vec<PackedA>, pointwise: bool },
    /// Direct per-channel kernel; weights `[C, kh, kw]` contiguous; see [`Phases`].
    Depthwise { weight: Vec<f32>, phases: Phases },
    /// One group and fewer output pixels than a register tile is wide (the last layers of a
    /// CNN at low resolution): the product is computed transposed, pixels as rows and the
    /// packed weights as the right operand, so the tile's width runs over output channels;
    /// the result is transposed into NCHW.
    FewPixels { weight: PackedB },
}

/// Most output pixels for [`Plan::FewPixels`]: below the narrowest register tile (16).
const FEW_PIXELS: usize = 16;

/// A convolution with its weights prepared for repeated runs.
#[derive(Debug)]
pub struct PackedConv2d {
    g: Conv2dGeometry,
    oh: usize,
    ow: usize,
    plan: Plan,
    bias: Option<Vec<f32>>,
    act: Activation,
}

/// `a * b`, an error on overflow.
fn mul(a: usize, b: usize) -> Result<usize, GemmError> {
    a.checked_mul(b).ok_or(GemmError::Overflow("conv2d"))
}

impl PackedConv2d {
    /// Prepares the convolution: `weight` is `[Cout, Cin/groups, kh, kw]` contiguous (PyTorch
    /// layout), `bias` has `Cout` values. An error when a size is zero, the groups do not
    /// divide the channels, the kernel does not fit the padded input, a size overflows, or a
    /// slice has the wrong length.
    pub fn new(
        g: Conv2dGeometry,
        weight: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
    ) -> Result<Self, GemmError> {
        if [g.in_channels, g.in_h, g.in_w, g.out_channels, g.kh, g.kw, g.groups].contains(&0) {
            return Err(GemmError::Invalid("conv2d: zero size"));
        }
        if !g.in_channels.is_multiple_of(g.groups) || !g.out_channels.is_multiple_of(g.groups) {
            return Err(GemmError::Invalid("conv2d: groups do not divide the channels"));
        }
        if let Activation::Clamp { min, max } = act {
            if min.is_nan() || max.is_nan() {
                return Err(GemmError::Invalid("conv2d: clamp bound is NaN"));
            }
        }
        let oh = out_len(g.in_h, g.kh, g.stride[0], g.padding[0], g.dilation[0]);
        let ow = out_len(g.in_w, g.kw, g.stride[1], g.padding[1], g.dilation[1]);
        let (Some(oh), Some(ow)) = (oh, ow) else {
            return Err(GemmError::Invalid("conv2d: kernel, stride or dilation does not fit"));
        };
        let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
        let kdim = mul(mul(cin_g, g.kh)?, g.kw)?;
        // Sizes `run` computes per image must not overflow either.
        mul(mul(g.in_channels, g.in_h)?, g.in_w)?;
        mul(mul(g.out_channels, oh)?, ow)?;
        let wlen = mul(g.out_channels, kdim)?;
        if weight.len() != wlen {
            return Err(GemmError::Short { what: "conv2d weight", need: wlen, len: weight.len() });
        }
        if let Some(b) = bias {
            if b.len() != g.out_channels {
                return Err(GemmError::Short {
                    what: "conv2d bias",
                    need: g.out_channels,
                    len: b.len(),
                });
            }
        }
        let plan = if g.groups > 1 && cin_g == 1 && cout_g == 1 {
            Plan::Depthwise { weight: weight.to_vec(), phases: Phases::new(&g, oh, ow)? }
        } else if g.groups == 1 && oh * ow <= FEW_PIXELS {
            // weight^T: element (k, c) at weight[c * kdim + k].
            let wt = MatRef::new(weight, kdim, g.out_channels, 1, kdim)?;
            Plan::FewPixels { weight: PackedB::new(wt)? }
        } else {
            let groups = weight
                .chunks_exact(cout_g * kdim)
                .map(|w| PackedA::new(MatRef::new(w, cout_g, kdim, kdim, 1)?))
                .collect::<Result<Vec<_>, _>>()?;
            let pointwise = g.kh == 1 && g.kw == 1 && g.stride == [1, 1] && g.padding == [0, 0];
            Plan::Gemm { groups, pointwise }
        };
        Ok(PackedConv2d { g, oh, ow, plan, bias: bias.map(<[f32]>::to_vec), act })
    }

    /// Output height and width.
    pub fn out_hw(&self) -> (usize, usize) {
        (self.oh, self.ow)
    }

    /// Runs the convolution: `input` is NCHW contiguous `[batch, Cin, H, W]`, `out` NCHW
    /// contiguous `[batch, Cout, OH, OW]`; `residual` (if any) has the shape of `out` and is
    /// added before the activation. An error (nothing written) when a slice is short or a size
    /// overflows.
    pub fn run(
        &self,
        batch: usize,
        input: &[f32],
        residual: Option<&[f32]>,
        out: &mut [f32],
        scratch: &mut ConvScratch,
    ) -> Result<(), GemmError> {
        let g = &self.g;
        let in_img = g.in_channels * g.in_h * g.in_w;
        let ohw = self.oh * self.ow;
        let out_img = g.out_channels * ohw;
        let need_in = mul(batch, in_img)?;
        let need_out = mul(batch, out_img)?;
        let short = |what, need: usize, len: usize| {
            if len < need {
                Err(GemmError::Short { what, need, len })
            } else {
                Ok(())
            }
        };
        short("conv2d input", need_in, input.len())?;
        short("conv2d output", need_out, out.len())?;
        if let Some(r) = residual {
            short("conv2d residual", need_out, r.len())?;
        }
        let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
        let (in_grp, out_grp) = (cin_g * g.in_h * g.in_w, cout_g * ohw);
        for b in 0..batch {
            for gi in 0..g.groups {
                let x = &input[b * in_img + gi * in_grp..][..in_grp];
                let at = b * out_img + gi * out_grp;
                let y = &mut out[at..][..out_grp];
                let res = residual.map(|r| &r[at..][..out_grp]);
                let bias = self.bias.as_ref().map(|v| &v[gi * cout_g..][..cout_g]);
                match &self.plan {
                    Plan::Gemm { groups, pointwise } => {
                        let ep = Epilogue {
                            bias: bias.map_or(Bias::None, Bias::PerRow),
                            residual: res,
                            act: self.act,
                        };
                        let src: &dyn PackB;
                        let dense;
                        let lazy;
                        if *pointwise {
                            dense = MatRef::new(x, cin_g, ohw, ohw, 1)?;
                            src = &dense;
                        } else {
                            lazy = Im2col::new(
                                x,
                                [cin_g, g.in_h, g.in_w],
                                [g.kh, g.kw],
                                g.stride,
                                g.padding,
                                g.dilation,
                            )?;
                            src = &lazy;
                        }
                        gemm_packed_a(&groups[gi], src, y, ohw, &ep, &mut scratch.gemm)?;
                    }
                    Plan::FewPixels { weight } => {
                        let cs = &mut *scratch;
                        let geo = Geometry {
                            c: cin_g,
                            h: g.in_h,
                            w: g.in_w,
                            kh: g.kh,
                            kw: g.kw,
                            oh: self.oh,
                            ow: self.ow,
                            stride: g.stride,
                            pad: g.padding,
                            dil: g.dilation,
                        };
                        let kdim = weight.k();
                        cs.col.clear();
                        cs.col.resize(kdim * ohw, 0.0);
                        im2col(&geo, x, [g.in_h * g.in_w, g.in_w, 1], &mut cs.col);
                        // Rows are pixels: element (p, k) of the transposed im2col matrix.
                        let a = MatRef::new(&cs.col, ohw, kdim, 1, ohw)?;
                        cs.product.clear();
                        cs.product.resize(ohw * cout_g, 0.0);
                        // The residual is laid out NCHW, so it and the activation after it are
                        // applied while transposing.
                        let ep = Epilogue {
                            bias: bias.map_or(Bias::None, Bias::PerCol),
                            residual: None,
                            act: if res.is_some() { Activation::None } else { self.act },
                        };
                        gemm_packed_b(a, weight, &mut cs.product, cout_g, &ep, &mut cs.gemm)?;
                        for (c, row) in y.chunks_exact_mut(ohw).enumerate() {
                            for (p, o) in row.iter_mut().enumerate() {
                                *o = cs.product[p * cout_g + c];
                            }
                            if let Some(r) = res {
                                for (o, &r) in row.iter_mut().zip(&r[c * ohw..][..ohw]) {
                                    *o = self.act.apply(*o + r);
                                }
                            }
                        }
                    }
                    Plan::Depthwise { weight, phases } => {
                        let kk = g.kh * g.kw;
                        let plane = Plane {
                            g,
                            oh: self.oh,
                            ow: self.ow,
                            weight: &weight[gi * kk..][..kk],
                            phases,
                            bias: bias.map_or(0.0, |v| v[0]),
                            act: self.act,
                        };
                        plane.run(x, res, y, &mut scratch.row);
                    }
                }
            }
        }
        Ok(())
    }
}

/// How a depthwise convolution lays out an input row so that every tap reads `LANES`
/// contiguous values. The row, zero-padded, is split into its `stride` phases: phase `ph`
/// holds padded columns `ph, ph + s, ph + 2s, ...` (`len` values, zeros beyond the row). Tap
/// `kx` of output column `ox` reads padded column `ox * s + kx * d`, which is element
/// `ox + (kx * d) / s` of phase `(kx * d) % s`: `taps[kx]` is that element's offset for
/// `ox = 0` in the row's phases laid end to end. `spans[oy]` are the input rows output row
/// `oy` reads.
#[derive(Debug)]
struct Phases {
    len: usize,
    taps: Vec<usize>,
    spans: Vec<RowSpan>,
}

impl Phases {
    fn new(g: &Conv2dGeometry, oh: usize, ow: usize) -> Result<Phases, GemmError> {
        let (s, d) = (g.stride[1], g.dilation[1]);
        let reach = mul(g.kw - 1, d)?;
        let len = mul(ow.div_ceil(LANES), LANES)?
            .checked_add(reach / s)
            .ok_or(GemmError::Overflow("conv2d"))?;
        mul(mul(len, s)?, g.in_h)?;
        let taps = (0..g.kw).map(|kx| (kx * d % s) * len + kx * d / s).collect();
        let (sh, dh, ph) = (g.stride[0], g.dilation[0], g.padding[0]);
        let spans = row_spans(g.in_h, oh, g.kh, sh, dh, ph);
        Ok(Phases { len, taps, spans })
    }

    /// Values of one phased row.
    fn row_len(&self, g: &Conv2dGeometry) -> usize {
        self.len * g.stride[1]
    }

    /// Lays `row` (one input row) out as its phases in `dst` (`row_len` values).
    fn fill(&self, g: &Conv2dGeometry, row: &[f32], dst: &mut [f32]) {
        let (s, p) = (g.stride[1], g.padding[1]);
        dst.fill(0.0);
        for (ph, dst) in dst.chunks_exact_mut(self.len).enumerate() {
            // The first element of this phase inside the row: j * s + ph >= p.
            let j0 = p.saturating_sub(ph).div_ceil(s);
            let c0 = j0 * s + ph - p;
            if j0 >= self.len || c0 >= row.len() {
                continue;
            }
            if s == 1 {
                let n = (self.len - j0).min(row.len() - c0);
                dst[j0..j0 + n].copy_from_slice(&row[c0..c0 + n]);
            } else if s == 2 {
                let (src, dst) = (&row[c0..], &mut dst[j0..]);
                for (d, pair) in dst.iter_mut().zip(src.chunks_exact(2)) {
                    *d = pair[0];
                }
                if let (Some(d), [.., last]) = (dst.get_mut(src.len() / 2), src) {
                    if src.len() % 2 == 1 {
                        *d = *last;
                    }
                }
            } else {
                for (d, &v) in dst[j0..].iter_mut().zip(row[c0..].iter().step_by(s)) {
                    *d = v;
                }
            }
        }
    }
}

/// One channel plane of a depthwise convolution.
struct Plane<'a> {
    g: &'a Conv2dGeometry,
    oh: usize,
    ow: usize,
    /// `[kh, kw]` taps.
    weight: &'a [f32],
    phases: &'a Phases,
    bias: f32,
    act: Activation,
}

impl Plane<'_> {
    /// `out[oy, ox] = act(sum_{ky, kx} w[ky, kx] * x[oy*s + ky*d - p, ox*s + kx*d - p]
    /// plus bias plus residual[oy, ox])`, summed in `ky`, `kx` order (taps in the padding
    /// add zero; rows in the padding are skipped). The input rows are first laid out as
    /// [`Phases`] in `scratch`, so each output value is a [`sum_taps`] of contiguous runs.
    fn run(&self, x: &[f32], res: Option<&[f32]>, out: &mut [f32], scratch: &mut Vec<f32>) {
        let g = self.g;
        let (h, w, ow) = (g.in_h, g.in_w, self.ow);
        let row_len = self.phases.row_len(g);
        scratch.clear();
        scratch.resize(h * row_len, 0.0);
        for (row, dst) in x.chunks_exact(w).zip(scratch.chunks_exact_mut(row_len)) {
            self.phases.fill(g, row, dst);
        }
        let plane = TapPlane {
            plane: &scratch[..],
            row_len,
            spans: &self.phases.spans,
            dilation: g.dilation[0],
            weights: self.weight,
            taps: &self.phases.taps,
        };
        let clamp = match self.act {
            Activation::Clamp { min, max } => Some((min, max)),
            _ => None,
        };
        let out = &mut out[..self.oh * ow];
        sum_taps(out, ow, plane, TapEpilogue { bias: self.bias, residual: res, clamp });
        if !matches!(self.act, Activation::None | Activation::Clamp { .. }) {
            for d in out.iter_mut() {
                *d = self.act.apply(*d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::sgemm::tests::act_ref;

    /// Naive f64 grouped convolution + bias + residual (before the activation), NCHW.
    fn conv_ref(
        g: &Conv2dGeometry,
        (oh, ow): (usize, usize),
        batch: usize,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        res: Option<&[f32]>,
    ) -> (Vec<f64>, Vec<f64>) {
        let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
        let n = batch * g.out_channels * oh * ow;
        let (mut out, mut mag) = (vec![0f64; n], vec![0f64; n]);
        for b in 0..batch {
            for co in 0..g.out_channels {
                let gi = co / cout_g;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (mut s, mut m) = (0f64, 0f64);
                        for ci in 0..cin_g {
                            let c = gi * cin_g + ci;
                            for ky in 0..g.kh {
                                for kx in 0..g.kw {
                                    let iy = (oy * g.stride[0] + ky * g.dilation[0]) as isize
                                        - g.padding[0] as isize;
                                    let ix = (ox * g.stride[1] + kx * g.dilation[1]) as isize
                                        - g.padding[1] as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy as usize >= g.in_h
                                        || ix as usize >= g.in_w
                                    {
                                        continue;
                                    }
                                    let xv = x[((b * g.in_channels + c) * g.in_h + iy as usize)
                                        * g.in_w
                                        + ix as usize];
                                    let wv = w[((co * cin_g + ci) * g.kh + ky) * g.kw + kx];
                                    let t = f64::from(xv) * f64::from(wv);
                                    s += t;
                                    m += t.abs();
                                }
                            }
                        }
                        let at = ((b * g.out_channels + co) * oh + oy) * ow + ox;
                        let extra = [bias.map_or(0.0, |v| v[co]), res.map_or(0.0, |r| r[at])];
                        for e in extra {
                            s += f64::from(e);
                            m += f64::from(e.abs());
                        }
                        out[at] = s;
                        mag[at] = m;
                    }
                }
            }
        }
        (out, mag)
    }

    fn random_geometry(rng: &mut fastrand::Rng) -> Conv2dGeometry {
        let k = [1, 3, 5, 7][rng.usize(0..4)];
        let groups = [1, 1, 2, 3, 4, 0][rng.usize(0..6)]; // 0: depthwise
        let (cin, cout) = if groups == 0 {
            let c = rng.usize(1..9);
            (c, c)
        } else {
            (groups * rng.usize(1..5), groups * rng.usize(1..7))
        };
        Conv2dGeometry {
            in_channels: cin,
            in_h: rng.usize(1..14),
            in_w: rng.usize(1..14),
            out_channels: cout,
            kh: k,
            kw: if rng.bool() { k } else { [1, 3, 5][rng.usize(0..3)] },
            stride: [rng.usize(1..3), rng.usize(1..3)],
            padding: [rng.usize(0..4), rng.usize(0..4)],
            dilation: [rng.usize(1..3), rng.usize(1..3)],
            groups: if groups == 0 { cin } else { groups },
        }
    }

    #[test]
    fn packed_conv_matches_direct_reference() {
        let mut rng = fastrand::Rng::with_seed(0xc0);
        let acts = [
            Activation::None,
            Activation::RELU,
            Activation::Clamp { min: 0.0, max: 6.0 },
            Activation::Hardswish,
            Activation::Silu,
            Activation::Gelu,
        ];
        let (mut tested, mut depthwise, mut pointwise) = (0, 0, 0);
        let mut scratch = ConvScratch::default();
        while tested < 300 {
            let mut g = random_geometry(&mut rng);
            if rng.usize(0..6) == 0 {
                (g.kh, g.kw, g.stride, g.padding) = (1, 1, [1, 1], [0, 0]);
            }
            let wlen = g.out_channels * (g.in_channels / g.groups) * g.kh * g.kw;
            let w: Vec<f32> = (0..wlen).map(|_| rng.f32() - 0.5).collect();
            let bias: Vec<f32> = (0..g.out_channels).map(|_| rng.f32() - 0.5).collect();
            let act = acts[rng.usize(0..acts.len())];
            let bias = if rng.bool() { Some(&bias[..]) } else { None };
            let conv = match PackedConv2d::new(g, &w, bias, act) {
                Ok(c) => c,
                Err(GemmError::Invalid(_)) => continue, // kernel larger than the padded input
                Err(e) => panic!("{g:?}: {e}"),
            };
            depthwise += matches!(conv.plan, Plan::Depthwise { .. }) as usize;
            pointwise += matches!(conv.plan, Plan::Gemm { pointwise: true, .. }) as usize;
            let batch = rng.usize(1..3);
            let (oh, ow) = conv.out_hw();
            let x: Vec<f32> =
                (0..batch * g.in_channels * g.in_h * g.in_w).map(|_| rng.f32() - 0.5).collect();
            let n = batch * g.out_channels * oh * ow;
            let res: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let res = if rng.bool() { Some(&res[..]) } else { None };
            let mut out = vec![f32::NAN; n];
            conv.run(batch, &x, res, &mut out, &mut scratch).unwrap();
            let (want, mag) = conv_ref(&g, (oh, ow), batch, &x, &w, bias, res);
            for i in 0..n {
                let k = (g.in_channels / g.groups) * g.kh * g.kw;
                let tol = 3.0 * f64::from(f32::EPSILON) * (k as f64 + 2.0) * mag[i] + 1e-30;
                let want = act_ref(act, want[i]);
                let got = f64::from(out[i]);
                // Every activation is at most 1.5-Lipschitz (hardswish at 3); rounding adds an ulp.
                let tol = 1.5 * tol + f64::from(f32::EPSILON) * want.abs();
                assert!((got - want).abs() <= tol, "{g:?} {act:?} [{i}]: {got} vs {want}");
            }
            tested += 1;
        }
        assert!(depthwise > 20 && pointwise > 10, "{depthwise} depthwise, {pointwise} 1x1");
    }

    #[test]
    fn hostile_geometry_is_an_error() {
        let ok = Conv2dGeometry {
            in_channels: 2,
            in_h: 4,
            in_w: 4,
            out_channels: 2,
            kh: 3,
            kw: 3,
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 1,
        };
        let w = vec![0.5f32; 2 * 2 * 9];
        let act = Activation::None;
        let big = usize::MAX / 2;
        for g in [
            Conv2dGeometry { in_channels: 0, ..ok },
            Conv2dGeometry { kh: 0, ..ok },
            Conv2dGeometry { groups: 0, ..ok },
            Conv2dGeometry { groups: 3, ..ok },
            Conv2dGeometry { stride: [0, 1], ..ok },
            Conv2dGeometry { dilation: [1, 0], ..ok },
            Conv2dGeometry { kh: 9, padding: [0, 0], ..ok },
            Conv2dGeometry { in_h: big, in_w: big, ..ok },
            Conv2dGeometry { padding: [usize::MAX, 1], ..ok },
            Conv2dGeometry { kh: usize::MAX, dilation: [2, 1], ..ok },
            Conv2dGeometry { out_channels: big, ..ok },
        ] {
            assert!(PackedConv2d::new(g, &w, None, act).is_err(), "{g:?}");
        }
        assert!(PackedConv2d::new(ok, &w[1..], None, act).is_err());
        assert!(PackedConv2d::new(ok, &w, Some(&[0.0]), act).is_err());
        let nan = Activation::Clamp { min: f32::NAN, max: 0.0 };
        assert!(PackedConv2d::new(ok, &w, None, nan).is_err());

        let conv = PackedConv2d::new(ok, &w, None, act).unwrap();
        let mut s = ConvScratch::default();
        let x = vec![1.0f32; 2 * 16];
        let mut out = vec![0.0f32; 2 * 16];
        assert!(conv.run(1, &x[1..], None, &mut out, &mut s).is_err());
        assert!(conv.run(1, &x, None, &mut out[1..], &mut s).is_err());
        assert!(conv.run(1, &x, Some(&x[1..]), &mut out, &mut s).is_err());
        assert!(conv.run(2, &x, None, &mut out, &mut s).is_err());
        assert!(conv.run(usize::MAX, &x, None, &mut out, &mut s).is_err());
        assert!(out.iter().all(|&v| v == 0.0));
        conv.run(0, &x, None, &mut out, &mut s).unwrap();
        conv.run(1, &x, None, &mut out, &mut s).unwrap();
        // Centre pixel: all 2 * 9 taps inside, each 0.5 * 1.0.
        assert_eq!(out[5], 9.0);
    }
}
