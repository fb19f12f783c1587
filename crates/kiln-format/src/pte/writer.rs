//! Serializing a [`ProgramModel`] with ExecuTorch's layout rules
//! (`exir/_serialize/_program.py::serialize_pte_binary`):
//!
//! - segments are placed after the flatbuffer at 128-byte aligned offsets (relative to the
//!   segment base, the first at 0), with zero padding between them and none after the last;
//! - buffers inside a constant segment start at 16-byte aligned offsets, identical buffers are
//!   stored once;
//! - the 32-byte `eh00` header is spliced in after byte 8 when there is segment data, and left
//!   out when there is none;
//! - inline `[ubyte] (force_align: 16)` data (`constant_buffer`, `backend_delegate_data`)
//!   starts 16-byte aligned from the start of the file.

use flatbuffers::{FlatBufferBuilder, Vector, WIPOffset};
use kiln_schema::program::executorch_flatbuffer as fb;
use std::collections::HashMap;

use super::header::ExtendedHeader;
use super::model::{
    ChainModel, InstructionModel, MethodModel, ProgramModel, SegmentModel, TensorModel, ValueModel,
};
use super::program::{DelegateData, ShapeDynamism, FORMAT};
use crate::bytes::align_up;
use crate::error::{Error, Result};
use crate::ptd::writer::splice_header;

/// Alignment of segments (`ExecutorchBackendConfig.segment_alignment`).
pub const SEGMENT_ALIGNMENT: u64 = 128;
/// Alignment of inline `force_align` byte vectors.
pub const INLINE_ALIGNMENT: usize = 16;

/// A segment laid out: its bytes and, for buffer segments, each buffer's offset.
struct PackedSegment {
    bytes: Vec<u8>,
    offsets: Vec<u64>,
}

fn too_big() -> Error {
    Error::invalid(FORMAT, "segments", None, "total size overflows")
}

/// Packs buffers: each at an `alignment`-aligned offset, identical buffers shared, zero padding.
fn pack(buffers: &[Vec<u8>], alignment: u64) -> Result<PackedSegment> {
    let mut bytes = Vec::new();
    let mut offsets = Vec::with_capacity(buffers.len());
    let mut seen: HashMap<&[u8], u64> = HashMap::new();
    for b in buffers {
        if let Some(&o) = seen.get(b.as_slice()) {
            offsets.push(o);
            continue;
        }
        let o = align_up(bytes.len() as u64, alignment.max(1)).ok_or_else(too_big)?;
        bytes.resize(usize::try_from(o).map_err(|_| too_big())?, 0);
        bytes.extend_from_slice(b);
        seen.insert(b.as_slice(), o);
        offsets.push(o);
    }
    Ok(PackedSegment { bytes, offsets })
}

/// Serializes `model` into the bytes of a `.pte`.
pub fn write(model: &ProgramModel) -> Result<Vec<u8>> {
    check_references(model)?;
    let packed: Vec<PackedSegment> = model
        .segments
        .iter()
        .map(|s| match s {
            SegmentModel::Raw(b) => Ok(PackedSegment { bytes: b.clone(), offsets: Vec::new() }),
            SegmentModel::Buffers { buffers, alignment } => pack(buffers, *alignment),
        })
        .collect::<Result<_>>()?;
    let mut placed = Vec::with_capacity(packed.len());
    let mut end = 0u64;
    for s in &packed {
        // Each segment starts at the previous one's end, aligned ("[{0,0},{0,432}]").
        let offset = align_up(end, SEGMENT_ALIGNMENT).ok_or_else(too_big)?;
        let size = s.bytes.len() as u64;
        end = offset.checked_add(size).ok_or_else(too_big)?;
        placed.push((offset, size));
    }

    let flat = build_flatbuffer(model, &packed, &placed)?;
    if end == 0 {
        return Ok(flat);
    }
    let program_size = flat.len() as u64 + u64::from(super::header::LENGTH);
    let base = align_up(program_size, SEGMENT_ALIGNMENT).ok_or_else(too_big)?;
    let header = ExtendedHeader {
        length: super::header::LENGTH,
        program_size,
        segment_base_offset: base,
        segment_data_size: end,
    };
    let total = base.checked_add(end).ok_or_else(too_big)?;
    let total = usize::try_from(total).map_err(|_| too_big())?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&splice_header(&flat, &header.encode())?);
    for (s, (offset, _)) in packed.iter().zip(&placed) {
        out.resize(usize::try_from(base + offset).map_err(|_| too_big())?, 0);
        out.extend_from_slice(&s.bytes);
    }
    Ok(out)
}

/// Program-level references must name segments of the right kind.
fn check_references(model: &ProgramModel) -> Result<()> {
    let n = model.segments.len();
    let buffers = |i: u32, field: &str| -> Result<()> {
        match model.segments.get(i as usize) {
            Some(SegmentModel::Buffers { .. }) => Ok(()),
            Some(SegmentModel::Raw(_)) => Err(Error::invalid(
                FORMAT,
                field.to_string(),
                None,
                format!("segment {i} is a raw segment, not a buffer segment"),
            )),
            None => Err(Error::invalid(FORMAT, field.to_string(), None, format!("{i} >= {n}"))),
        }
    };
    if let Some(i) = model.constant_segment {
        buffers(i, "constant_segment.segment_index")?;
    }
    for (k, i) in model.mutable_data_segments.iter().enumerate() {
        buffers(*i, &format!("mutable_data_segments[{k}].segment_index"))?;
    }
    Ok(())
}

/// A byte vector whose data starts `align`-aligned from the end of the finished buffer (and so
/// from its start, since [`finish`] pads the whole buffer to a multiple of `align`).
fn aligned_bytes<'b>(
    b: &mut FlatBufferBuilder<'b>,
    data: &[u8],
    align: usize,
) -> WIPOffset<Vector<'b, u8>> {
    let used = b.unfinished_data().len();
    let pad = (align - (used + data.len()) % align) % align;
    for _ in 0..pad {
        b.push(0u8);
    }
    b.create_vector(data)
}

/// Finishes with the `ET12` identifier so that the total size is a multiple of 16.
fn finish<'b>(b: &mut FlatBufferBuilder<'b>, root: WIPOffset<fb::Program<'b>>) {
    // finish() adds the 4-byte root offset and the 4-byte identifier.
    let used = b.unfinished_data().len();
    let pad = (INLINE_ALIGNMENT - (used + 8) % INLINE_ALIGNMENT) % INLINE_ALIGNMENT;
    for _ in 0..pad {
        b.push(0u8);
    }
    fb::finish_program_buffer(b, root);
}

fn build_flatbuffer(
    model: &ProgramModel,
    packed: &[PackedSegment],
    placed: &[(u64, u64)],
) -> Result<Vec<u8>> {
    let mut b = FlatBufferBuilder::with_capacity(1 << 16);
    let mut plans = Vec::with_capacity(model.methods.len());
    for m in &model.methods {
        plans.push(method(&mut b, m)?);
    }
    let plans = b.create_vector(&plans);
    let constant_buffer = if model.constant_buffer.is_empty() {
        None
    } else {
        let v: Vec<_> = model
            .constant_buffer
            .iter()
            .map(|data| {
                let storage = aligned_bytes(&mut b, data, INLINE_ALIGNMENT);
                fb::Buffer::create(&mut b, &fb::BufferArgs { storage: Some(storage) })
            })
            .collect();
        Some(b.create_vector(&v))
    };
    let inline = if model.backend_delegate_data.is_empty() {
        None
    } else {
        let v: Vec<_> = model
            .backend_delegate_data
            .iter()
            .map(|data| {
                let data = aligned_bytes(&mut b, data, INLINE_ALIGNMENT);
                fb::BackendDelegateInlineData::create(
                    &mut b,
                    &fb::BackendDelegateInlineDataArgs { data: Some(data) },
                )
            })
            .collect();
        Some(b.create_vector(&v))
    };
    let segs: Vec<_> = placed
        .iter()
        .map(|(offset, size)| {
            let (offset, size) = (
                nonzero(*offset, fb::UnalignedULong::new),
                nonzero(*size, fb::UnalignedULong::new),
            );
            fb::DataSegment::create(
                &mut b,
                &fb::DataSegmentArgs { offset: offset.as_ref(), size: size.as_ref() },
            )
        })
        .collect();
    let segs = b.create_vector(&segs);
    let constant_segment = model.constant_segment.map(|i| subsegment(&mut b, packed, i));
    let mutable: Vec<_> =
        model.mutable_data_segments.iter().map(|i| subsegment(&mut b, packed, *i)).collect();
    let mutable = if mutable.is_empty() { None } else { Some(b.create_vector(&mutable)) };
    let named: Vec<_> = model
        .named_data
        .iter()
        .map(|(key, seg)| {
            let key = b.create_string(key);
            fb::NamedData::create(
                &mut b,
                &fb::NamedDataArgs { key: Some(key), segment_index: *seg },
            )
        })
        .collect();
    let named = if named.is_empty() { None } else { Some(b.create_vector(&named)) };
    let root = fb::Program::create(
        &mut b,
        &fb::ProgramArgs {
            version: model.version,
            execution_plan: Some(plans),
            constant_buffer,
            backend_delegate_data: inline,
            segments: Some(segs),
            constant_segment,
            mutable_data_segments: mutable,
            named_data: named,
        },
    );
    finish(&mut b, root);
    Ok(b.finished_data().to_vec())
}

/// `SubsegmentOffsets` for buffer segment `i`.
fn subsegment<'b>(
    b: &mut FlatBufferBuilder<'b>,
    packed: &[PackedSegment],
    i: u32,
) -> WIPOffset<fb::SubsegmentOffsets<'b>> {
    let offsets = packed.get(i as usize).map(|p| p.offsets.as_slice()).unwrap_or(&[]);
    let offsets: Vec<_> = offsets.iter().map(|&o| fb::UnalignedULong::new(o)).collect();
    let offsets = b.create_vector(&offsets);
    fb::SubsegmentOffsets::create(
        b,
        &fb::SubsegmentOffsetsArgs { segment_index: i, offsets: Some(offsets) },
    )
}

fn method<'b>(
    b: &mut FlatBufferBuilder<'b>,
    m: &MethodModel,
) -> Result<WIPOffset<fb::ExecutionPlan<'b>>> {
    let name = b.create_string(&m.name);
    let container_meta_type = m.container_meta.as_ref().map(|(i, o)| {
        let i = b.create_string(i);
        let o = b.create_string(o);
        fb::ContainerMetadata::create(
            b,
            &fb::ContainerMetadataArgs { encoded_inp_str: Some(i), encoded_out_str: Some(o) },
        )
    });
    let values: Vec<_> = m.values.iter().map(|v| value(b, v)).collect();
    let values = b.create_vector(&values);
    let inputs = b.create_vector(&m.inputs);
    let outputs = b.create_vector(&m.outputs);
    let chains: Vec<_> = m.chains.iter().map(|c| chain(b, c)).collect();
    let chains = b.create_vector(&chains);
    let operators: Vec<_> = m
        .operators
        .iter()
        .map(|(name, overload)| {
            let name = b.create_string(name);
            let overload = b.create_string(overload);
            fb::Operator::create(
                b,
                &fb::OperatorArgs { name: Some(name), overload: Some(overload) },
            )
        })
        .collect();
    let operators = b.create_vector(&operators);
    let delegates: Vec<_> = m
        .delegates
        .iter()
        .map(|d| {
            let id = b.create_string(&d.id);
            let (location, index) = match d.data {
                DelegateData::Inline(i) => (fb::DataLocation::INLINE, i),
                DelegateData::Segment(i) => (fb::DataLocation::SEGMENT, i),
            };
            let processed = fb::BackendDelegateDataReference::create(
                b,
                &fb::BackendDelegateDataReferenceArgs { location, index },
            );
            let specs: Vec<_> = d
                .compile_specs
                .iter()
                .map(|(k, v)| {
                    let key = b.create_string(k);
                    let value = b.create_vector(v);
                    fb::CompileSpec::create(
                        b,
                        &fb::CompileSpecArgs { key: Some(key), value: Some(value) },
                    )
                })
                .collect();
            let compile_specs = b.create_vector(&specs);
            fb::BackendDelegate::create(
                b,
                &fb::BackendDelegateArgs {
                    id: Some(id),
                    processed: Some(processed),
                    compile_specs: Some(compile_specs),
                },
            )
        })
        .collect();
    let delegates = b.create_vector(&delegates);
    let sizes: Vec<_> =
        m.non_const_buffer_sizes.iter().map(|&s| fb::UnalignedLong::new(s)).collect();
    let sizes = b.create_vector(&sizes);
    let devices = if m.non_const_buffer_device.is_empty() {
        None
    } else {
        let v: Vec<_> = m
            .non_const_buffer_device
            .iter()
            .map(|(buffer_idx, t, i)| {
                fb::NonConstBufferDevice::create(
                    b,
                    &fb::NonConstBufferDeviceArgs {
                        buffer_idx: *buffer_idx,
                        device_type: fb::DeviceType(*t),
                        device_index: *i,
                    },
                )
            })
            .collect();
        Some(b.create_vector(&v))
    };
    Ok(fb::ExecutionPlan::create(
        b,
        &fb::ExecutionPlanArgs {
            name: Some(name),
            container_meta_type,
            values: Some(values),
            inputs: Some(inputs),
            outputs: Some(outputs),
            chains: Some(chains),
            operators: Some(operators),
            delegates: Some(delegates),
            non_const_buffer_sizes: Some(sizes),
            non_const_buffer_device: devices,
        },
    ))
}

fn tensor<'b>(b: &mut FlatBufferBuilder<'b>, t: &TensorModel) -> WIPOffset<fb::Tensor<'b>> {
    let sizes = b.create_vector(&t.sizes);
    let dim_order = b.create_vector(&t.dim_order);
    let allocation_info = t.allocation.map(|(memory_id, offset)| {
        fb::AllocationDetails::create(
            b,
            &fb::AllocationDetailsArgs {
                memory_id,
                memory_offset_low: offset as u32,
                memory_offset_high: (offset >> 32) as u32,
            },
        )
    });
    let extra_tensor_info = t.extra.as_ref().map(|e| {
        let fully_qualified_name = e.fully_qualified_name.as_ref().map(|n| b.create_string(n));
        let mutable_data_segments_idx =
            nonzero(e.mutable_data_segments_idx, fb::UnalignedULong::new);
        fb::ExtraTensorInfo::create(
            b,
            &fb::ExtraTensorInfoArgs {
                mutable_data_segments_idx: mutable_data_segments_idx.as_ref(),
                fully_qualified_name,
                location: if e.external {
                    fb::TensorDataLocation::EXTERNAL
                } else {
                    fb::TensorDataLocation::SEGMENT
                },
                device_type: fb::DeviceType(e.device_type),
                device_index: e.device_index,
            },
        )
    });
    fb::Tensor::create(
        b,
        &fb::TensorArgs {
            scalar_type: fb::ScalarType(t.scalar_type.code()),
            storage_offset: 0,
            sizes: Some(sizes),
            dim_order: Some(dim_order),
            requires_grad: t.requires_grad,
            data_buffer_idx: t.data_buffer_idx,
            allocation_info,
            layout: t.layout,
            shape_dynamism: match t.dynamism {
                ShapeDynamism::Static => fb::TensorShapeDynamism::STATIC,
                ShapeDynamism::DynamicBound => fb::TensorShapeDynamism::DYNAMIC_BOUND,
                ShapeDynamism::DynamicUnbound => fb::TensorShapeDynamism::DYNAMIC_UNBOUND,
            },
            extra_tensor_info,
        },
    )
}

fn value<'b>(b: &mut FlatBufferBuilder<'b>, v: &ValueModel) -> WIPOffset<fb::EValue<'b>> {
    let (val_type, val) = match v {
        ValueModel::Null => {
            (fb::KernelTypes::Null, fb::Null::create(b, &fb::NullArgs {}).as_union_value())
        }
        ValueModel::Int(x) => {
            let int_val = nonzero(*x, fb::UnalignedLong::new);
            (
                fb::KernelTypes::Int,
                fb::Int::create(b, &fb::IntArgs { int_val: int_val.as_ref() }).as_union_value(),
            )
        }
        ValueModel::Bool(x) => (
            fb::KernelTypes::Bool,
            fb::Bool::create(b, &fb::BoolArgs { bool_val: *x }).as_union_value(),
        ),
        ValueModel::Double(x) => {
            // Only +0.0 is the default flatc leaves out: -0.0 keeps its sign bit.
            let double_val = (x.to_bits() != 0).then(|| fb::UnalignedDouble::new(*x));
            (
                fb::KernelTypes::Double,
                fb::Double::create(b, &fb::DoubleArgs { double_val: double_val.as_ref() })
                    .as_union_value(),
            )
        }
        ValueModel::String(s) => {
            let s = b.create_string(s);
            (
                fb::KernelTypes::String,
                fb::String::create(b, &fb::StringArgs { string_val: Some(s) }).as_union_value(),
            )
        }
        ValueModel::Tensor(t) => (fb::KernelTypes::Tensor, tensor(b, t).as_union_value()),
        ValueModel::IntList(items) => {
            let items: Vec<_> = items.iter().map(|&x| fb::UnalignedLong::new(x)).collect();
            let items = b.create_vector(&items);
            (
                fb::KernelTypes::IntList,
                fb::IntList::create(b, &fb::IntListArgs { items: Some(items) }).as_union_value(),
            )
        }
        ValueModel::DoubleList(items) => {
            let items: Vec<_> = items.iter().map(|&x| fb::UnalignedDouble::new(x)).collect();
            let items = b.create_vector(&items);
            (
                fb::KernelTypes::DoubleList,
                fb::DoubleList::create(b, &fb::DoubleListArgs { items: Some(items) })
                    .as_union_value(),
            )
        }
        ValueModel::BoolList(items) => {
            let items = b.create_vector(items);
            (
                fb::KernelTypes::BoolList,
                fb::BoolList::create(b, &fb::BoolListArgs { items: Some(items) }).as_union_value(),
            )
        }
        ValueModel::TensorList(items) => {
            let items = b.create_vector(items);
            (
                fb::KernelTypes::TensorList,
                fb::TensorList::create(b, &fb::TensorListArgs { items: Some(items) })
                    .as_union_value(),
            )
        }
        ValueModel::OptionalTensorList(items) => {
            let items = b.create_vector(items);
            (
                fb::KernelTypes::OptionalTensorList,
                fb::OptionalTensorList::create(
                    b,
                    &fb::OptionalTensorListArgs { items: Some(items) },
                )
                .as_union_value(),
            )
        }
    };
    fb::EValue::create(b, &fb::EValueArgs { val_type, val: Some(val) })
}

fn chain<'b>(b: &mut FlatBufferBuilder<'b>, c: &ChainModel) -> WIPOffset<fb::Chain<'b>> {
    let inputs = b.create_vector(&c.inputs);
    let outputs = b.create_vector(&c.outputs);
    let instructions: Vec<_> = c.instructions.iter().map(|i| instruction(b, i)).collect();
    let instructions = b.create_vector(&instructions);
    let stacktrace = c.stacktrace.as_ref().map(|frames| {
        let lists: Vec<_> = frames
            .iter()
            .map(|list| {
                let items = list.as_ref().map(|list| {
                    let frames: Vec<_> = list
                        .iter()
                        .map(|f| {
                            let filename = f.filename.as_ref().map(|s| b.create_string(s));
                            let name = f.name.as_ref().map(|s| b.create_string(s));
                            let context = f.context.as_ref().map(|s| b.create_string(s));
                            fb::Frame::create(
                                b,
                                &fb::FrameArgs { filename, lineno: f.lineno, name, context },
                            )
                        })
                        .collect();
                    b.create_vector(&frames)
                });
                fb::FrameList::create(b, &fb::FrameListArgs { items })
            })
            .collect();
        b.create_vector(&lists)
    });
    fb::Chain::create(
        b,
        &fb::ChainArgs {
            inputs: Some(inputs),
            outputs: Some(outputs),
            instructions: Some(instructions),
            stacktrace,
        },
    )
}

fn instruction<'b>(
    b: &mut FlatBufferBuilder<'b>,
    i: &InstructionModel,
) -> WIPOffset<fb::Instruction<'b>> {
    let (instr_args_type, args) = match i {
        InstructionModel::Kernel { op_index, args } => {
            let args = b.create_vector(args);
            (
                fb::InstructionArguments::KernelCall,
                fb::KernelCall::create(
                    b,
                    &fb::KernelCallArgs { op_index: *op_index, args: Some(args) },
                )
                .as_union_value(),
            )
        }
        InstructionModel::Delegate { delegate_index, args } => {
            let args = b.create_vector(args);
            (
                fb::InstructionArguments::DelegateCall,
                fb::DelegateCall::create(
                    b,
                    &fb::DelegateCallArgs { delegate_index: *delegate_index, args: Some(args) },
                )
                .as_union_value(),
            )
        }
        InstructionModel::Move { from, to } => (
            fb::InstructionArguments::MoveCall,
            fb::MoveCall::create(b, &fb::MoveCallArgs { move_from: *from, move_to: *to })
                .as_union_value(),
        ),
        InstructionModel::JumpFalse { cond, destination } => (
            fb::InstructionArguments::JumpFalseCall,
            fb::JumpFalseCall::create(
                b,
                &fb::JumpFalseCallArgs {
                    cond_value_index: *cond,
                    destination_instruction: *destination,
                },
            )
            .as_union_value(),
        ),
        InstructionModel::Free { value } => (
            fb::InstructionArguments::FreeCall,
            fb::FreeCall::create(b, &fb::FreeCallArgs { value_index: *value }).as_union_value(),
        ),
    };
    fb::Instruction::create(b, &fb::InstructionArgs { instr_args_type, instr_args: Some(args) })
}

/// An 8-byte field's struct, or `None` for 0: flatc leaves a scalar equal to its default out of
/// the table, and so does kiln, so that a rewrite keeps the bytes of fields it did not change.
fn nonzero<T, S>(value: T, make: impl FnOnce(T) -> S) -> Option<S>
where
    T: Default + PartialEq,
{
    (value != T::default()).then(|| make(value))
}
