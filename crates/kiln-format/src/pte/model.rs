//! An owned, editable copy of a program, the input of [`super::writer::write`].
//!
//! Segment *contents* are held here, not offsets: constant and mutable-data segments are lists
//! of buffers that the writer packs (with alignment and deduplication), so the writer alone
//! decides the file layout. Every other field mirrors the schema one to one, so reading a file
//! into a model and writing it back keeps everything but the layout.

use kiln_schema::program::executorch_flatbuffer as fb;
use kiln_schema::{or_zero, Unaligned};

use super::program::{loc, DelegateData, Program, ShapeDynamism, TensorData, FORMAT};
use super::scalar_type::ScalarType;
use crate::error::{Error, Result};

/// An owned program.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProgramModel {
    /// `Program.version` (ExecuTorch writes 0).
    pub version: u32,
    /// Methods in file order.
    pub methods: Vec<MethodModel>,
    /// Deprecated inline constant buffers (`Program.constant_buffer`).
    pub constant_buffer: Vec<Vec<u8>>,
    /// Inline delegate blobs (`Program.backend_delegate_data`).
    pub backend_delegate_data: Vec<Vec<u8>>,
    /// Segments in file order; the writer places them.
    pub segments: Vec<SegmentModel>,
    /// Index of the constant segment (a [`SegmentModel::Buffers`]), when there is one.
    pub constant_segment: Option<u32>,
    /// Indices of the mutable-data segments (each a [`SegmentModel::Buffers`]).
    pub mutable_data_segments: Vec<u32>,
    /// Named data: key and segment index.
    pub named_data: Vec<(String, u32)>,
}

/// The contents of one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SegmentModel {
    /// An opaque blob (delegate data, named data).
    Raw(Vec<u8>),
    /// Buffers addressed by index through `SubsegmentOffsets` (constants, mutable data). The
    /// writer places buffer i at an offset aligned to `alignment`, sharing identical buffers.
    Buffers {
        /// Buffer contents; entry 0 is ExecuTorch's reserved entry.
        buffers: Vec<Vec<u8>>,
        /// Alignment of each buffer inside the segment (16 for constants, 1 for mutable data).
        alignment: u64,
    },
}

/// An owned method (`ExecutionPlan`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MethodModel {
    /// Method name.
    pub name: String,
    /// Pytree specs of inputs and outputs, when present.
    pub container_meta: Option<(String, String)>,
    /// The value table.
    pub values: Vec<ValueModel>,
    /// Input value indices.
    pub inputs: Vec<i32>,
    /// Output value indices.
    pub outputs: Vec<i32>,
    /// Chains.
    pub chains: Vec<ChainModel>,
    /// Operators: name and overload.
    pub operators: Vec<(String, String)>,
    /// Delegates.
    pub delegates: Vec<DelegateModel>,
    /// `non_const_buffer_sizes` (entry 0 reserved).
    pub non_const_buffer_sizes: Vec<i64>,
    /// `non_const_buffer_device`: buffer index, device type, device index.
    pub non_const_buffer_device: Vec<(i32, i8, i8)>,
}

/// An owned value.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueModel {
    /// None.
    Null,
    /// Integer.
    Int(i64),
    /// Boolean.
    Bool(bool),
    /// Double.
    Double(f64),
    /// String.
    String(String),
    /// Tensor.
    Tensor(TensorModel),
    /// Int value indices.
    IntList(Vec<i64>),
    /// Literal doubles.
    DoubleList(Vec<f64>),
    /// Literal booleans.
    BoolList(Vec<bool>),
    /// Tensor value indices.
    TensorList(Vec<i32>),
    /// Tensor value indices or -1.
    OptionalTensorList(Vec<i32>),
}

/// An owned tensor description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorModel {
    /// Element type.
    pub scalar_type: ScalarType,
    /// Sizes.
    pub sizes: Vec<i32>,
    /// Dimension order.
    pub dim_order: Vec<u8>,
    /// `requires_grad`.
    pub requires_grad: bool,
    /// Constant or mutable-data buffer index (0 = none).
    pub data_buffer_idx: u32,
    /// Planned placement: memory_id and byte offset.
    pub allocation: Option<(u32, u64)>,
    /// The unused `layout` byte, kept as written.
    pub layout: i8,
    /// Shape dynamism.
    pub dynamism: ShapeDynamism,
    /// `extra_tensor_info`, when present.
    pub extra: Option<ExtraTensorInfoModel>,
}

/// An owned `ExtraTensorInfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtraTensorInfoModel {
    /// `mutable_data_segments_idx`.
    pub mutable_data_segments_idx: u64,
    /// Fully qualified name.
    pub fully_qualified_name: Option<String>,
    /// True for `EXTERNAL` location.
    pub external: bool,
    /// Device type (0 = CPU).
    pub device_type: i8,
    /// Device index.
    pub device_index: i8,
}

/// An owned chain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChainModel {
    /// Input value indices.
    pub inputs: Vec<i32>,
    /// Output value indices.
    pub outputs: Vec<i32>,
    /// Instructions.
    pub instructions: Vec<InstructionModel>,
    /// Per-instruction stack traces, when emitted (`None` entries are absent frame lists).
    pub stacktrace: Option<Vec<Option<Vec<FrameModel>>>>,
}

/// An owned instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstructionModel {
    /// `KernelCall`.
    Kernel {
        /// Operator index.
        op_index: i32,
        /// Value indices.
        args: Vec<i32>,
    },
    /// `DelegateCall`.
    Delegate {
        /// Delegate index.
        delegate_index: i32,
        /// Value indices.
        args: Vec<i32>,
    },
    /// `MoveCall`.
    Move {
        /// Source.
        from: i32,
        /// Destination.
        to: i32,
    },
    /// `JumpFalseCall`.
    JumpFalse {
        /// Condition value index.
        cond: i32,
        /// Destination instruction.
        destination: i32,
    },
    /// `FreeCall`.
    Free {
        /// Tensor value index.
        value: i32,
    },
}

/// One stack frame.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameModel {
    /// File name.
    pub filename: Option<String>,
    /// Line number.
    pub lineno: i32,
    /// Function name.
    pub name: Option<String>,
    /// Source context.
    pub context: Option<String>,
}

/// An owned delegate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelegateModel {
    /// Backend id.
    pub id: String,
    /// Where the processed blob is.
    pub data: DelegateData,
    /// Compile specs: key and value.
    pub compile_specs: Vec<(String, Vec<u8>)>,
}

impl ProgramModel {
    /// Copies a verified program into an owned model. Constant and mutable-data segments are
    /// split into buffers at their offsets (buffer i runs to the next larger offset, or to the
    /// end of the segment), so padding stays with the buffer before it.
    pub fn from_program(p: &Program<'_>) -> Result<Self> {
        let raw = p.raw();
        let n = p.num_segments();
        let mut segments: Vec<SegmentModel> = (0..n)
            .map(|i| p.segment_bytes(i).map(|b| SegmentModel::Raw(b.to_vec())))
            .collect::<Result<_>>()?;
        // Bytes each buffer must hold: the largest tensor reading it. A buffer normally runs to
        // the next offset, but a (valid) file may let a tensor's data overlap the next buffer.
        let (mut const_needed, mut mutable_needed) = (Vec::new(), Vec::new());
        for m in p.methods() {
            for i in 0..m.num_values() {
                if let super::program::Value::Tensor(t) = m.value(i)? {
                    let (needed, idx) = match t.data() {
                        TensorData::Constant(idx) => (&mut const_needed, idx),
                        TensorData::PlannedInitialized(_, idx) => (&mut mutable_needed, idx),
                        _ => continue,
                    };
                    let idx = idx as usize;
                    if needed.len() <= idx {
                        needed.resize(idx + 1, 0);
                    }
                    needed[idx] = needed[idx].max(t.nbytes());
                }
            }
        }
        let mut split = |index: u32,
                         offsets: Vec<u64>,
                         needed: &[u64],
                         alignment: u64,
                         path: &str|
         -> Result<()> {
            let slot = segments.get_mut(index as usize).ok_or_else(|| {
                Error::invalid(FORMAT, format!("{path}.segment_index"), None, "out of range")
            })?;
            let data = match slot {
                SegmentModel::Raw(d) => std::mem::take(d),
                SegmentModel::Buffers { .. } => {
                    return Err(Error::unsupported(
                        FORMAT,
                        format!("{path}.segment_index"),
                        None,
                        "a segment shared by two subsegment tables cannot be rewritten",
                    ))
                }
            };
            let buffers = split_buffers(&data, &offsets, needed, path)?;
            *slot = SegmentModel::Buffers { buffers, alignment };
            Ok(())
        };
        let mut constant_segment = None;
        if let Some(cs) = raw.constant_segment() {
            let offsets: Vec<u64> =
                cs.offsets().map(|v| v.iter().map(|o| o.get()).collect()).unwrap_or_default();
            if !offsets.is_empty() {
                split(cs.segment_index(), offsets, &const_needed, 16, "constant_segment")?;
                constant_segment = Some(cs.segment_index());
            }
        }
        let mut mutable_data_segments = Vec::new();
        for (i, sub) in raw.mutable_data_segments().into_iter().flat_map(|v| v.iter()).enumerate() {
            let offsets: Vec<u64> =
                sub.offsets().map(|v| v.iter().map(|o| o.get()).collect()).unwrap_or_default();
            // The runtime reads initial mutable data from mutable_data_segments[0] only.
            let needed: &[u64] = if i == 0 { &mutable_needed } else { &[] };
            split(sub.segment_index(), offsets, needed, 1, &format!("mutable_data_segments[{i}]"))?;
            mutable_data_segments.push(sub.segment_index());
        }
        let bytes_of =
            |v: Option<flatbuffers::Vector<'_, u8>>| v.map_or(Vec::new(), |v| v.bytes().to_vec());
        Ok(ProgramModel {
            version: raw.version(),
            methods: p.methods().map(|m| method_model(&m)).collect::<Result<_>>()?,
            constant_buffer: raw
                .constant_buffer()
                .into_iter()
                .flat_map(|v| v.iter())
                .map(|b| bytes_of(b.storage()))
                .collect(),
            backend_delegate_data: raw
                .backend_delegate_data()
                .into_iter()
                .flat_map(|v| v.iter())
                .map(|b| bytes_of(b.data()))
                .collect(),
            segments,
            constant_segment,
            mutable_data_segments,
            named_data: p.named_data().map(|(k, s)| (k.to_string(), s)).collect(),
        })
    }
}

/// Splits a segment at `offsets` (each checked <= the segment size by verification): buffer i
/// runs to the next larger offset or the segment end, or further when a tensor reading it
/// needs `needed[i]` bytes (its data then overlaps the next buffer and is copied into both).
fn split_buffers(data: &[u8], offsets: &[u64], needed: &[u64], path: &str) -> Result<Vec<Vec<u8>>> {
    let mut sorted: Vec<u64> = offsets.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let len = data.len() as u64;
    offsets
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            let next = match sorted.binary_search(&start) {
                Ok(k) => sorted.get(k + 1).copied().unwrap_or(len),
                Err(_) => len,
            };
            let want = start.saturating_add(needed.get(i).copied().unwrap_or(0));
            let end = next.max(want).min(len);
            usize::try_from(start)
                .ok()
                .zip(usize::try_from(end).ok())
                .and_then(|(s, e)| data.get(s..e))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| {
                    Error::invalid(
                        FORMAT,
                        format!("{path}.offsets[{i}]"),
                        None,
                        "offset past segment",
                    )
                })
        })
        .collect()
}

fn strings(s: Option<&str>) -> Option<String> {
    s.map(str::to_string)
}

fn method_model(m: &super::program::Method<'_>) -> Result<MethodModel> {
    let plan = m.raw();
    let ints = |v: Option<flatbuffers::Vector<'_, i32>>| -> Vec<i32> {
        v.map(|v| v.iter().collect()).unwrap_or_default()
    };
    let values = plan
        .values()
        .into_iter()
        .flat_map(|v| v.iter())
        .enumerate()
        .map(|(i, ev)| value_model(ev, &|| format!("execution_plan[{}].values[{i}]", m.index())))
        .collect::<Result<_>>()?;
    let chains = plan
        .chains()
        .into_iter()
        .flat_map(|v| v.iter())
        .map(|c| {
            let instructions = c
                .instructions()
                .into_iter()
                .flat_map(|v| v.iter())
                .map(instruction_model)
                .collect::<Result<_>>()?;
            let stacktrace = c.stacktrace().map(|st| {
                st.iter()
                    .map(|fl| {
                        fl.items().map(|items| {
                            items
                                .iter()
                                .map(|f| FrameModel {
                                    filename: strings(f.filename()),
                                    lineno: f.lineno(),
                                    name: strings(f.name()),
                                    context: strings(f.context()),
                                })
                                .collect()
                        })
                    })
                    .collect()
            });
            Ok(ChainModel {
                inputs: ints(c.inputs()),
                outputs: ints(c.outputs()),
                instructions,
                stacktrace,
            })
        })
        .collect::<Result<_>>()?;
    let operators = m
        .operators()
        .map(|o| o.map(|o| (o.name.to_string(), o.overload.to_string())))
        .collect::<Result<_>>()?;
    let delegates = m
        .delegates()
        .map(|d| {
            d.map(|d| DelegateModel {
                id: d.id.to_string(),
                data: d.data,
                compile_specs: d
                    .compile_specs
                    .iter()
                    .map(|c| (c.key.to_string(), c.value.to_vec()))
                    .collect(),
            })
        })
        .collect::<Result<_>>()?;
    Ok(MethodModel {
        name: m.name().to_string(),
        container_meta: m.container_meta().map(|(i, o)| (i.to_string(), o.to_string())),
        values,
        inputs: ints(plan.inputs()),
        outputs: ints(plan.outputs()),
        chains,
        operators,
        delegates,
        non_const_buffer_sizes: plan
            .non_const_buffer_sizes()
            .map(|v| v.iter().map(|s| s.get()).collect())
            .unwrap_or_default(),
        non_const_buffer_device: plan
            .non_const_buffer_device()
            .into_iter()
            .flat_map(|v| v.iter())
            .map(|d| (d.buffer_idx(), d.device_type().0, d.device_index()))
            .collect(),
    })
}

fn value_model(ev: fb::EValue<'_>, path: &dyn Fn() -> String) -> Result<ValueModel> {
    let bad = || Error::invalid(FORMAT, path(), loc(&ev._tab), "value does not decode");
    Ok(match ev.val_type() {
        fb::KernelTypes::Null => ValueModel::Null,
        fb::KernelTypes::Int => {
            ValueModel::Int(or_zero(ev.val_as_int().ok_or_else(bad)?.int_val()))
        }
        fb::KernelTypes::Bool => ValueModel::Bool(ev.val_as_bool().ok_or_else(bad)?.bool_val()),
        fb::KernelTypes::Double => {
            ValueModel::Double(or_zero(ev.val_as_double().ok_or_else(bad)?.double_val()))
        }
        fb::KernelTypes::String => ValueModel::String(
            ev.val_as_string().and_then(|s| s.string_val()).ok_or_else(bad)?.to_string(),
        ),
        fb::KernelTypes::Tensor => {
            let t = ev.val_as_tensor().ok_or_else(bad)?;
            // Verification already decoded it; decode again for the checked enums.
            let d = super::program::Tensor::decode(t, path)?;
            let extra = t.extra_tensor_info().map(|e| ExtraTensorInfoModel {
                mutable_data_segments_idx: or_zero(e.mutable_data_segments_idx()),
                fully_qualified_name: strings(e.fully_qualified_name()),
                external: e.location() == fb::TensorDataLocation::EXTERNAL,
                device_type: e.device_type().0,
                device_index: e.device_index(),
            });
            ValueModel::Tensor(TensorModel {
                scalar_type: d.dtype(),
                sizes: d.sizes().iter().collect(),
                dim_order: d.dim_order().iter().collect(),
                requires_grad: t.requires_grad(),
                data_buffer_idx: t.data_buffer_idx(),
                allocation: t.allocation_info().map(|a| {
                    (
                        a.memory_id(),
                        u64::from(a.memory_offset_low())
                            | (u64::from(a.memory_offset_high()) << 32),
                    )
                }),
                layout: t.layout(),
                dynamism: d.dynamism(),
                extra,
            })
        }
        fb::KernelTypes::IntList => ValueModel::IntList(
            ev.val_as_int_list()
                .and_then(|l| l.items())
                .ok_or_else(bad)?
                .iter()
                .map(|x| x.get())
                .collect(),
        ),
        fb::KernelTypes::DoubleList => ValueModel::DoubleList(
            ev.val_as_double_list()
                .and_then(|l| l.items())
                .ok_or_else(bad)?
                .iter()
                .map(|x| x.get())
                .collect(),
        ),
        fb::KernelTypes::BoolList => ValueModel::BoolList(
            ev.val_as_bool_list().and_then(|l| l.items()).ok_or_else(bad)?.iter().collect(),
        ),
        fb::KernelTypes::TensorList => ValueModel::TensorList(
            ev.val_as_tensor_list().and_then(|l| l.items()).ok_or_else(bad)?.iter().collect(),
        ),
        fb::KernelTypes::OptionalTensorList => ValueModel::OptionalTensorList(
            ev.val_as_optional_tensor_list()
                .and_then(|l| l.items())
                .ok_or_else(bad)?
                .iter()
                .collect(),
        ),
        _ => return Err(bad()),
    })
}

fn instruction_model(ins: fb::Instruction<'_>) -> Result<InstructionModel> {
    let bad = || Error::invalid(FORMAT, "instruction", loc(&ins._tab), "does not decode");
    let args =
        |a: Option<flatbuffers::Vector<'_, i32>>| a.map(|v| v.iter().collect()).unwrap_or_default();
    Ok(match ins.instr_args_type() {
        fb::InstructionArguments::KernelCall => {
            let k = ins.instr_args_as_kernel_call().ok_or_else(bad)?;
            InstructionModel::Kernel { op_index: k.op_index(), args: args(k.args()) }
        }
        fb::InstructionArguments::DelegateCall => {
            let d = ins.instr_args_as_delegate_call().ok_or_else(bad)?;
            InstructionModel::Delegate { delegate_index: d.delegate_index(), args: args(d.args()) }
        }
        fb::InstructionArguments::MoveCall => {
            let m = ins.instr_args_as_move_call().ok_or_else(bad)?;
            InstructionModel::Move { from: m.move_from(), to: m.move_to() }
        }
        fb::InstructionArguments::JumpFalseCall => {
            let j = ins.instr_args_as_jump_false_call().ok_or_else(bad)?;
            InstructionModel::JumpFalse {
                cond: j.cond_value_index(),
                destination: j.destination_instruction(),
            }
        }
        fb::InstructionArguments::FreeCall => {
            let f = ins.instr_args_as_free_call().ok_or_else(bad)?;
            InstructionModel::Free { value: f.value_index() }
        }
        _ => return Err(bad()),
    })
}
