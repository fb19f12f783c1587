//! Header parsing, flatbuffer verification and decoding of the graph into [`Graph`], with every
//! value id, constant index and constant range checked.

use std::collections::HashMap;

use flatbuffers::VerifierOptions;
use kiln_schema::xnnpack::fb_xnnpack as fb;

use super::model::{
    BinaryKind, Constant, Conv, ConvKind, DataType, Graph, Header, Node, Op, Payload, Pool, Quant,
    Scales, UnaryKind, Value, FLAG_EXTERNAL_INPUT, FLAG_EXTERNAL_OUTPUT, FORMAT, INVALID_ID,
    MAX_RANK,
};
use crate::error::{Error, Result};

/// The header's magic, at bytes 4..8.
const MAGIC: &[u8; 4] = b"XH00";
/// Bytes of the header fields.
const HEADER_LEN: usize = 30;
/// Elements one value may hold (2^40: more than any real model, and no overflow in bytes).
const MAX_NUMEL: usize = 1 << 40;

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::invalid(FORMAT, field, None, reason)
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// The XH00 header of `bytes`, `None` when the magic is absent (a bare flatbuffer).
fn header(bytes: &[u8]) -> Result<Option<Header>> {
    if bytes.get(4..8) != Some(MAGIC) {
        return Ok(None);
    }
    let h = bytes.get(..HEADER_LEN).ok_or_else(|| Error::Truncated {
        format: FORMAT,
        field: "header".into(),
        offset: 0,
        end: HEADER_LEN as u64,
        len: bytes.len() as u64,
    })?;
    let length = u16::from_le_bytes([h[8], h[9]]);
    if usize::from(length) < HEADER_LEN {
        return Err(Error::invalid(
            FORMAT,
            "header.length",
            Some(8),
            format!("{length} is shorter than the {HEADER_LEN} bytes of the header's fields"),
        ));
    }
    let fb_offset = le_u32(h, 10) as u64;
    let fb_size = le_u32(h, 14) as u64;
    let cd_offset = le_u32(h, 18) as u64;
    let mut w = [0u8; 8];
    w.copy_from_slice(&h[22..30]);
    let cd_size = u64::from_le_bytes(w);
    let len = bytes.len() as u64;
    let range = |field: &str, at: u64, offset: u64, size: u64| match offset
        .checked_add(size)
        .filter(|&e| e <= len)
    {
        Some(end) => Ok(offset as usize..end as usize),
        None => Err(Error::invalid(
            FORMAT,
            field.to_string(),
            Some(at),
            format!("{offset} + {size} bytes is outside the {len}-byte payload"),
        )),
    };
    let flatbuffer = range("header.flatbuffer", 10, fb_offset, fb_size)?;
    let constants = range("header.constant_data", 18, cd_offset, cd_size)?;
    if flatbuffer.start < HEADER_LEN {
        return Err(Error::invalid(
            FORMAT,
            "header.flatbuffer_offset",
            Some(10),
            "inside the header",
        ));
    }
    Ok(Some(Header { length, flatbuffer, constants }))
}

pub(super) fn payload(bytes: &[u8]) -> Result<Payload<'_>> {
    let header = header(bytes)?;
    let fb_bytes = match &header {
        Some(h) => &bytes[h.flatbuffer.clone()],
        None => bytes,
    };
    let base = header.as_ref().map_or(0, |h| h.flatbuffer.start);
    let ident = fb_bytes.get(4..8).ok_or_else(|| Error::Truncated {
        format: FORMAT,
        field: "flatbuffer identifier".into(),
        offset: base as u64 + 4,
        end: base as u64 + 8,
        len: bytes.len() as u64,
    })?;
    if ident != b"XN01" && ident != b"XN00" {
        return Err(Error::BadMagic {
            format: FORMAT,
            offset: base as u64 + 4,
            expected: "\"XN01\" or \"XN00\" (or an XH00 header at byte 4)".into(),
            found: format!("{:?}", String::from_utf8_lossy(ident)),
        });
    }
    let identifier = [ident[0], ident[1], ident[2], ident[3]];
    let opts = VerifierOptions {
        max_depth: 16,
        max_tables: fb_bytes.len() / 4 + 1,
        max_apparent_size: fb_bytes.len().saturating_mul(4).max(1 << 16),
        ignore_missing_null_terminator: false,
    };
    let root = fb::root_as_xnngraph_with_opts(&opts, fb_bytes)
        .map_err(|source| Error::Flatbuffer { format: FORMAT, source })?;
    let constants = constants(bytes, fb_bytes, base, header.as_ref(), &root)?;
    let values = values(&root, constants.len())?;
    let nodes = nodes(&root, values.len())?;
    let ids =
        |v: Option<flatbuffers::Vector<'_, u32>>| v.map(|v| v.iter().collect()).unwrap_or_default();
    let graph = Graph {
        version: root.version().unwrap_or_default().to_string(),
        nodes,
        values,
        num_externs: root.num_externs(),
        input_ids: ids(root.input_ids()),
        output_ids: ids(root.output_ids()),
        constants,
    };
    externals(&graph)?;
    Ok(Payload { bytes, header, identifier, graph })
}

/// The constant table: `constant_data` (region or named), else the legacy inline
/// `constant_buffer`. Entry 0 is the reserved "no data".
fn constants(
    bytes: &[u8],
    fb_bytes: &[u8],
    base: usize,
    header: Option<&Header>,
    root: &fb::XNNGraph<'_>,
) -> Result<Vec<Option<Constant>>> {
    let mut out = Vec::new();
    if let Some(table) = root.constant_data().filter(|t| !t.is_empty()) {
        out.reserve(table.len());
        for (i, c) in table.iter().enumerate() {
            if i == 0 {
                out.push(None);
                continue;
            }
            let field = || format!("constant_data[{i}]");
            if let Some(key) = c.named_key() {
                out.push(Some(Constant::Named { key: key.to_string(), size: c.size() }));
                continue;
            }
            let Some(h) = header else {
                return Err(invalid(
                    field(),
                    "an offset into the constant region, but the payload has no XH00 header",
                ));
            };
            let region = h.constants.end - h.constants.start;
            let fits = c.offset().checked_add(c.size()).filter(|&e| e <= region as u64);
            let Some(end) = fits else {
                return Err(invalid(
                    field(),
                    format!(
                        "offset {} + size {} is outside the {region}-byte constant region",
                        c.offset(),
                        c.size()
                    ),
                ));
            };
            let start = h.constants.start + c.offset() as usize;
            out.push(Some(Constant::Region(start..h.constants.start + end as usize)));
        }
    } else if let Some(table) = root.constant_buffer() {
        out.reserve(table.len());
        for (i, b) in table.iter().enumerate() {
            match b.storage().filter(|_| i > 0) {
                Some(s) => {
                    let start = (s.bytes().as_ptr() as usize)
                        .checked_sub(fb_bytes.as_ptr() as usize)
                        .map(|o| o + base)
                        .filter(|&o| o + s.len() <= bytes.len())
                        .ok_or_else(|| {
                            invalid(format!("constant_buffer[{i}]"), "outside the payload")
                        })?;
                    out.push(Some(Constant::Inline(start..start + s.len())));
                }
                None => out.push(None),
            }
        }
    }
    Ok(out)
}

fn datatype(code: i16, field: impl Fn() -> String) -> Result<DataType> {
    DataType::from_code(code).ok_or_else(|| invalid(field(), format!("unknown datatype {code}")))
}

fn scales(
    inline: Option<flatbuffers::Vector<'_, f32>>,
    buffer_idx: u32,
    num_constants: usize,
    field: impl Fn() -> String,
) -> Result<Scales> {
    if buffer_idx != 0 {
        if buffer_idx as usize >= num_constants {
            return Err(invalid(
                field(),
                format!("scale_buffer_idx {buffer_idx} is outside the {num_constants} constants"),
            ));
        }
        return Ok(Scales::Constant(buffer_idx));
    }
    Ok(Scales::Inline(inline.map(|v| v.iter().collect()).unwrap_or_default()))
}

fn quant(q: &fb::XNNQuantizedTensorValue<'_>, num_constants: usize, i: usize) -> Result<Quant> {
    let field = || format!("xvalues[{i}].quant_params");
    if let Some(p) = q.quant_params_as_per_tensor_quant() {
        return Ok(Quant::PerTensor { scale: p.scale(), zero_point: p.zero_point() });
    }
    if let Some(p) = q.quant_params_as_per_channel_quant() {
        let channel_dim = u32::try_from(p.channel_dim())
            .map_err(|_| invalid(field(), format!("channel_dim {}", p.channel_dim())))?;
        let scales = scales(p.scale(), p.scale_buffer_idx(), num_constants, field)?;
        let num_scales = match &scales {
            Scales::Inline(s) if p.num_scales() == 0 => s.len() as u32,
            _ => p.num_scales(),
        };
        return Ok(Quant::PerChannel { scales, channel_dim, num_scales });
    }
    if let Some(p) = q.quant_params_as_per_channel_group_quant() {
        let channel_dim = u32::try_from(p.channel_dim())
            .map_err(|_| invalid(field(), format!("channel_dim {}", p.channel_dim())))?;
        let group_size = u32::try_from(p.group_size())
            .ok()
            .filter(|&g| g > 0)
            .ok_or_else(|| invalid(field(), format!("group_size {}", p.group_size())))?;
        let scales = scales(p.scale(), p.scale_buffer_idx(), num_constants, field)?;
        let num_scales = match &scales {
            Scales::Inline(s) if p.num_scales() == 0 => s.len() as u32,
            _ => p.num_scales(),
        };
        return Ok(Quant::PerChannelGroup { scales, channel_dim, group_size, num_scales });
    }
    if let Some(p) = q.quant_params_as_per_token_dynamic_quant() {
        let n = u32::try_from(p.num_nonbatch_dims()).map_err(|_| {
            invalid(field(), format!("num_nonbatch_dims {}", p.num_nonbatch_dims()))
        })?;
        return Ok(Quant::PerTokenDynamic { num_nonbatch_dims: n });
    }
    Err(invalid(field(), "missing or unknown quantization parameters"))
}

fn values(root: &fb::XNNGraph<'_>, num_constants: usize) -> Result<Vec<Value>> {
    let Some(xvalues) = root.xvalues() else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(xvalues.len());
    for (i, xv) in xvalues.iter().enumerate() {
        let field = |f: &str| format!("xvalues[{i}].{f}");
        let (t, q) = if let Some(t) = xv.xvalue_union_as_xnntensor_value() {
            (t, None)
        } else if let Some(q) = xv.xvalue_union_as_xnnquantized_tensor_value() {
            let t = q.tensor_value().ok_or_else(|| invalid(field("tensor_value"), "missing"))?;
            (t, Some(quant(&q, num_constants, i)?))
        } else {
            return Err(invalid(field("xvalue_union"), "missing or unknown value kind"));
        };
        if t.id_out() as usize != i {
            return Err(invalid(
                field("id_out"),
                format!(
                    "{} is not the value's index {i} (nodes name values by id_out)",
                    t.id_out()
                ),
            ));
        }
        let dims: Vec<usize> =
            t.dims().map(|d| d.iter().map(|x| x as usize).collect()).unwrap_or_default();
        if dims.len() > MAX_RANK {
            return Err(invalid(
                field("dims"),
                format!("rank {} is over XNNPACK's {MAX_RANK}", dims.len()),
            ));
        }
        if t.num_dims() as usize != dims.len() {
            return Err(invalid(
                field("num_dims"),
                format!("{} but dims has {} entries", t.num_dims(), dims.len()),
            ));
        }
        let numel =
            dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).filter(|&n| n <= MAX_NUMEL);
        if numel.is_none() {
            return Err(invalid(field("dims"), format!("{dims:?} holds more than 2^40 elements")));
        }
        let dq_datatype = datatype(t.dq_datatype().0, || field("dq_datatype"))?;
        let datatype = datatype(t.datatype().0, || field("datatype"))?;
        let constant = match t.constant_buffer_idx() {
            0 => None,
            c if (c as usize) < num_constants => Some(c),
            c => {
                return Err(invalid(
                    field("constant_buffer_idx"),
                    format!("{c} is outside the {num_constants} constants"),
                ))
            }
        };
        let flags = t.flags();
        if flags & !(FLAG_EXTERNAL_INPUT | FLAG_EXTERNAL_OUTPUT) != 0 {
            return Err(invalid(field("flags"), format!("unknown flag bits 0x{flags:x}")));
        }
        let external_id = (t.external_id() != INVALID_ID).then_some(t.external_id());
        out.push(Value { datatype, dims, constant, external_id, flags, quant: q, dq_datatype });
    }
    Ok(out)
}

/// External ids are below `num_externs`, distinct, and only on values with a flag; a value is
/// not both an input and an output.
fn externals(g: &Graph) -> Result<()> {
    let mut seen: HashMap<u32, usize> = HashMap::new();
    for (i, v) in g.values.iter().enumerate() {
        let field = || format!("xvalues[{i}].external_id");
        match v.external_id {
            None if v.flags != 0 => {
                return Err(invalid(
                    field(),
                    "an external input/output flag without an external id",
                ))
            }
            None => {}
            Some(e) => {
                if e >= g.num_externs {
                    return Err(invalid(
                        field(),
                        format!("{e} is not below num_externs {}", g.num_externs),
                    ));
                }
                if let Some(j) = seen.insert(e, i) {
                    return Err(invalid(
                        field(),
                        format!("{e} is also the external id of xvalues[{j}]"),
                    ));
                }
                if v.flags == FLAG_EXTERNAL_INPUT | FLAG_EXTERNAL_OUTPUT {
                    return Err(invalid(
                        format!("xvalues[{i}].flags"),
                        "both an external input and output",
                    ));
                }
                if v.constant.is_some() {
                    return Err(invalid(
                        format!("xvalues[{i}].constant_buffer_idx"),
                        "an external value with constant data",
                    ));
                }
            }
        }
    }
    Ok(())
}

fn nodes(root: &fb::XNNGraph<'_>, num_values: usize) -> Result<Vec<Node>> {
    let Some(xnodes) = root.xnodes() else { return Ok(Vec::new()) };
    let mut out = Vec::with_capacity(xnodes.len());
    for (i, n) in xnodes.iter().enumerate() {
        let kind_code = n.xnode_union_type();
        let kind = kind_code.variant_name().filter(|_| kind_code != fb::XNodeUnion::NONE);
        let Some(kind) = kind else {
            return Err(invalid(
                format!("xnodes[{i}].xnode_union"),
                format!("unknown node kind {}", kind_code.0),
            ));
        };
        let op = op(&n, kind_code, i)?;
        let field = |what: &str| format!("xnodes[{i}] ({kind}).{what}");
        let check = |id: u32, what: &str| -> Result<()> {
            if (id as usize) < num_values {
                Ok(())
            } else {
                Err(invalid(
                    field(what),
                    format!("value id {id} is outside the {num_values} values"),
                ))
            }
        };
        for id in op.inputs() {
            check(id, "input")?;
        }
        for id in op.outputs() {
            check(id, "output")?;
        }
        let min_max = n.output_min_max().map(|m| (m.output_min(), m.output_max()));
        out.push(Node { kind, op, debug_handle: n.debug_handle(), min_max });
    }
    Ok(out)
}

fn opt_id(id: u32) -> Option<u32> {
    (id != INVALID_ID).then_some(id)
}

fn list(v: Option<flatbuffers::Vector<'_, u32>>) -> Vec<u32> {
    v.map(|v| v.iter().collect()).unwrap_or_default()
}

fn op(n: &fb::XNode<'_>, kind: fb::XNodeUnion, i: usize) -> Result<Op> {
    use fb::XNodeUnion as K;
    let missing = || invalid(format!("xnodes[{i}].xnode_union"), "the node's table is missing");
    let binary = |kind: BinaryKind, t: Option<fb::_XNNNode2x1<'_>>| -> Result<Op> {
        let t = t.ok_or_else(missing)?;
        Ok(Op::Binary {
            kind,
            a: t.input1_id(),
            b: t.input2_id(),
            output: t.output_id(),
            flags: t.flags(),
        })
    };
    let unary = |kind: UnaryKind, t: Option<fb::_XNNNode1x1<'_>>| -> Result<Op> {
        let t = t.ok_or_else(missing)?;
        Ok(Op::Unary { kind, input: t.input_id(), output: t.output_id(), flags: t.flags() })
    };
    let conv = |kind: ConvKind, c: Option<fb::_XNNNodeConv<'_>>| -> Result<Op> {
        let c = c.ok_or_else(missing)?;
        Ok(Op::Conv(Conv {
            kind,
            padding: [c.padding_top(), c.padding_right(), c.padding_bottom(), c.padding_left()],
            kernel: [c.kernel_height(), c.kernel_width()],
            stride: [c.subsampling_height(), c.subsampling_width()],
            dilation: [c.dilation_height(), c.dilation_width()],
            group_input_channels: c.group_input_channels(),
            group_output_channels: c.group_output_channels(),
            groups: c.groups(),
            adjustment: [c.adjustment_height(), c.adjustment_width()],
            input: c.input1_id(),
            filter: c.filter_id(),
            bias: opt_id(c.bias_id()),
            output: c.output_id(),
            flags: c.flags(),
        }))
    };
    let pool = |max: bool, p: Option<fb::_XNNPooling2D<'_>>| -> Result<Op> {
        let p = p.ok_or_else(missing)?;
        Ok(Op::Pool(Pool {
            max,
            padding: [p.padding_top(), p.padding_right(), p.padding_bottom(), p.padding_left()],
            pooling: [p.pooling_height(), p.pooling_width()],
            stride: [p.stride_height(), p.stride_width()],
            dilation: [p.dilation_height(), p.dilation_width()],
            input: p.input_id(),
            output: p.output_id(),
            flags: p.flags(),
        }))
    };
    let cat = |count: usize, c: Option<fb::_XNNCat<'_>>| -> Result<Op> {
        let c = c.ok_or_else(missing)?;
        let all = [c.input1_id(), c.input2_id(), c.input3_id(), c.input4_id(), c.input5_id()];
        Ok(Op::Concat { axis: c.axis(), inputs: all[..count].to_vec(), output: c.output_id() })
    };
    Ok(match kind {
        K::XNNAdd => binary(BinaryKind::Add, n.xnode_union_as_xnnadd())?,
        K::XNNSubtract => binary(BinaryKind::Subtract, n.xnode_union_as_xnnsubtract())?,
        K::XNNMultiply => binary(BinaryKind::Multiply, n.xnode_union_as_xnnmultiply())?,
        K::XNNDiv => binary(BinaryKind::Div, n.xnode_union_as_xnndiv())?,
        K::XNNMinimum => binary(BinaryKind::Minimum, n.xnode_union_as_xnnminimum())?,
        K::XNNMaximum => binary(BinaryKind::Maximum, n.xnode_union_as_xnnmaximum())?,
        K::XNNPReLU => binary(BinaryKind::PReLU, n.xnode_union_as_xnnpre_lu())?,
        K::XNNBatchMatrixMultiply => {
            binary(BinaryKind::BatchMatrixMultiply, n.xnode_union_as_xnnbatch_matrix_multiply())?
        }
        K::XNNSoftmax => unary(UnaryKind::Softmax, n.xnode_union_as_xnnsoftmax())?,
        K::XNNSigmoid => unary(UnaryKind::Sigmoid, n.xnode_union_as_xnnsigmoid())?,
        K::XNNClamp => unary(UnaryKind::Clamp, n.xnode_union_as_xnnclamp())?,
        K::XNNFloor => unary(UnaryKind::Floor, n.xnode_union_as_xnnfloor())?,
        K::XNNConvert => unary(UnaryKind::Convert, n.xnode_union_as_xnnconvert())?,
        K::XNNGlobalAvgPooling2d => {
            unary(UnaryKind::GlobalAvgPooling2d, n.xnode_union_as_xnnglobal_avg_pooling_2d())?
        }
        K::XNNSquareRoot => unary(UnaryKind::SquareRoot, n.xnode_union_as_xnnsquare_root())?,
        K::XNNCeiling => unary(UnaryKind::Ceiling, n.xnode_union_as_xnnceiling())?,
        K::XNNHardswish => unary(UnaryKind::Hardswish, n.xnode_union_as_xnnhardswish())?,
        K::XNNNegate => unary(UnaryKind::Negate, n.xnode_union_as_xnnnegate())?,
        K::XNNSquare => unary(UnaryKind::Square, n.xnode_union_as_xnnsquare())?,
        K::XNNAbs => unary(UnaryKind::Abs, n.xnode_union_as_xnnabs())?,
        K::XNNReciprocalSquareRoot => {
            unary(UnaryKind::ReciprocalSquareRoot, n.xnode_union_as_xnnreciprocal_square_root())?
        }
        K::XNNLog => unary(UnaryKind::Log, n.xnode_union_as_xnnlog())?,
        K::XNNGelu => unary(UnaryKind::Gelu, n.xnode_union_as_xnngelu())?,
        K::XNNTanh => unary(UnaryKind::Tanh, n.xnode_union_as_xnntanh())?,
        K::XNNExp => unary(UnaryKind::Exp, n.xnode_union_as_xnnexp())?,
        K::XNNSin => unary(UnaryKind::Sin, n.xnode_union_as_xnnsin())?,
        K::XNNCopy => unary(UnaryKind::Copy, n.xnode_union_as_xnncopy())?,
        K::XNNCos => unary(UnaryKind::Cos, n.xnode_union_as_xnncos())?,
        K::XNNConv2d => conv(ConvKind::Conv2d, n.xnode_union_as_xnnconv_2d())?,
        K::XNNDepthwiseConv2d => {
            conv(ConvKind::DepthwiseConv2d, n.xnode_union_as_xnndepthwise_conv_2d())?
        }
        K::XNNConvTranspose2d => {
            conv(ConvKind::ConvTranspose2d, n.xnode_union_as_xnnconv_transpose_2d())?
        }
        K::XNNAvgPooling2d => pool(false, n.xnode_union_as_xnnavg_pooling_2d())?,
        K::XNNMaxPooling2d => pool(true, n.xnode_union_as_xnnmax_pooling_2d())?,
        K::XNNConcatenate2 => cat(2, n.xnode_union_as_xnnconcatenate_2())?,
        K::XNNConcatenate3 => cat(3, n.xnode_union_as_xnnconcatenate_3())?,
        K::XNNConcatenate4 => cat(4, n.xnode_union_as_xnnconcatenate_4())?,
        K::XNNConcatenate5 => cat(5, n.xnode_union_as_xnnconcatenate_5())?,
        K::XNNFullyConnected => {
            let f = n.xnode_union_as_xnnfully_connected().ok_or_else(missing)?;
            Op::FullyConnected {
                input: f.input1_id(),
                filter: f.filter_id(),
                bias: opt_id(f.bias_id()),
                output: f.output_id(),
                flags: f.flags(),
            }
        }
        K::XNNArgMaxPooling2d => {
            let p = n.xnode_union_as_xnnarg_max_pooling_2d().ok_or_else(missing)?;
            Op::ArgMaxPool {
                padding: [p.padding_top(), p.padding_right(), p.padding_bottom(), p.padding_left()],
                pooling: [p.pooling_height(), p.pooling_width()],
                input: p.input_id(),
                values: p.output_value_id(),
                indices: p.output_index_id(),
            }
        }
        K::XNNStaticTranspose => {
            let t = n.xnode_union_as_xnnstatic_transpose().ok_or_else(missing)?;
            Op::Transpose { perm: list(t.perm()), input: t.input_id(), output: t.output_id() }
        }
        K::XNNStaticReshape => {
            let t = n.xnode_union_as_xnnstatic_reshape().ok_or_else(missing)?;
            Op::Reshape {
                new_shape: list(t.new_shape()),
                input: t.input_id(),
                output: t.output_id(),
            }
        }
        K::XNNStaticSlice => {
            let t = n.xnode_union_as_xnnstatic_slice().ok_or_else(missing)?;
            Op::Slice {
                offsets: list(t.offsets()),
                sizes: list(t.sizes()),
                input: t.input_id(),
                output: t.output_id(),
            }
        }
        K::XNNStaticConstantPad => {
            let t = n.xnode_union_as_xnnstatic_constant_pad().ok_or_else(missing)?;
            Op::Pad {
                pre: list(t.pre_paddings()),
                post: list(t.post_paddings()),
                value: t.padding_value(),
                input: t.input_id(),
                output: t.output_id(),
            }
        }
        K::XNNStaticResizeBilinear2D => {
            let t = n.xnode_union_as_xnnstatic_resize_bilinear_2_d().ok_or_else(missing)?;
            Op::ResizeBilinear {
                height: t.new_height(),
                width: t.new_width(),
                input: t.input_id(),
                output: t.output_id(),
                flags: t.flags(),
            }
        }
        K::XNNLeakyReLU => {
            let t = n.xnode_union_as_xnnleaky_re_lu().ok_or_else(missing)?;
            Op::LeakyRelu { slope: t.negative_slope(), input: t.input_id(), output: t.output_id() }
        }
        K::XNNELU => {
            let t = n.xnode_union_as_xnnelu().ok_or_else(missing)?;
            Op::Elu { alpha: t.alpha(), input: t.input_id(), output: t.output_id() }
        }
        K::XNNScaledDotProductAttention => {
            let t = n.xnode_union_as_xnnscaled_dot_product_attention().ok_or_else(missing)?;
            Op::Sdpa {
                query: t.query_id(),
                key: t.key_id(),
                value: t.value_id(),
                scale: t.scale_id(),
                mask: t.mask_id(),
                output: t.output_id(),
            }
        }
        other => {
            return Err(invalid(
                format!("xnodes[{i}].xnode_union"),
                format!("unknown node kind {}", other.0),
            ))
        }
    })
}
