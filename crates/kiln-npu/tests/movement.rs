//! The data-movement and reduction operators of `kiln_npu::ops` ([`Transpose`], [`Concat`],
//! [`Reshape`], [`Expand`], [`Mean`]) and [`BatchMatMul`], each fused on its own and run on
//! the reference device against ExecuTorch's op fixtures and plain index loops here, and their
//! shape errors.

mod common;

use common::{assert_close, expand, f32_tensor, f64s, fixture, run_one, values};
use kiln_npu::ops::{BatchMatMul, Concat, Expand, Mean, Reshape, Transpose};
use kiln_npu::{fuse, Error, Node, NpuOp};

/// Runs a one-input operator on the fixture `case` and checks its output bit for bit.
fn check_exact(op: &dyn NpuOp, case: &str) {
    let (x, y) = (fixture(&format!("{case}.in0")), fixture(&format!("{case}.out0")));
    let got = run_one(op, &[("x", &x.shape, &x.values)], vec![], &y.shape);
    assert_eq!(got, y.values, "{case}");
}

/// `x` of shape `shape` permuted by `perm`, by index arithmetic.
fn permute_loops(x: &[f32], shape: &[usize], perm: &[usize]) -> Vec<f32> {
    let rank = shape.len();
    let mut strides = vec![1; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    (0..x.len())
        .map(|mut flat| {
            let mut src = 0;
            for d in (0..rank).rev() {
                src += (flat % out[d]) * strides[perm[d]];
                flat /= out[d];
            }
            x[src]
        })
        .collect()
}

#[test]
fn transpose_matches_executorch_and_plain_loops() {
    check_exact(&Transpose { perm: vec![2, 0, 1] }, "views.permute");
    check_exact(&Transpose { perm: vec![2, 1, 0] }, "views.transpose");
    for (shape, perm) in [
        (&[3, 5][..], &[1, 0][..]),
        (&[2, 3, 5, 7], &[3, 1, 0, 2]),
        (&[7], &[0]),
        (&[1, 4, 1, 3, 2], &[4, 2, 0, 3, 1]),
    ] {
        let x = values(shape.iter().product(), 3);
        let want = permute_loops(&x, shape, perm);
        let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let got = run_one(&Transpose { perm: perm.to_vec() }, &[("x", shape, &x)], vec![], &out);
        assert_eq!(got, want, "{shape:?} {perm:?}");
    }
}

#[test]
fn concat_matches_executorch_and_plain_loops() {
    // torch.cat([a, b, a], dim=1): a [2, 3, 4], b [2, 1, 4].
    let (a, b, y) = (fixture("views.cat.in0"), fixture("views.cat.in1"), fixture("views.cat.out0"));
    let ins = [
        ("a", &a.shape[..], &a.values[..]),
        ("b", &b.shape, &b.values),
        ("c", &a.shape, &a.values),
    ];
    assert_eq!(run_one(&Concat { dim: 1 }, &ins, vec![], &y.shape), y.values);

    // Three inputs of odd sizes along each dim of rank 3, and a lone input.
    let base = [3, 2, 5];
    for dim in 0..3 {
        let sizes = [2, 1, 3];
        let shapes: Vec<Vec<usize>> = sizes
            .iter()
            .map(|&s| {
                let mut sh = base.to_vec();
                sh[dim] = s;
                sh
            })
            .collect();
        let data: Vec<Vec<f32>> =
            shapes.iter().enumerate().map(|(i, s)| values(s.iter().product(), i + 1)).collect();
        let mut out_shape = base.to_vec();
        out_shape[dim] = 6;
        // Outer blocks: per index of the dims before `dim`, each input's contiguous run.
        let outer: usize = base[..dim].iter().product();
        let mut want = Vec::new();
        for o in 0..outer {
            for (s, d) in shapes.iter().zip(&data) {
                let run: usize = s[dim..].iter().product();
                want.extend_from_slice(&d[o * run..(o + 1) * run]);
            }
        }
        let ins: Vec<(&str, &[usize], &[f32])> =
            shapes.iter().zip(&data).map(|(s, d)| ("in", &s[..], &d[..])).collect();
        let ins: Vec<(String, &[usize], &[f32])> =
            ins.iter().enumerate().map(|(i, (_, s, d))| (format!("in{i}"), *s, *d)).collect();
        let ins: Vec<(&str, &[usize], &[f32])> =
            ins.iter().map(|(n, s, d)| (n.as_str(), *s, *d)).collect();
        assert_eq!(run_one(&Concat { dim }, &ins, vec![], &out_shape), want, "dim {dim}");
    }
    let x = values(6, 1);
    assert_eq!(run_one(&Concat { dim: 0 }, &[("x", &[2, 3], &x)], vec![], &[2, 3]), x);
}

#[test]
fn reshape_and_expand_match_executorch() {
    check_exact(&Reshape, "views.view");
    check_exact(&Reshape, "views.squeeze_unsqueeze");
    for case in ["reshape", "squeeze", "unsqueeze", "view"] {
        check_exact(&Reshape, &format!("../ops-more/lone_copies.{case}"));
    }
    check_exact(&Expand, "views.expand");

    let x = values(15, 2);
    assert_eq!(run_one(&Reshape, &[("x", &[3, 5], &x)], vec![], &[5, 1, 3]), x);
    for (from, to) in [(&[3, 1][..], &[2, 3, 4][..]), (&[5], &[3, 5]), (&[1, 1], &[1, 7])] {
        let x = values(from.iter().product(), 4);
        let want = expand(&x, from, to);
        assert_eq!(run_one(&Expand, &[("x", from, &x)], vec![], to), want, "{from:?}");
    }
}

#[test]
fn mean_matches_executorch_and_plain_loops() {
    let (x, y) = (fixture("reduce.mean_dim.in0"), fixture("reduce.mean_dim.out0"));
    let op = Mean { dims: vec![2], keepdim: false };
    let got = run_one(&op, &[("x", &x.shape, &x.values)], vec![], &y.shape);
    assert_close("mean_dim", &got, &f64s(&y.values), 1e-6);
    let (x, y) = (fixture("reduce.mean_keepdim.in0"), fixture("reduce.mean_keepdim.out0"));
    let op = Mean { dims: vec![1, 2], keepdim: true };
    let got = run_one(&op, &[("x", &x.shape, &x.values)], vec![], &y.shape);
    assert_close("mean_keepdim", &got, &f64s(&y.values), 1e-6);

    // [3, 5, 7] over dim 1, dims {0, 2}, and every dim.
    let x = values(105, 6);
    let at = |i: usize, j: usize, k: usize| f64::from(x[(i * 5 + j) * 7 + k]);
    let over1: Vec<f64> = (0..3)
        .flat_map(|i| (0..7).map(move |k| (i, k)))
        .map(|(i, k)| (0..5).map(|j| at(i, j, k)).sum::<f64>() / 5.0)
        .collect();
    let ins = [("x", &[3, 5, 7][..], &x[..])];
    let got = run_one(&Mean { dims: vec![1], keepdim: false }, &ins, vec![], &[3, 7]);
    assert_close("mean dim 1", &got, &over1, 1e-6);
    let over02: Vec<f64> = (0..5)
        .map(|j| {
            (0..3).flat_map(|i| (0..7).map(move |k| (i, k))).map(|(i, k)| at(i, j, k)).sum::<f64>()
                / 21.0
        })
        .collect();
    let got = run_one(&Mean { dims: vec![2, 0], keepdim: true }, &ins, vec![], &[1, 5, 1]);
    assert_close("mean dims 0, 2", &got, &over02, 1e-6);
    let all = x.iter().map(|&v| f64::from(v)).sum::<f64>() / 105.0;
    let got = run_one(&Mean { dims: vec![], keepdim: false }, &ins, vec![], &[]);
    assert_close("mean of all", &got, &[all], 1e-6);
}

#[test]
fn batch_matmul_matches_executorch_and_plain_loops() {
    let (a, b, y) =
        (fixture("matmul.bmm.in0"), fixture("matmul.bmm.in1"), fixture("matmul.bmm.out0"));
    let ins = [("a", &a.shape[..], &a.values[..]), ("b", &b.shape, &b.values)];
    let got = run_one(&BatchMatMul, &ins, vec![], &y.shape);
    assert_close("bmm", &got, &f64s(&y.values), 1e-6);

    let (bt, m, k, n) = (3, 5, 7, 2);
    let (a, b) = (values(bt * m * k, 1), values(bt * k * n, 2));
    let mut want = vec![0f64; bt * m * n];
    for t in 0..bt {
        for i in 0..m {
            for j in 0..n {
                want[(t * m + i) * n + j] = (0..k)
                    .map(|p| f64::from(a[(t * m + i) * k + p]) * f64::from(b[(t * k + p) * n + j]))
                    .sum();
            }
        }
    }
    let ins = [("a", &[bt, m, k][..], &a[..]), ("b", &[bt, k, n], &b)];
    assert_close("bmm odd", &run_one(&BatchMatMul, &ins, vec![], &[bt, m, n]), &want, 1e-6);
}

/// The reason of the shape error of fusing `op` with inputs `inputs` and output `output`.
fn shape_err(op: &dyn NpuOp, inputs: &[&[usize]], output: &[usize]) -> (&'static str, String) {
    let nodes = [Node {
        name: "node".into(),
        op,
        inputs: inputs.iter().enumerate().map(|(i, s)| f32_tensor(&format!("x{i}"), s)).collect(),
        consts: vec![],
        outputs: vec![f32_tensor("y", output)],
    }];
    match fuse(&nodes).unwrap_err() {
        Error::UnsupportedShape { op, reason, .. } => (op, reason),
        other => panic!("not a shape error: {other}"),
    }
}

#[test]
fn movement_shape_errors_name_the_operator_and_reason() {
    for (op, inputs, output, name, needle) in [
        (
            &Transpose { perm: vec![0, 0] } as &dyn NpuOp,
            &[&[2, 3][..]][..],
            &[2, 3][..],
            "transpose",
            "not a permutation",
        ),
        (
            &Transpose { perm: vec![1, 0] },
            &[&[2, 3]],
            &[2, 3],
            "transpose",
            "permuted shape is [3, 2]",
        ),
        (&Transpose { perm: vec![0] }, &[&[2, 3]], &[2, 3], "transpose", "one entry per dim"),
        (
            &Concat { dim: 2 },
            &[&[2, 3], &[2, 3]],
            &[4, 3],
            "concat",
            "dim 2 is not below the rank 2",
        ),
        (&Concat { dim: 0 }, &[&[2, 3], &[2, 4]], &[4, 3], "concat", "except along dim 0"),
        (&Concat { dim: 0 }, &[&[2, 3], &[2, 3]], &[5, 3], "concat", "add up to 4"),
        (&Concat { dim: 0 }, &[], &[5, 3], "concat", "one or more inputs"),
        (&Reshape, &[&[2, 3]], &[7], "reshape", "as many elements"),
        (&Expand, &[&[2, 3]], &[3, 3], "expand", "does not broadcast"),
        (&Expand, &[&[1, 2, 3]], &[2, 3], "expand", "does not broadcast"),
        (&Mean { dims: vec![1, 1], keepdim: false }, &[&[2, 3]], &[2], "mean", "not distinct"),
        (&Mean { dims: vec![2], keepdim: false }, &[&[2, 3]], &[2], "mean", "not distinct"),
        (&Mean { dims: vec![1], keepdim: true }, &[&[2, 3]], &[2], "mean", "shape is [2, 1]"),
        (&BatchMatMul, &[&[2, 3, 4], &[2, 5, 6]], &[2, 3, 6], "batch_matmul", "[b, k, n]"),
        (&BatchMatMul, &[&[2, 3, 4]], &[2, 3, 6], "batch_matmul", "takes 2 inputs, not 1"),
    ] {
        let (got_op, reason) = shape_err(op, inputs, output);
        assert_eq!(got_op, name);
        assert!(reason.contains(needle), "{name}: {needle:?} not in {reason:?}");
    }
}
