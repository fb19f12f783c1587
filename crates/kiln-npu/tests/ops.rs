//! kiln's operators (`kiln_npu::ops`), each fused on its own and run on the reference device for
//! several shapes, odd sizes among them, against ExecuTorch's outputs from the op fixtures in
//! `tests/fixtures/ops` (inputs and outputs its runtime wrote as `.npy`) where a fixture has
//! the shape, and against plain loops here where none does; a fused matmul → add → sigmoid
//! chain; the transactions' patches and launches; and the shape and type errors.

mod common;

use common::{
    assert_close, expand, f32_const, f32_tensor, f64s, fixture, floats, input_buffer, output,
    patches_of, run_one, values,
};
use kiln_format::txn::{CustomPayload, LaunchKernel, OpKind, Txn};
use kiln_npu::ops::{arg_reg, Add, MatMul, Mul, Sigmoid, WeightLayout};
use kiln_npu::{
    fuse, ConstBufferIo, ConstTensor, Device, Error, Node, NpuOp, OpArgType, TensorDesc,
};

#[test]
fn add_matches_executorch_fixtures() {
    // add(int→float(in0), in1): ExecuTorch converts in0 to float, then adds.
    let (a, b, y) = (
        fixture("elementwise.add_int_float_promote.in0"),
        fixture("elementwise.add_int_float_promote.in1"),
        fixture("elementwise.add_int_float_promote.out0"),
    );
    assert_eq!((a.shape.as_slice(), b.shape.as_slice()), (&[3, 4][..], &[3, 4][..]));
    let got =
        run_one(&Add, &[("a", &a.shape, &a.values), ("b", &b.shape, &b.values)], vec![], &y.shape);
    assert_eq!(got, y.values);

    // [2, 3, 4] + [4], broadcast by the kernel.
    let (a, b, y) = (
        fixture("elementwise.add_broadcast.in0"),
        fixture("elementwise.add_broadcast.in1"),
        fixture("elementwise.add_broadcast.out0"),
    );
    assert_eq!((a.shape.as_slice(), b.shape.as_slice()), (&[2, 3, 4][..], &[4][..]));
    let got =
        run_one(&Add, &[("a", &a.shape, &a.values), ("b", &b.shape, &b.values)], vec![], &y.shape);
    assert_eq!(got, y.values);
}

#[test]
fn mul_matches_executorch_fixtures() {
    let (a, b, y) = (
        fixture("elementwise.mul_broadcast.in0"),
        fixture("elementwise.mul_broadcast.in1"),
        fixture("elementwise.mul_broadcast.out0"),
    );
    let got =
        run_one(&Mul, &[("a", &a.shape, &a.values), ("b", &b.shape, &b.values)], vec![], &y.shape);
    assert_eq!(got, y.values);

    // bool→float(in0) * in1, [3, 4].
    let (a, b, y) = (
        fixture("dtypes.mul_bool_float.in0"),
        fixture("dtypes.mul_bool_float.in1"),
        fixture("dtypes.mul_bool_float.out0"),
    );
    let got =
        run_one(&Mul, &[("a", &a.shape, &a.values), ("b", &b.shape, &b.values)], vec![], &y.shape);
    assert_eq!(got, y.values);
}

#[test]
fn add_and_mul_match_plain_loops_on_odd_shapes() {
    for shape in [&[1][..], &[7], &[5, 3, 7], &[300], &[2, 1, 129]] {
        let len: usize = shape.iter().product();
        let (a, b) = (values(len, 1), values(len, 2));
        let ins = [("a", shape, a.as_slice()), ("b", shape, b.as_slice())];
        let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        let product: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
        // One rounding of the exact result: the bits must match.
        assert_eq!(run_one(&Add, &ins, vec![], shape), sum, "add {shape:?}");
        assert_eq!(run_one(&Mul, &ins, vec![], shape), product, "mul {shape:?}");
    }
}

#[test]
fn sigmoid_matches_executorch_and_plain_loops() {
    let (x, y) = (fixture("unary.sigmoid.in0"), fixture("unary.sigmoid.out0"));
    assert_eq!(x.shape, [4, 8]);
    let got = run_one(&Sigmoid, &[("x", &x.shape, &x.values)], vec![], &y.shape);
    assert_close("sigmoid fixture", &got, &f64s(&y.values), 1e-6);

    for shape in [&[1][..], &[7], &[3, 5, 7], &[257]] {
        let len: usize = shape.iter().product();
        let x: Vec<f32> = values(len, 3).iter().map(|v| v * 4.0).collect();
        let want: Vec<f64> = x.iter().map(|&v| 1.0 / (1.0 + (-f64::from(v)).exp())).collect();
        let got = run_one(&Sigmoid, &[("x", shape, &x)], vec![], shape);
        assert_close(&format!("sigmoid {shape:?}"), &got, &want, 2e-7);
    }
}

/// `w` (`[rows, cols]`, row-major) transposed.
fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols).map(|i| w[(i % rows) * cols + i / rows]).collect()
}

/// Runs `MatMul` with `layout` on `x` `[m, k]` and weight `w` in that layout.
fn matmul(layout: WeightLayout, x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let w_shape = match layout {
        WeightLayout::KN => [k, n],
        WeightLayout::NK => [n, k],
    };
    let op = MatMul { weight: layout, bias: false };
    run_one(&op, &[("x", &[m, k], x)], vec![f32_const("w", &w_shape, w)], &[m, n])
}

#[test]
fn matmul_matches_executorch_fixtures() {
    // mm: [3, 5] · [5, 4], the weight as given and as a linear layer's transposed weight.
    let (a, b, y) = (fixture("matmul.mm.in0"), fixture("matmul.mm.in1"), fixture("matmul.mm.out0"));
    assert_eq!((a.shape.as_slice(), b.shape.as_slice()), (&[3, 5][..], &[5, 4][..]));
    let want = f64s(&y.values);
    assert_close("mm", &matmul(WeightLayout::KN, &a.values, &b.values, 3, 5, 4), &want, 1e-6);
    let bt = transpose(&b.values, 5, 4);
    assert_close("mm, [n, k]", &matmul(WeightLayout::NK, &a.values, &bt, 3, 5, 4), &want, 1e-6);

    // matmul_vec: [3, 5] · [5] is the matmul with n = 1.
    let (a, b, y) = (
        fixture("matmul.matmul_vec.in0"),
        fixture("matmul.matmul_vec.in1"),
        fixture("matmul.matmul_vec.out0"),
    );
    assert_eq!((a.shape.as_slice(), b.shape.as_slice()), (&[3, 5][..], &[5][..]));
    let got = matmul(WeightLayout::KN, &a.values, &b.values, 3, 5, 1);
    assert_close("matmul_vec", &got, &f64s(&y.values), 1e-6);

    // matmul_broadcast: [2, 1, 3, 5] · [3, 5, 2] → [2, 3, 3, 2]; out[i, j] = a[i] · b[j], each
    // a [3, 5] · [5, 2] matmul.
    let (a, b, y) = (
        fixture("matmul.matmul_broadcast.in0"),
        fixture("matmul.matmul_broadcast.in1"),
        fixture("matmul.matmul_broadcast.out0"),
    );
    assert_eq!((a.shape.as_slice(), b.shape.as_slice()), (&[2, 1, 3, 5][..], &[3, 5, 2][..]));
    for i in 0..2 {
        for j in 0..3 {
            let got = matmul(
                WeightLayout::KN,
                &a.values[i * 15..][..15],
                &b.values[j * 10..][..10],
                3,
                5,
                2,
            );
            let want = f64s(&y.values[(i * 3 + j) * 6..][..6]);
            assert_close(&format!("matmul_broadcast [{i}, {j}]"), &got, &want, 1e-6);
        }
    }
}

#[test]
fn matmul_then_add_matches_executorch_addmm() {
    // addmm(bias [4], x [3, 5], w [5, 4], beta = 0.5, alpha = 2.0) (tools/fixtures/
    // export_ops.py) = 0.5·bias + x · 2w: scaling by powers of two is exact, so the weight goes
    // in as 2w and the bias, expanded to [3, 4], as 0.5·bias, added by a fused Add.
    let (bias, x, w, y) = (
        fixture("matmul.addmm.in0"),
        fixture("matmul.addmm.in1"),
        fixture("matmul.addmm.in2"),
        fixture("matmul.addmm.out0"),
    );
    let bias: Vec<f32> =
        expand(&bias.values, &bias.shape, &[3, 4]).iter().map(|b| 0.5 * b).collect();
    let w: Vec<f32> = w.values.iter().map(|v| 2.0 * v).collect();
    let mm = MatMul::default();
    let nodes = [
        Node {
            name: "matmul".into(),
            op: &mm,
            inputs: vec![f32_tensor("x", &[3, 5])],
            consts: vec![f32_const("w", &[5, 4], &w)],
            outputs: vec![f32_tensor("t", &[3, 4])],
        },
        Node {
            name: "bias".into(),
            op: &Add,
            inputs: vec![f32_tensor("t", &[3, 4]), f32_tensor("bias", &[3, 4])],
            consts: vec![],
            outputs: vec![f32_tensor("y", &[3, 4])],
        },
    ];
    let fused = fuse(&nodes).unwrap();
    let input = input_buffer(&fused, &[("x", &x.values), ("bias", &bias)]);
    let mut device = Device::for_fused(&fused, input).unwrap();
    assert_eq!(device.run(&fused.txn).unwrap().launches, 2);
    assert_close("addmm", &output(&device, &fused, "y"), &f64s(&y.values), 1e-6);
}

/// `x · w` (`[m, k]` · `[k, n]`) in f64.
fn matmul_loops(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] =
                (0..k).map(|p| f64::from(x[i * k + p]) * f64::from(w[p * n + j])).sum();
        }
    }
    out
}

#[test]
fn matmul_matches_plain_loops_on_odd_shapes() {
    for (m, k, n) in [(1, 1, 1), (7, 3, 5), (1, 9, 13), (17, 33, 9)] {
        let (x, w) = (values(m * k, 4), values(k * n, 5));
        let want = matmul_loops(&x, &w, m, k, n);
        let tol = 1e-6 * k as f64;
        let got = matmul(WeightLayout::KN, &x, &w, m, k, n);
        assert_close(&format!("matmul {m}x{k}x{n}"), &got, &want, tol);
        let got = matmul(WeightLayout::NK, &x, &transpose(&w, k, n), m, k, n);
        assert_close(&format!("matmul [n, k] {m}x{k}x{n}"), &got, &want, tol);
    }
}

#[test]
fn fused_matmul_add_sigmoid_matches_plain_loops() {
    let (m, k, n) = (5, 7, 3);
    let (x, w, bias) = (values(m * k, 6), values(k * n, 7), values(m * n, 8));
    let mm = MatMul { weight: WeightLayout::NK, bias: false };
    let nodes = [
        Node {
            name: "linear".into(),
            op: &mm,
            inputs: vec![f32_tensor("x", &[m, k])],
            consts: vec![f32_const("w", &[n, k], &transpose(&w, k, n))],
            outputs: vec![f32_tensor("t", &[m, n])],
        },
        Node {
            name: "bias".into(),
            op: &Add,
            inputs: vec![f32_tensor("t", &[m, n]), f32_tensor("bias", &[m, n])],
            consts: vec![],
            outputs: vec![f32_tensor("s", &[m, n])],
        },
        Node {
            name: "sigmoid".into(),
            op: &Sigmoid,
            inputs: vec![f32_tensor("s", &[m, n])],
            consts: vec![],
            outputs: vec![f32_tensor("y", &[m, n])],
        },
    ];
    let fused = fuse(&nodes).unwrap();
    let input = input_buffer(&fused, &[("x", &x), ("bias", &bias)]);
    let mut device = Device::for_fused(&fused, input).unwrap();
    let summary = device.run(&fused.txn).unwrap();
    // 3 + 3 + 2 DDR_PATCH ops and 3 launches.
    assert_eq!((summary.ops, summary.launches), (11, 3));
    let want: Vec<f64> = matmul_loops(&x, &w, m, k, n)
        .iter()
        .zip(&bias)
        .map(|(t, &b)| 1.0 / (1.0 + (-(t + f64::from(b))).exp()))
        .collect();
    assert_close("linear → add → sigmoid", &output(&device, &fused, "y"), &want, 1e-6);
    // The intermediates went through the scratch buffer, at the offsets fusion gave them.
    let scratch = |name: &str| {
        let t = fused.tensors.iter().find(|t| t.name == name).unwrap();
        assert_eq!(t.buffer, OpArgType::ScratchPad, "{name}");
        floats(&device.buffer(OpArgType::ScratchPad)[t.offset as usize..][..t.size as usize])
    };
    let t = matmul_loops(&x, &w, m, k, n);
    assert_close("linear", &scratch("t"), &t, 1e-6);
    let s: Vec<f64> = t.iter().zip(&bias).map(|(t, &b)| t + f64::from(b)).collect();
    assert_close("linear → add", &scratch("s"), &s, 1e-6);
}

#[test]
fn transactions_patch_each_argument_into_its_register_then_launch() {
    let t = |name: &str| f32_tensor(name, &[3, 7]);
    let bytes = Add.transaction_bin(&[t("a"), t("b")], &[t("y")]).unwrap();
    let txn = Txn::parse(&bytes).unwrap();
    // a at kernel argument 1 + 0, b after it (21 floats), y at argument 0.
    assert_eq!(patches_of(&txn), [(1, 0), (1, 84), (0, 0)]);
    let regs: Vec<u64> = txn
        .ops
        .iter()
        .filter_map(|op| match &op.kind {
            OpKind::Custom { payload: CustomPayload::DdrPatch(p), .. } => Some(p.regaddr()),
            _ => None,
        })
        .collect();
    assert_eq!(regs, [0x1D004, 0x1D024, 0x1D044]);
    let OpKind::Custom { payload: CustomPayload::Launch(l), .. } = &txn.ops[3].kind else {
        panic!("op 3 is not a launch: {:?}", txn.ops[3].kind);
    };
    assert_eq!(
        (l.kernel, l.dtype, l.dims.as_slice()),
        (LaunchKernel::Add, 6, &[2, 3, 7, 2, 3, 7, 2, 3, 7][..])
    );
    assert_eq!(l.arg_regs, [arg_reg(0), arg_reg(1), arg_reg(2)]);
    assert_eq!(txn.ops.len(), 4);
    assert!(Add.super_kernel_params(&[t("a"), t("b")], &[t("y")]).unwrap().is_empty());

    let maps = MatMul::default()
        .buffer_reqs(&[f32_tensor("x", &[2, 3])], &[f32_tensor("y", &[2, 5])])
        .unwrap();
    let summary: Vec<_> = maps
        .iter()
        .map(|m| (m.arg_type, m.xrt_arg_idx, m.onnx_arg_idx, m.offset, m.size))
        .collect();
    assert_eq!(
        summary,
        [
            (OpArgType::Input, 1, 0, 0, 24),
            (OpArgType::ConstInput, 2, 1, 0, 60),
            (OpArgType::Output, 0, 2, 0, 40),
        ]
    );
    let bytes =
        MatMul::default().transaction_bin(&[f32_tensor("x", &[2, 3])], &[f32_tensor("y", &[2, 5])]);
    let txn = Txn::parse(&bytes.unwrap()).unwrap();
    assert_eq!(patches_of(&txn), [(1, 0), (2, 0), (0, 0)]);
    let OpKind::Custom { payload: CustomPayload::Launch(l), .. } = &txn.ops[3].kind else {
        panic!("op 3 is not a launch");
    };
    assert_eq!(
        (l.kernel, l.dims.as_slice()),
        (LaunchKernel::MatMul, &[2, 2, 3, 2, 3, 5, 2, 2, 5][..])
    );
}

/// The error of fusing `op` as one node with these tensors and constants.
fn fuse_err(
    op: &dyn NpuOp,
    inputs: Vec<TensorDesc>,
    consts: Vec<ConstTensor>,
    outputs: Vec<TensorDesc>,
) -> Error {
    let nodes = [Node { name: "node".into(), op, inputs, consts, outputs }];
    fuse(&nodes).unwrap_err()
}

#[test]
fn unsupported_shapes_and_types_are_errors_naming_operator_and_shape() {
    let t = f32_tensor;
    let err = fuse_err(&Add, vec![t("a", &[3, 4]), t("b", &[3])], vec![], vec![t("y", &[3, 4])]);
    assert!(
        matches!(&err, Error::UnsupportedShape { op: "add", shapes, .. } if *shapes == [vec![3, 4], vec![3], vec![3, 4]]),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("add: cannot run on shapes [[3, 4], [3], [3, 4]]"),
        "{err}"
    );
    assert!(err.to_string().contains("do not broadcast"), "{err}");
    // They broadcast, but not to the output's shape.
    let err = fuse_err(&Add, vec![t("a", &[3, 4]), t("b", &[4])], vec![], vec![t("y", &[4, 4])]);
    assert!(err.to_string().contains("broadcast to [3, 4], not the output's shape"), "{err}");

    let err = fuse_err(&Mul, vec![t("a", &[5])], vec![], vec![t("y", &[5])]);
    assert!(
        matches!(&err, Error::UnsupportedShape { op: "mul", reason, .. } if reason.contains("takes 2 inputs, not 1")),
        "{err}"
    );

    let err = fuse_err(&Sigmoid, vec![t("x", &[0, 3])], vec![], vec![t("y", &[0, 3])]);
    assert!(
        matches!(&err, Error::UnsupportedShape { op: "sigmoid", reason, .. } if reason.contains("no elements")),
        "{err}"
    );

    let half = TensorDesc { name: "x".into(), shape: vec![4], dtype: "float16".into() };
    let err = fuse_err(&Sigmoid, vec![half], vec![], vec![t("y", &[4])]);
    assert!(
        matches!(&err, Error::UnsupportedDtype { op: "sigmoid", tensor, dtype } if tensor == "x" && dtype == "float16"),
        "{err}"
    );
    assert_eq!(err.to_string(), "sigmoid: tensor x is float16, but the operator runs only float32");

    // Fusion refuses a const the arg map does not count; the operator refuses it too.
    let c = f32_const("c", &[2], &[1.0, 2.0]);
    let err =
        Add.initialize_const_params(&mut ConstBufferIo::new("add", &mut []), &[c]).unwrap_err();
    assert!(
        matches!(&err, Error::UnsupportedShape { op: "add", shapes, reason } if *shapes == [vec![2]] && reason.contains("takes 0 constant inputs, not 1")),
        "{err}"
    );

    let mm = MatMul::default();
    let w = || vec![f32_const("w", &[3, 2], &[0.0; 6])];
    let err = fuse_err(&mm, vec![t("x", &[1, 4, 3])], w(), vec![t("y", &[4, 2])]);
    assert!(
        matches!(&err, Error::UnsupportedShape { op: "matmul", shapes, reason } if *shapes == [vec![1, 4, 3], vec![4, 2]] && reason.contains("two-dimensional")),
        "{err}"
    );
    let err = fuse_err(&mm, vec![t("x", &[4, 3])], w(), vec![t("y", &[5, 2])]);
    assert!(
        matches!(&err, Error::UnsupportedShape { op: "matmul", reason, .. } if reason.contains("differ in m")),
        "{err}"
    );
    let err = fuse_err(&mm, vec![t("x", &[4, 0])], w(), vec![t("y", &[4, 2])]);
    assert!(
        matches!(&err, Error::UnsupportedShape { op: "matmul", reason, .. } if reason.contains("no elements")),
        "{err}"
    );
    // A weight that does not fill k·n floats.
    let err = fuse_err(
        &mm,
        vec![t("x", &[4, 3])],
        vec![f32_const("w", &[2, 2], &[0.0; 4])],
        vec![t("y", &[4, 2])],
    );
    assert!(
        matches!(&err, Error::UnsupportedShape { op: "matmul", shapes, reason } if *shapes == [vec![2, 2]] && reason.contains("take 16 bytes, but the node's tensors imply 24")),
        "{err}"
    );
    // Without its weight, fusion refuses the arg map; the operator refuses it too.
    let err = fuse_err(&mm, vec![t("x", &[4, 3])], vec![], vec![t("y", &[4, 2])]);
    assert!(matches!(err, Error::OnnxArgOutOfRange { arg: 2, onnx_arg_idx: 2, .. }), "{err}");
    let err =
        mm.initialize_const_params(&mut ConstBufferIo::new("mm", &mut [0; 24]), &[]).unwrap_err();
    assert!(
        matches!(&err, Error::UnsupportedShape { op: "matmul", reason, .. } if reason.contains("takes 1 constant inputs, not 0")),
        "{err}"
    );
    let mut int_w = w();
    int_w[0].desc.dtype = "int32".into();
    let err = fuse_err(&mm, vec![t("x", &[4, 3])], int_w, vec![t("y", &[4, 2])]);
    assert!(
        matches!(&err, Error::UnsupportedDtype { op: "matmul", tensor, .. } if tensor == "w"),
        "{err}"
    );
}
