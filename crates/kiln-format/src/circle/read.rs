//! Reading a Circle model: the verified flatbuffer, its metadata entries and operator codes.

use super::schema::{self, BuiltinOperator, Model, OperatorCode};
use crate::error::{Error, Result};
use flatbuffers::VerifierOptions;

/// Format name used in errors.
pub const FORMAT: &str = "circle";

/// The file identifier at bytes 4..8.
pub const IDENTIFIER: &[u8; 4] = b"CIR0";

/// Largest flatbuffer the verifier accepts (flatbuffers' own 2 GiB limit); external buffer data
/// may extend the file beyond it.
pub(super) const MAX_FLATBUFFER: usize = (1 << 31) - 1;

/// A verified Circle model over borrowed bytes.
#[derive(Clone, Copy)]
pub struct CircleModel<'a> {
    bytes: &'a [u8],
    model: Model<'a>,
}

impl std::fmt::Debug for CircleModel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircleModel").field("len", &self.bytes.len()).finish()
    }
}

/// One `Model.metadata` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataEntry<'a> {
    /// Its name (`ONE_source_table`, `CIRCLE_TRAINING`, ...).
    pub name: &'a str,
    /// Index into `Model.buffers`.
    pub buffer: u32,
}

impl<'a> CircleModel<'a> {
    /// Checks the identifier, runs the flatbuffer verifier (with caps scaled to the file) and
    /// then the index checks of [`CircleModel::check`].
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let ident = bytes.get(4..8).unwrap_or_default();
        if ident != IDENTIFIER {
            return Err(Error::BadMagic {
                format: FORMAT,
                offset: 4,
                expected: "CIR0".into(),
                found: format!("{:02x?}", ident),
            });
        }
        let fb = &bytes[..bytes.len().min(MAX_FLATBUFFER)];
        let opts = VerifierOptions {
            max_depth: 64,
            // Every table takes at least 4 bytes (its vtable offset).
            max_tables: (fb.len() / 4).max(16),
            // Shared tables are counted once per reference, so this bounds how far unpacking
            // (the writer's object API) can blow a small hostile file up; honest files stay
            // near their own size (shared vtables and strings).
            max_apparent_size: fb.len().saturating_mul(8).clamp(1 << 20, MAX_FLATBUFFER),
            ignore_missing_null_terminator: false,
        };
        let model = schema::root_as_model_with_opts(&opts, fb)
            .map_err(|source| Error::Flatbuffer { format: FORMAT, source })?;
        let model = CircleModel { bytes, model };
        model.check()?;
        Ok(model)
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The verified root table.
    pub fn model(&self) -> Model<'a> {
        self.model
    }

    /// Index checks the verifier cannot do: operator codes, tensor and buffer indices,
    /// metadata buffers and external data ranges.
    pub fn check(&self) -> Result<()> {
        let m = self.model;
        let num_codes = m.operator_codes().map_or(0, |v| v.len());
        let num_buffers = m.buffers().map_or(0, |v| v.len());
        for (s, sg) in m.subgraphs().iter().flatten().enumerate() {
            let num_tensors = sg.tensors().map_or(0, |v| v.len());
            let tensor_ok = |i: i32, optional: bool| {
                (optional && i == -1) || usize::try_from(i).is_ok_and(|i| i < num_tensors)
            };
            for (t, tensor) in sg.tensors().iter().flatten().enumerate() {
                if tensor.buffer() as usize >= num_buffers {
                    return Err(Error::invalid(
                        FORMAT,
                        format!("subgraphs[{s}].tensors[{t}].buffer"),
                        None,
                        format!("buffer {} of {num_buffers}", tensor.buffer()),
                    ));
                }
            }
            for (name, list) in [("inputs", sg.inputs()), ("outputs", sg.outputs())] {
                for (k, i) in list.iter().flatten().enumerate() {
                    if !tensor_ok(i, false) {
                        return Err(Error::invalid(
                            FORMAT,
                            format!("subgraphs[{s}].{name}[{k}]"),
                            None,
                            format!("tensor {i} of {num_tensors}"),
                        ));
                    }
                }
            }
            for (o, op) in sg.operators().iter().flatten().enumerate() {
                if op.opcode_index() as usize >= num_codes {
                    return Err(Error::invalid(
                        FORMAT,
                        format!("subgraphs[{s}].operators[{o}].opcode_index"),
                        None,
                        format!("operator code {} of {num_codes}", op.opcode_index()),
                    ));
                }
                let lists = [("inputs", op.inputs()), ("outputs", op.outputs())];
                for (name, list) in lists.into_iter().chain([("intermediates", op.intermediates())])
                {
                    for (k, i) in list.iter().flatten().enumerate() {
                        if !tensor_ok(i, name == "inputs") {
                            return Err(Error::invalid(
                                FORMAT,
                                format!("subgraphs[{s}].operators[{o}].{name}[{k}]"),
                                None,
                                format!("tensor {i} of {num_tensors}"),
                            ));
                        }
                    }
                }
                let (off, size) =
                    (op.large_custom_options_offset(), op.large_custom_options_size());
                if off > 1 {
                    self.external(
                        off,
                        size,
                        &format!("subgraphs[{s}].operators[{o}].large_custom_options"),
                    )?;
                }
            }
        }
        for (i, entry) in self.metadata().into_iter().enumerate() {
            if entry.buffer as usize >= num_buffers {
                return Err(Error::invalid(
                    FORMAT,
                    format!("metadata[{i}].buffer"),
                    None,
                    format!("buffer {} of {num_buffers}", entry.buffer),
                ));
            }
        }
        for i in 0..num_buffers {
            self.buffer_data(i as u32)?;
        }
        Ok(())
    }

    /// The bytes `offset..offset + size` of the file, for data stored outside the flatbuffer.
    fn external(&self, offset: u64, size: u64, field: &str) -> Result<&'a [u8]> {
        crate::bytes::ByteReader::new(self.bytes, FORMAT).slice(offset, size, field)
    }

    /// The data of buffer `index`: inline `data`, or the `offset`/`size` range of the file when
    /// `offset > 1`, or empty.
    pub fn buffer_data(&self, index: u32) -> Result<&'a [u8]> {
        let field = format!("buffers[{index}]");
        let buffers = self.model.buffers();
        let buffer = buffers
            .filter(|b| (index as usize) < b.len())
            .map(|b| b.get(index as usize))
            .ok_or_else(|| Error::invalid(FORMAT, &field, None, "no such buffer"))?;
        match buffer.data() {
            Some(data) if !data.is_empty() => Ok(data.bytes()),
            _ if buffer.offset() > 1 => self.external(buffer.offset(), buffer.size(), &field),
            _ => Ok(&[]),
        }
    }

    /// The `Model.metadata` entries in order.
    pub fn metadata(&self) -> Vec<MetadataEntry<'a>> {
        self.model
            .metadata()
            .iter()
            .flatten()
            .map(|m| MetadataEntry { name: m.name().unwrap_or_default(), buffer: m.buffer() })
            .collect()
    }

    /// The data of the metadata entry called `name` (the last one when several share the name,
    /// as luci's importer ends up using).
    pub fn metadata_data(&self, name: &str) -> Result<Option<&'a [u8]>> {
        match self.metadata().into_iter().rev().find(|m| m.name == name) {
            Some(entry) => self.buffer_data(entry.buffer).map(Some),
            None => Ok(None),
        }
    }

    /// The operator name of `operator_codes[index]`: the builtin name (e.g. `CONV_2D`), or the
    /// custom code for `CUSTOM` ops.
    pub fn operator_name(&self, index: u32) -> String {
        match self.model.operator_codes().filter(|c| (index as usize) < c.len()) {
            Some(codes) => operator_code_name(&codes.get(index as usize)),
            None => format!("<operator code {index}>"),
        }
    }
}

/// The builtin operator of an operator code as luci reads it: `deprecated_builtin_code` when it
/// is in 0..127, else (127 = `PLACEHOLDER_FOR_GREATER_OP_CODES`, or negative) `builtin_code`.
pub fn builtin_operator(code: &OperatorCode<'_>) -> BuiltinOperator {
    let deprecated = code.deprecated_builtin_code();
    if (0..127).contains(&deprecated) {
        BuiltinOperator(i32::from(deprecated))
    } else {
        code.builtin_code()
    }
}

/// A printable name for an operator code.
pub fn operator_code_name(code: &OperatorCode<'_>) -> String {
    let op = builtin_operator(code);
    if op == BuiltinOperator::CUSTOM {
        return code.custom_code().unwrap_or("CUSTOM").to_string();
    }
    op.variant_name().map_or_else(|| format!("BUILTIN_{}", op.0), str::to_string)
}
