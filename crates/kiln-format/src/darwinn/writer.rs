//! Writing DarwiNN packages and executables.
//!
//! - [`write_package`] lays out a `Package` (identifier `DWN1`) by hand, front to back, so that
//!   the MultiExecutable starts at package offset 4096 and every executable at a multiple of
//!   4096 inside it, as libedgetpu's own files are laid out.
//! - [`ExecutableSpec`] is an owned description of every field of an `Executable`;
//!   [`ExecutableSpec::from_executable`] reads one and [`ExecutableSpec::build`] serialises one
//!   with the generated builders, moving `parameters` to a 4096-byte boundary.

use flatbuffers::{FlatBufferBuilder, WIPOffset};

use super::schema::{
    self, AnyHint, AnyLayer, DataType, Description, Direction, ExecutableType, InterruptType,
    Position,
};
use super::{multi, Executable};
use crate::bytes::align_up;
use crate::error::{Error, Result};

const FORMAT: &str = "darwinn.writer";

/// Page size the blobs are aligned to.
pub const PAGE: u64 = 4096;

/// The `Package` header fields.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct PackageSpec {
    /// `min_runtime_version`.
    pub min_runtime_version: i32,
    /// `compiler_version`.
    pub compiler_version: String,
    /// `keypair_version`.
    pub keypair_version: i32,
    /// `signature` of the MultiExecutable (empty in every public package).
    pub signature: Vec<u8>,
    /// `virtual_chip_id` (0 for a single chip).
    pub virtual_chip_id: i32,
    /// `model_identifier`.
    pub model_identifier: String,
}

fn too_big(what: &str) -> Error {
    Error::Limit {
        format: FORMAT,
        what: what.to_string(),
        value: u64::MAX,
        limit: u64::from(u32::MAX),
    }
}

fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| too_big(what))
}

/// Appends a flatbuffer string or byte vector (u32 length, bytes, NUL for strings) at a 4-byte
/// boundary, or with its data at an `align` boundary; returns the length prefix's position.
fn push_vector(out: &mut Vec<u8>, bytes: &[u8], nul: bool, align: u64) -> Result<usize> {
    let data_at = align_up(out.len() as u64 + 4, align).ok_or_else(|| too_big("package"))?;
    out.resize((data_at - 4) as usize, 0);
    let at = out.len();
    out.extend_from_slice(&u32_of(bytes.len(), "vector")?.to_le_bytes());
    out.extend_from_slice(bytes);
    if nul {
        out.push(0);
    }
    Ok(at)
}

/// Serialises a Package holding `executables` (serialized `Executable` flatbuffers).
pub fn write_package(spec: &PackageSpec, executables: &[&[u8]]) -> Result<Vec<u8>> {
    let me = multi::write(executables, PAGE)?;
    // Header (root offset, "DWN1"), vtable of 8 fields at 8, table at 28.
    const FIELDS: usize = 8;
    let vtable = 8usize;
    let table = vtable + 4 + 2 * FIELDS;
    let slots: [Option<u16>; FIELDS] =
        [Some(4), Some(8), Some(12), Some(16), Some(20), Some(24), None, Some(28)];
    let mut out = Vec::with_capacity(me.len() + 2 * PAGE as usize);
    out.extend_from_slice(&(table as u32).to_le_bytes());
    out.extend_from_slice(super::package::IDENTIFIER);
    out.extend_from_slice(&((4 + 2 * FIELDS) as u16).to_le_bytes());
    out.extend_from_slice(&32u16.to_le_bytes());
    for s in slots {
        out.extend_from_slice(&s.unwrap_or(0).to_le_bytes());
    }
    out.extend_from_slice(&((table - vtable) as i32).to_le_bytes());
    let scalars =
        [(4, spec.min_runtime_version), (16, spec.keypair_version), (24, spec.virtual_chip_id)];
    out.resize(table + 32, 0);
    for (off, v) in scalars {
        out[table + off..table + off + 4].copy_from_slice(&v.to_le_bytes());
    }
    let link = |out: &mut Vec<u8>, field: usize, target: usize| -> Result<()> {
        let at = table + field;
        let rel = u32_of(target - at, "package")?;
        out[at..at + 4].copy_from_slice(&rel.to_le_bytes());
        Ok(())
    };
    let s = push_vector(&mut out, spec.compiler_version.as_bytes(), true, 4)?;
    link(&mut out, 20, s)?;
    let s = push_vector(&mut out, spec.model_identifier.as_bytes(), true, 4)?;
    link(&mut out, 28, s)?;
    let s = push_vector(&mut out, &spec.signature, false, 4)?;
    link(&mut out, 12, s)?;
    let s = push_vector(&mut out, &me, false, PAGE)?;
    link(&mut out, 8, s)?;
    let total = align_up(out.len() as u64, PAGE).ok_or_else(|| too_big("package"))?;
    out.resize(usize::try_from(total).map_err(|_| too_big("package"))?, 0);
    Ok(out)
}

/// `Meta`.
#[derive(Clone, Debug, PartialEq)]
pub struct MetaSpec {
    /// `desc`.
    pub desc: Description,
    /// `batch`.
    pub batch: i32,
    /// `name`.
    pub name: Option<String>,
    /// `position`.
    pub position: Position,
}

/// `FieldOffset`.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldOffsetSpec {
    /// `meta`.
    pub meta: Option<MetaSpec>,
    /// `offset_bit`.
    pub offset_bit: i32,
}

/// `InstructionBitstream`.
#[derive(Clone, Debug, PartialEq)]
pub struct BitstreamSpec {
    /// `bitstream`.
    pub bitstream: Option<Vec<u8>>,
    /// `field_offsets`.
    pub field_offsets: Option<Vec<FieldOffsetSpec>>,
}

/// One `DmaHint`: the `AnyHint` union member and the direction.
#[derive(Clone, Debug, PartialEq)]
pub enum HintSpec {
    /// `DmaDescriptorHint`.
    Descriptor {
        /// `meta`.
        meta: Option<MetaSpec>,
        /// `offset_in_bytes`.
        offset_in_bytes: i32,
        /// `size_in_bytes`.
        size_in_bytes: i32,
        /// `direction`.
        direction: Direction,
    },
    /// `InstructionHint`.
    Instruction {
        /// `instruction_chunk_index`.
        chunk: i32,
        /// `direction`.
        direction: Direction,
    },
    /// `InterruptHint`.
    Interrupt {
        /// `type`.
        kind: InterruptType,
        /// `direction`.
        direction: Direction,
    },
    /// `FenceHint`.
    Fence {
        /// `direction`.
        direction: Direction,
    },
    /// A hint with no union member (or an unknown one).
    None {
        /// `direction`.
        direction: Direction,
    },
}

/// `DmaHints`.
#[derive(Clone, Debug, PartialEq)]
pub struct DmaHintsSpec {
    /// `hints`.
    pub hints: Option<Vec<HintSpec>>,
    /// `fully_deterministic`.
    pub fully_deterministic: bool,
}

/// `OutputLayout`: the six maps.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct OutputLayoutSpec {
    /// `y_coordinate_to_linear_tile_id_map`.
    pub y_coordinate_to_linear_tile_id_map: Vec<i32>,
    /// `x_coordinate_to_linear_tile_id_map`.
    pub x_coordinate_to_linear_tile_id_map: Vec<i32>,
    /// `linearized_tile_byte_offset`.
    pub linearized_tile_byte_offset: Vec<i32>,
    /// `x_coordinate_to_local_byte_offset`.
    pub x_coordinate_to_local_byte_offset: Vec<i32>,
    /// `y_coordinate_to_local_y_offset`.
    pub y_coordinate_to_local_y_offset: Vec<i32>,
    /// `x_coordinate_to_local_y_row_size`.
    pub x_coordinate_to_local_y_row_size: Vec<i32>,
}

/// `TensorLayout`: a shape (inclusive ranges) and its strides.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorLayoutSpec {
    /// `shape.dimension`.
    pub shape: Vec<(i32, i32)>,
    /// `stride`.
    pub stride: Vec<i32>,
}

/// `OutputShapeInfo`.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ShapeInfoSpec {
    /// `slice_layout`.
    pub slice_layout: Vec<TensorLayoutSpec>,
    /// `slice_offset`.
    pub slice_offset: Vec<i32>,
}

/// The `AnyLayer` member of a `Layer`.
#[derive(Clone, Debug, PartialEq)]
pub enum LayerKind {
    /// `InputLayer`.
    Input,
    /// `OutputLayer`.
    Output {
        /// `layout`.
        layout: Option<OutputLayoutSpec>,
        /// `data_type` (deprecated).
        data_type: DataType,
        /// `shape_info`.
        shape_info: Option<ShapeInfoSpec>,
    },
    /// No member.
    None,
}

/// `Layer`.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    /// `name`.
    pub name: Option<String>,
    /// `size_bytes`.
    pub size_bytes: i32,
    /// `y_dim`.
    pub y_dim: i32,
    /// `x_dim`.
    pub x_dim: i32,
    /// `z_dim`.
    pub z_dim: i32,
    /// `numerics`: (zero_point, dequantization_factor).
    pub numerics: Option<(i32, f32)>,
    /// `data_type`.
    pub data_type: DataType,
    /// `any_layer`.
    pub kind: LayerKind,
    /// `execution_count_per_inference`.
    pub execution_count_per_inference: i32,
    /// `cache_on_dram`.
    pub cache_on_dram: bool,
    /// `shape.dimension` (inclusive ranges).
    pub shape: Option<Vec<(i32, i32)>>,
}

/// Every field of an `Executable`.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutableSpec {
    /// `version`.
    pub version: i32,
    /// `name`.
    pub name: Option<String>,
    /// `serialized_model`.
    pub serialized_model: Option<Vec<u8>>,
    /// `batch_size`.
    pub batch_size: i32,
    /// `scratch_size_bytes`.
    pub scratch_size_bytes: i32,
    /// `instruction_bitstreams`.
    pub instruction_bitstreams: Option<Vec<BitstreamSpec>>,
    /// `parameters`.
    pub parameters: Option<Vec<u8>>,
    /// `dma_hints`.
    pub dma_hints: Option<DmaHintsSpec>,
    /// `input_layers`.
    pub input_layers: Option<Vec<LayerSpec>>,
    /// `output_layers`.
    pub output_layers: Option<Vec<LayerSpec>>,
    /// `chip`.
    pub chip: Option<String>,
    /// `estimated_cycles`.
    pub estimated_cycles: i32,
    /// `used_narrow_memory_bytes_per_tile`.
    pub used_narrow_memory_bytes_per_tile: i32,
    /// `type`.
    pub type_: ExecutableType,
    /// `parameter_caching_token`.
    pub parameter_caching_token: u64,
    /// `use_tpu_dram_for_parameters`.
    pub use_tpu_dram_for_parameters: bool,
    /// `estimated_cycles_64bit`.
    pub estimated_cycles_64bit: i64,
}

fn meta_spec(m: schema::Meta<'_>) -> MetaSpec {
    MetaSpec {
        desc: m.desc(),
        batch: m.batch(),
        name: m.name().map(str::to_string),
        position: m.position(),
    }
}

fn ranges(s: schema::TensorShape<'_>) -> Vec<(i32, i32)> {
    s.dimension().iter().flatten().map(|r| (r.start(), r.end())).collect()
}

fn i32s(v: Option<flatbuffers::Vector<'_, i32>>) -> Vec<i32> {
    v.map(|v| v.iter().collect()).unwrap_or_default()
}

impl LayerSpec {
    /// Every field of `l`.
    pub fn from_layer(l: schema::Layer<'_>) -> Self {
        let kind = match l.any_layer_type() {
            AnyLayer::InputLayer => LayerKind::Input,
            AnyLayer::OutputLayer => match l.any_layer_as_output_layer() {
                Some(o) => LayerKind::Output {
                    layout: o.layout().map(|m| OutputLayoutSpec {
                        y_coordinate_to_linear_tile_id_map: i32s(
                            m.y_coordinate_to_linear_tile_id_map(),
                        ),
                        x_coordinate_to_linear_tile_id_map: i32s(
                            m.x_coordinate_to_linear_tile_id_map(),
                        ),
                        linearized_tile_byte_offset: i32s(m.linearized_tile_byte_offset()),
                        x_coordinate_to_local_byte_offset: i32s(
                            m.x_coordinate_to_local_byte_offset(),
                        ),
                        y_coordinate_to_local_y_offset: i32s(m.y_coordinate_to_local_y_offset()),
                        x_coordinate_to_local_y_row_size: i32s(
                            m.x_coordinate_to_local_y_row_size(),
                        ),
                    }),
                    data_type: o.data_type(),
                    shape_info: o.shape_info().map(|si| ShapeInfoSpec {
                        slice_layout: si
                            .slice_layout()
                            .iter()
                            .flatten()
                            .map(|t| TensorLayoutSpec {
                                shape: t.shape().map(ranges).unwrap_or_default(),
                                stride: i32s(t.stride()),
                            })
                            .collect(),
                        slice_offset: i32s(si.slice_offset()),
                    }),
                },
                None => LayerKind::None,
            },
            _ => LayerKind::None,
        };
        LayerSpec {
            name: l.name().map(str::to_string),
            size_bytes: l.size_bytes(),
            y_dim: l.y_dim(),
            x_dim: l.x_dim(),
            z_dim: l.z_dim(),
            numerics: l.numerics().map(|n| (n.zero_point(), n.dequantization_factor())),
            data_type: l.data_type(),
            kind,
            execution_count_per_inference: l.execution_count_per_inference(),
            cache_on_dram: l.cache_on_dram(),
            shape: l.shape().map(ranges),
        }
    }
}

fn hint_spec(h: schema::DmaHint<'_>) -> HintSpec {
    let direction = h.direction();
    match h.any_hint_type() {
        AnyHint::DmaDescriptorHint => match h.any_hint_as_dma_descriptor_hint() {
            Some(d) => HintSpec::Descriptor {
                meta: d.meta().map(meta_spec),
                offset_in_bytes: d.offset_in_bytes(),
                size_in_bytes: d.size_in_bytes(),
                direction,
            },
            None => HintSpec::None { direction },
        },
        AnyHint::InstructionHint => match h.any_hint_as_instruction_hint() {
            Some(i) => HintSpec::Instruction { chunk: i.instruction_chunk_index(), direction },
            None => HintSpec::None { direction },
        },
        AnyHint::InterruptHint => match h.any_hint_as_interrupt_hint() {
            Some(i) => HintSpec::Interrupt { kind: i.type_(), direction },
            None => HintSpec::None { direction },
        },
        AnyHint::FenceHint => HintSpec::Fence { direction },
        _ => HintSpec::None { direction },
    }
}

impl ExecutableSpec {
    /// Every field of `exe`.
    pub fn from_executable(exe: &Executable<'_>) -> Self {
        let r = exe.root();
        ExecutableSpec {
            version: r.version(),
            name: r.name().map(str::to_string),
            serialized_model: r.serialized_model().map(|v| v.bytes().to_vec()),
            batch_size: r.batch_size(),
            scratch_size_bytes: r.scratch_size_bytes(),
            instruction_bitstreams: r.instruction_bitstreams().map(|v| {
                v.iter()
                    .map(|b| BitstreamSpec {
                        bitstream: b.bitstream().map(|x| x.bytes().to_vec()),
                        field_offsets: b.field_offsets().map(|f| {
                            f.iter()
                                .map(|fo| FieldOffsetSpec {
                                    meta: fo.meta().map(meta_spec),
                                    offset_bit: fo.offset_bit(),
                                })
                                .collect()
                        }),
                    })
                    .collect()
            }),
            parameters: r.parameters().map(|v| v.bytes().to_vec()),
            dma_hints: r.dma_hints().map(|h| DmaHintsSpec {
                hints: h.hints().map(|v| v.iter().map(hint_spec).collect()),
                fully_deterministic: h.fully_deterministic(),
            }),
            input_layers: r.input_layers().map(|v| v.iter().map(LayerSpec::from_layer).collect()),
            output_layers: r.output_layers().map(|v| v.iter().map(LayerSpec::from_layer).collect()),
            chip: r.chip().map(str::to_string),
            estimated_cycles: r.estimated_cycles(),
            used_narrow_memory_bytes_per_tile: r.used_narrow_memory_bytes_per_tile(),
            type_: r.type_(),
            parameter_caching_token: r.parameter_caching_token(),
            use_tpu_dram_for_parameters: r.use_tpu_dram_for_parameters(),
            estimated_cycles_64bit: r.estimated_cycles_64bit(),
        }
    }

    /// Serialises the executable (no file identifier, like libedgetpu's). `parameters` start at
    /// a multiple of 4096 and the length is a multiple of 4096.
    pub fn build(&self) -> Result<Vec<u8>> {
        let built = self.build_unaligned(false)?;
        let buf = match params_offset(&built)? {
            Some(d) if d % 8 != 0 => self.build_unaligned(true)?,
            _ => built,
        };
        let Some(d) = params_offset(&buf)? else { return pad_to_page(buf) };
        if d % 8 != 0 {
            return Err(Error::invalid(
                FORMAT,
                "parameters",
                Some(d as u64),
                "could not be placed at an 8-byte boundary",
            ));
        }
        // Every offset inside a flatbuffer is relative except the root's, so inserting bytes
        // right after the root offset moves everything else together; 8-byte multiples keep
        // every scalar aligned.
        let pad = (PAGE as usize - d % PAGE as usize) % PAGE as usize;
        let root =
            u32::from_le_bytes(buf.get(..4).and_then(|b| b.try_into().ok()).unwrap_or([0; 4]));
        let mut out = Vec::with_capacity(buf.len() + pad + PAGE as usize);
        out.extend_from_slice(&u32_of(root as usize + pad, "executable")?.to_le_bytes());
        out.resize(4 + pad, 0);
        out.extend_from_slice(buf.get(4..).unwrap_or_default());
        pad_to_page(out)
    }

    fn build_unaligned(&self, extra: bool) -> Result<Vec<u8>> {
        let mut fbb = FlatBufferBuilder::new();
        // Parameters first, so they sit at the end of the buffer. The 8 zero bytes after them
        // make the builder's alignment 8, so the total length is a multiple of 8 and `extra`
        // (4 more bytes) decides whether the parameters start at an 8-byte boundary.
        fbb.push(0u64);
        if extra {
            fbb.push(0u32);
        }
        let parameters = self.parameters.as_ref().map(|p| fbb.create_vector(p));
        let name = self.name.as_deref().map(|s| fbb.create_string(s));
        let chip = self.chip.as_deref().map(|s| fbb.create_string(s));
        let serialized_model = self.serialized_model.as_ref().map(|p| fbb.create_vector(p));
        let bitstreams = match &self.instruction_bitstreams {
            Some(list) => {
                let mut v = Vec::with_capacity(list.len());
                for b in list {
                    let bitstream = b.bitstream.as_ref().map(|x| fbb.create_vector(x));
                    let field_offsets = match &b.field_offsets {
                        Some(f) => {
                            let mut items = Vec::with_capacity(f.len());
                            for fo in f {
                                let meta = fo.meta.as_ref().map(|m| build_meta(&mut fbb, m));
                                items.push(schema::FieldOffset::create(
                                    &mut fbb,
                                    &schema::FieldOffsetArgs { meta, offset_bit: fo.offset_bit },
                                ));
                            }
                            Some(fbb.create_vector(&items))
                        }
                        None => None,
                    };
                    v.push(schema::InstructionBitstream::create(
                        &mut fbb,
                        &schema::InstructionBitstreamArgs { bitstream, field_offsets },
                    ));
                }
                Some(fbb.create_vector(&v))
            }
            None => None,
        };
        let dma_hints = self.dma_hints.as_ref().map(|h| {
            let hints = h.hints.as_ref().map(|list| {
                let items: Vec<_> = list.iter().map(|x| build_hint(&mut fbb, x)).collect();
                fbb.create_vector(&items)
            });
            schema::DmaHints::create(
                &mut fbb,
                &schema::DmaHintsArgs { hints, fully_deterministic: h.fully_deterministic },
            )
        });
        let mut layers = |list: &Option<Vec<LayerSpec>>| {
            list.as_ref().map(|l| {
                let items: Vec<_> = l.iter().map(|x| build_layer(&mut fbb, x)).collect();
                fbb.create_vector(&items)
            })
        };
        let input_layers = layers(&self.input_layers);
        let output_layers = layers(&self.output_layers);
        let root = schema::Executable::create(
            &mut fbb,
            &schema::ExecutableArgs {
                version: self.version,
                name,
                serialized_model,
                batch_size: self.batch_size,
                scratch_size_bytes: self.scratch_size_bytes,
                instruction_bitstreams: bitstreams,
                parameters,
                dma_hints,
                input_layers,
                output_layers,
                chip,
                estimated_cycles: self.estimated_cycles,
                used_narrow_memory_bytes_per_tile: self.used_narrow_memory_bytes_per_tile,
                type_: self.type_,
                parameter_caching_token: self.parameter_caching_token,
                use_tpu_dram_for_parameters: self.use_tpu_dram_for_parameters,
                estimated_cycles_64bit: self.estimated_cycles_64bit,
            },
        );
        fbb.finish_minimal(root);
        Ok(fbb.finished_data().to_vec())
    }
}

fn params_offset(buf: &[u8]) -> Result<Option<usize>> {
    let exe = Executable::open(buf, 0)?;
    Ok(exe.parameters_offset().map(|d| d as usize))
}

fn pad_to_page(mut buf: Vec<u8>) -> Result<Vec<u8>> {
    let total = align_up(buf.len() as u64, PAGE).ok_or_else(|| too_big("executable"))?;
    buf.resize(usize::try_from(total).map_err(|_| too_big("executable"))?, 0);
    Ok(buf)
}

fn build_meta<'b>(fbb: &mut FlatBufferBuilder<'b>, m: &MetaSpec) -> WIPOffset<schema::Meta<'b>> {
    let name = m.name.as_deref().map(|s| fbb.create_string(s));
    schema::Meta::create(
        fbb,
        &schema::MetaArgs { desc: m.desc, batch: m.batch, name, position: m.position },
    )
}

fn build_hint<'b>(fbb: &mut FlatBufferBuilder<'b>, h: &HintSpec) -> WIPOffset<schema::DmaHint<'b>> {
    let (any_hint_type, any_hint, direction) = match h {
        HintSpec::Descriptor { meta, offset_in_bytes, size_in_bytes, direction } => {
            let meta = meta.as_ref().map(|m| build_meta(fbb, m));
            let d = schema::DmaDescriptorHint::create(
                fbb,
                &schema::DmaDescriptorHintArgs {
                    meta,
                    offset_in_bytes: *offset_in_bytes,
                    size_in_bytes: *size_in_bytes,
                },
            );
            (AnyHint::DmaDescriptorHint, Some(d.as_union_value()), *direction)
        }
        HintSpec::Instruction { chunk, direction } => {
            let i = schema::InstructionHint::create(
                fbb,
                &schema::InstructionHintArgs { instruction_chunk_index: *chunk },
            );
            (AnyHint::InstructionHint, Some(i.as_union_value()), *direction)
        }
        HintSpec::Interrupt { kind, direction } => {
            let i = schema::InterruptHint::create(fbb, &schema::InterruptHintArgs { type_: *kind });
            (AnyHint::InterruptHint, Some(i.as_union_value()), *direction)
        }
        HintSpec::Fence { direction } => {
            let f = schema::FenceHint::create(fbb, &schema::FenceHintArgs {});
            (AnyHint::FenceHint, Some(f.as_union_value()), *direction)
        }
        HintSpec::None { direction } => (AnyHint::NONE, None, *direction),
    };
    schema::DmaHint::create(fbb, &schema::DmaHintArgs { any_hint_type, any_hint, direction })
}

fn build_shape<'b>(
    fbb: &mut FlatBufferBuilder<'b>,
    dims: &[(i32, i32)],
) -> WIPOffset<schema::TensorShape<'b>> {
    let ranges: Vec<schema::Range> = dims.iter().map(|&(s, e)| schema::Range::new(s, e)).collect();
    let dimension = Some(fbb.create_vector(&ranges));
    schema::TensorShape::create(fbb, &schema::TensorShapeArgs { dimension })
}

fn build_layer<'b>(fbb: &mut FlatBufferBuilder<'b>, l: &LayerSpec) -> WIPOffset<schema::Layer<'b>> {
    let name = l.name.as_deref().map(|s| fbb.create_string(s));
    let numerics = l.numerics.map(|(zero_point, dequantization_factor)| {
        schema::NumericsConstants::create(
            fbb,
            &schema::NumericsConstantsArgs { zero_point, dequantization_factor },
        )
    });
    let shape = l.shape.as_ref().map(|d| build_shape(fbb, d));
    let (any_layer_type, any_layer) = match &l.kind {
        LayerKind::Input => {
            let i = schema::InputLayer::create(fbb, &schema::InputLayerArgs {});
            (AnyLayer::InputLayer, Some(i.as_union_value()))
        }
        LayerKind::Output { layout, data_type, shape_info } => {
            let layout = layout.as_ref().map(|m| {
                let args = schema::OutputLayoutArgs {
                    y_coordinate_to_linear_tile_id_map: Some(
                        fbb.create_vector(&m.y_coordinate_to_linear_tile_id_map),
                    ),
                    x_coordinate_to_linear_tile_id_map: Some(
                        fbb.create_vector(&m.x_coordinate_to_linear_tile_id_map),
                    ),
                    linearized_tile_byte_offset: Some(
                        fbb.create_vector(&m.linearized_tile_byte_offset),
                    ),
                    x_coordinate_to_local_byte_offset: Some(
                        fbb.create_vector(&m.x_coordinate_to_local_byte_offset),
                    ),
                    y_coordinate_to_local_y_offset: Some(
                        fbb.create_vector(&m.y_coordinate_to_local_y_offset),
                    ),
                    x_coordinate_to_local_y_row_size: Some(
                        fbb.create_vector(&m.x_coordinate_to_local_y_row_size),
                    ),
                };
                schema::OutputLayout::create(fbb, &args)
            });
            let shape_info = shape_info.as_ref().map(|si| {
                let slices: Vec<_> = si
                    .slice_layout
                    .iter()
                    .map(|t| {
                        let shape = Some(build_shape(fbb, &t.shape));
                        let stride = Some(fbb.create_vector(&t.stride));
                        schema::TensorLayout::create(
                            fbb,
                            &schema::TensorLayoutArgs { shape, stride },
                        )
                    })
                    .collect();
                let slice_layout = Some(fbb.create_vector(&slices));
                let slice_offset = Some(fbb.create_vector(&si.slice_offset));
                schema::OutputShapeInfo::create(
                    fbb,
                    &schema::OutputShapeInfoArgs { slice_layout, slice_offset },
                )
            });
            let o = schema::OutputLayer::create(
                fbb,
                &schema::OutputLayerArgs { layout, data_type: *data_type, shape_info },
            );
            (AnyLayer::OutputLayer, Some(o.as_union_value()))
        }
        LayerKind::None => (AnyLayer::NONE, None),
    };
    schema::Layer::create(
        fbb,
        &schema::LayerArgs {
            name,
            size_bytes: l.size_bytes,
            y_dim: l.y_dim,
            x_dim: l.x_dim,
            z_dim: l.z_dim,
            numerics,
            data_type: l.data_type,
            any_layer_type,
            any_layer,
            execution_count_per_inference: l.execution_count_per_inference,
            cache_on_dram: l.cache_on_dram,
            shape,
        },
    )
}
