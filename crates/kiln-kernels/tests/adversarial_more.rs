//! The norm-stats, sampling, distance, quantization and random kernels never panic: every
//! combination of hostile arguments below (empty and odd shapes, non-finite and extreme
//! scalars, wrong dtypes, extreme quant ranges) returns `Ok` or an error naming the
//! operator.

use kiln_kernels::{
    find_kernel, Arg, Capacity, DType, KernelContext, Out, Shape, TensorMut, TensorRef,
};

/// An out tensor with a generous dynamic bound so resizes succeed when sizes are sane.
struct OutBuf {
    dtype: DType,
    sizes: Vec<usize>,
    store: Vec<u64>,
}

impl OutBuf {
    fn new(dtype: DType, sizes: &[usize]) -> OutBuf {
        OutBuf { dtype, sizes: sizes.to_vec(), store: vec![0; 4096] }
    }
    fn view(&mut self) -> TensorMut<'_> {
        let shape = Shape::contiguous(&self.sizes).unwrap();
        let cap = 4096 * 8 / self.dtype.size();
        TensorMut::new(
            self.dtype,
            shape,
            Capacity::Bound(cap),
            bytemuck::cast_slice_mut(&mut self.store),
        )
        .unwrap()
    }
}

fn call(op: &str, args: &[Arg<'_>], outs: &mut [OutBuf]) {
    let def = find_kernel(op).unwrap_or_else(|| panic!("{op} not registered"));
    let mut views: Vec<Out<'_, '_>> = outs.iter_mut().map(|o| Out::Tensor(o.view())).collect();
    let mut all = args.to_vec();
    while all.len() < def.arity as usize {
        all.push(Arg::Output);
    }
    let mut ctx = KernelContext::new(def.name);
    if let Err(e) = (def.run)(&mut ctx, &all, &mut views) {
        assert_eq!(e.op, def.name);
    }
}

fn f32s(sizes: &[usize], data: &[f32]) -> TensorRef<'static> {
    let v: &'static [f32] = Box::leak(data.to_vec().into_boxed_slice());
    TensorRef::from_slice(sizes, v).unwrap()
}

fn filled(sizes: &[usize], v: f32) -> TensorRef<'static> {
    f32s(sizes, &vec![v; sizes.iter().product()])
}

fn ints<T: kiln_kernels::element::Element>(sizes: &[usize], data: &[T]) -> TensorRef<'static> {
    let v: &'static [T] = Box::leak(data.to_vec().into_boxed_slice());
    TensorRef::from_slice(sizes, v).unwrap()
}

const SPECIAL: [f64; 8] = [0.0, -1.0, 1e-300, 1e300, f64::NAN, f64::INFINITY, -f64::INFINITY, 0.5];

#[test]
fn norm_stats_and_sampling_survive_hostile_arguments() {
    let shapes: [&[usize]; 5] = [&[0, 3, 2, 2], &[2, 0, 2, 2], &[1, 1, 1, 1], &[2, 3], &[3]];
    for s in shapes {
        let x = filled(s, 1.0);
        for eps in SPECIAL {
            let mut outs = [
                OutBuf::new(DType::Float, s),
                OutBuf::new(DType::Float, &[1]),
                OutBuf::new(DType::Float, &[1]),
            ];
            call(
                "aten::_native_batch_norm_legit.no_stats_out",
                &[
                    Arg::Tensor(x),
                    Arg::None,
                    Arg::None,
                    Arg::Bool(true),
                    Arg::Double(0.1),
                    Arg::Double(eps),
                ],
                &mut outs,
            );
            let c = filled(&[3], 1.0);
            call(
                "aten::_native_batch_norm_legit.out",
                &[
                    Arg::Tensor(x),
                    Arg::None,
                    Arg::None,
                    Arg::Tensor(c),
                    Arg::Tensor(c),
                    Arg::Bool(false),
                    Arg::Double(0.1),
                    Arg::Double(eps),
                ],
                &mut outs,
            );
        }
    }
    let img = filled(&[1, 2, 3, 4], 0.5);
    for size in [[0i64, 1], [-1, 2], [1, 1], [7, 1], [i64::MAX, 2]] {
        for sc in SPECIAL {
            let sz: &'static [i64] = Box::leak(Box::new(size));
            let mut outs = [OutBuf::new(DType::Float, &[1, 2, 1, 1])];
            call(
                "aten::_upsample_bilinear2d_aa.out",
                &[
                    Arg::Tensor(img),
                    Arg::IntList(sz),
                    Arg::Bool(false),
                    Arg::Double(sc),
                    Arg::Double(sc),
                ],
                &mut outs,
            );
        }
    }
    for g in SPECIAL {
        let grid = filled(&[1, 2, 3, 2], g as f32);
        for mode in [-1, 0, 1, 2, 3] {
            for pad in [-1, 0, 1, 2, 3] {
                for align in [false, true] {
                    let mut outs = [OutBuf::new(DType::Float, &[1, 2, 2, 3])];
                    call(
                        "aten::grid_sampler_2d.out",
                        &[
                            Arg::Tensor(img),
                            Arg::Tensor(grid),
                            Arg::Int(mode),
                            Arg::Int(pad),
                            Arg::Bool(align),
                        ],
                        &mut outs,
                    );
                }
            }
        }
        // One-pixel and empty inputs.
        for s in [[1usize, 1, 1, 1], [1, 1, 0, 3], [0, 1, 2, 2]] {
            let x = filled(&s, 1.0);
            let mut outs = [OutBuf::new(DType::Float, &[1, 1, 2, 3])];
            call(
                "aten::grid_sampler_2d.out",
                &[Arg::Tensor(x), Arg::Tensor(grid), Arg::Int(2), Arg::Int(2), Arg::Bool(true)],
                &mut outs,
            );
        }
    }
}

#[test]
fn distance_quant_and_random_survive_hostile_arguments() {
    for p in SPECIAL {
        for (a, b) in [
            (&[0usize, 3][..], &[2usize, 3][..]),
            (&[2, 0], &[3, 0]),
            (&[4, 1, 2, 3], &[5, 2, 3]),
            (&[3], &[3]),
        ] {
            let mut outs = [OutBuf::new(DType::Float, &[1])];
            call(
                "aten::_cdist_forward.out",
                &[
                    Arg::Tensor(filled(a, 2.0)),
                    Arg::Tensor(filled(b, f32::NAN)),
                    Arg::Double(p),
                    Arg::Int(7),
                ],
                &mut outs,
            );
            call(
                "aten::_pdist_forward.out",
                &[Arg::Tensor(filled(a, 1.0)), Arg::Double(p)],
                &mut outs,
            );
        }
    }
    for (lo, hi) in
        [(i64::MIN, i64::MAX), (i32::MIN as i64, i32::MAX as i64), (5, 5), (10, -10), (-128, 127)]
    {
        for v in SPECIAL {
            let x = filled(&[2, 3], v as f32);
            let mut outs = [OutBuf::new(DType::Double, &[1]), OutBuf::new(DType::Long, &[1])];
            call(
                "quantized_decomposed::choose_qparams.Tensor_out",
                &[Arg::Tensor(x), Arg::Int(lo), Arg::Int(hi), Arg::Double(v), Arg::Int(1)],
                &mut outs,
            );
            call(
                "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
                &[Arg::Tensor(x), Arg::Int(1)],
                &mut outs,
            );
            let s = ints::<f64>(&[2, 1], &[v, 0.0]);
            let z = ints::<i64>(&[2, 1], &[i64::MAX, i64::MIN]);
            let mut q = [OutBuf::new(DType::Char, &[2, 3])];
            call(
                "quantized_decomposed::quantize_per_token.out",
                &[
                    Arg::Tensor(x),
                    Arg::Tensor(s),
                    Arg::Tensor(z),
                    Arg::Int(lo),
                    Arg::Int(hi),
                    Arg::Int(1),
                ],
                &mut q,
            );
            let qi = ints::<i8>(&[2, 3], &[-128, 127, 0, 1, 2, 3]);
            let mut d = [OutBuf::new(DType::Float, &[2, 3])];
            call(
                "quantized_decomposed::dequantize_per_token.out",
                &[
                    Arg::Tensor(qi),
                    Arg::Tensor(s),
                    Arg::Tensor(z),
                    Arg::Int(lo),
                    Arg::Int(hi),
                    Arg::Int(1),
                    Arg::Int(6),
                ],
                &mut d,
            );
            let qu = ints::<u8>(&[2, 3], &[0, 255, 3, 4, 5, 6]);
            let mut o = [OutBuf::new(DType::Byte, &[2, 3])];
            call(
                "quantized_decomposed::add.out",
                &[
                    Arg::Tensor(qu),
                    Arg::Double(v),
                    Arg::Int(lo),
                    Arg::Int(0),
                    Arg::Int(255),
                    Arg::Tensor(qu),
                    Arg::Double(v),
                    Arg::Int(hi),
                    Arg::Int(0),
                    Arg::Int(255),
                    Arg::Double(v),
                    Arg::Int(lo),
                    Arg::Int(lo),
                    Arg::Int(hi),
                ],
                &mut o,
            );
        }
    }
    let w = ints::<u8>(&[3, 2], &[255, 0, 17, 34, 51, 68]);
    let wi = ints::<i8>(&[3, 2], &[-128, 127, 1, 2, 3, 4]);
    for idx in [i64::MIN, -1, 0, 2, 3, i64::MAX] {
        let ids = ints::<i64>(&[1], &[idx]);
        for scales in
            [filled(&[3], 0.1), filled(&[3, 3], 0.1), filled(&[3, 0], 0.1), filled(&[2], 0.1)]
        {
            for op in [
                "quantized_decomposed::embedding_2bit.out",
                "quantized_decomposed::embedding_4bit.dtype_out",
            ] {
                let mut o = [OutBuf::new(DType::Float, &[1, 4])];
                call(
                    op,
                    &[
                        Arg::Tensor(w),
                        Arg::Tensor(scales),
                        Arg::None,
                        Arg::Int(-8),
                        Arg::Int(7),
                        Arg::Tensor(ids),
                        Arg::Int(6),
                    ],
                    &mut o,
                );
            }
            let mut o = [OutBuf::new(DType::Float, &[1, 1])];
            for x in [filled(&[2, 3], 1.0), filled(&[2, 2], f32::NAN), filled(&[0, 2], 1.0)] {
                call(
                    "quantized_decomposed::mixed_mm.out",
                    &[Arg::Tensor(x), Arg::Tensor(wi), Arg::Tensor(scales), Arg::None],
                    &mut o,
                );
                call(
                    "quantized_decomposed::mixed_linear.out",
                    &[Arg::Tensor(x), Arg::Tensor(wi), Arg::Tensor(scales), Arg::None, Arg::None],
                    &mut o,
                );
            }
        }
    }
    for p in SPECIAL {
        for train in [Arg::None, Arg::Bool(true), Arg::Bool(false)] {
            let mut outs = [OutBuf::new(DType::Float, &[2, 2]), OutBuf::new(DType::Bool, &[2, 2])];
            call(
                "aten::native_dropout.out",
                &[Arg::Tensor(filled(&[2, 2], 1.0)), Arg::Double(p), train],
                &mut outs,
            );
        }
    }
    for size in [vec![], vec![0], vec![-1], vec![i64::MAX, i64::MAX], vec![3, 5]] {
        let sz: &'static [i64] = Box::leak(size.into_boxed_slice());
        for dt in [DType::Float, DType::Half, DType::Int] {
            let mut outs = [OutBuf::new(dt, &[1, 1])];
            call("aten::rand.out", &[Arg::IntList(sz)], &mut outs);
            call("aten::randn.out", &[Arg::IntList(sz)], &mut outs);
        }
    }
}

/// The LLM kernels (`aten::linear.out`, `llama::update_cache.out`, `llama::custom_sdpa.out`)
/// never panic: mismatched ranks and sizes, positions before, at and past the cache, wrong
/// dtypes, masks of any shape, empty tensors.
#[test]
fn llm_kernels_survive_hostile_arguments() {
    let shapes: [&[usize]; 7] =
        [&[1, 3, 2, 4], &[1, 8, 2, 4], &[1, 8, 1, 4], &[2, 3, 2, 4], &[1, 0, 2, 4], &[3, 4], &[]];
    for q in shapes {
        for k in shapes {
            for pos in [-1i64, 0, 5, 7, 8, i64::MAX, i64::MIN] {
                let mut cache = [OutBuf::new(DType::Float, k)];
                call(
                    "llama::update_cache.out",
                    &[Arg::Tensor(filled(q, 1.0)), Arg::Output, Arg::Int(pos), Arg::Output],
                    &mut cache,
                );
                for (mask, causal) in [
                    (Arg::None, true),
                    (Arg::None, false),
                    (Arg::Tensor(filled(&[3, 8], f32::NEG_INFINITY)), false),
                    (Arg::Tensor(filled(&[3, 8], 0.0)), true),
                    (Arg::Tensor(filled(&[2], 0.0)), false),
                    (Arg::Tensor(ints::<i64>(&[3, 8], &[0; 24])), false),
                ] {
                    for scale in [Arg::None, Arg::Double(f64::NAN), Arg::Double(0.0)] {
                        let mut out = [OutBuf::new(DType::Float, &[1, 3, 2, 4])];
                        call(
                            "llama::custom_sdpa.out",
                            &[
                                Arg::Tensor(filled(q, 0.5)),
                                Arg::Tensor(filled(k, 1e30)),
                                Arg::Tensor(filled(k, f32::NAN)),
                                Arg::Int(pos),
                                mask,
                                Arg::Double(0.0),
                                Arg::Bool(causal),
                                scale,
                            ],
                            &mut out,
                        );
                    }
                }
            }
            for bias in [Arg::None, Arg::Tensor(filled(&[4], 1.0)), Arg::Tensor(filled(&[5], 1.0))]
            {
                let mut out = [OutBuf::new(DType::Float, &[1])];
                call(
                    "aten::linear.out",
                    &[Arg::Tensor(filled(q, 1.0)), Arg::Tensor(filled(k, 2.0)), bias],
                    &mut out,
                );
                call(
                    "aten::linear.out",
                    &[
                        Arg::Tensor(filled(q, 1.0)),
                        Arg::Tensor(ints::<i8>(&[4, 4], &[1; 16])),
                        bias,
                    ],
                    &mut out,
                );
            }
        }
    }
}
