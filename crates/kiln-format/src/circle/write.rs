//! Writing Circle models back: [`CircleEditor`].
//!
//! # Strategy
//! A flatbuffer builder does not reproduce another writer's bytes (object order, padding,
//! vtable sharing and string de-duplication all differ between flatc's C++ runtime, luci's
//! exporter and the Rust builder), so kiln does not try:
//! - **Nothing changed**: [`CircleEditor::to_bytes`] returns the original bytes, borrowed. A
//!   read → write round trip is byte-identical by construction, whoever wrote the file.
//! - **Something changed** (metadata, buffers, or anything through
//!   [`CircleEditor::model_mut`]): the model is unpacked once into the generated object API
//!   (`ModelT`, which carries every field of the complete Circle 0.10 schema, deprecated ones
//!   included) and packed again. The result is a different byte layout but the same model:
//!   reading it back gives a `ModelT` equal to the edited one. Splicing new tables into the old
//!   bytes was the alternative; it would keep unknown future fields too, but flatbuffer offsets
//!   only point forward, so every table on the path to an edit (root, vectors) must be
//!   rewritten anyway, and external-data offsets shift, which leaves little to gain for much
//!   more fragile code. Fields from schema versions newer than 0.10 are the one thing a
//!   rewrite drops, and only in files that have them.
//!
//! Packing honours `Buffer.data`'s `force_align: 16` (the Rust builder ignores the attribute):
//! each data vector is padded so that it starts 16 bytes from a multiple of 16 from the end,
//! and the finished buffer is padded after its 8-byte header to a multiple of 16. Data stored
//! outside the flatbuffer (`Buffer.offset/size` and `Operator.large_custom_options_*` with an
//! offset > 1) is copied after the flatbuffer, 16-byte aligned, and the offsets are filled in.

use std::borrow::Cow;

use flatbuffers::FlatBufferBuilder;

use super::layout;
use super::read::{CircleModel, FORMAT};
use super::schema::{Buffer, BufferArgs, Model, ModelArgs, Operator, SubGraph};
use super::schema::{BufferT, MetadataT, ModelT};
use crate::bytes::ByteReader;
use crate::error::{Error, Result};

/// Inline data above this makes the flatbuffer builder exceed its 2 GiB limit; such models
/// must keep their data outside the flatbuffer.
const MAX_INLINE: u64 = (1 << 31) - (1 << 24);

/// Edits a Circle model and writes it back (see the module docs for how).
pub struct CircleEditor<'a> {
    original: CircleModel<'a>,
    model: Option<ModelT>,
}

impl<'a> CircleEditor<'a> {
    /// An editor over `original`; nothing is unpacked until the first edit.
    pub fn new(original: CircleModel<'a>) -> Self {
        CircleEditor { original, model: None }
    }

    /// The model as read.
    pub fn original(&self) -> &CircleModel<'a> {
        &self.original
    }

    /// True once any edit was made (or [`CircleEditor::model_mut`] was called).
    pub fn is_changed(&self) -> bool {
        self.model.is_some()
    }

    /// The whole model for editing, unpacked on first use.
    pub fn model_mut(&mut self) -> &mut ModelT {
        let original = self.original;
        self.model.get_or_insert_with(|| original.model().unpack())
    }

    /// Sets the data of the metadata entry `name`, adding the entry (and a new buffer, after
    /// all existing ones, as luci does) when there is none. An existing entry's buffer is
    /// overwritten only if nothing else uses it; otherwise the entry gets a new buffer.
    pub fn set_metadata(&mut self, name: &str, data: Vec<u8>) -> Result<()> {
        let m = self.model_mut();
        let buffers = m.buffers.get_or_insert_with(Vec::new);
        if buffers.is_empty() {
            buffers.push(BufferT::default()); // buffer 0, the empty sentinel
        }
        let metadata = m.metadata.get_or_insert_with(Vec::new);
        let existing = metadata.iter().rposition(|e| e.name.as_deref() == Some(name));
        let reusable = existing.map(|k| metadata[k].buffer).filter(|&b| {
            let shared_by_metadata =
                metadata.iter().enumerate().any(|(j, e)| Some(j) != existing && e.buffer == b);
            let shared_by_tensor = m
                .subgraphs
                .iter()
                .flatten()
                .any(|sg| sg.tensors.iter().flatten().any(|t| t.buffer == b));
            b != 0 && !shared_by_metadata && !shared_by_tensor
        });
        let buffers = m.buffers.get_or_insert_with(Vec::new);
        let mut new_buffer = BufferT::default();
        new_buffer.data = Some(data);
        let index = match reusable.and_then(|b| buffers.get_mut(b as usize).map(|s| (b, s))) {
            Some((b, slot)) => {
                *slot = new_buffer;
                b
            }
            None => {
                let b = u32::try_from(buffers.len()).map_err(|_| Error::Limit {
                    format: FORMAT,
                    what: "number of buffers".into(),
                    value: buffers.len() as u64,
                    limit: u64::from(u32::MAX),
                })?;
                buffers.push(new_buffer);
                b
            }
        };
        let metadata = m.metadata.get_or_insert_with(Vec::new);
        match existing.and_then(|k| metadata.get_mut(k)) {
            Some(entry) => entry.buffer = index,
            None => {
                let mut entry = MetadataT::default();
                entry.name = Some(name.to_string());
                entry.buffer = index;
                metadata.push(entry);
            }
        }
        Ok(())
    }

    /// The file bytes: the original bytes when nothing changed, else the repacked model.
    pub fn to_bytes(&self) -> Result<Cow<'a, [u8]>> {
        match &self.model {
            None => Ok(Cow::Borrowed(self.original.bytes())),
            Some(model) => pack(model, self.original.bytes()).map(Cow::Owned),
        }
    }
}

/// Data that lives outside the flatbuffer: where its offset and size fields are, and the bytes.
enum External<'a> {
    /// `buffers[index]`.
    Buffer(usize, &'a [u8]),
    /// `subgraphs[s].operators[o]` large custom options.
    CustomOptions(usize, usize, &'a [u8]),
}

fn external_slice<'a>(original: &'a [u8], offset: u64, size: u64, field: &str) -> Result<&'a [u8]> {
    ByteReader::new(original, FORMAT).slice(offset, size, field)
}

/// Packs `model`; external data is read from `original` (the file the model came from).
fn pack(model: &ModelT, original: &[u8]) -> Result<Vec<u8>> {
    let mut external = Vec::new();
    let mut inline = 0u64;
    for (i, b) in model.buffers.iter().flatten().enumerate() {
        match &b.data {
            Some(d) if !d.is_empty() => inline += d.len() as u64,
            _ if b.offset > 1 => external.push(External::Buffer(
                i,
                external_slice(original, b.offset, b.size, &format!("buffers[{i}]"))?,
            )),
            _ => {}
        }
    }
    let mut model = Cow::Borrowed(model);
    for (s, sg) in model.subgraphs.iter().flatten().enumerate() {
        for (o, op) in sg.operators.iter().flatten().enumerate() {
            inline += op.custom_options.as_ref().map_or(0, |c| c.len() as u64);
            if op.large_custom_options_offset > 1 {
                let field = format!("subgraphs[{s}].operators[{o}].large_custom_options");
                let (off, size) = (op.large_custom_options_offset, op.large_custom_options_size);
                external.push(External::CustomOptions(
                    s,
                    o,
                    external_slice(original, off, size, &field)?,
                ));
            }
        }
    }
    if inline > MAX_INLINE {
        return Err(Error::Limit {
            format: FORMAT,
            what: "inline buffer data to write".into(),
            value: inline,
            limit: MAX_INLINE,
        });
    }
    // Placeholders (non-zero, so the fields are written) for the offsets filled in below.
    if external.iter().any(|e| matches!(e, External::CustomOptions(..))) {
        for op in model
            .to_mut()
            .subgraphs
            .iter_mut()
            .flatten()
            .flat_map(|sg| sg.operators.iter_mut().flatten())
        {
            if op.large_custom_options_offset > 1 {
                op.large_custom_options_offset = 1;
                op.large_custom_options_size = 1;
            }
        }
    }
    let mut out = build(&model, inline)?;
    align_start_to_16(&mut out)?;
    if !external.is_empty() {
        append_external(&mut out, &external)?;
    }
    Ok(out)
}

/// Builds the flatbuffer like `ModelT::pack`, except that buffers are packed by
/// [`pack_buffer`] (16-byte aligned data, placeholders for external data).
fn build(model: &ModelT, inline: u64) -> Result<Vec<u8>> {
    let capacity = usize::try_from(inline.saturating_add(1 << 16)).unwrap_or(usize::MAX);
    let mut fbb = FlatBufferBuilder::with_capacity(capacity.min(MAX_INLINE as usize));
    let operator_codes = model.operator_codes.as_ref().map(|x| {
        let w: Vec<_> = x.iter().map(|t| t.pack(&mut fbb)).collect();
        fbb.create_vector(&w)
    });
    let subgraphs = model.subgraphs.as_ref().map(|x| {
        let w: Vec<_> = x.iter().map(|t| t.pack(&mut fbb)).collect();
        fbb.create_vector(&w)
    });
    let description = model.description.as_ref().map(|x| fbb.create_string(x));
    let buffers = model.buffers.as_ref().map(|x| {
        let w: Vec<_> = x.iter().map(|b| pack_buffer(&mut fbb, b)).collect();
        fbb.create_vector(&w)
    });
    let metadata_buffer = model.metadata_buffer.as_ref().map(|x| fbb.create_vector(x));
    let metadata = model.metadata.as_ref().map(|x| {
        let w: Vec<_> = x.iter().map(|t| t.pack(&mut fbb)).collect();
        fbb.create_vector(&w)
    });
    let signature_defs = model.signature_defs.as_ref().map(|x| {
        let w: Vec<_> = x.iter().map(|t| t.pack(&mut fbb)).collect();
        fbb.create_vector(&w)
    });
    let root = Model::create(
        &mut fbb,
        &ModelArgs {
            version: model.version,
            operator_codes,
            subgraphs,
            description,
            buffers,
            metadata_buffer,
            metadata,
            signature_defs,
        },
    );
    fbb.finish(root, Some("CIR0"));
    Ok(fbb.finished_data().to_vec())
}

/// Packs one buffer. Inline data is placed so that it ends up 16-byte aligned from the end
/// of the finished buffer (see [`align_start_to_16`]); external data gets placeholders.
fn pack_buffer<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    b: &BufferT,
) -> flatbuffers::WIPOffset<Buffer<'b>> {
    let (data, offset, size) = match &b.data {
        Some(d) if !d.is_empty() => {
            // The builder writes back to front: the data will start `used + pad + len` bytes
            // from the end. Pad so that distance is a multiple of 16 (then the vector's own
            // 4-byte alignment adds nothing).
            let used = fbb.unfinished_data().len();
            let pad = (16 - (used + d.len()) % 16) % 16;
            for _ in 0..pad {
                fbb.push(0u8);
            }
            (Some(fbb.create_vector(d)), b.offset, b.size)
        }
        Some(d) => (Some(fbb.create_vector(d)), b.offset, b.size),
        None if b.offset > 1 => (None, 1, 1),
        None => (None, b.offset, b.size),
    };
    Buffer::create(fbb, &BufferArgs { data, offset, size })
}

/// Pads a finished flatbuffer to a multiple of 16 bytes by inserting zeros after its 8-byte
/// header (root offset and identifier) and moving the root offset past them. Every other
/// offset is relative and unchanged, and positions counted from the end (where the builder
/// aligned the buffer data) become the same positions modulo 16 from the start. The pad is a
/// multiple of the builder's own alignment (the length was one already), so nothing else
/// loses its alignment.
fn align_start_to_16(out: &mut Vec<u8>) -> Result<()> {
    let pad = (16 - out.len() % 16) % 16;
    if pad == 0 {
        return Ok(());
    }
    let r = ByteReader::new(out, FORMAT);
    let root = r.u32(0, "root offset")?;
    let root = root
        .checked_add(pad as u32)
        .ok_or_else(|| Error::invalid(FORMAT, "root offset", Some(0), "overflows"))?;
    out.splice(8..8, std::iter::repeat_n(0u8, pad));
    out[0..4].copy_from_slice(&root.to_le_bytes());
    Ok(())
}

/// Appends external data (each piece 16-byte aligned) and writes its offsets and sizes into the
/// placeholder fields.
fn append_external(out: &mut Vec<u8>, external: &[External<'_>]) -> Result<()> {
    // Find every field to fill before appending (positions inside the flatbuffer).
    let fields = {
        let r = ByteReader::new(out, FORMAT);
        let root = layout::deref(&r, 0, "root")?;
        let buffers = layout::table_vector(&r, root, Model::VT_BUFFERS, "buffers")?;
        let subgraphs = layout::table_vector(&r, root, Model::VT_SUBGRAPHS, "subgraphs")?;
        let mut fields = Vec::with_capacity(external.len());
        for e in external {
            let (table, off_slot, size_slot, name) = match e {
                External::Buffer(i, _) => (
                    buffers.get(*i).copied(),
                    Buffer::VT_OFFSET,
                    Buffer::VT_SIZE,
                    format!("buffers[{i}]"),
                ),
                External::CustomOptions(s, o, _) => {
                    let name = format!("subgraphs[{s}].operators[{o}]");
                    let ops = match subgraphs.get(*s) {
                        Some(sg) => layout::table_vector(&r, *sg, SubGraph::VT_OPERATORS, &name)?,
                        None => Vec::new(),
                    };
                    (
                        ops.get(*o).copied(),
                        Operator::VT_LARGE_CUSTOM_OPTIONS_OFFSET,
                        Operator::VT_LARGE_CUSTOM_OPTIONS_SIZE,
                        name,
                    )
                }
            };
            let missing =
                || Error::invalid(FORMAT, &name, None, "placeholder not found after packing");
            let table = table.ok_or_else(missing)?;
            let off = layout::field(&r, table, off_slot, &name)?.ok_or_else(missing)?;
            let size = layout::field(&r, table, size_slot, &name)?.ok_or_else(missing)?;
            fields.push((off, size));
        }
        fields
    };
    for (e, (off_at, size_at)) in external.iter().zip(fields) {
        let bytes = match e {
            External::Buffer(_, b) | External::CustomOptions(_, _, b) => *b,
        };
        let pad = (16 - out.len() % 16) % 16;
        out.resize(out.len() + pad, 0);
        let offset = out.len() as u64;
        out.extend_from_slice(bytes);
        for (at, value) in [(off_at, offset), (size_at, bytes.len() as u64)] {
            let slot = usize::try_from(at)
                .ok()
                .and_then(|at| out.get_mut(at..at.checked_add(8)?))
                .ok_or_else(|| {
                    Error::invalid(FORMAT, "external data", Some(at), "field out of range")
                })?;
            slot.copy_from_slice(&value.to_le_bytes());
        }
    }
    Ok(())
}
