//! Which program instructions an NPU operator can take, and with what attributes: a kernel
//! call of a supported ExecuTorch operator whose tensors are float32, static and contiguous,
//! whose attributes the operator implements, and whose weights are constants with data in
//! the program.
//!
//! The argument positions are those of the operators' out-variant schemas as ExecuTorch
//! serializes them: every schema argument, the `out` tensors, then the return value.

use kiln_format::pte::model::{TensorModel, ValueModel};
use kiln_format::pte::{ScalarType, ShapeDynamism};

use crate::op::NpuOp;
use crate::ops::{
    Add, AvgPool2d, BatchMatMul, BatchNorm, Clamp, Concat, Conv2d, Expand, Gelu, LayerNorm, MatMul,
    MaxPool2d, Mean, Mul, MulScalar, Reshape, Sigmoid, Softmax, Transpose, WeightLayout,
};

/// One instruction an NPU operator takes.
pub(super) struct Matched {
    /// The operator, with the instruction's attributes.
    pub op: Box<dyn NpuOp>,
    /// The NPU operator's name (`conv2d`, ...).
    pub name: &'static str,
    /// Tensor inputs, as value indices, in the operator's input order.
    pub inputs: Vec<usize>,
    /// Constant inputs (value indices of constant tensors), in the operator's order.
    pub consts: Vec<usize>,
    /// The output the operator writes.
    pub output: usize,
    /// Outputs of the instruction the operator does not write (max pooling's indices, layer
    /// norm's mean and rstd): lowering needs them unread.
    pub unwritten: Vec<usize>,
    /// A weight `permute_copy` this instruction absorbs: its instruction index.
    pub absorbed: Option<usize>,
    /// The shapes the operator sees the inputs and the output with, when not the values'
    /// own (the same bytes: `mm` runs as a batch-1 `bmm`).
    pub shapes: Option<(Vec<Vec<usize>>, Vec<usize>)>,
}

impl Matched {
    /// Operator `op` (named `name`) on tensor inputs `inputs`, writing `output`: no
    /// constants, no unwritten outputs, nothing absorbed, the values' own shapes.
    fn new(name: &'static str, op: Box<dyn NpuOp>, inputs: Vec<usize>, output: usize) -> Matched {
        Matched {
            op,
            name,
            inputs,
            consts: Vec::new(),
            output,
            unwritten: Vec::new(),
            absorbed: None,
            shapes: None,
        }
    }
}

/// The method's values, and which constant tensors have data in the program.
pub(super) struct Values<'a> {
    pub values: &'a [ValueModel],
    /// Whether constant buffer `i` holds data kiln can read (index 0 never does).
    pub has_data: &'a dyn Fn(u32) -> bool,
}

impl Values<'_> {
    /// The value at `arg`, if the index is in range.
    fn get(&self, arg: i32) -> Option<&ValueModel> {
        usize::try_from(arg).ok().and_then(|i| self.values.get(i))
    }

    /// A float32, static, contiguous tensor at `arg`: its index and sizes.
    fn tensor(&self, arg: i32) -> Option<(usize, Vec<usize>)> {
        match self.get(arg)? {
            ValueModel::Tensor(t) if plain_f32(t) => {
                Some((arg as usize, t.sizes.iter().map(|&d| d as usize).collect()))
            }
            _ => None,
        }
    }

    /// A tensor at `arg` that is a constant with data.
    fn constant(&self, arg: i32) -> Option<(usize, Vec<usize>)> {
        let (i, sizes) = self.tensor(arg)?;
        match &self.values[i] {
            ValueModel::Tensor(t)
                if t.data_buffer_idx > 0
                    && t.allocation.is_none()
                    && (self.has_data)(t.data_buffer_idx) =>
            {
                Some((i, sizes))
            }
            _ => None,
        }
    }

    /// A tensor at `arg` with no data in the program (an activation).
    fn activation(&self, arg: i32) -> Option<(usize, Vec<usize>)> {
        let (i, sizes) = self.tensor(arg)?;
        match &self.values[i] {
            ValueModel::Tensor(t) if t.data_buffer_idx == 0 => Some((i, sizes)),
            _ => None,
        }
    }

    fn int(&self, arg: i32) -> Option<i64> {
        match self.get(arg)? {
            ValueModel::Int(v) => Some(*v),
            _ => None,
        }
    }

    fn bool(&self, arg: i32) -> Option<bool> {
        match self.get(arg)? {
            ValueModel::Bool(v) => Some(*v),
            _ => None,
        }
    }

    /// A Double or Int scalar.
    fn scalar(&self, arg: i32) -> Option<f64> {
        match self.get(arg)? {
            ValueModel::Double(v) => Some(*v),
            ValueModel::Int(v) => Some(*v as f64),
            _ => None,
        }
    }

    fn is_null(&self, arg: i32) -> bool {
        matches!(self.get(arg), Some(ValueModel::Null))
    }

    /// An int list (its entries are Int value indices).
    fn ints(&self, arg: i32) -> Option<Vec<i64>> {
        match self.get(arg)? {
            ValueModel::IntList(items) => {
                items.iter().map(|&i| i32::try_from(i).ok().and_then(|i| self.int(i))).collect()
            }
            _ => None,
        }
    }

    /// An int list of two non-negative entries.
    fn pair(&self, arg: i32) -> Option<[usize; 2]> {
        match self.ints(arg)?.as_slice() {
            &[a, b] => Some([usize::try_from(a).ok()?, usize::try_from(b).ok()?]),
            _ => None,
        }
    }

    fn string(&self, arg: i32) -> Option<&str> {
        match self.get(arg)? {
            ValueModel::String(s) => Some(s),
            _ => None,
        }
    }
}

/// Whether a tensor is float32, of static shape and contiguous (dim order `0, 1, ...`).
fn plain_f32(t: &TensorModel) -> bool {
    t.scalar_type == ScalarType::Float
        && t.dynamism == ShapeDynamism::Static
        && t.dim_order.iter().enumerate().all(|(i, &d)| usize::from(d) == i)
        && t.sizes.iter().all(|&d| d >= 0)
        && t.extra.as_ref().is_none_or(|e| !e.external)
}

/// `dim` of a rank-`rank` tensor, negative counting from the end, normalized.
fn norm_dim(dim: i64, rank: usize) -> Option<usize> {
    let rank = rank as i64;
    let d = if dim < 0 { dim + rank } else { dim };
    (0..rank).contains(&d).then_some(d as usize)
}

/// The operator for the kernel call of `operator` with `args`, when one can take it.
/// `producer` names the instruction that writes a value, with its operator and arguments,
/// for absorbing a weight's `permute_copy`.
pub(super) fn match_call(
    operator: &str,
    args: &[i32],
    v: &Values<'_>,
    producer: &dyn Fn(usize) -> Option<(usize, String, Vec<i32>)>,
) -> Option<Matched> {
    let a = |i: usize| args.get(i).copied();
    match (operator, args.len()) {
        ("aten::add.out", 5) => {
            if v.scalar(a(2)?)? != 1.0 {
                return None;
            }
            let (x, _) = v.tensor(a(0)?)?;
            let (y, _) = v.tensor(a(1)?)?;
            Some(Matched::new("add", Box::new(Add), vec![x, y], v.tensor(a(3)?)?.0))
        }
        ("aten::mul.out", 4) => {
            let (x, _) = v.tensor(a(0)?)?;
            let (y, _) = v.tensor(a(1)?)?;
            Some(Matched::new("mul", Box::new(Mul), vec![x, y], v.tensor(a(2)?)?.0))
        }
        ("aten::mul.Scalar_out", 4) => {
            let value = v.scalar(a(1)?)?;
            let (x, _) = v.tensor(a(0)?)?;
            Some(Matched::new(
                "mul_scalar",
                Box::new(MulScalar { value }),
                vec![x],
                v.tensor(a(2)?)?.0,
            ))
        }
        ("aten::sigmoid.out", 3) => unary("sigmoid", Box::new(Sigmoid), args, v),
        ("aten::relu.out", 3) => unary("relu", Box::new(Clamp::relu()), args, v),
        ("aten::hardtanh.out", 5) | ("aten::clamp.out", 5) => {
            let bound = |arg: i32, none: f64| {
                if v.is_null(arg) {
                    Some(none)
                } else {
                    v.scalar(arg)
                }
            };
            let min = bound(a(1)?, f64::NEG_INFINITY)?;
            let max = bound(a(2)?, f64::INFINITY)?;
            let (x, _) = v.tensor(a(0)?)?;
            Some(Matched::new("clamp", Box::new(Clamp { min, max }), vec![x], v.tensor(a(3)?)?.0))
        }
        ("aten::gelu.out", 4) => {
            let tanh = match v.string(a(1)?)? {
                "none" => false,
                "tanh" => true,
                _ => return None,
            };
            let (x, _) = v.tensor(a(0)?)?;
            Some(Matched::new("gelu", Box::new(Gelu { tanh }), vec![x], v.tensor(a(2)?)?.0))
        }
        ("aten::_softmax.out", 5) => {
            let (x, sizes) = v.tensor(a(0)?)?;
            if v.bool(a(2)?)? {
                return None;
            }
            let dim = norm_dim(v.int(a(1)?)?, sizes.len())?;
            Some(Matched::new("softmax", Box::new(Softmax { dim }), vec![x], v.tensor(a(3)?)?.0))
        }
        ("aten::permute_copy.out", 4) => {
            let (x, sizes) = v.tensor(a(0)?)?;
            let perm = v
                .ints(a(1)?)?
                .into_iter()
                .map(|d| norm_dim(d, sizes.len()))
                .collect::<Option<Vec<_>>>()?;
            Some(Matched::new(
                "transpose",
                Box::new(Transpose { perm }),
                vec![x],
                v.tensor(a(2)?)?.0,
            ))
        }
        ("aten::view_copy.out", 4)
        | ("aten::clone.out", 4)
        | ("aten::squeeze_copy.dims_out", 4)
        | ("aten::squeeze_copy.dim_out", 4)
        | ("aten::unsqueeze_copy.out", 4)
        | ("dim_order_ops::_clone_dim_order.out", 5)
        | ("dim_order_ops::_to_dim_order_copy.out", 5) => {
            // Every tensor here is contiguous, so each of these copies the elements in order.
            let (x, _) = v.tensor(a(0)?)?;
            let out = a(args.len() - 2)?;
            Some(Matched::new("reshape", Box::new(Reshape), vec![x], v.tensor(out)?.0))
        }
        ("aten::expand_copy.out", 5) => {
            let (x, _) = v.tensor(a(0)?)?;
            Some(Matched::new("expand", Box::new(Expand), vec![x], v.tensor(a(3)?)?.0))
        }
        ("aten::cat.out", 4) => {
            let ValueModel::TensorList(items) = v.get(a(0)?)? else { return None };
            let inputs: Vec<(usize, Vec<usize>)> =
                items.iter().map(|&i| v.tensor(i)).collect::<Option<_>>()?;
            let rank = inputs.first()?.1.len();
            let dim = norm_dim(v.int(a(1)?)?, rank)?;
            let inputs = inputs.into_iter().map(|(i, _)| i).collect();
            Some(Matched::new("concat", Box::new(Concat { dim }), inputs, v.tensor(a(2)?)?.0))
        }
        ("aten::mean.out", 6) => {
            let (x, sizes) = v.tensor(a(0)?)?;
            if !v.is_null(a(3)?) {
                return None;
            }
            let dims = if v.is_null(a(1)?) {
                (0..sizes.len()).collect()
            } else {
                let mut d = v
                    .ints(a(1)?)?
                    .into_iter()
                    .map(|d| norm_dim(d, sizes.len()))
                    .collect::<Option<Vec<_>>>()?;
                d.sort_unstable();
                d.dedup();
                d
            };
            let keepdim = v.bool(a(2)?)?;
            Some(Matched::new(
                "mean",
                Box::new(Mean { dims, keepdim }),
                vec![x],
                v.tensor(a(4)?)?.0,
            ))
        }
        ("aten::bmm.out", 4) => {
            let (x, _) = v.tensor(a(0)?)?;
            let (y, _) = v.tensor(a(1)?)?;
            Some(Matched::new(
                "batch_matmul",
                Box::new(BatchMatMul),
                vec![x, y],
                v.tensor(a(2)?)?.0,
            ))
        }
        ("aten::mm.out", 4) => matmul(None, a(0)?, a(1)?, a(2)?, v, producer).or_else(|| {
            // Two activations: a batch-1 bmm over the same bytes.
            let (x, xs) = v.tensor(a(0)?)?;
            let (y, ys) = v.tensor(a(1)?)?;
            let (out, os) = v.tensor(a(2)?)?;
            let batch1 = |s: Vec<usize>| std::iter::once(1).chain(s).collect::<Vec<_>>();
            let mut m = Matched::new("batch_matmul", Box::new(BatchMatMul), vec![x, y], out);
            m.shapes = Some((vec![batch1(xs), batch1(ys)], batch1(os)));
            Some(m)
        }),
        ("aten::addmm.out", 7) => {
            if v.scalar(a(3)?)? != 1.0 || v.scalar(a(4)?)? != 1.0 {
                return None;
            }
            matmul(Some(a(0)?), a(1)?, a(2)?, a(5)?, v, producer)
        }
        ("aten::convolution.out", 11) => {
            let (x, sizes) = v.activation(a(0)?)?;
            let (w, ws) = v.constant(a(1)?)?;
            if sizes.len() != 4 || ws.len() != 4 || v.bool(a(6)?)? {
                return None;
            }
            let bias = if v.is_null(a(2)?) { None } else { Some(v.constant(a(2)?)?.0) };
            let groups = usize::try_from(v.int(a(8)?)?).ok()?;
            let op = Conv2d {
                kernel: [ws[2], ws[3]],
                stride: v.pair(a(3)?)?,
                padding: v.pair(a(4)?)?,
                dilation: v.pair(a(5)?)?,
                groups,
                bias: bias.is_some(),
            };
            let mut m = Matched::new("conv2d", Box::new(op), vec![x], v.tensor(a(9)?)?.0);
            m.consts = std::iter::once(w).chain(bias).collect();
            Some(m)
        }
        ("aten::_native_batch_norm_legit_no_training.out", 11) => {
            let (x, _) = v.activation(a(0)?)?;
            let consts = (1..5).map(|i| v.constant(a(i)?).map(|c| c.0)).collect::<Option<_>>()?;
            let eps = v.scalar(a(6)?)?;
            let mut m = Matched::new(
                "batch_norm",
                Box::new(BatchNorm { eps }),
                vec![x],
                v.tensor(a(7)?)?.0,
            );
            m.consts = consts;
            m.unwritten = vec![a(8)? as usize, a(9)? as usize];
            Some(m)
        }
        ("aten::native_layer_norm.out", 9) => {
            let (x, _) = v.tensor(a(0)?)?;
            let normalized_dims = v.ints(a(1)?)?.len();
            let eps = v.scalar(a(4)?)?;
            let (weight, bias) = (a(2)?, a(3)?);
            let consts: Vec<usize> = match (v.is_null(weight), v.is_null(bias)) {
                (true, true) => Vec::new(),
                (false, false) => vec![v.constant(weight)?.0, v.constant(bias)?.0],
                _ => return None,
            };
            let op = LayerNorm { normalized_dims, eps, affine: !consts.is_empty() };
            let mut m = Matched::new("layer_norm", Box::new(op), vec![x], v.tensor(a(5)?)?.0);
            m.consts = consts;
            m.unwritten = vec![a(6)? as usize, a(7)? as usize];
            Some(m)
        }
        ("aten::max_pool2d_with_indices.out", 9) => {
            let (x, sizes) = v.tensor(a(0)?)?;
            let kernel = v.pair(a(1)?)?;
            if sizes.len() != 4 {
                return None;
            }
            let stride = stride_or_kernel(v, a(2)?, kernel)?;
            let op = MaxPool2d {
                kernel,
                stride,
                padding: v.pair(a(3)?)?,
                dilation: v.pair(a(4)?)?,
                ceil_mode: v.bool(a(5)?)?,
            };
            let mut m = Matched::new("max_pool2d", Box::new(op), vec![x], v.tensor(a(6)?)?.0);
            m.unwritten = vec![a(7)? as usize];
            Some(m)
        }
        ("aten::avg_pool2d.out", 9) => {
            let (x, sizes) = v.tensor(a(0)?)?;
            let kernel = v.pair(a(1)?)?;
            if sizes.len() != 4 {
                return None;
            }
            let divisor_override = if v.is_null(a(6)?) { None } else { Some(v.int(a(6)?)?) };
            let op = AvgPool2d {
                kernel,
                stride: stride_or_kernel(v, a(2)?, kernel)?,
                padding: v.pair(a(3)?)?,
                ceil_mode: v.bool(a(4)?)?,
                count_include_pad: v.bool(a(5)?)?,
                divisor_override,
            };
            Some(Matched::new("avg_pool2d", Box::new(op), vec![x], v.tensor(a(7)?)?.0))
        }
        _ => None,
    }
}

/// A pooling stride: the kernel size when the list is empty (PyTorch's default).
fn stride_or_kernel(v: &Values<'_>, arg: i32, kernel: [usize; 2]) -> Option<[usize; 2]> {
    match v.ints(arg)?.len() {
        0 => Some(kernel),
        _ => v.pair(arg),
    }
}

/// A one-input, one-output call `[x, out, ret]`.
fn unary(name: &'static str, op: Box<dyn NpuOp>, args: &[i32], v: &Values<'_>) -> Option<Matched> {
    let (x, _) = v.tensor(*args.first()?)?;
    let (out, _) = v.tensor(*args.get(1)?)?;
    Some(Matched::new(name, op, vec![x], out))
}

/// `mm(x, w)` or `addmm(bias, x, w)` with a constant weight: `w` itself (`[k, n]`), or the
/// `permute_copy(W, [1, 0])` of a constant `[n, k]` weight, which the matmul absorbs.
fn matmul(
    bias: Option<i32>,
    x: i32,
    w: i32,
    out: i32,
    v: &Values<'_>,
    producer: &dyn Fn(usize) -> Option<(usize, String, Vec<i32>)>,
) -> Option<Matched> {
    let (x, xs) = v.activation(x)?;
    if xs.len() != 2 {
        return None;
    }
    let (weight, layout, absorbed) = match v.constant(w) {
        Some((w, _)) => (w, WeightLayout::KN, None),
        None => {
            let (w, _) = v.tensor(w)?;
            let (at, op, args) = producer(w)?;
            if op != "aten::permute_copy.out" || args.len() != 4 {
                return None;
            }
            let (src, sizes) = v.constant(args[0])?;
            if sizes.len() != 2 || v.ints(args[1])? != [1, 0] {
                return None;
            }
            (src, WeightLayout::NK, Some(at))
        }
    };
    let mut consts = vec![weight];
    if let Some(b) = bias {
        let (b, sizes) = v.constant(b)?;
        if sizes.len() != 1 {
            return None;
        }
        consts.push(b);
    }
    let op = Box::new(MatMul { weight: layout, bias: bias.is_some() });
    let mut m = Matched::new("matmul", op, vec![x], v.tensor(out)?.0);
    m.consts = consts;
    m.absorbed = absorbed;
    Some(m)
}
