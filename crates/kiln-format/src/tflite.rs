//! A minimal TensorFlow Lite (`TFL3`) reader: operator codes (with the deprecated/builtin code
//! rule), subgraphs, operators with their custom options, tensors with shape, type and
//! quantization, and buffers.
//!
//! The bytes are opened only through the flatbuffers verifier, with caps derived from the file
//! size, using the generated code of kiln's minimal schema (`kiln-schema/schema/tflite.fbs`);
//! everything below works on verified tables. [`summary`] is what `kiln inspect` shows of a
//! model.

pub mod summary;

use flatbuffers::VerifierOptions;

use crate::error::{Error, Result};

/// Generated accessors for the TFLite tables kiln reads (verified before use).
pub use kiln_schema::tflite::tflite as schema;

const FORMAT: &str = "tflite";

/// `BuiltinOperator::CUSTOM`.
pub const BUILTIN_CUSTOM: i32 = 32;

/// The TFLite file identifier at bytes 4..8.
pub const IDENTIFIER: &[u8; 4] = b"TFL3";

/// Verifier caps for a flatbuffer of `len` bytes: depth 64, at most one table per 4 bytes, and
/// an apparent (tree-expanded) size of at most 8 times the buffer.
pub fn verifier_options(len: usize) -> VerifierOptions {
    VerifierOptions {
        max_depth: 64,
        max_tables: len / 4 + 16,
        max_apparent_size: len.saturating_mul(8).saturating_add(1 << 16),
        ignore_missing_null_terminator: false,
    }
}

/// Byte offset of `sub` inside `base`, when `sub` is a sub-slice of it.
pub(crate) fn offset_in(base: &[u8], sub: &[u8]) -> Option<u64> {
    let start = (sub.as_ptr() as usize).checked_sub(base.as_ptr() as usize)?;
    (start.checked_add(sub.len())? <= base.len()).then_some(start as u64)
}

/// A verified TFLite model.
#[derive(Clone, Copy)]
pub struct Model<'a> {
    data: &'a [u8],
    root: schema::Model<'a>,
}

/// One entry of `Model.operator_codes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperatorCode<'a> {
    /// `deprecated_builtin_code` (a byte; codes above 127 need `builtin_code`).
    pub deprecated_builtin_code: i8,
    /// `custom_code`, for custom operators.
    pub custom_code: Option<&'a str>,
    /// Operator version.
    pub version: i32,
    /// `builtin_code` (0 when absent, as in older files).
    pub builtin_code: i32,
}

impl OperatorCode<'_> {
    /// The effective builtin code: `max(builtin_code, deprecated_builtin_code)`, as TFLite's
    /// `GetBuiltinCode` computes it.
    pub fn code(&self) -> i32 {
        self.builtin_code.max(i32::from(self.deprecated_builtin_code))
    }

    /// True for a custom operator with this `custom_code`.
    pub fn is_custom(&self, name: &str) -> bool {
        self.code() == BUILTIN_CUSTOM && self.custom_code == Some(name)
    }
}

/// Where an operator's custom options are and what they hold.
#[derive(Clone, Copy, Debug)]
pub struct CustomOptions<'a> {
    /// File offset of the first byte.
    pub offset: u64,
    /// The bytes.
    pub bytes: &'a [u8],
    /// `custom_options_format` (0 = FlexBuffers).
    pub format: i8,
}

/// One operator of one subgraph.
#[derive(Clone, Debug)]
pub struct OperatorRef<'a> {
    /// Subgraph index.
    pub subgraph: usize,
    /// Operator index within the subgraph.
    pub index: usize,
    /// `opcode_index` (0 when absent).
    pub opcode_index: u32,
    /// Its operator code, when `opcode_index` is in range.
    pub code: Option<OperatorCode<'a>>,
    /// Input tensor indices (-1 = optional input absent).
    pub inputs: Vec<i32>,
    /// Output tensor indices.
    pub outputs: Vec<i32>,
    /// Custom options: inline `custom_options`, or the `large_custom_options_*` range of the
    /// file when those are absent.
    pub custom_options: Option<CustomOptions<'a>>,
}

/// One tensor of one subgraph.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo<'a> {
    /// Index in the subgraph's tensor list.
    pub index: usize,
    /// Name.
    pub name: Option<&'a str>,
    /// Shape (empty for scalars or when absent).
    pub shape: Vec<i32>,
    /// `TensorType` code (see [`tensor_type_name`]).
    pub dtype: i8,
    /// Buffer index.
    pub buffer: u32,
    /// Quantization scales (empty when absent).
    pub scale: Vec<f32>,
    /// Quantization zero points (empty when absent).
    pub zero_point: Vec<i64>,
}

/// The name of a TFLite builtin operator code (`CONV_2D`, `FULLY_CONNECTED`, ...), or `None`
/// for a code this schema does not know. Circle keeps TFLite's numbering for every code >= 0
/// (its own operators are negative), so its generated enum names TFLite's operators.
pub fn builtin_operator_name(code: i32) -> Option<&'static str> {
    if code < 0 {
        return None;
    }
    kiln_schema::circle::circle::BuiltinOperator(code).variant_name()
}

/// The name of a TFLite `TensorType` code.
pub fn tensor_type_name(code: i8) -> &'static str {
    match code {
        0 => "FLOAT32",
        1 => "FLOAT16",
        2 => "INT32",
        3 => "UINT8",
        4 => "INT64",
        5 => "STRING",
        6 => "BOOL",
        7 => "INT16",
        8 => "COMPLEX64",
        9 => "INT8",
        10 => "FLOAT64",
        11 => "COMPLEX128",
        12 => "UINT64",
        13 => "RESOURCE",
        14 => "VARIANT",
        15 => "UINT32",
        16 => "UINT16",
        17 => "INT4",
        18 => "BFLOAT16",
        _ => "UNKNOWN",
    }
}

impl<'a> Model<'a> {
    /// Checks the `TFL3` identifier and verifies the flatbuffer.
    pub fn open(data: &'a [u8]) -> Result<Self> {
        let ident = data.get(4..8).unwrap_or_default();
        if ident != IDENTIFIER {
            return Err(Error::BadMagic {
                format: FORMAT,
                offset: 4,
                expected: "TFL3".into(),
                found: String::from_utf8_lossy(ident).into_owned(),
            });
        }
        let opts = verifier_options(data.len());
        let root = flatbuffers::root_with_opts::<schema::Model>(&opts, data)
            .map_err(|source| Error::Flatbuffer { format: FORMAT, source })?;
        Ok(Model { data, root })
    }

    /// The verified root table, for fields the helpers below do not cover.
    pub fn root(&self) -> schema::Model<'a> {
        self.root
    }

    /// The whole file.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Schema version.
    pub fn version(&self) -> u32 {
        self.root.version()
    }

    /// Description string.
    pub fn description(&self) -> Option<&'a str> {
        self.root.description()
    }

    /// Number of buffers.
    pub fn num_buffers(&self) -> usize {
        self.root.buffers().map_or(0, |b| b.len())
    }

    /// All operator codes, in order.
    pub fn operator_codes(&self) -> Vec<OperatorCode<'a>> {
        let Some(codes) = self.root.operator_codes() else { return Vec::new() };
        codes
            .iter()
            .map(|c| OperatorCode {
                deprecated_builtin_code: c.deprecated_builtin_code(),
                custom_code: c.custom_code(),
                version: c.version(),
                builtin_code: c.builtin_code(),
            })
            .collect()
    }

    /// Number of subgraphs.
    pub fn num_subgraphs(&self) -> usize {
        self.root.subgraphs().map_or(0, |s| s.len())
    }

    fn subgraph(&self, index: usize) -> Result<schema::SubGraph<'a>> {
        self.root.subgraphs().and_then(|s| s.iter().nth(index)).ok_or_else(|| {
            Error::invalid(FORMAT, format!("subgraphs[{index}]"), None, "no such subgraph")
        })
    }

    /// `(inputs, outputs, number of tensors, number of operators)` of subgraph `index`.
    pub fn subgraph_io(&self, index: usize) -> Result<(Vec<i32>, Vec<i32>, usize, usize)> {
        let sg = self.subgraph(index)?;
        Ok((
            sg.inputs().map(|v| v.iter().collect()).unwrap_or_default(),
            sg.outputs().map(|v| v.iter().collect()).unwrap_or_default(),
            sg.tensors().map_or(0, |t| t.len()),
            sg.operators().map_or(0, |o| o.len()),
        ))
    }

    /// Every operator of every subgraph, in order.
    pub fn operators(&self) -> Result<Vec<OperatorRef<'a>>> {
        let codes = self.operator_codes();
        let mut out = Vec::new();
        let Some(subgraphs) = self.root.subgraphs() else { return Ok(out) };
        for (si, sg) in subgraphs.iter().enumerate() {
            let Some(ops) = sg.operators() else { continue };
            for (oi, op) in ops.iter().enumerate() {
                let field = format!("subgraphs[{si}].operators[{oi}]");
                out.push(OperatorRef {
                    subgraph: si,
                    index: oi,
                    opcode_index: op.opcode_index(),
                    code: codes.get(op.opcode_index() as usize).copied(),
                    inputs: op.inputs().map(|v| v.iter().collect()).unwrap_or_default(),
                    outputs: op.outputs().map(|v| v.iter().collect()).unwrap_or_default(),
                    custom_options: self.custom_options(&op, &field)?,
                });
            }
        }
        Ok(out)
    }

    fn custom_options(
        &self,
        op: &schema::Operator<'a>,
        field: &str,
    ) -> Result<Option<CustomOptions<'a>>> {
        let format = op.custom_options_format();
        if let Some(v) = op.custom_options() {
            let bytes = v.bytes();
            let offset = offset_in(self.data, bytes).ok_or_else(|| {
                Error::invalid(FORMAT, format!("{field}.custom_options"), None, "outside the file")
            })?;
            return Ok(Some(CustomOptions { offset, bytes, format }));
        }
        // The interpreter uses the large_custom_options range only when the offset is > 1.
        let (offset, size) = (op.large_custom_options_offset(), op.large_custom_options_size());
        if offset > 1 {
            let r = crate::bytes::ByteReader::new(self.data, FORMAT);
            let bytes = r.slice(offset, size, &format!("{field}.large_custom_options"))?;
            return Ok(Some(CustomOptions { offset, bytes, format }));
        }
        Ok(None)
    }

    /// Tensor `index` of subgraph `subgraph`.
    pub fn tensor(&self, subgraph: usize, index: i32) -> Result<TensorInfo<'a>> {
        let field = format!("subgraphs[{subgraph}].tensors[{index}]");
        let t = usize::try_from(index)
            .ok()
            .and_then(|i| self.subgraph(subgraph).ok()?.tensors()?.iter().nth(i))
            .ok_or_else(|| Error::invalid(FORMAT, field, None, "no such tensor"))?;
        let q = t.quantization();
        Ok(TensorInfo {
            index: index as usize,
            name: t.name(),
            shape: t.shape().map(|v| v.iter().collect()).unwrap_or_default(),
            dtype: t.type_(),
            buffer: t.buffer(),
            scale: q.and_then(|q| q.scale()).map(|v| v.iter().collect()).unwrap_or_default(),
            zero_point: q
                .and_then(|q| q.zero_point())
                .map(|v| v.iter().collect())
                .unwrap_or_default(),
        })
    }
}
