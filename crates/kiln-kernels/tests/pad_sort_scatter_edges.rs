//! Edge cases of the pad / topk / scatter / movement kernels that the PyTorch-computed cases
//! cannot express: extreme argument values from a hostile program must give an error, never a
//! panic or an out-of-bounds write; topk's tie order (unspecified in PyTorch) is checked
//! against an independent rule (indices select the values, equal values keep input order).

use kiln_kernels::{
    find_kernel, Arg, Capacity, ErrorKind, KernelContext, KernelError, Out, Shape, TensorMut,
    TensorRef,
};

fn call<'x>(
    op: &'static str,
    args: &[Arg<'x>],
    outs: &mut [Out<'_, 'x>],
) -> Result<(), KernelError> {
    let def = find_kernel(op).unwrap_or_else(|| panic!("{op} not registered"));
    let mut ctx = KernelContext::new(def.name);
    ctx.check_arity(def, args.len())?;
    (def.run)(&mut ctx, args, outs)
}

/// The kind of error `r` holds (the variant's name); panics when `r` is `Ok`.
fn kind(r: Result<(), KernelError>) -> &'static str {
    match *r.expect_err("expected an error").kind {
        ErrorKind::Arity { .. } => "Arity",
        ErrorKind::ArgType { .. } => "ArgType",
        ErrorKind::DType { .. } => "DType",
        ErrorKind::Shape { .. } => "Shape",
        ErrorKind::Invalid { .. } => "Invalid",
        ErrorKind::Tensor { .. } => "Tensor",
        ref other => panic!("an error kind this test does not know: {other:?}"),
    }
}

/// A bounded f32 output of `rank` dims over `store`.
fn bounded<'a>(sizes: &[usize], store: &'a mut [f32]) -> TensorMut<'a> {
    let cap = store.len();
    TensorMut::new(
        kiln_kernels::DType::Float,
        Shape::contiguous(sizes).unwrap(),
        Capacity::Bound(cap),
        bytemuck::cast_slice_mut(store),
    )
    .unwrap()
}

#[test]
fn extreme_pads_are_errors() {
    let data = [1.0f32, 2.0, 3.0, 4.0];
    let x = TensorRef::from_slice(&[1, 4], &data).unwrap();
    for pad in
        [vec![i64::MIN, i64::MAX], vec![i64::MAX, i64::MAX], vec![i64::MIN, 0], vec![1 << 40, 0]]
    {
        for op in [
            "aten::constant_pad_nd.out",
            "aten::replication_pad1d.out",
            "aten::reflection_pad1d.out",
        ] {
            let mut store = vec![0f32; 16];
            let mut outs = [Out::Tensor(bounded(&[1, 4], &mut store))];
            let r = if op == "aten::constant_pad_nd.out" {
                call(
                    op,
                    &[
                        Arg::Tensor(x),
                        Arg::IntList(&pad),
                        Arg::Double(0.0),
                        Arg::Output,
                        Arg::Output,
                    ],
                    &mut outs,
                )
            } else {
                call(op, &[Arg::Tensor(x), Arg::IntList(&pad), Arg::Output, Arg::Output], &mut outs)
            };
            // i64::MIN + i64::MAX + 4 = 3 is a legal size for constant/replication padding: the
            // result must then be the PyTorch one (all fill / all edge values), never a panic.
            if let Ok(()) = r {
                let Out::Tensor(t) = &outs[0] else { unreachable!() };
                assert_eq!(t.sizes(), &[1, 3], "{op} {pad:?}");
                let v = t.as_ref().as_slice::<f32>().unwrap().to_vec();
                let want =
                    if op == "aten::constant_pad_nd.out" { vec![0.0; 3] } else { vec![4.0; 3] };
                assert_eq!(v, want, "{op} {pad:?}");
            }
        }
    }
}

#[test]
fn hostile_movement_arguments_are_errors() {
    let data: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let x = TensorRef::from_slice(&[2, 3, 4], &data).unwrap();
    let mut store = vec![0f32; 64];
    // Rolls by extreme shifts wrap like PyTorch (shift mod size).
    let mut outs = [Out::Tensor(bounded(&[2, 3, 4], &mut store))];
    call(
        "aten::roll.out",
        &[Arg::Tensor(x), Arg::IntList(&[i64::MIN]), Arg::IntList(&[2]), Arg::Output, Arg::Output],
        &mut outs,
    )
    .unwrap();
    let Out::Tensor(t) = &outs[0] else { unreachable!() };
    // i64::MIN mod 4 == 0: unchanged.
    assert_eq!(t.as_ref().as_slice::<f32>().unwrap(), &data[..]);
    let mut store = vec![0f32; 64];
    let mut outs = [Out::Tensor(bounded(&[2, 3, 4], &mut store))];
    let r = call(
        "aten::pixel_unshuffle.out",
        &[Arg::Tensor(x), Arg::Int(i64::MAX), Arg::Output, Arg::Output],
        &mut outs,
    );
    assert_eq!(kind(r), "Invalid");
    let empty = TensorRef::from_slice::<f32>(&[1, 1, 0, 0], &[]).unwrap();
    let mut store = vec![0f32; 4];
    let mut outs = [Out::Tensor(bounded(&[1, 1, 0, 0], &mut store))];
    // Factor 2^32: its square overflows; an error, not a panic.
    let r = call(
        "aten::pixel_unshuffle.out",
        &[Arg::Tensor(empty), Arg::Int(1 << 32), Arg::Output, Arg::Output],
        &mut outs,
    );
    assert_eq!(kind(r), "Invalid");
    // The last one's output does not fit the out's capacity: a tensor error.
    for (size, stride, off, want) in [
        (vec![2i64, 2], vec![i64::MAX, 1], 0i64, "Invalid"),
        (vec![2, 2], vec![1, 1], i64::MAX, "Invalid"),
        (vec![2, 2], vec![-1, 1], 0, "Invalid"),
        (vec![i64::MAX, 2], vec![0, 0], 0, "Tensor"),
    ] {
        let mut store = vec![0f32; 64];
        let mut outs = [Out::Tensor(bounded(&[2, 2], &mut store))];
        let r = call(
            "aten::as_strided_copy.out",
            &[
                Arg::Tensor(x),
                Arg::IntList(&size),
                Arg::IntList(&stride),
                Arg::Int(off),
                Arg::Output,
                Arg::Output,
            ],
            &mut outs,
        );
        assert_eq!(kind(r), want, "as_strided {size:?} {stride:?} {off}");
    }
    // A huge repeat count cannot allocate past the out's capacity.
    let reps = [i64::MAX / 2, i64::MAX / 2];
    let reps = TensorRef::from_slice(&[2], &reps).unwrap();
    let mut istore = vec![0i64; 8];
    let mut outs = [Out::Tensor(
        TensorMut::new(
            kiln_kernels::DType::Long,
            Shape::contiguous(&[8]).unwrap(),
            Capacity::Bound(8),
            bytemuck::cast_slice_mut(&mut istore),
        )
        .unwrap(),
    )];
    let r = call(
        "aten::repeat_interleave.Tensor_out",
        &[Arg::Tensor(reps), Arg::None, Arg::Output, Arg::Output],
        &mut outs,
    );
    assert_eq!(kind(r), "Tensor");
}

#[test]
fn et_copy_index_huge_index_is_an_error() {
    let row = [1.0f32, 2.0];
    let from = TensorRef::from_slice(&[2], &row).unwrap();
    for index in [i64::MAX, 1 << 40] {
        let mut store = vec![0f32; 8];
        let mut outs = [Out::Tensor(bounded(&[1, 2], &mut store))];
        let r = call(
            "executorch_prim::et_copy_index.tensor",
            &[Arg::Output, Arg::Tensor(from), Arg::Int(index)],
            &mut outs,
        );
        assert_eq!(kind(r), "Tensor", "index {index}");
    }
}

#[test]
fn topk_ties_keep_input_order_and_indices_select_values() {
    let data = [3.0f32, 1.0, 3.0, f32::NAN, 2.0, 3.0, f32::NAN, 1.0];
    let x = TensorRef::from_slice(&[8], &data).unwrap();
    for (largest, k) in [(true, 5usize), (false, 8)] {
        let mut vals = [0f32; 8];
        let mut idx = [0i64; 8];
        let v = TensorMut::from_slice(&[k], &mut vals[..k]).unwrap();
        let i = TensorMut::from_slice(&[k], &mut idx[..k]).unwrap();
        let mut outs = [Out::Tensor(v), Out::Tensor(i)];
        call(
            "aten::topk.values",
            &[
                Arg::Tensor(x),
                Arg::Int(k as i64),
                Arg::Int(0),
                Arg::Bool(largest),
                Arg::Bool(true),
                Arg::Output,
                Arg::Output,
                Arg::Output,
            ],
            &mut outs,
        )
        .unwrap();
        let (vals, idx) = (&vals[..k], &idx[..k]);
        for (v, &i) in vals.iter().zip(idx) {
            let src = data[i as usize];
            assert!(src == *v || src.is_nan() && v.is_nan(), "index {i} does not hold {v}");
        }
        // Independent rule: order by value (NaN largest), ties by ascending index.
        let key = |i: i64| {
            let v = data[i as usize];
            (if v.is_nan() { f32::INFINITY } else { v }, v.is_nan())
        };
        for w in idx.windows(2) {
            let (a, b) = (key(w[0]), key(w[1]));
            let ordered = if largest { (a.1, a.0) >= (b.1, b.0) } else { (a.1, a.0) <= (b.1, b.0) };
            assert!(ordered, "{idx:?} not ordered (largest={largest})");
            if a == b {
                assert!(w[0] < w[1], "tie order {idx:?}");
            }
        }
    }
}
