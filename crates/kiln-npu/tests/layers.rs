//! The neural-network layer operators of `kiln_npu::ops` ([`Conv2d`], [`BatchNorm`],
//! [`LayerNorm`], [`MaxPool2d`], [`AvgPool2d`], [`Clamp`], [`Gelu`], [`Softmax`],
//! [`MulScalar`], [`MatMul`] with a bias), each fused on its own and run on the reference
//! device against ExecuTorch's op fixtures (inputs and outputs its runtime wrote as `.npy`, the
//! layers' weights read from the fixture's `.pte`) and against plain loops here on odd shapes;
//! a fused conv → batch norm → relu → max pool chain; and their shape errors.

mod common;

use common::{
    assert_close, f32_const, f32_tensor, f64s, fixture, fixture_consts, input_buffer, output,
    run_one, values,
};
use kiln_npu::ops::{
    AvgPool2d, BatchNorm, Clamp, Conv2d, Gelu, LayerNorm, MatMul, MaxPool2d, MulScalar, Softmax,
    WeightLayout,
};
use kiln_npu::{fuse, ConstTensor, Device, Error, Node, NpuOp};

/// The `file.case` fixture's input 0 and output 0.
fn io(case: &str) -> (common::Fixture, common::Fixture) {
    (fixture(&format!("{case}.in0")), fixture(&format!("{case}.out0")))
}

/// Runs a one-input operator on the `file.case` fixture and compares with its output.
fn check_unary(op: &dyn NpuOp, case: &str, consts: Vec<ConstTensor>, tol: f64) {
    let (x, y) = io(case);
    let got = run_one(op, &[("x", &x.shape, &x.values)], consts, &y.shape);
    assert_close(case, &got, &f64s(&y.values), tol);
}

/// Constants of shapes and values `c`, named `c0`, `c1`, ...
fn consts(c: &[common::Fixture]) -> Vec<ConstTensor> {
    c.iter().enumerate().map(|(i, f)| f32_const(&format!("c{i}"), &f.shape, &f.values)).collect()
}

/// Convolution in f64: `x [n, c, h, w]`, `w [oc, c/g, kh, kw]`, optional bias.
#[allow(clippy::too_many_arguments)]
fn conv_loops(
    x: &[f32],
    [n, c, h, wd]: [usize; 4],
    w: &[f32],
    [oc, kh, kw]: [usize; 3],
    bias: Option<&[f32]>,
    op: &Conv2d,
) -> (Vec<f64>, [usize; 4]) {
    let (s, p, d, g) = (op.stride, op.padding, op.dilation, op.groups);
    let oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) / s[0] + 1;
    let ow = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) / s[1] + 1;
    let (cg, og) = (c / g, oc / g);
    let mut out = vec![0f64; n * oc * oh * ow];
    for b in 0..n {
        for o in 0..oc {
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = bias.map_or(0.0, |bs| f64::from(bs[o]));
                    for ci in 0..cg {
                        let cin = (o / og) * cg + ci;
                        for u in 0..kh {
                            for v in 0..kw {
                                let y = (i * s[0] + u * d[0]) as isize - p[0] as isize;
                                let z = (j * s[1] + v * d[1]) as isize - p[1] as isize;
                                if y < 0 || z < 0 || y >= h as isize || z >= wd as isize {
                                    continue;
                                }
                                let xv = x[((b * c + cin) * h + y as usize) * wd + z as usize];
                                let wv = w[((o * cg + ci) * kh + u) * kw + v];
                                acc += f64::from(xv) * f64::from(wv);
                            }
                        }
                    }
                    out[((b * oc + o) * oh + i) * ow + j] = acc;
                }
            }
        }
    }
    (out, [n, oc, oh, ow])
}

#[test]
fn conv2d_matches_executorch_grouped_conv() {
    // nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2) on [1, 4, 7, 6]; weight and bias from
    // the .pte.
    let c = fixture_consts("matmul", "conv2d_groups");
    assert_eq!((c[0].shape.as_slice(), c[1].shape.as_slice()), (&[6, 2, 3, 3][..], &[6][..]));
    let op = Conv2d {
        kernel: [3, 3],
        stride: [2, 2],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 2,
        bias: true,
    };
    check_unary(&op, "matmul.conv2d_groups", consts(&c), 1e-5);
}

#[test]
fn conv2d_matches_plain_loops() {
    // (input [n, c, h, w], [oc, kh, kw], stride, padding, dilation, groups, bias)
    let cases = [
        ([1, 3, 5, 7], [4, 3, 3], [1, 1], [0, 0], [1, 1], 1, false),
        ([2, 3, 9, 8], [5, 3, 2], [2, 3], [1, 0], [1, 1], 1, true),
        ([1, 4, 11, 10], [4, 3, 3], [1, 2], [2, 1], [2, 3], 4, true), // depthwise
        ([1, 6, 8, 8], [6, 3, 3], [2, 2], [1, 1], [1, 1], 6, false),  // depthwise, stride 2
        ([1, 4, 9, 9], [6, 5, 4], [3, 2], [2, 2], [1, 2], 2, true),
        ([1, 2, 8, 8], [3, 2, 2], [2, 2], [0, 0], [1, 1], 1, false), // patchify
    ];
    for (i, (xs, [oc, kh, kw], stride, padding, dilation, groups, bias)) in
        cases.into_iter().enumerate()
    {
        let op = Conv2d { kernel: [kh, kw], stride, padding, dilation, groups, bias };
        let x = values(xs.iter().product(), i);
        let w = values(oc * (xs[1] / groups) * kh * kw, i + 7);
        let b = values(oc, i + 3);
        let (want, ys) = conv_loops(&x, xs, &w, [oc, kh, kw], bias.then_some(&b[..]), &op);
        let mut c = vec![f32_const("w", &[oc, xs[1] / groups, kh, kw], &w)];
        if bias {
            c.push(f32_const("b", &[oc], &b));
        }
        let got = run_one(&op, &[("x", &xs, &x)], c, &ys);
        assert_close(&format!("conv case {i}"), &got, &want, 1e-5);
    }
}

/// Batch norm in f64 over channel dim 1 of `x` (`inner` elements per channel and batch).
fn batch_norm_loops(x: &[f32], c: usize, inner: usize, p: &[Vec<f32>], eps: f64) -> Vec<f64> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = (i / inner) % c;
            let [w, b, m, var] = [0, 1, 2, 3].map(|k| f64::from(p[k][ch]));
            (f64::from(v) - m) / (var + eps).sqrt() * w + b
        })
        .collect()
}

#[test]
fn batch_norm_matches_executorch_and_plain_loops() {
    // nn.BatchNorm2d(6).eval(): weight, bias, running_mean, running_var from the .pte (then
    // num_batches_tracked, a scalar).
    let c = fixture_consts("norm", "batch_norm");
    assert!(c[..4].iter().all(|t| t.shape == [6]));
    check_unary(&BatchNorm { eps: 1e-5 }, "norm.batch_norm", consts(&c[..4]), 1e-5);

    for (shape, eps) in [(&[3, 5][..], 1e-5), (&[2, 3, 7][..], 1e-3), (&[1, 4, 3, 5][..], 0.1)] {
        let ch = shape[1];
        let inner: usize = shape[2..].iter().product();
        let x = values(shape.iter().product(), 5);
        let mut p: Vec<Vec<f32>> = (0..4).map(|k| values(ch, k + 1)).collect();
        p[3] = p[3].iter().map(|v| v.abs() + 0.25).collect();
        let want = batch_norm_loops(&x, ch, inner, &p, eps);
        let cs = p.iter().map(|v| f32_const("p", &[ch], v)).collect();
        let got = run_one(&BatchNorm { eps }, &[("x", shape, &x)], cs, shape);
        assert_close(&format!("batch norm {shape:?}"), &got, &want, 1e-5);
    }
}

/// Layer norm in f64 over the last `inner` elements of each row.
fn layer_norm_loops(x: &[f32], inner: usize, wb: Option<(&[f32], &[f32])>, eps: f64) -> Vec<f64> {
    let mut out = Vec::new();
    for row in x.chunks(inner) {
        let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / inner as f64;
        let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / inner as f64;
        for (j, &v) in row.iter().enumerate() {
            let y = (f64::from(v) - mean) / (var + eps).sqrt();
            out.push(wb.map_or(y, |(w, b)| y * f64::from(w[j]) + f64::from(b[j])));
        }
    }
    out
}

#[test]
fn layer_norm_matches_executorch_and_plain_loops() {
    // nn.LayerNorm([4, 3]) on [2, 6, 4, 3]: weight and bias from the .pte.
    let c = fixture_consts("norm", "layer_norm");
    let op = LayerNorm { normalized_dims: 2, eps: 1e-5, affine: true };
    check_unary(&op, "norm.layer_norm", consts(&c), 1e-5);

    for (shape, d, affine) in
        [(&[3, 7][..], 1, true), (&[2, 3, 5][..], 2, false), (&[5][..], 1, false)]
    {
        let inner: usize = shape[shape.len() - d..].iter().product();
        let x = values(shape.iter().product(), 9);
        let (w, b) = (values(inner, 2), values(inner, 4));
        let want = layer_norm_loops(&x, inner, affine.then_some((&w[..], &b[..])), 1e-5);
        let ns = &shape[shape.len() - d..];
        let cs = if affine { vec![f32_const("w", ns, &w), f32_const("b", ns, &b)] } else { vec![] };
        let op = LayerNorm { normalized_dims: d, eps: 1e-5, affine };
        let got = run_one(&op, &[("x", shape, &x)], cs, shape);
        assert_close(&format!("layer norm {shape:?}"), &got, &want, 1e-5);
    }
}

#[test]
fn linear_with_bias_matches_executorch() {
    // nn.Linear(5, 3) on [2, 4, 5], read as [8, 5]; weight [3, 5] and bias [3] from the .pte.
    let c = fixture_consts("matmul", "linear");
    let (x, y) = io("matmul.linear");
    let op = MatMul { weight: WeightLayout::NK, bias: true };
    let got = run_one(&op, &[("x", &[8, 5], &x.values)], consts(&c), &[8, 3]);
    assert_close("linear", &got, &f64s(&y.values), 1e-5);
}

#[test]
fn matmul_with_bias_matches_executorch_addmm() {
    // addmm(bias, x, w, beta = 0.5, alpha = 2) = x · 2w + 0.5·bias exactly (powers of two).
    let (bias, x, w, y) = (
        fixture("matmul.addmm.in0"),
        fixture("matmul.addmm.in1"),
        fixture("matmul.addmm.in2"),
        fixture("matmul.addmm.out0"),
    );
    let w2: Vec<f32> = w.values.iter().map(|v| 2.0 * v).collect();
    let b2: Vec<f32> = bias.values.iter().map(|v| 0.5 * v).collect();
    let c = vec![f32_const("w", &[5, 4], &w2), f32_const("b", &[4], &b2)];
    let op = MatMul { weight: WeightLayout::KN, bias: true };
    let got = run_one(&op, &[("x", &x.shape, &x.values)], c, &y.shape);
    assert_close("addmm", &got, &f64s(&y.values), 1e-6);
}

#[test]
fn activations_match_executorch() {
    check_unary(&Clamp::relu(), "unary.relu", vec![], 0.0);
    let (x, y) = io("unary.relu");
    let got = run_one(&Clamp::relu(), &[("x", &x.shape, &x.values)], vec![], &y.shape);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got), bits(&y.values), "relu bit for bit (-0.0 and NaN included)");
    check_unary(&Clamp { min: -1.0, max: 1.0 }, "unary.hardtanh", vec![], 0.0);
    check_unary(&Clamp { min: -0.5, max: 0.75 }, "elementwise.clamp", vec![], 0.0);
    check_unary(&Gelu { tanh: false }, "unary.gelu", vec![], 1e-6);
    check_unary(&Gelu { tanh: true }, "unary.gelu_tanh", vec![], 1e-6);
    check_unary(&Softmax { dim: 1 }, "unary.softmax", vec![], 1e-6);
}

#[test]
fn activations_match_plain_loops() {
    let shape = [3, 5, 7];
    let x: Vec<f32> = values(105, 2).iter().map(|v| v * 3.0).collect();
    let ins = [("x", &shape[..], &x[..])];
    let clamp = |lo: f64, hi: f64| -> Vec<f64> {
        x.iter().map(|&v| f64::from(v).max(lo).min(hi)).collect()
    };
    for (min, max) in [(0.0, 6.0), (-1.5, f64::INFINITY), (f64::NEG_INFINITY, 0.5)] {
        let got = run_one(&Clamp { min, max }, &ins, vec![], &shape);
        assert_close(&format!("clamp {min} {max}"), &got, &clamp(min, max), 0.0);
    }
    // No bound at all: a copy.
    let op = Clamp { min: f64::NEG_INFINITY, max: f64::INFINITY };
    assert_eq!(run_one(&op, &ins, vec![], &shape), x);

    let tanh_gelu: Vec<f64> = x
        .iter()
        .map(|&v| {
            let v = f64::from(v);
            let k = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * v * (1.0 + (k * (v + 0.044715 * v.powi(3))).tanh())
        })
        .collect();
    assert_close(
        "gelu tanh",
        &run_one(&Gelu { tanh: true }, &ins, vec![], &shape),
        &tanh_gelu,
        1e-6,
    );

    let scaled: Vec<f64> = x.iter().map(|&v| f64::from(v) * 0.3).collect();
    assert_close(
        "mul scalar",
        &run_one(&MulScalar { value: 0.3 }, &ins, vec![], &shape),
        &scaled,
        1e-6,
    );

    // Softmax along each dim of [3, 5, 7].
    let strides = [35, 7, 1];
    for dim in 0..3 {
        let mut want = vec![0f64; 105];
        for (i, w) in want.iter_mut().enumerate() {
            let base = i - (i / strides[dim] % shape[dim]) * strides[dim];
            let row: Vec<f64> =
                (0..shape[dim]).map(|j| f64::from(x[base + j * strides[dim]])).collect();
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
            *w = (f64::from(x[i]) - max).exp() / sum;
        }
        let got = run_one(&Softmax { dim }, &ins, vec![], &shape);
        assert_close(&format!("softmax dim {dim}"), &got, &want, 1e-6);
    }
}

/// Pooling in f64 over `x [n·c, h, w]` planes: max or average with the given divisor rule.
#[allow(clippy::too_many_arguments)]
fn pool_loops(
    x: &[f32],
    planes: usize,
    [h, w]: [usize; 2],
    [oh, ow]: [usize; 2],
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    avg: Option<(bool, Option<i64>)>,
) -> Vec<f64> {
    let mut out = Vec::new();
    for pl in 0..planes {
        for i in 0..oh {
            for j in 0..ow {
                let (mut max, mut sum, mut count) = (f64::NEG_INFINITY, 0.0, 0usize);
                let (y0, x0) =
                    ((i * s[0]) as isize - p[0] as isize, (j * s[1]) as isize - p[1] as isize);
                // The window clipped to the padded input, for count_include_pad.
                let ye = (y0 + k[0] as isize).min((h + p[0]) as isize);
                let xe = (x0 + k[1] as isize).min((w + p[1]) as isize);
                let padded = ((ye - y0) * (xe - x0)) as usize;
                for u in 0..k[0] {
                    for v in 0..k[1] {
                        let y = y0 + (u * d[0]) as isize;
                        let z = x0 + (v * d[1]) as isize;
                        if y < 0 || z < 0 || y >= h as isize || z >= w as isize {
                            continue;
                        }
                        let val = f64::from(x[(pl * h + y as usize) * w + z as usize]);
                        max = max.max(val);
                        sum += val;
                        count += 1;
                    }
                }
                out.push(match avg {
                    None => max,
                    Some((_, Some(div))) => sum / div as f64,
                    Some((true, None)) => sum / padded as f64,
                    Some((false, None)) => sum / count as f64,
                });
            }
        }
    }
    out
}

#[test]
fn pools_match_executorch() {
    let max = |k, s, p, d, ceil_mode| MaxPool2d {
        kernel: [k; 2],
        stride: [s; 2],
        padding: [p; 2],
        dilation: [d; 2],
        ceil_mode,
    };
    check_unary(&max(2, 2, 0, 1, false), "pool.max_pool2d", vec![], 0.0);
    check_unary(&max(3, 2, 1, 1, false), "pool.max_pool2d_pad_stride", vec![], 0.0);
    check_unary(&max(2, 2, 0, 1, true), "pool.max_pool2d_ceil", vec![], 0.0);
    check_unary(&max(2, 1, 0, 2, false), "pool.max_pool2d_dilation", vec![], 0.0);
    check_unary(&max(2, 2, 0, 1, false), "pool.max_pool2d_indices", vec![], 0.0);
    // The channels-last input, as its .npy holds it (logical order).
    check_unary(&max(2, 2, 0, 1, false), "pool.max_pool2d_channels_last", vec![], 0.0);
    let avg = |k, s, p, ceil_mode, count_include_pad, divisor_override| AvgPool2d {
        kernel: [k; 2],
        stride: [s; 2],
        padding: [p; 2],
        ceil_mode,
        count_include_pad,
        divisor_override,
    };
    check_unary(&avg(2, 2, 0, false, true, None), "pool.avg_pool2d", vec![], 1e-6);
    check_unary(&avg(3, 2, 1, false, true, None), "pool.avg_pool2d_pad", vec![], 1e-6);
    check_unary(&avg(3, 2, 1, false, false, None), "pool.avg_pool2d_pad_exclude", vec![], 1e-6);
    check_unary(&avg(2, 2, 0, true, true, None), "pool.avg_pool2d_ceil", vec![], 1e-6);
    check_unary(&avg(2, 2, 0, false, true, Some(3)), "pool.avg_pool2d_divisor", vec![], 1e-6);
    check_unary(&avg(2, 2, 0, false, true, None), "pool.avg_pool2d_channels_last", vec![], 1e-6);
}

#[test]
fn pools_match_plain_loops() {
    // ([planes, h, w] as [n, c, h, w], kernel, stride, padding, dilation, output)
    let cases = [
        ([1, 2, 7, 5], [3, 2], [2, 1], [1, 0], [1, 2], [4, 3]),
        ([2, 3, 6, 9], [2, 3], [2, 3], [1, 1], [1, 1], [4, 3]),
        ([1, 1, 5, 5], [5, 5], [1, 1], [2, 2], [1, 1], [5, 5]),
    ];
    for (i, (xs, k, s, p, d, o)) in cases.into_iter().enumerate() {
        let planes = xs[0] * xs[1];
        let x = values(xs.iter().product(), i);
        let ys = [xs[0], xs[1], o[0], o[1]];
        let op = MaxPool2d { kernel: k, stride: s, padding: p, dilation: d, ceil_mode: false };
        let want = pool_loops(&x, planes, [xs[2], xs[3]], o, k, s, p, d, None);
        let got = run_one(&op, &[("x", &xs, &x)], vec![], &ys);
        assert_close(&format!("max pool case {i}"), &got, &want, 0.0);
        if d != [1, 1] {
            continue;
        }
        for (include, divisor) in [(true, None), (false, None), (true, Some(-2))] {
            let op = AvgPool2d {
                kernel: k,
                stride: s,
                padding: p,
                ceil_mode: false,
                count_include_pad: include,
                divisor_override: divisor,
            };
            let want =
                pool_loops(&x, planes, [xs[2], xs[3]], o, k, s, p, d, Some((include, divisor)));
            let got = run_one(&op, &[("x", &xs, &x)], vec![], &ys);
            assert_close(&format!("avg pool case {i} {include} {divisor:?}"), &got, &want, 1e-6);
        }
    }
}

#[test]
fn fused_conv_batch_norm_relu_max_pool_matches_plain_loops() {
    let (xs, oc) = ([2, 3, 9, 9], 4);
    let conv = Conv2d {
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 1,
        bias: true,
    };
    let bn = BatchNorm { eps: 1e-5 };
    let relu = Clamp::relu();
    let pool = MaxPool2d {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
        ceil_mode: false,
    };
    let x = values(xs.iter().product(), 1);
    let w = values(oc * 3 * 9, 2);
    let b = values(oc, 3);
    let mut p: Vec<Vec<f32>> = (0..4).map(|k| values(oc, k + 4)).collect();
    p[3] = p[3].iter().map(|v| v.abs() + 0.5).collect();
    let (c, ys) = conv_loops(&x, xs, &w, [oc, 3, 3], Some(&b), &conv);
    assert_eq!(ys, [2, oc, 9, 9]);
    let c32: Vec<f32> = c.iter().map(|&v| v as f32).collect();
    let n = batch_norm_loops(&c32, oc, 81, &p, 1e-5);
    let r: Vec<f32> = n.iter().map(|&v| v.max(0.0) as f32).collect();
    let want = pool_loops(&r, 2 * oc, [9, 9], [4, 4], [2, 2], [2, 2], [0, 0], [1, 1], None);

    let t = |name: &str, shape: &[usize]| f32_tensor(name, shape);
    let nodes = [
        Node {
            name: "conv".into(),
            op: &conv,
            inputs: vec![t("x", &xs)],
            consts: vec![f32_const("w", &[oc, 3, 3, 3], &w), f32_const("b", &[oc], &b)],
            outputs: vec![t("c", &ys)],
        },
        Node {
            name: "bn".into(),
            op: &bn,
            inputs: vec![t("c", &ys)],
            consts: p.iter().map(|v| f32_const("p", &[oc], v)).collect(),
            outputs: vec![t("n", &ys)],
        },
        Node {
            name: "relu".into(),
            op: &relu,
            inputs: vec![t("n", &ys)],
            consts: vec![],
            outputs: vec![t("r", &ys)],
        },
        Node {
            name: "pool".into(),
            op: &pool,
            inputs: vec![t("r", &ys)],
            consts: vec![],
            outputs: vec![t("y", &[2, oc, 4, 4])],
        },
    ];
    let fused = fuse(&nodes).unwrap();
    let mut device = Device::for_fused(&fused, input_buffer(&fused, &[("x", &x)])).unwrap();
    assert_eq!(device.run(&fused.txn).unwrap().launches, 4);
    assert_close("conv → bn → relu → pool", &output(&device, &fused, "y"), &want, 1e-5);
}

/// The error of fusing `op` as one node with these tensors and constants.
fn fuse_err(
    op: &dyn NpuOp,
    inputs: &[&[usize]],
    consts: Vec<ConstTensor>,
    output: &[usize],
) -> Error {
    let nodes = [Node {
        name: "node".into(),
        op,
        inputs: inputs.iter().enumerate().map(|(i, s)| f32_tensor(&format!("x{i}"), s)).collect(),
        consts,
        outputs: vec![f32_tensor("y", output)],
    }];
    fuse(&nodes).unwrap_err()
}

/// Asserts `err` is an unsupported shape of `op` whose reason contains `needle`.
fn assert_shape_err(err: Error, op: &str, needle: &str) {
    assert!(
        matches!(&err, Error::UnsupportedShape { op: o, reason, .. } if *o == op && reason.contains(needle)),
        "{op}: {needle:?} not in {err}"
    );
}

#[test]
fn layer_shape_errors_name_the_operator_and_reason() {
    let conv = Conv2d {
        kernel: [3, 3],
        stride: [1, 1],
        padding: [0, 0],
        dilation: [1, 1],
        groups: 1,
        bias: true,
    };
    let w = || vec![f32_const("w", &[2, 3, 3, 3], &[0.0; 54]), f32_const("b", &[2], &[0.0; 2])];
    assert_shape_err(fuse_err(&conv, &[&[3, 5, 5]], w(), &[1, 2, 3, 3]), "conv2d", "[n, c, h, w]");
    assert_shape_err(fuse_err(&conv, &[&[1, 3, 5, 5]], w(), &[2, 2, 3, 3]), "conv2d", "batch");
    assert_shape_err(
        fuse_err(&conv, &[&[1, 3, 5, 5]], w(), &[1, 2, 6, 3]),
        "conv2d",
        "does not map",
    );
    // Fusion refuses a const count the arg map does not match; the operator refuses it too.
    let err = conv
        .initialize_const_params(&mut kiln_npu::ConstBufferIo::new("c", &mut [0; 224]), &w()[..1])
        .unwrap_err();
    assert_shape_err(err, "conv2d", "takes 2 constant inputs, not 1");
    // A [2, 3, 2, 2] weight where the shapes imply 3×3.
    let small = vec![f32_const("w", &[2, 3, 2, 2], &[0.0; 24]), f32_const("b", &[2], &[0.0; 2])];
    assert_shape_err(fuse_err(&conv, &[&[1, 3, 5, 5]], small, &[1, 2, 3, 3]), "conv2d", "imply");
    // Stride 3 maps width 8 to 3 for kernel widths 2 to 4 (padding 1): the kernel attribute
    // (3) says which, and a width-2 weight is refused, not misread.
    let strided = Conv2d { stride: [1, 3], padding: [0, 1], ..conv };
    let w2 = vec![f32_const("w", &[2, 3, 3, 2], &[0.0; 36]), f32_const("b", &[2], &[0.0; 2])];
    assert_shape_err(fuse_err(&strided, &[&[1, 3, 5, 8]], w2, &[1, 2, 3, 3]), "conv2d", "imply");
    let grouped = Conv2d { groups: 2, ..conv };
    assert_shape_err(
        fuse_err(&grouped, &[&[1, 3, 5, 5]], w(), &[1, 2, 3, 3]),
        "conv2d",
        "groups 2",
    );
    let mut int_w = w();
    int_w[0].desc.dtype = "int8".into();
    let err = fuse_err(&conv, &[&[1, 3, 5, 5]], int_w, &[1, 2, 3, 3]);
    assert!(matches!(err, Error::UnsupportedDtype { op: "conv2d", .. }), "{err}");

    let bn = BatchNorm { eps: 1e-5 };
    let p = |n: usize, c: usize| (0..n).map(|_| f32_const("p", &[c], &vec![1.0; c])).collect();
    assert_shape_err(fuse_err(&bn, &[&[6]], p(4, 6), &[6]), "batch_norm", "rank 2");
    let mut slice = [0; 48];
    let err =
        bn.initialize_const_params(&mut kiln_npu::ConstBufferIo::new("bn", &mut slice), &p(3, 3));
    assert_shape_err(err.unwrap_err(), "batch_norm", "takes 4 constant inputs, not 3");
    assert_shape_err(fuse_err(&bn, &[&[2, 3]], p(4, 4), &[2, 3]), "batch_norm", "imply");
    assert_shape_err(fuse_err(&bn, &[&[2, 3]], p(4, 3), &[2, 4]), "batch_norm", "one shape");

    let ln = LayerNorm { normalized_dims: 3, eps: 1e-5, affine: false };
    assert_shape_err(fuse_err(&ln, &[&[2, 3]], vec![], &[2, 3]), "layer_norm", "normalizes 3 dims");
    let ln = LayerNorm { normalized_dims: 1, eps: 1e-5, affine: true };
    let err = ln.initialize_const_params(&mut kiln_npu::ConstBufferIo::new("ln", &mut []), &[]);
    assert_shape_err(err.unwrap_err(), "layer_norm", "takes 2 constant inputs, not 0");

    let pool = MaxPool2d {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
        ceil_mode: false,
    };
    assert_shape_err(fuse_err(&pool, &[&[8, 8]], vec![], &[4, 4]), "max_pool2d", "[n, c, h, w]");
    assert_shape_err(
        fuse_err(&pool, &[&[1, 1, 8, 8]], vec![], &[1, 1, 3, 4]),
        "max_pool2d",
        "pooled shape is [1, 1, 4, 4]",
    );
    let wide = MaxPool2d { padding: [2, 0], ..pool };
    assert_shape_err(
        fuse_err(&wide, &[&[1, 1, 8, 8]], vec![], &[1, 1, 6, 4]),
        "max_pool2d",
        "half the window",
    );
    let avg = AvgPool2d {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        ceil_mode: false,
        count_include_pad: true,
        divisor_override: Some(0),
    };
    assert_shape_err(
        fuse_err(&avg, &[&[1, 1, 8, 8]], vec![], &[1, 1, 4, 4]),
        "avg_pool2d",
        "divisor_override 0",
    );

    assert_shape_err(
        fuse_err(&Softmax { dim: 2 }, &[&[2, 3]], vec![], &[2, 3]),
        "softmax",
        "dim 2",
    );
    assert_shape_err(fuse_err(&Clamp::relu(), &[&[2, 3]], vec![], &[3, 2]), "clamp", "one shape");
    assert_shape_err(
        fuse_err(&Gelu { tanh: false }, &[&[2], &[2]], vec![], &[2]),
        "gelu",
        "takes 1 inputs, not 2",
    );
    let mm = MatMul { weight: WeightLayout::KN, bias: true };
    let wb = vec![f32_const("w", &[3, 2], &[0.0; 6]), f32_const("b", &[3], &[0.0; 3])];
    assert_shape_err(fuse_err(&mm, &[&[4, 3]], wb, &[4, 2]), "matmul", "the bias must be [2]");
    let two = vec![f32_const("w", &[3, 2], &[0.0; 6]), f32_const("w", &[3, 2], &[0.0; 6])];
    let err = MulScalar { value: 2.0 }
        .initialize_const_params(&mut kiln_npu::ConstBufferIo::new("m", &mut []), &two)
        .unwrap_err();
    assert_shape_err(err, "mul_scalar", "takes 0 constant inputs, not 2");
}
