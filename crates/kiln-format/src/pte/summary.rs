//! The summary behind `kiln inspect` for a `.pte`: methods with their inputs and outputs,
//! instruction counts, operators, delegates, segments and constant sizes.

use serde::Serialize;

use super::program::{Constants, Program, Segment, Value};
use crate::error::Result;

/// `kiln inspect --json` for a `.pte`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Always `"pte"`.
    pub format: &'static str,
    /// One entry per method, in file order.
    pub methods: Vec<MethodSummary>,
    /// `Program.segments` as written (offset relative to the segment base).
    pub segments: Vec<Segment>,
    /// Whether the file has the `eh00` header.
    pub extended_header: bool,
    /// Absolute file offset of the segment data (0 when none).
    pub segment_base_offset: u64,
    /// Bytes of constant data (the constant segment, or the inline buffers).
    pub constants_size: u64,
    /// Number of constant buffers, the reserved entry 0 included.
    pub constant_buffers: usize,
    /// Keys of `Program.named_data`, with their sizes.
    pub named_data: Vec<NamedDataSummary>,
    /// File size in bytes.
    pub file_size: u64,
}

/// One method of a [`Summary`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MethodSummary {
    /// Method name.
    pub name: String,
    /// Inputs in order.
    pub inputs: Vec<IoSummary>,
    /// Outputs in order.
    pub outputs: Vec<IoSummary>,
    /// Instructions over all chains.
    pub instructions: usize,
    /// `name.overload` per operator table entry, in table order.
    pub operators: Vec<String>,
    /// Delegate backend ids, in table order.
    pub delegates: Vec<String>,
    /// Number of values.
    pub values: usize,
    /// Sizes of the planned arenas (memory_id 1, 2, ...).
    pub planned_buffers: Vec<u64>,
    /// What each `XnnpackBackend` delegate's payload holds.
    pub xnnpack: Vec<XnnpackDelegate>,
    /// What each `KilnNpuBackend` delegate holds.
    pub npu: Vec<NpuDelegateSummary>,
}

/// One `KilnNpuBackend` delegate of a method: its fused operators with their origins, its
/// buffers and the tensors in them, or why its data does not parse.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NpuDelegateSummary {
    /// Index in the method's delegate table.
    pub delegate: usize,
    /// The manifest: buffers, tensors, call inputs and outputs, arg map, nodes.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<crate::npu_delegate::Manifest>,
    /// Bytes of the fused transaction.
    pub transaction_bytes: u64,
    /// Bytes of the const buffer.
    pub const_bytes: u64,
    /// The reader's error, when the data is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One `XnnpackBackend` delegate of a method: its payload's summary, or why it does not
/// parse.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct XnnpackDelegate {
    /// Index in the method's delegate table.
    pub delegate: usize,
    /// The payload's node histogram, values, constants and quantization kinds.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub summary: Option<crate::xnnpack::Summary>,
    /// The reader's error, when the payload is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One input or output: a tensor's dtype and shape, or a non-tensor value's kind.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IoSummary {
    /// Lower-case ExecuTorch dtype name for tensors, else the value kind in snake case (`int`,
    /// `bool`, `int_list`, `none`, ...).
    pub dtype: String,
    /// Tensor shape (upper bound for dynamic tensors); `None` for non-tensors.
    pub shape: Option<Vec<i64>>,
    /// `static`, `dynamic_bound` or `dynamic_unbound` for tensors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamism: Option<&'static str>,
    /// The serialized value of an Int, Bool or Double: what a constant method (an LLM
    /// export's `get_max_seq_len`, say) returns, or the traced value of such an input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<ScalarValue>,
}

/// A scalar value as serialized (JSON: a number or a boolean).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ScalarValue {
    /// An Int.
    Int(i64),
    /// A Bool.
    Bool(bool),
    /// A Double.
    Double(f64),
}

impl std::fmt::Display for ScalarValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScalarValue::Int(v) => write!(f, "{v}"),
            ScalarValue::Bool(v) => write!(f, "{v}"),
            ScalarValue::Double(v) => write!(f, "{v}"),
        }
    }
}

/// One named data entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NamedDataSummary {
    /// The key.
    pub key: String,
    /// Segment index.
    pub segment: u32,
    /// Size of the segment in bytes.
    pub size: u64,
}

/// The summaries of method `m`'s XNNPACK payloads.
fn xnnpack_delegates(
    p: &Program<'_>,
    m: &super::program::Method<'_>,
) -> Result<Vec<XnnpackDelegate>> {
    let mut out = Vec::new();
    for (delegate, d) in m.delegates().enumerate() {
        let d = d?;
        if d.id != "XnnpackBackend" {
            continue;
        }
        let parsed = crate::xnnpack::Payload::parse(p.delegate_data(&d)?);
        let (summary, error) = match parsed {
            Ok(payload) => (Some(crate::xnnpack::summarize(&payload)), None),
            Err(e) => (None, Some(e.to_string())),
        };
        out.push(XnnpackDelegate { delegate, summary, error });
    }
    Ok(out)
}

/// The summaries of method `m`'s NPU delegates.
fn npu_delegates(
    p: &Program<'_>,
    m: &super::program::Method<'_>,
) -> Result<Vec<NpuDelegateSummary>> {
    let mut out = Vec::new();
    for (delegate, d) in m.delegates().enumerate() {
        let d = d?;
        if d.id != crate::npu_delegate::BACKEND_ID {
            continue;
        }
        out.push(match crate::npu_delegate::NpuDelegate::parse(p.delegate_data(&d)?) {
            Ok(n) => NpuDelegateSummary {
                delegate,
                transaction_bytes: n.txn.len() as u64,
                const_bytes: n.const_buffer.len() as u64,
                manifest: Some(n.manifest),
                error: None,
            },
            Err(e) => NpuDelegateSummary {
                delegate,
                manifest: None,
                transaction_bytes: 0,
                const_bytes: 0,
                error: Some(e.to_string()),
            },
        });
    }
    Ok(out)
}

/// Summarises a verified program.
pub fn summarize(p: &Program<'_>) -> Result<Summary> {
    let mut methods = Vec::with_capacity(p.num_methods());
    for m in p.methods() {
        let io = |indices: Vec<usize>| -> Result<Vec<IoSummary>> {
            indices.into_iter().map(|i| Ok(io_summary(&m.value(i)?))).collect()
        };
        methods.push(MethodSummary {
            name: m.name().to_string(),
            inputs: io(m.inputs()?)?,
            outputs: io(m.outputs()?)?,
            instructions: m.num_instructions(),
            operators: m.operators().map(|o| o.map(|o| o.full_name())).collect::<Result<_>>()?,
            delegates: m.delegates().map(|d| d.map(|d| d.id.to_string())).collect::<Result<_>>()?,
            values: m.num_values(),
            planned_buffers: m.planned_buffer_sizes(),
            xnnpack: xnnpack_delegates(p, &m)?,
            npu: npu_delegates(p, &m)?,
        });
    }
    let constants_size = match p.constants() {
        Constants::Segment { segment_index, .. } => p.segment(segment_index as usize)?.size,
        Constants::Inline(b) => b.iter().map(|b| b.storage().map_or(0, |s| s.len() as u64)).sum(),
        Constants::None => 0,
    };
    let named_data = p
        .named_data()
        .map(|(key, segment)| {
            Ok(NamedDataSummary {
                key: key.to_string(),
                segment,
                size: p.segment(segment as usize)?.size,
            })
        })
        .collect::<Result<_>>()?;
    Ok(Summary {
        format: "pte",
        methods,
        segments: p.segments().collect(),
        extended_header: p.layout().header.is_some(),
        segment_base_offset: p.layout().segment_base_offset,
        constants_size,
        constant_buffers: p.num_constant_buffers(),
        named_data,
        file_size: p.bytes().len() as u64,
    })
}

fn io_summary(v: &Value<'_>) -> IoSummary {
    match v {
        Value::Tensor(t) => IoSummary {
            dtype: t.dtype().schema_name().to_string(),
            shape: Some(t.sizes().iter().map(i64::from).collect()),
            dynamism: Some(t.dynamism().name()),
            value: None,
        },
        other => IoSummary {
            dtype: other.kind().snake_name().to_string(),
            shape: None,
            dynamism: None,
            value: match *other {
                Value::Int(v) => Some(ScalarValue::Int(v)),
                Value::Bool(v) => Some(ScalarValue::Bool(v)),
                Value::Double(v) => Some(ScalarValue::Double(v)),
                _ => None,
            },
        },
    }
}
