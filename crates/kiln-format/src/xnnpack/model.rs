//! The payload's header and the graph decoded into plain owned structs: what the decoder
//! fills and the dump, the summary and kiln's lowering read.

use std::ops::Range;

/// The format name used in errors.
pub(crate) const FORMAT: &str = "xnnpack";
/// XNNPACK's rank limit (`XNN_MAX_TENSOR_DIMS`).
pub const MAX_RANK: usize = 6;
/// The id XNNPACK uses for "no value" (an absent bias, an internal value's external id).
pub const INVALID_ID: u32 = u32::MAX;

/// A verified, decoded XNNPACK payload.
#[derive(Clone, Debug)]
pub struct Payload<'a> {
    /// The payload bytes (the delegate's processed data).
    pub bytes: &'a [u8],
    /// The XH00 header, when the payload has one.
    pub header: Option<Header>,
    /// The flatbuffer's identifier (`XN01`, or the legacy `XN00`).
    pub identifier: [u8; 4],
    /// The decoded graph.
    pub graph: Graph,
}

/// The XH00 header: where the flatbuffer and the constant region are in the payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The header length field (30 in every writer so far).
    pub length: u16,
    /// The flatbuffer's bytes.
    pub flatbuffer: Range<usize>,
    /// The constant region's bytes.
    pub constants: Range<usize>,
}

/// XNNPACK element types (`XNNDatatype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum DataType {
    Invalid,
    Fp32,
    Fp16,
    /// Quantized int8, one scale and zero point.
    QInt8,
    /// Quantized uint8, one scale and zero point.
    QUInt8,
    /// Quantized int32, one scale and zero point.
    QInt32,
    /// Quantized int8 with per-channel scales (zero point 0).
    QCInt8,
    /// Quantized int32 with per-channel scales (zero point 0).
    QCInt32,
    /// 4-bit with per-channel scales (zero point 8), two per byte.
    QCInt4,
    /// Int8 quantized at run time per row.
    QDInt8,
    /// 4-bit with per-block bf16 scales (zero point 8), two per byte.
    QBInt4,
    /// Int8 packed with its row parameters.
    QPInt8,
    Int32,
    /// Packed float32.
    PFp32,
    Bf16,
}

impl DataType {
    /// From the schema's code.
    pub fn from_code(code: i16) -> Option<DataType> {
        use DataType::*;
        Some(match code {
            0 => Invalid,
            1 => Fp32,
            2 => Fp16,
            3 => QInt8,
            4 => QUInt8,
            5 => QInt32,
            6 => QCInt8,
            7 => QCInt32,
            8 => QCInt4,
            9 => QDInt8,
            10 => QBInt4,
            11 => QPInt8,
            12 => Int32,
            13 => PFp32,
            14 => Bf16,
            _ => return None,
        })
    }

    /// The schema's name (`xnn_datatype_fp32`, ...).
    pub fn name(self) -> &'static str {
        use DataType::*;
        match self {
            Invalid => "xnn_datatype_invalid",
            Fp32 => "xnn_datatype_fp32",
            Fp16 => "xnn_datatype_fp16",
            QInt8 => "xnn_datatype_qint8",
            QUInt8 => "xnn_datatype_quint8",
            QInt32 => "xnn_datatype_qint32",
            QCInt8 => "xnn_datatype_qcint8",
            QCInt32 => "xnn_datatype_qcint32",
            QCInt4 => "xnn_datatype_qcint4",
            QDInt8 => "xnn_datatype_qdint8",
            QBInt4 => "xnn_datatype_qbint4",
            QPInt8 => "xnn_datatype_qpint8",
            Int32 => "xnn_datatype_int32",
            PFp32 => "xnn_datatype_pfp32",
            Bf16 => "xnn_datatype_bf16",
        }
    }

    /// Bits per stored element (4-bit types pack two per byte).
    pub fn bits(self) -> usize {
        use DataType::*;
        match self {
            Invalid => 0,
            QCInt4 | QBInt4 => 4,
            QInt8 | QUInt8 | QCInt8 | QDInt8 | QPInt8 => 8,
            Fp16 | Bf16 => 16,
            Fp32 | QInt32 | QCInt32 | Int32 | PFp32 => 32,
        }
    }
}

/// Where per-channel scales are: inline in the flatbuffer, or a constant (fp32, or bf16 for
/// per-group scales).
#[derive(Clone, Debug, PartialEq)]
pub enum Scales {
    /// The `scale` vector.
    Inline(Vec<f32>),
    /// `constant_data[index]` (`scale_buffer_idx`).
    Constant(u32),
}

/// How a quantized value maps to real numbers (`XNNQuantParams`).
#[derive(Clone, Debug, PartialEq)]
pub enum Quant {
    /// One scale and zero point.
    PerTensor {
        /// Scale.
        scale: f32,
        /// Zero point.
        zero_point: i32,
    },
    /// One scale per index of dim `channel_dim`.
    PerChannel {
        /// The scales.
        scales: Scales,
        /// The channel dim.
        channel_dim: u32,
        /// The number of scales.
        num_scales: u32,
    },
    /// One scale per block of `group_size` elements along the rows of a 2-D weight.
    PerChannelGroup {
        /// The scales, `[rows][cols / group_size]`.
        scales: Scales,
        /// The channel dim.
        channel_dim: u32,
        /// Elements per block.
        group_size: u32,
        /// The number of scales.
        num_scales: u32,
    },
    /// Quantized at run time, one scale and zero point per row of the trailing
    /// `num_nonbatch_dims` dims.
    PerTokenDynamic {
        /// Dims per row.
        num_nonbatch_dims: u32,
    },
}

impl Quant {
    /// The schema's table name.
    pub fn name(&self) -> &'static str {
        match self {
            Quant::PerTensor { .. } => "PerTensorQuant",
            Quant::PerChannel { .. } => "PerChannelQuant",
            Quant::PerChannelGroup { .. } => "PerChannelGroupQuant",
            Quant::PerTokenDynamic { .. } => "PerTokenDynamicQuant",
        }
    }
}

/// Value flag: an external input.
pub const FLAG_EXTERNAL_INPUT: u32 = 1;
/// Value flag: an external output.
pub const FLAG_EXTERNAL_OUTPUT: u32 = 2;

/// One value of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// Element type.
    pub datatype: DataType,
    /// Physical dims (NHWC for channels-last values).
    pub dims: Vec<usize>,
    /// The constant holding its data (`constant_buffer_idx`, never 0).
    pub constant: Option<u32>,
    /// Its index in the delegate call's arguments, for an external value.
    pub external_id: Option<u32>,
    /// `flags`: [`FLAG_EXTERNAL_INPUT`], [`FLAG_EXTERNAL_OUTPUT`].
    pub flags: u32,
    /// Quantization, for a quantized value.
    pub quant: Option<Quant>,
    /// The legacy dynamic-quantization target type (`XN00` payloads).
    pub dq_datatype: DataType,
}

impl Value {
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }
}

/// Where constant `i` of `constant_data` is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Constant {
    /// In the payload's constant region (a checked range of [`Payload::bytes`]).
    Region(Range<usize>),
    /// In the program's named data under this key (`size` bytes).
    Named {
        /// The key.
        key: String,
        /// The size the payload records.
        size: u64,
    },
    /// Inline legacy storage (`constant_buffer[i].storage`, a range of [`Payload::bytes`]).
    Inline(Range<usize>),
}

/// Binary node kinds (`_XNNNode2x1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum BinaryKind {
    Add,
    Subtract,
    Multiply,
    Div,
    Minimum,
    Maximum,
    PReLU,
    BatchMatrixMultiply,
}

/// Unary node kinds (`_XNNNode1x1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum UnaryKind {
    Softmax,
    Sigmoid,
    Clamp,
    Floor,
    Convert,
    GlobalAvgPooling2d,
    SquareRoot,
    Ceiling,
    Hardswish,
    Negate,
    Square,
    Abs,
    ReciprocalSquareRoot,
    Log,
    Gelu,
    Tanh,
    Exp,
    Sin,
    Copy,
    Cos,
}

/// Convolution node kinds (`_XNNNodeConv`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ConvKind {
    Conv2d,
    DepthwiseConv2d,
    ConvTranspose2d,
}

/// A convolution's fields (`_XNNNodeConv`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Conv {
    pub kind: ConvKind,
    /// Top, right, bottom, left.
    pub padding: [u32; 4],
    /// Height, width.
    pub kernel: [u32; 2],
    pub stride: [u32; 2],
    pub dilation: [u32; 2],
    pub group_input_channels: u32,
    pub group_output_channels: u32,
    pub groups: u32,
    /// A transposed convolution's output padding.
    pub adjustment: [u32; 2],
    pub input: u32,
    pub filter: u32,
    pub bias: Option<u32>,
    pub output: u32,
    pub flags: u32,
}

/// A pooling's fields (`_XNNPooling2D`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct Pool {
    pub max: bool,
    pub padding: [u32; 4],
    pub pooling: [u32; 2],
    pub stride: [u32; 2],
    pub dilation: [u32; 2],
    pub input: u32,
    pub output: u32,
    pub flags: u32,
}

/// What a node computes, with checked value ids.
#[derive(Clone, Debug, PartialEq)]
#[allow(missing_docs)]
pub enum Op {
    Binary { kind: BinaryKind, a: u32, b: u32, output: u32, flags: u32 },
    Unary { kind: UnaryKind, input: u32, output: u32, flags: u32 },
    FullyConnected { input: u32, filter: u32, bias: Option<u32>, output: u32, flags: u32 },
    Conv(Conv),
    Pool(Pool),
    ArgMaxPool { padding: [u32; 4], pooling: [u32; 2], input: u32, values: u32, indices: u32 },
    Transpose { perm: Vec<u32>, input: u32, output: u32 },
    Reshape { new_shape: Vec<u32>, input: u32, output: u32 },
    Slice { offsets: Vec<u32>, sizes: Vec<u32>, input: u32, output: u32 },
    Pad { pre: Vec<u32>, post: Vec<u32>, value: f32, input: u32, output: u32 },
    ResizeBilinear { height: u32, width: u32, input: u32, output: u32, flags: u32 },
    Concat { axis: u32, inputs: Vec<u32>, output: u32 },
    LeakyRelu { slope: f32, input: u32, output: u32 },
    Elu { alpha: f32, input: u32, output: u32 },
    Sdpa { query: u32, key: u32, value: u32, scale: u32, mask: u32, output: u32 },
}

impl Op {
    /// The values the node reads, in order.
    pub fn inputs(&self) -> Vec<u32> {
        match self {
            Op::Binary { a, b, .. } => vec![*a, *b],
            Op::Unary { input, .. }
            | Op::Transpose { input, .. }
            | Op::Reshape { input, .. }
            | Op::Slice { input, .. }
            | Op::Pad { input, .. }
            | Op::ResizeBilinear { input, .. }
            | Op::LeakyRelu { input, .. }
            | Op::Elu { input, .. }
            | Op::ArgMaxPool { input, .. } => vec![*input],
            Op::Pool(p) => vec![p.input],
            Op::FullyConnected { input, filter, bias, .. } => {
                [*input, *filter].into_iter().chain(*bias).collect()
            }
            Op::Conv(c) => [c.input, c.filter].into_iter().chain(c.bias).collect(),
            Op::Concat { inputs, .. } => inputs.clone(),
            Op::Sdpa { query, key, value, scale, mask, .. } => {
                vec![*query, *key, *value, *scale, *mask]
            }
        }
    }

    /// The values the node writes.
    pub fn outputs(&self) -> Vec<u32> {
        match self {
            Op::Binary { output, .. }
            | Op::Unary { output, .. }
            | Op::FullyConnected { output, .. }
            | Op::Transpose { output, .. }
            | Op::Reshape { output, .. }
            | Op::Slice { output, .. }
            | Op::Pad { output, .. }
            | Op::ResizeBilinear { output, .. }
            | Op::Concat { output, .. }
            | Op::LeakyRelu { output, .. }
            | Op::Elu { output, .. }
            | Op::Sdpa { output, .. } => vec![*output],
            Op::Conv(c) => vec![c.output],
            Op::Pool(p) => vec![p.output],
            Op::ArgMaxPool { values, indices, .. } => vec![*values, *indices],
        }
    }
}

/// One node.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The schema's node kind (`XNNConv2d`, ...).
    pub kind: &'static str,
    /// What it computes.
    pub op: Op,
    /// The id linking it to the exported graph's node.
    pub debug_handle: u32,
    /// The fused output clamp (`output_min_max`), when present.
    pub min_max: Option<(f32, f32)>,
}

/// The decoded graph, with every id checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// `version` ("0" in every writer so far).
    pub version: String,
    /// Nodes in execution order.
    pub nodes: Vec<Node>,
    /// Values; nodes name them by index.
    pub values: Vec<Value>,
    /// `num_externs`.
    pub num_externs: u32,
    /// `input_ids` (informational; the runtime uses value flags).
    pub input_ids: Vec<u32>,
    /// `output_ids` (informational).
    pub output_ids: Vec<u32>,
    /// Constants by index; index 0 is the reserved "no data" entry (`None`).
    pub constants: Vec<Option<Constant>>,
}
