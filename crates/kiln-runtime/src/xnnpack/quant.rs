//! Lowering XNNPACK's quantized nodes onto `kiln_xnnpack` kernels (XNNPACK's integer
//! arithmetic): converts, QS8 convolution, fully connected and elementwise nodes, QD8 fully
//! connected layers, and the integer clamp and global average pooling.

use kiln_format::xnnpack::{BinaryKind, Conv, ConvKind, DataType, Node, Quant, UnaryKind};
use kiln_kernels::compute::xnn_quant::{
    qd8_panel_shapes, qs8_quantize_bound, Qd8PanelForm, Qd8Weights,
};
use kiln_kernels::DType;

use super::lower::{identity, is_float, Bytes, Lowerer, R};

impl Lowerer<'_, '_> {
    /// A unary node on a quantized (QS8) value: the clamp and the global average pooling
    /// XNNPACK runs in the integer domain.
    pub(super) fn quantized_unary(
        &mut self,
        n: &Node,
        kind: UnaryKind,
        input: u32,
        output: u32,
    ) -> R<()> {
        use UnaryKind as U;
        let dt = self.xvalue(input).datatype;
        if dt != DataType::QInt8 {
            return Err(format!("{kind:?} on {} values is not supported yet", dt.name()));
        }
        match kind {
            U::Clamp => {
                // XNNPACK clamps the integers to the bounds quantized with the output's
                // parameters (the same as the input's).
                let (si, zi) = self.per_tensor(input)?;
                let (so, zo) = self.per_tensor(output)?;
                if (si, zi) != (so, zo) {
                    return Err(format!(
                        "a quantized clamp from scale {si} zero point {zi} to {so} {zo}"
                    ));
                }
                let r = self.rep(input)?;
                let (lo, hi) = n.min_max.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
                let q = |v: f32| i64::from(qs8_quantize_bound(v, so as f32, zo as i32));
                let (a, b) = (self.int(q(lo)), self.int(q(hi)));
                let out = self.output(output, r.perm.clone())?;
                self.emit("aten::clamp.out", vec![r.value, a, b, out.value, out.value]);
                self.set(output, out);
                Ok(())
            }
            U::GlobalAvgPooling2d => {
                let x = self.plain(input)?;
                let (si, zi) = self.per_tensor(input)?;
                let (so, zo) = self.per_tensor(output)?;
                let (lo, hi) = self.quant_bounds(n);
                let args =
                    vec![x, self.double(si), self.int(zi), self.double(so), self.int(zo), lo, hi];
                let out = self.output(output, identity(4))?;
                let mut all = args;
                all.extend([out.value, out.value]);
                self.emit("kiln_xnnpack::qs8_global_avg_pool.out", all);
                self.set(output, out);
                Ok(())
            }
            _ => Err(format!("{kind:?} on {} values is not supported yet", dt.name())),
        }
    }

    /// The per-tensor scale and zero point of value `id`.
    pub(super) fn per_tensor(&self, id: u32) -> R<(f64, i64)> {
        match &self.xvalue(id).quant {
            Some(Quant::PerTensor { scale, zero_point }) => {
                Ok((f64::from(*scale), i64::from(*zero_point)))
            }
            other => Err(format!("value {id} needs per-tensor quantization, has {other:?}")),
        }
    }

    pub(super) fn convert(&mut self, input: u32, output: u32) -> R<()> {
        let (i, o) = (self.xvalue(input).datatype, self.xvalue(output).datatype);
        if o == DataType::QDInt8 {
            // Quantized per row by the product that reads it.
            let r = self.rep(input)?;
            self.set(output, r);
            return Ok(());
        }
        let (si, zi) = if is_float(i) { (0.0, 0) } else { self.per_tensor(input)? };
        let (so, zo) = if is_float(o) { (0.0, 0) } else { self.per_tensor(output)? };
        let args = vec![self.double(si), self.int(zi), self.double(so), self.int(zo)];
        let r = self.rep(input)?;
        let out = self.output(output, r.perm.clone())?;
        let mut all = vec![r.value];
        all.extend(args);
        all.push(out.value);
        all.push(out.value);
        self.emit("kiln_xnnpack::convert.out", all);
        self.set(output, out);
        Ok(())
    }

    /// Per-channel float scales of a quantized weight as an f32 tensor `[n]`.
    pub(super) fn weight_scales(&mut self, id: u32, n: usize) -> R<u32> {
        let scales = match &self.xvalue(id).quant {
            Some(Quant::PerChannel { scales, .. }) => self.floats(scales, false)?,
            Some(Quant::PerTensor { scale, zero_point: 0 }) => vec![*scale],
            other => return Err(format!("weight {id} quantization {other:?} is not supported")),
        };
        if scales.len() != n && scales.len() != 1 {
            return Err(format!("weight {id} has {} scales for {n} channels", scales.len()));
        }
        self.f32_constant(&scales)
    }

    pub(super) fn quant_bounds(&mut self, n: &Node) -> (u32, u32) {
        let (lo, hi) = n.min_max.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        (self.double(f64::from(lo)), self.double(f64::from(hi)))
    }

    pub(super) fn qs8_conv(&mut self, n: &Node, c: &Conv) -> R<()> {
        let x = self.plain(c.input)?;
        let (sx, zx) = self.per_tensor(c.input)?;
        let w = self.rep(c.filter)?.value;
        let o = self.dims(c.output).last().copied().unwrap_or(0);
        let ws = self.weight_scales(c.filter, o)?;
        let bias = match c.bias {
            Some(b) => self.rep(b)?.value,
            None => self.none(),
        };
        let (so, zo) = self.per_tensor(c.output)?;
        let stride = self.ints(&c.stride.map(|s| i64::from(s.max(1))));
        let padding = self.ints(&c.padding.map(i64::from));
        let dilation = self.ints(&c.dilation.map(|d| i64::from(d.max(1))));
        let groups = self.int(i64::from(c.groups.max(1)));
        let (lo, hi) = self.quant_bounds(n);
        let (sx, zx, so, zo) = (self.double(sx), self.int(zx), self.double(so), self.int(zo));
        let out = self.output(c.output, identity(4))?;
        if c.kind == ConvKind::ConvTranspose2d {
            let adjustment = self.ints(&c.adjustment.map(i64::from));
            self.emit(
                "kiln_xnnpack::qs8_deconvolution.out",
                vec![
                    x, sx, zx, w, ws, bias, stride, padding, dilation, adjustment, groups, so, zo,
                    lo, hi, out.value, out.value,
                ],
            );
            self.set(c.output, out);
            return Ok(());
        }
        let depthwise = self.boolean(c.kind == ConvKind::DepthwiseConv2d);
        self.emit(
            "kiln_xnnpack::qs8_convolution.out",
            vec![
                x, sx, zx, w, ws, bias, stride, padding, dilation, groups, depthwise, so, zo, lo,
                hi, out.value, out.value,
            ],
        );
        self.set(c.output, out);
        Ok(())
    }

    pub(super) fn qs8_fully_connected(
        &mut self,
        n: &Node,
        input: u32,
        filter: u32,
        bias: Option<u32>,
        output: u32,
        flags: u32,
    ) -> R<()> {
        if flags & 1 != 0 {
            return Err(
                "quantized fully connected with transposed weights is not supported yet".into()
            );
        }
        let x = self.plain(input)?;
        let (sx, zx) = self.per_tensor(input)?;
        let w = self.rep(filter)?.value;
        let nn = self.dims(filter).first().copied().unwrap_or(0);
        let ws = self.weight_scales(filter, nn)?;
        let bias = match bias {
            Some(b) => self.rep(b)?.value,
            None => self.none(),
        };
        let (so, zo) = self.per_tensor(output)?;
        let (lo, hi) = self.quant_bounds(n);
        let (sx, zx, so, zo) = (self.double(sx), self.int(zx), self.double(so), self.int(zo));
        let rank = self.dims(output).len();
        let out = self.output(output, identity(rank))?;
        self.emit(
            "kiln_xnnpack::qs8_fully_connected.out",
            vec![x, sx, zx, w, ws, bias, so, zo, lo, hi, out.value, out.value],
        );
        self.set(output, out);
        Ok(())
    }

    pub(super) fn qd8_fully_connected(
        &mut self,
        n: &Node,
        input: u32,
        filter: u32,
        bias: Option<u32>,
        output: u32,
        flags: u32,
    ) -> R<()> {
        if flags & 1 != 0 {
            return Err("dynamically quantized fully connected with transposed weights is not supported yet".into());
        }
        let wv = self.xvalue(filter);
        let x = self.plain(input)?;
        let w = self.rep(filter)?.value;
        let nn = wv.dims.first().copied().unwrap_or(0);
        let (kind, scales, block) = match (&wv.datatype, &wv.quant) {
            (DataType::QCInt8, Some(Quant::PerChannel { scales, .. })) => {
                (0, self.floats(scales, false)?, 0)
            }
            (DataType::QCInt4, Some(Quant::PerChannel { scales, .. })) => {
                (1, self.floats(scales, false)?, 0)
            }
            (DataType::QBInt4, Some(Quant::PerChannelGroup { scales, group_size, .. })) => {
                (2, self.floats(scales, true)?, *group_size as i64)
            }
            (dt, q) => return Err(format!("weights {} with {q:?}", dt.name())),
        };
        // Constant weights are laid out once, here, in the panels the fast loops read.
        let (w, scales_t, kind, block) = match self.panels(wv, kind, &scales, block)? {
            Some((w, s, panel_kind)) => (w, s, panel_kind, if kind == 2 { block } else { 0 }),
            None => {
                let scales_t = if kind == 2 {
                    let k = wv.dims.get(1).copied().unwrap_or(0);
                    let blocks = k / (block.max(1) as usize);
                    if scales.len() != nn * blocks {
                        return Err(format!(
                            "{} block scales for [{nn}, {k}] in blocks of {block}",
                            scales.len()
                        ));
                    }
                    let bytes: Vec<u8> = scales.iter().flat_map(|x| x.to_le_bytes()).collect();
                    self.constant(DType::Float, &[nn, blocks], Bytes::Owned(bytes))?
                } else {
                    if scales.len() != nn {
                        return Err(format!("{} scales for {nn} channels", scales.len()));
                    }
                    self.f32_constant(&scales)?
                };
                (w, scales_t, kind, block)
            }
        };
        let bias = match bias {
            Some(b) => self.plain(b)?,
            None => self.none(),
        };
        let (lo, hi) = self.quant_bounds(n);
        let kind = self.int(kind);
        let block = self.int(block);
        let rank = self.dims(output).len();
        let out = self.output(output, identity(rank))?;
        self.emit(
            "kiln_xnnpack::qd8_fully_connected.out",
            vec![x, w, kind, scales_t, block, bias, lo, hi, out.value, out.value],
        );
        self.set(output, out);
        Ok(())
    }

    /// The constant weights of a QD8 fully connected node (weight kind 0, 1 or 2 of
    /// `kiln_xnnpack::qd8_fully_connected`) and their scales as panels, with the panels' kind
    /// (3: int8, 4: 4-bit), or `None` when they are not a constant of the expected size.
    fn panels(
        &mut self,
        wv: &kiln_format::xnnpack::Value,
        kind: i64,
        scales: &[f32],
        block: i64,
    ) -> R<Option<(u32, u32, i64)>> {
        let (Some(index), &[nn, k]) = (wv.constant, wv.dims.as_slice()) else {
            return Ok(None);
        };
        // Laid out from where the weights lie (no copy of them first).
        let source = self.constant_bytes(index)?;
        let raw = source.resolve(self.file);
        let weights = match kind {
            0 => Qd8Weights::Qc8w { w: bytemuck::cast_slice(raw), scales },
            1 => Qd8Weights::Qc4w { w: raw, scales },
            _ => Qd8Weights::Qb4w { w: raw, scales, block_size: block.max(0) as usize },
        };
        // 4-bit weights stay 4-bit where their blocks allow (half the bytes a decode step
        // reads); otherwise int8.
        let laid = [Qd8PanelForm::Int4, Qd8PanelForm::Int8]
            .into_iter()
            .find_map(|form| Some((form, weights.to_panels(nn, k, form)?)));
        let Some((form, (panels, panel_scales, block))) = laid else {
            return Ok(None);
        };
        // The pages of the weights (in the file or a .ptd) were read once, here: runs read
        // the panels. Given back now, they do not add up over a program's layers while it
        // decodes (a stories110M-sized export's 57 MB).
        self.release(&source);
        let Some((wshape, sshape)) = qd8_panel_shapes(nn, k, block, form) else {
            return Ok(None);
        };
        // In place: the panels' allocation becomes the constant's.
        let bytes: Vec<u8> = panels.into_iter().map(|v| v as u8).collect();
        let w = self.constant(DType::Char, &wshape, Bytes::Owned(bytes))?;
        let bytes: Vec<u8> = panel_scales.iter().flat_map(|v| v.to_le_bytes()).collect();
        let s = self.constant(DType::Float, &sshape, Bytes::Owned(bytes))?;
        let kind = match form {
            Qd8PanelForm::Int8 => 3,
            Qd8PanelForm::Int4 => 4,
        };
        Ok(Some((w, s, kind)))
    }

    pub(super) fn qs8_binary(
        &mut self,
        n: &Node,
        kind: BinaryKind,
        (a, x): (u32, u32),
        (b, y): (u32, u32),
        output: u32,
        perm: Vec<usize>,
    ) -> R<()> {
        let op = match kind {
            BinaryKind::Add => "kiln_xnnpack::qs8_add.out",
            BinaryKind::Subtract => "kiln_xnnpack::qs8_subtract.out",
            BinaryKind::Multiply => "kiln_xnnpack::qs8_multiply.out",
            other => return Err(format!("quantized {other:?} is not supported yet")),
        };
        let (sa, za) = self.per_tensor(a)?;
        let (sb, zb) = self.per_tensor(b)?;
        let (so, zo) = self.per_tensor(output)?;
        let (lo, hi) = self.quant_bounds(n);
        let args = vec![
            x,
            self.double(sa),
            self.int(za),
            y,
            self.double(sb),
            self.int(zb),
            self.double(so),
            self.int(zo),
            lo,
            hi,
        ];
        let out = self.output(output, perm)?;
        let mut all = args;
        all.push(out.value);
        all.push(out.value);
        self.emit(op, all);
        self.set(output, out);
        Ok(())
    }
}
