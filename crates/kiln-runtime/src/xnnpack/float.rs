//! Lowering XNNPACK's float nodes onto `aten` kernels: XNNPACK's semantics on its serialized
//! dims, through each value's permutation ([`Rep`]).

use std::sync::Arc;

use kiln_format::xnnpack::{BinaryKind, Conv, ConvKind, DataType, Node, Pool, UnaryKind};
use kiln_kernels::DType;

use super::lower::{
    dtype_of, identity, inverse, is_float, is_identity, Bytes, Lowerer, Rep, NHWC, R,
};
use crate::plan::ValueDef;

/// The bounds of node `n`'s fused output clamp, unless it clamps nothing.
fn output_clamp(n: &Node) -> Option<(f32, f32)> {
    n.min_max.filter(|&(lo, hi)| !(lo == f32::NEG_INFINITY && hi == f32::INFINITY))
}

impl Lowerer<'_, '_> {
    /// A unary method operator with extra arguments, applied in the input's permutation.
    pub(super) fn same_perm_unary(
        &mut self,
        op: &str,
        input: u32,
        extra: Vec<u32>,
        output: u32,
    ) -> R<()> {
        let r = self.rep(input)?;
        let out = self.output(output, r.perm.clone())?;
        let mut args = vec![r.value];
        args.extend(extra);
        args.push(out.value);
        args.push(out.value);
        self.emit(op, args);
        self.set(output, out);
        Ok(())
    }

    /// A fused output clamp after the node's method value `v` (XNNPACK's `output_min_max`).
    pub(super) fn clamp_after(&mut self, n: &Node, r: Rep, output: u32) -> R<Rep> {
        let Some((lo, hi)) = output_clamp(n) else { return Ok(r) };
        let (a, b) = (self.bound(lo), self.bound(hi));
        let out = self.output(output, r.perm.clone())?;
        self.emit("aten::clamp.out", vec![r.value, a, b, out.value, out.value]);
        Ok(out)
    }

    pub(super) fn unary(&mut self, n: &Node, kind: UnaryKind, input: u32, output: u32) -> R<()> {
        use UnaryKind as U;
        let simple = |k: U| -> Option<&'static str> {
            Some(match k {
                U::Sigmoid => "aten::sigmoid.out",
                U::Floor => "aten::floor.out",
                U::SquareRoot => "aten::sqrt.out",
                U::Ceiling => "aten::ceil.out",
                U::Hardswish => "aten::hardswish.out",
                U::Negate => "aten::neg.out",
                U::Abs => "aten::abs.out",
                U::ReciprocalSquareRoot => "aten::rsqrt.out",
                U::Log => "aten::log.out",
                U::Tanh => "aten::tanh.out",
                U::Exp => "aten::exp.out",
                U::Sin => "aten::sin.out",
                U::Cos => "aten::cos.out",
                _ => return None,
            })
        };
        if kind == U::Convert {
            return self.convert(input, output);
        }
        if !is_float(self.xvalue(input).datatype) {
            return self.quantized_unary(n, kind, input, output);
        }
        if let Some(op) = simple(kind) {
            return self.same_perm_unary(op, input, vec![], output);
        }
        match kind {
            U::Square => {
                let r = self.rep(input)?;
                let out = self.output(output, r.perm.clone())?;
                self.emit("aten::mul.out", vec![r.value, r.value, out.value, out.value]);
                self.set(output, out);
                Ok(())
            }
            U::Gelu => {
                let s = self.push(ValueDef::String(Arc::from("none")));
                self.same_perm_unary("aten::gelu.out", input, vec![s], output)
            }
            U::Copy => {
                let none = self.none();
                self.same_perm_unary("aten::clone.out", input, vec![none], output)
            }
            U::Clamp => {
                let r = self.rep(input)?;
                let (lo, hi) = n.min_max.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
                let (a, b) = (self.bound(lo), self.bound(hi));
                let out = self.output(output, r.perm.clone())?;
                self.emit("aten::clamp.out", vec![r.value, a, b, out.value, out.value]);
                self.set(output, out);
                Ok(())
            }
            U::Softmax => {
                let r = self.rep(input)?;
                let last = r.perm.len().checked_sub(1).ok_or("softmax of a rank-0 value")?;
                let dim = self.int(r.perm[last] as i64);
                let f = self.boolean(false);
                self.same_perm_unary("aten::_softmax.out", input, vec![dim, f], output)
            }
            U::GlobalAvgPooling2d => {
                let x = self.as_perm(input, &NHWC)?;
                let dims = self.ints(&[2, 3]);
                let keep = self.boolean(true);
                let none = self.none();
                let out = self.output(output, NHWC.to_vec())?;
                self.emit("aten::mean.out", vec![x, dims, keep, none, out.value, out.value]);
                let out = self.clamp_after(n, out, output)?;
                self.set(output, out);
                Ok(())
            }
            _ => Err(format!("{kind:?} is not supported")),
        }
    }

    pub(super) fn binary(
        &mut self,
        n: &Node,
        kind: BinaryKind,
        a: u32,
        b: u32,
        output: u32,
    ) -> R<()> {
        let quantized = !is_float(self.xvalue(a).datatype);
        if kind == BinaryKind::BatchMatrixMultiply {
            return self.bmm(a, b, output);
        }
        // Both operands in one permutation: the output's rank, the smaller operand
        // broadcast from the right (numpy rules on XNNPACK's dims).
        let rank = self.dims(output).len();
        let perm = {
            let ra = self.rep(a)?;
            let rb = self.rep(b)?;
            if ra.perm.len() == rank {
                ra.perm
            } else if rb.perm.len() == rank {
                rb.perm
            } else {
                identity(rank)
            }
        };
        let x = self.broadcast_operand(a, &perm)?;
        let y = self.broadcast_operand(b, &perm)?;
        if quantized {
            return self.qs8_binary(n, kind, (a, x), (b, y), output, perm);
        }
        let out = self.output(output, perm.clone())?;
        let one = || ValueDef::Int(1);
        let (op, mut args) = match kind {
            BinaryKind::Add => ("aten::add.out", vec![x, y, self.push(one())]),
            BinaryKind::Subtract => ("aten::sub.out", vec![x, y, self.push(one())]),
            BinaryKind::Multiply => ("aten::mul.out", vec![x, y]),
            BinaryKind::Div => ("aten::div.out", vec![x, y]),
            BinaryKind::Minimum => ("aten::minimum.out", vec![x, y]),
            BinaryKind::Maximum => ("aten::maximum.out", vec![x, y]),
            BinaryKind::PReLU => {
                // x < 0 ? x * slope : x, as max(x, 0) + slope * min(x, 0) (exact).
                let dtype = DType::Float;
                let sizes = Self::method_sizes(&self.dims(output), &perm);
                let zero = self.double(0.0);
                let none = self.none();
                let pos = self.call("aten::clamp.out", vec![x, zero, none], dtype, &sizes)?;
                let neg = self.call("aten::clamp.out", vec![x, none, zero], dtype, &sizes)?;
                let scaled = self.call("aten::mul.out", vec![neg, y], dtype, &sizes)?;
                let one = self.push(one());
                ("aten::add.out", vec![pos, scaled, one])
            }
            BinaryKind::BatchMatrixMultiply => unreachable!("handled above"),
        };
        args.push(out.value);
        args.push(out.value);
        self.emit(op, args);
        let out = match kind {
            BinaryKind::PReLU => out,
            _ => self.clamp_after(n, out, output)?,
        };
        self.set(output, out);
        Ok(())
    }

    /// Operand `id` of a broadcasting node whose output is seen through `perm`: a value of
    /// the same rank is brought to `perm`; a lower-rank one is first reshaped to the full rank
    /// with leading ones (numpy alignment), then permuted.
    pub(super) fn broadcast_operand(&mut self, id: u32, perm: &[usize]) -> R<u32> {
        let dims = self.dims(id);
        if dims.len() == perm.len() {
            return self.as_perm(id, perm);
        }
        if dims.len() > perm.len() {
            return Err(format!("operand {id} has a higher rank than the output"));
        }
        let x = self.plain(id)?;
        let mut full = vec![1usize; perm.len() - dims.len()];
        full.extend(&dims);
        let dtype = dtype_of(self.xvalue(id).datatype)?;
        let shape = self.ints(&full.iter().map(|&d| d as i64).collect::<Vec<_>>());
        let v = self.call("aten::view_copy.out", vec![x, shape], dtype, &full)?;
        if is_identity(perm) {
            return Ok(v);
        }
        let inv = inverse(perm);
        let sizes = Self::method_sizes(&full, perm);
        let dims_arg = self.ints(&inv.iter().map(|&d| d as i64).collect::<Vec<_>>());
        self.call("aten::permute_copy.out", vec![v, dims_arg], dtype, &sizes)
    }

    pub(super) fn bmm(&mut self, a: u32, b: u32, output: u32) -> R<()> {
        let (da, db, dout) = (self.dims(a), self.dims(b), self.dims(output));
        if da.len() < 3 || da.len() != db.len() || da[..da.len() - 2] != db[..db.len() - 2] {
            return Err(format!("batch matrix multiply of {da:?} and {db:?} is not supported"));
        }
        let r = da.len();
        let batch: usize = da[..r - 2].iter().product();
        let x = self.plain(a)?;
        let y = self.plain(b)?;
        let (x, y) = if r == 3 {
            (x, y)
        } else {
            let sa = [batch, da[r - 2], da[r - 1]];
            let sb = [batch, db[r - 2], db[r - 1]];
            (self.reshape(x, &sa)?, self.reshape(y, &sb)?)
        };
        let m3 = [batch, da[r - 2], db[r - 1]];
        let z = self.call("aten::bmm.out", vec![x, y], DType::Float, &m3)?;
        let z = if r == 3 { z } else { self.reshape(z, &dout)? };
        self.set(output, Rep { value: z, perm: identity(r) });
        Ok(())
    }

    pub(super) fn reshape(&mut self, x: u32, sizes: &[usize]) -> R<u32> {
        let shape = self.ints(&sizes.iter().map(|&d| d as i64).collect::<Vec<_>>());
        self.call("aten::view_copy.out", vec![x, shape], DType::Float, sizes)
    }

    pub(super) fn slice(
        &mut self,
        input: u32,
        offsets: &[u32],
        sizes: &[u32],
        output: u32,
    ) -> R<()> {
        let r = self.rep(input)?;
        let dims = self.dims(input);
        if offsets.len() != dims.len() || sizes.len() != dims.len() {
            return Err(format!(
                "offsets/sizes of rank {} for a rank-{} value",
                offsets.len(),
                dims.len()
            ));
        }
        let dtype = dtype_of(self.xvalue(input).datatype)?;
        let mut cur = r.value;
        let mut cur_dims = dims.clone();
        for i in 0..dims.len() {
            let (o, s) = (offsets[i] as usize, sizes[i] as usize);
            // A size of 0 means "to the end" in XNNPACK's static slice.
            let s = if s == 0 { dims[i].saturating_sub(o) } else { s };
            if o == 0 && s == dims[i] {
                continue;
            }
            if o + s > dims[i] {
                return Err(format!("slice {o}..{} of dim {i} of size {}", o + s, dims[i]));
            }
            cur_dims[i] = s;
            let dim = self.int(r.perm[i] as i64);
            let start = self.int(o as i64);
            let end = self.int((o + s) as i64);
            let step = self.int(1);
            let msizes = Self::method_sizes(&cur_dims, &r.perm);
            cur = self.call(
                "aten::slice_copy.Tensor_out",
                vec![cur, dim, start, end, step],
                dtype,
                &msizes,
            )?;
        }
        let value = if cur == r.value {
            let none = self.none();
            let msizes = Self::method_sizes(&cur_dims, &r.perm);
            self.call("aten::clone.out", vec![cur, none], dtype, &msizes)?
        } else {
            cur
        };
        self.set(output, Rep { value, perm: r.perm });
        Ok(())
    }

    pub(super) fn pad(
        &mut self,
        input: u32,
        pre: &[u32],
        post: &[u32],
        value: f32,
        output: u32,
    ) -> R<()> {
        let r = self.rep(input)?;
        let rank = r.perm.len();
        if pre.len() != rank || post.len() != rank {
            return Err(format!("paddings of rank {} for a rank-{rank} value", pre.len()));
        }
        // constant_pad_nd pads the last method dim first: [last_pre, last_post, ...].
        let mut by_dim = vec![(0i64, 0i64); rank];
        for i in 0..rank {
            by_dim[r.perm[i]] = (i64::from(pre[i]), i64::from(post[i]));
        }
        let pads: Vec<i64> = by_dim.iter().rev().flat_map(|&(a, b)| [a, b]).collect();
        let pads = self.ints(&pads);
        let v = self.double(f64::from(value));
        let out = self.output(output, r.perm.clone())?;
        self.emit("aten::constant_pad_nd.out", vec![r.value, pads, v, out.value, out.value]);
        self.set(output, out);
        Ok(())
    }

    pub(super) fn concat(&mut self, axis: u32, inputs: &[u32], output: u32) -> R<()> {
        let perm = self.rep(inputs[0])?.perm;
        let axis = axis as usize;
        if axis >= perm.len() {
            return Err(format!("axis {axis} of a rank-{} value", perm.len()));
        }
        let mut items = Vec::with_capacity(inputs.len());
        for &i in inputs {
            items.push(self.as_perm(i, &perm)?);
        }
        let list = self.push(ValueDef::TensorList(items.into()));
        let dim = self.int(perm[axis] as i64);
        let out = self.output(output, perm)?;
        self.emit("aten::cat.out", vec![list, dim, out.value, out.value]);
        self.set(output, out);
        Ok(())
    }

    pub(super) fn pool(&mut self, n: &Node, p: &Pool) -> R<()> {
        let [t, r, b, l] = p.padding.map(i64::from);
        let int8 = self.xvalue(p.input).datatype == DataType::QInt8;
        if p.max && int8 && t == b && l == r {
            // In XNNPACK's own NHWC order: no transposes around it.
            let x = self.plain(p.input)?;
            let two = |v: [u32; 2]| v.map(|x| i64::from(x.max(1)));
            let kernel = self.ints(&p.pooling.map(i64::from));
            let stride = self.ints(&two(p.stride));
            let padding = self.ints(&[t, l]);
            let dilation = self.ints(&two(p.dilation));
            let out = self.output(p.output, identity(4))?;
            let args = vec![x, kernel, stride, padding, dilation, out.value, out.value];
            self.emit("kiln_xnnpack::qs8_max_pool.out", args);
            let out = self.clamp_after(n, out, p.output)?;
            self.set(p.output, out);
            return Ok(());
        }
        let x = self.as_perm(p.input, &NHWC)?;
        let kernel = self.ints(&[i64::from(p.pooling[0]), i64::from(p.pooling[1])]);
        let stride = self.ints(&[i64::from(p.stride[0].max(1)), i64::from(p.stride[1].max(1))]);
        let out = self.output(p.output, NHWC.to_vec())?;
        let dtype = dtype_of(self.xvalue(p.input).datatype)?;
        if p.max {
            // Asymmetric padding (ceil mode) pads the input with -inf first: padded cells
            // never win.
            let (x, pad) = if t == b && l == r {
                (x, [t, l])
            } else {
                let sizes = self.dims(p.input);
                let msizes =
                    [sizes[0], sizes[3], sizes[1] + (t + b) as usize, sizes[2] + (l + r) as usize];
                let pads = self.ints(&[l, r, t, b]);
                let v = self.double(f64::NEG_INFINITY);
                (self.call("aten::constant_pad_nd.out", vec![x, pads, v], dtype, &msizes)?, [0, 0])
            };
            let padding = self.ints(&pad);
            let dil = [p.dilation[0].max(1), p.dilation[1].max(1)].map(i64::from);
            let dilation = self.ints(&dil);
            let ceil = self.boolean(false);
            let out_dims = Self::method_sizes(&self.dims(p.output), &NHWC);
            let indices = self.tensor(DType::Long, &out_dims)?;
            // The return value is the list of both outs, as ExecuTorch serializes it (the
            // compile stage computes values only when nothing reads the indices or the list).
            let ret = self.push(ValueDef::TensorList([out.value, indices].into()));
            self.emit(
                "aten::max_pool2d_with_indices.out",
                vec![x, kernel, stride, padding, dilation, ceil, out.value, indices, ret],
            );
        } else {
            if t != b || l != r {
                return Err(format!("average pooling with asymmetric padding {:?}", p.padding));
            }
            let padding = self.ints(&[t, l]);
            let f = self.boolean(false);
            let none = self.none();
            self.emit(
                "aten::avg_pool2d.out",
                vec![x, kernel, stride, padding, f, f, none, out.value, out.value],
            );
        }
        let out = self.clamp_after(n, out, p.output)?;
        self.set(p.output, out);
        Ok(())
    }

    pub(super) fn conv(&mut self, n: &Node, c: &Conv) -> R<()> {
        let wv = self.xvalue(c.filter);
        if !is_float(self.xvalue(c.input).datatype) {
            return self.qs8_conv(n, c);
        }
        if !is_float(wv.datatype) {
            return Err(format!("a float convolution with {} weights", wv.datatype.name()));
        }
        let [t, r, b, l] = c.padding;
        if t != b || l != r {
            return Err(format!("asymmetric padding {:?}", c.padding));
        }
        let x = self.as_perm(c.input, &NHWC)?;
        // The filter, in PyTorch's layout.
        let w = self.conv_filter(c, wv)?;
        let bias = match c.bias {
            Some(bv) => self.plain(bv)?,
            None => self.none(),
        };
        let stride = self.ints(&c.stride.map(|s| i64::from(s.max(1))));
        let padding = self.ints(&[i64::from(t), i64::from(l)]);
        let dilation = self.ints(&c.dilation.map(|d| i64::from(d.max(1))));
        let transposed = self.boolean(c.kind == ConvKind::ConvTranspose2d);
        let output_padding = self.ints(&c.adjustment.map(i64::from));
        let groups = self.int(i64::from(c.groups.max(1)));
        let out = self.output(c.output, NHWC.to_vec())?;
        self.emit(
            "aten::convolution.out",
            vec![
                x,
                w,
                bias,
                stride,
                padding,
                dilation,
                transposed,
                output_padding,
                groups,
                out.value,
                out.value,
            ],
        );
        let out = self.clamp_after(n, out, c.output)?;
        self.set(c.output, out);
        Ok(())
    }

    /// A float convolution filter in PyTorch's layout. Convolution filters (OHWI), depthwise
    /// ones (1HWO) and one-group transposed ones ([O, KH, KW, I]) are PyTorch's filters in
    /// another dim order, so they borrow the payload's bytes, declared with that order; a
    /// grouped transposed filter ([G*O/G, KH, KW, I/G] -> [I, O/G, KH, KW]) is regrouped into
    /// a copy.
    pub(super) fn conv_filter(&mut self, c: &Conv, wv: &kiln_format::xnnpack::Value) -> R<u32> {
        let d = wv.dims.clone();
        let [a, kh, kw, z] = d[..] else {
            return Err(format!("filter dims {d:?} are not 4-D"));
        };
        let Some(index) = wv.constant else {
            return Err("a convolution filter that is not a constant".into());
        };
        let bytes = self.constant_bytes(index)?;
        let groups = c.groups.max(1) as usize;
        match c.kind {
            // OIHW sizes stored O, H, W, I.
            ConvKind::Conv2d => {
                return self.constant_in(DType::Float, &[a, z, kh, kw], &[0, 2, 3, 1], bytes)
            }
            // [O, 1, KH, KW] stored 1, H, W, O.
            ConvKind::DepthwiseConv2d => {
                return self.constant_in(DType::Float, &[z, 1, kh, kw], &[1, 2, 3, 0], bytes)
            }
            // [I, O, KH, KW] stored O, H, W, I.
            ConvKind::ConvTranspose2d if groups == 1 => {
                return self.constant_in(DType::Float, &[z, a, kh, kw], &[1, 2, 3, 0], bytes)
            }
            ConvKind::ConvTranspose2d => {}
        }
        let raw = bytes.resolve(self.file);
        let w: Vec<f32> =
            raw.chunks_exact(4).map(|q| f32::from_le_bytes([q[0], q[1], q[2], q[3]])).collect();
        if w.len() != a * kh * kw * z {
            return Err(format!("filter {d:?} has {} elements of data", w.len()));
        }
        if a % groups != 0 {
            return Err(format!("{a} output channels in {groups} groups"));
        }
        let og = a / groups;
        let at = |o: usize, y: usize, x: usize, i: usize| w[((o * kh + y) * kw + x) * z + i];
        let mut out = Vec::with_capacity(w.len());
        // PyTorch [g*I/G + il, ol, y, x] = XNNPACK [g*O/G + ol, y, x, il].
        for gi in 0..groups {
            for il in 0..z {
                for ol in 0..og {
                    for y in 0..kh {
                        for x in 0..kw {
                            out.push(at(gi * og + ol, y, x, il));
                        }
                    }
                }
            }
        }
        let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.constant(DType::Float, &[groups * z, og, kh, kw], Bytes::Owned(bytes))
    }

    pub(super) fn fully_connected(
        &mut self,
        n: &Node,
        input: u32,
        filter: u32,
        bias: Option<u32>,
        output: u32,
        flags: u32,
    ) -> R<()> {
        let (xv, wv) = (self.xvalue(input), self.xvalue(filter));
        if xv.datatype == DataType::QDInt8 {
            return self.qd8_fully_connected(n, input, filter, bias, output, flags);
        }
        if !is_float(xv.datatype) {
            return self.qs8_fully_connected(n, input, filter, bias, output, flags);
        }
        if !is_float(wv.datatype) || wv.dims.len() != 2 {
            return Err(format!(
                "filter {} {:?} is not a float32 matrix",
                wv.datatype.name(),
                wv.dims
            ));
        }
        let transpose = flags & 1 != 0;
        let (nn, k) = if transpose { (wv.dims[1], wv.dims[0]) } else { (wv.dims[0], wv.dims[1]) };
        let xd = xv.dims.clone();
        if xd.last() != Some(&k) {
            return Err(format!("input {xd:?} does not end in the filter's {k} columns"));
        }
        let od = self.dims(output);
        if od.len() != xd.len() || od.last() != Some(&nn) {
            return Err(format!("output {od:?} is not the input {xd:?} with {nn} columns"));
        }
        // `linear` takes the input of any rank (its leading dimensions, dynamic or not, are the
        // rows) and the weight [N, K]; a [K, N] one goes through a permute_copy the compile
        // stage folds into the packed weight.
        let x = self.plain(input)?;
        let w = self.rep(filter)?.value;
        let w = if transpose {
            let dims = self.ints(&[1, 0]);
            self.call("aten::permute_copy.out", vec![w, dims], DType::Float, &[nn, k])?
        } else {
            w
        };
        let b = match bias {
            Some(b) => self.plain(b)?,
            None => self.none(),
        };
        // Without a clamp after it, the product is the node's output (possibly the call's
        // output itself, [`Lowerer::output`]).
        let y = if output_clamp(n).is_some() {
            self.call("aten::linear.out", vec![x, w, b], DType::Float, &od)?
        } else {
            let out = self.output(output, identity(od.len()))?;
            self.emit("aten::linear.out", vec![x, w, b, out.value, out.value]);
            out.value
        };
        let r = self.clamp_after(n, Rep { value: y, perm: identity(od.len()) }, output)?;
        self.set(output, r);
        Ok(())
    }
}
