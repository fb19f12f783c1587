//! The kiln CPU kernel each launch kernel runs: the ExecuTorch portable operator of
//! `kiln_kernels` (ATen schema, PyTorch semantics), called with the launch's inputs as float32
//! tensors of their shapes, its parameter words decoded into the schema's arguments, and a
//! static output of the launch's output shape (a kernel that computes another shape fails).
//!
//! | kernel | ATen operator |
//! | --- | --- |
//! | ADD, MUL | `add.out` (alpha 1), `mul.out` |
//! | SIGMOID | `sigmoid.out` |
//! | MATMUL | `mm.out`, or with a bias `addmm.out` (beta = alpha = 1) |
//! | CONV2D | `convolution.out` (not transposed) |
//! | BATCH_NORM | `_native_batch_norm_legit_no_training.out` |
//! | CLAMP | `clamp.out`, an infinite bound passed as none; with no bound at all, a copy |
//! | SOFTMAX | `_softmax.out` |
//! | LAYER_NORM | `native_layer_norm.out` (mean and rstd into temporaries) |
//! | TRANSPOSE | `permute_copy.out` |
//! | MAX_POOL2D | `max_pool2d_with_indices.out` (indices into a temporary) |
//! | AVG_POOL2D | `avg_pool2d.out` |
//! | CONCAT | `cat.out` |
//! | MEAN | `mean.out` (no dims: every dim) |
//! | GELU | `gelu.out` (`"none"` or `"tanh"`) |
//! | COPY | `view_copy.out` to the output's shape |
//! | EXPAND | `expand_copy.out` to the output's shape |
//! | BMM | `bmm.out` |
//! | MUL_SCALAR | `mul.Scalar_out` |

use kiln_format::txn::launch::ABSENT;
use kiln_format::txn::LaunchKernel;
use kiln_kernels::{find_kernel, Arg, KernelContext, Out, TensorMut, TensorRef};

/// A launch input: its shape and its elements (as many as the shape holds).
pub(super) struct Input<'a> {
    /// The shape.
    pub sizes: &'a [usize],
    /// The elements, row-major.
    pub data: &'a [f32],
}

/// Outputs a kernel writes besides the one the launch exposes, into temporaries.
enum Extra {
    /// None.
    Nothing,
    /// `int64` indices of the output's shape (max pooling).
    Indices,
    /// Two float32 tensors of this shape (layer norm's mean and rstd; batch norm's `[0]`).
    Stats(Vec<usize>),
}

/// Runs `kernel` on `inputs` with parameter words `params`; returns the output's elements, of
/// shape `out`. Errors are reasons.
pub(super) fn run(
    kernel: LaunchKernel,
    inputs: &[Input<'_>],
    out: &[usize],
    params: &[u64],
) -> Result<Vec<f32>, String> {
    let name = kernel.name();
    let refs: Vec<TensorRef<'_>> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| TensorRef::from_slice(t.sizes, t.data).map_err(|e| format!("input {i}: {e}")))
        .collect::<Result<_, _>>()?;
    let tensor = |i: usize| {
        refs.get(i).copied().map(Arg::Tensor).ok_or_else(|| format!("{name}: no input {i}"))
    };
    let x = tensor(0)?;
    let x_rank = refs.first().map_or(0, TensorRef::rank);
    let out_list: Vec<i64> = ints(out.iter().map(|&d| d as u64))?;
    use LaunchKernel as K;
    match kernel {
        K::Add => {
            let [] = words(kernel, params)?;
            call("aten::add.out", &[x, tensor(1)?, Arg::Int(1)], out, Extra::Nothing)
        }
        K::Mul => {
            let [] = words(kernel, params)?;
            call("aten::mul.out", &[x, tensor(1)?], out, Extra::Nothing)
        }
        K::Sigmoid => {
            let [] = words(kernel, params)?;
            call("aten::sigmoid.out", &[x], out, Extra::Nothing)
        }
        K::MatMul => {
            let [] = words(kernel, params)?;
            match refs.len() {
                2 => call("aten::mm.out", &[x, tensor(1)?], out, Extra::Nothing),
                _ => {
                    let args = [tensor(2)?, x, tensor(1)?, Arg::Int(1), Arg::Int(1)];
                    call("aten::addmm.out", &args, out, Extra::Nothing)
                }
            }
        }
        K::Conv2d => {
            let [sh, sw, ph, pw, dh, dw, groups] = words(kernel, params)?;
            let (s, p, d) = (ints([sh, sw])?, ints([ph, pw])?, ints([dh, dw])?);
            let bias = if refs.len() == 3 { tensor(2)? } else { Arg::None };
            let args = [
                x,
                tensor(1)?,
                bias,
                Arg::IntList(&s),
                Arg::IntList(&p),
                Arg::IntList(&d),
                Arg::Bool(false),
                Arg::IntList(&[0, 0]),
                Arg::Int(int(groups)?),
            ];
            call("aten::convolution.out", &args, out, Extra::Nothing)
        }
        K::BatchNorm => {
            let [eps] = words(kernel, params)?;
            let args = [
                x,
                tensor(1)?,
                tensor(2)?,
                tensor(3)?,
                tensor(4)?,
                Arg::Double(0.1),
                Arg::Double(f64::from_bits(eps)),
            ];
            let name = "aten::_native_batch_norm_legit_no_training.out";
            call(name, &args, out, Extra::Stats(vec![0]))
        }
        K::Clamp => {
            let [min, max] = words(kernel, params)?.map(f64::from_bits);
            let bound = |v: f64, none: f64| if v == none { Arg::None } else { Arg::Double(v) };
            let (lo, hi) = (bound(min, f64::NEG_INFINITY), bound(max, f64::INFINITY));
            if let (Arg::None, Arg::None) = (lo, hi) {
                return copy(inputs, out);
            }
            call("aten::clamp.out", &[x, lo, hi], out, Extra::Nothing)
        }
        K::Softmax => {
            let [dim] = words(kernel, params)?;
            call(
                "aten::_softmax.out",
                &[x, Arg::Int(int(dim)?), Arg::Bool(false)],
                out,
                Extra::Nothing,
            )
        }
        K::LayerNorm => {
            let [d, eps] = words(kernel, params)?;
            let lead = usize::try_from(d)
                .ok()
                .and_then(|d| x_rank.checked_sub(d))
                .ok_or_else(|| format!("{name}: {d} normalized dims of a rank-{x_rank} input"))?;
            let sizes = refs.first().map_or(&[][..], TensorRef::sizes);
            let normalized = ints(sizes.iter().skip(lead).map(|&s| s as u64))?;
            let (weight, bias) = match refs.len() {
                1 => (Arg::None, Arg::None),
                3 => (tensor(1)?, tensor(2)?),
                n => {
                    return Err(format!(
                        "{name}: takes a weight and a bias or neither, not {} of them",
                        n.saturating_sub(1)
                    ))
                }
            };
            let stats: Vec<usize> = sizes
                .iter()
                .take(lead)
                .copied()
                .chain(std::iter::repeat_n(1, x_rank - lead))
                .collect();
            let args =
                [x, Arg::IntList(&normalized), weight, bias, Arg::Double(f64::from_bits(eps))];
            call("aten::native_layer_norm.out", &args, out, Extra::Stats(stats))
        }
        K::Transpose => {
            let perm = ints(params.iter().copied())?;
            call("aten::permute_copy.out", &[x, Arg::IntList(&perm)], out, Extra::Nothing)
        }
        K::MaxPool2d => {
            let [kh, kw, sh, sw, ph, pw, dh, dw, ceil] = words(kernel, params)?;
            let (k, s, p, d) = (ints([kh, kw])?, ints([sh, sw])?, ints([ph, pw])?, ints([dh, dw])?);
            let args = [
                x,
                Arg::IntList(&k),
                Arg::IntList(&s),
                Arg::IntList(&p),
                Arg::IntList(&d),
                Arg::Bool(flag(ceil)?),
            ];
            call("aten::max_pool2d_with_indices.out", &args, out, Extra::Indices)
        }
        K::AvgPool2d => {
            let [kh, kw, sh, sw, ph, pw, ceil, include, divisor] = words(kernel, params)?;
            let (k, s, p) = (ints([kh, kw])?, ints([sh, sw])?, ints([ph, pw])?);
            let divisor = if divisor == ABSENT { Arg::None } else { Arg::Int(divisor as i64) };
            let args = [
                x,
                Arg::IntList(&k),
                Arg::IntList(&s),
                Arg::IntList(&p),
                Arg::Bool(flag(ceil)?),
                Arg::Bool(flag(include)?),
                divisor,
            ];
            call("aten::avg_pool2d.out", &args, out, Extra::Nothing)
        }
        K::Concat => {
            let [dim] = words(kernel, params)?;
            call(
                "aten::cat.out",
                &[Arg::TensorList(&refs), Arg::Int(int(dim)?)],
                out,
                Extra::Nothing,
            )
        }
        K::Mean => {
            let (&keepdim, dims) =
                params.split_first().ok_or_else(|| format!("{name}: no keepdim word"))?;
            let dims = ints(dims.iter().copied())?;
            let args = [x, Arg::IntList(&dims), Arg::Bool(flag(keepdim)?), Arg::None];
            call("aten::mean.out", &args, out, Extra::Nothing)
        }
        K::Gelu => {
            let [tanh] = words(kernel, params)?;
            let approximate = if flag(tanh)? { "tanh" } else { "none" };
            call("aten::gelu.out", &[x, Arg::String(approximate)], out, Extra::Nothing)
        }
        K::Copy => {
            let [] = words(kernel, params)?;
            call("aten::view_copy.out", &[x, Arg::IntList(&out_list)], out, Extra::Nothing)
        }
        K::Expand => {
            let [] = words(kernel, params)?;
            let args = [x, Arg::IntList(&out_list), Arg::Bool(false)];
            call("aten::expand_copy.out", &args, out, Extra::Nothing)
        }
        K::Bmm => {
            let [] = words(kernel, params)?;
            call("aten::bmm.out", &[x, tensor(1)?], out, Extra::Nothing)
        }
        K::MulScalar => {
            let [value] = words(kernel, params)?;
            call(
                "aten::mul.Scalar_out",
                &[x, Arg::Double(f64::from_bits(value))],
                out,
                Extra::Nothing,
            )
        }
    }
}

/// Calls kernel `name` with schema inputs `args` (the out positions and the return value are
/// appended), the output a float32 tensor of shape `out`, and the `extra` outputs.
fn call(
    name: &'static str,
    args: &[Arg<'_>],
    out: &[usize],
    extra: Extra,
) -> Result<Vec<f32>, String> {
    let def = find_kernel(name).ok_or_else(|| format!("kiln has no kernel {name}"))?;
    let arity = usize::from(def.arity);
    let mut all = args.to_vec();
    all.resize(arity.max(args.len()), Arg::Output);
    if all.len() != arity || all.iter().skip(args.len()).any(|a| !matches!(a, Arg::Output)) {
        return Err(format!("{name} takes {arity} arguments, not {} and its outputs", args.len()));
    }
    let numel = |sizes: &[usize]| sizes.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let len = numel(out).ok_or("the output's element count overflows")?;
    let mut values = vec![0f32; len];
    // The extra outputs have at most the output's or an input's elements.
    let (mut indices, mut stats) = (Vec::new(), [Vec::new(), Vec::new()]);
    let stats_shape = match &extra {
        Extra::Nothing => Vec::new(),
        Extra::Indices => {
            indices = vec![0i64; len];
            Vec::new()
        }
        Extra::Stats(shape) => {
            let n = numel(shape).ok_or("the statistics' element count overflows")?;
            stats = [vec![0f32; n], vec![0f32; n]];
            shape.clone()
        }
    };
    let tensor_err = |e: kiln_kernels::TensorError| e.to_string();
    {
        let mut outs =
            vec![Out::Tensor(TensorMut::from_slice(out, &mut values).map_err(tensor_err)?)];
        match extra {
            Extra::Nothing => {}
            Extra::Indices => {
                outs.push(Out::Tensor(
                    TensorMut::from_slice(out, &mut indices).map_err(tensor_err)?,
                ));
            }
            Extra::Stats(_) => {
                for s in &mut stats {
                    outs.push(Out::Tensor(
                        TensorMut::from_slice(&stats_shape, s).map_err(tensor_err)?,
                    ));
                }
            }
        }
        if outs.len() != def.outs.len() {
            return Err(format!("{name} writes {} outputs, not {}", def.outs.len(), outs.len()));
        }
        (def.run)(&mut KernelContext::new(def.name), &all, &mut outs).map_err(|e| e.to_string())?;
    }
    Ok(values)
}

/// The input's elements in the output's shape (CLAMP with no bounds).
fn copy(inputs: &[Input<'_>], out: &[usize]) -> Result<Vec<f32>, String> {
    let x = inputs.first().ok_or("no input")?;
    let len = out.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if len != Some(x.data.len()) {
        return Err(format!("input {:?} and output {out:?} differ", x.sizes));
    }
    Ok(x.data.to_vec())
}

/// Exactly `N` parameter words, or the reason.
fn words<const N: usize>(kernel: LaunchKernel, params: &[u64]) -> Result<[u64; N], String> {
    <[u64; N]>::try_from(params)
        .map_err(|_| format!("{} takes {N} parameter words, not {}", kernel.name(), params.len()))
}

/// A parameter word as an `i64`, or the reason.
fn int(w: u64) -> Result<i64, String> {
    i64::try_from(w).map_err(|_| format!("parameter {w} does not fit i64"))
}

/// Parameter words as `i64`s.
fn ints(ws: impl IntoIterator<Item = u64>) -> Result<Vec<i64>, String> {
    ws.into_iter().map(int).collect()
}

/// A boolean parameter word (0 or 1), or the reason.
fn flag(w: u64) -> Result<bool, String> {
    match w {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(format!("boolean parameter {w} is neither 0 nor 1")),
    }
}
