//! A method decoded once, at program load, from the verified flatbuffer into owned form: the
//! value table, instructions, operators, delegates and arena sizes. Tensor data stays in the
//! mapped file and is referenced by byte range.

use std::ops::Range;
use std::sync::Arc;

use kiln_format::pte::{self, Instruction, ShapeDynamism, TensorData, Unaligned, Value};
use kiln_kernels::{DType, Shape, ShapeError, MAX_RANK};

use crate::error::{Error, Result};
use crate::io::{TensorMeta, ValueMeta};

/// Where a tensor's bytes come from.
#[derive(Clone, Debug)]
pub(crate) enum DataDef {
    /// Given at run time (an input, or set by a view kernel); kiln gives it owned storage.
    Runtime,
    /// Planned arena `memory_id` (1-based) at `offset`.
    Planned { memory_id: u32, offset: u64 },
    /// Constant bytes of the mapped file.
    Constant(Range<usize>),
    /// Planned, initialised from these bytes of the file (`mutable_data_segments[0]`).
    PlannedInit { memory_id: u32, offset: u64, init: Range<usize> },
    /// External constant, by fully qualified name.
    External(Arc<str>),
    /// Planned, loaded from external data by name.
    ExternalPlanned { fqn: Arc<str>, memory_id: u32, offset: u64 },
    /// Constant bytes made at load (a delegate's weights rearranged for kiln's kernels).
    Owned(Arc<[u8]>),
    /// Constant bytes of external source `source` (a delegate's named data in a `.ptd`),
    /// read in place.
    SourceBytes { source: u32, range: Range<usize> },
}

/// A tensor value as declared.
#[derive(Clone, Debug)]
pub(crate) struct TensorDef {
    pub dtype: DType,
    /// Serialized sizes (the upper bound for dynamic tensors) and dim order.
    pub shape: Shape,
    pub dynamic: bool,
    pub data: DataDef,
}

impl TensorDef {
    /// Bytes at the serialized (bound) shape.
    pub fn nbytes(&self) -> usize {
        self.shape.numel() * self.dtype.size()
    }
}

/// A value as declared.
#[derive(Clone, Debug)]
pub(crate) enum ValueDef {
    None,
    Int(i64),
    Double(f64),
    Bool(bool),
    String(Arc<str>),
    Tensor(TensorDef),
    IntList(Arc<[u32]>),
    DoubleList(Arc<[f64]>),
    BoolList(Arc<[bool]>),
    TensorList(Arc<[u32]>),
    OptionalTensorList(Arc<[Option<u32>]>),
}

/// An instruction with checked indices.
#[derive(Clone, Debug)]
pub(crate) enum InstrDef {
    Kernel { op: usize, args: Vec<u32> },
    Delegate { delegate: usize, args: Vec<u32> },
    Move { from: u32, to: u32 },
    JumpFalse { cond: u32, destination: usize },
    Free { value: u32 },
}

/// What an XNNPACK node is known by in origins and profiles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct XNodeInfo {
    /// The schema's node kind (`XNNConv2d`, ...).
    pub kind: &'static str,
    /// The id linking it to the exported graph's node (ExecuTorch's delegate debug handle).
    pub debug_handle: u32,
    /// The nodes that became no instruction of their own (a transpose or reshape folded into
    /// how its consumer reads the value) whose values this node's instructions read: they
    /// stand for those nodes too (origin rule 1, absorb).
    pub absorbed: Vec<u32>,
}

/// A delegate entry.
#[derive(Clone, Debug)]
pub(crate) struct DelegateDef {
    pub id: String,
    /// The processed blob's bytes in the file.
    pub processed: Range<usize>,
    pub compile_specs: Vec<(String, Vec<u8>)>,
    /// Whether its calls were replaced by kernel calls at decode ([`crate::xnnpack`]), so no
    /// backend runs it.
    pub inlined: bool,
    /// The nodes of its graph, when it was inlined ([`Source::node`] indexes them).
    pub xnodes: Vec<XNodeInfo>,
}

/// One decoded method.
#[derive(Clone, Debug)]
pub(crate) struct MethodPlan {
    pub name: String,
    pub values: Vec<ValueDef>,
    pub inputs: Vec<u32>,
    pub outputs: Vec<u32>,
    pub chains: Vec<Vec<InstrDef>>,
    pub operators: Vec<String>,
    pub delegates: Vec<DelegateDef>,
    /// `non_const_buffer_sizes` without the reserved entry 0: arena `memory_id - 1`.
    pub arena_sizes: Vec<u64>,
    /// Per chain, where each instruction comes from, when delegates were inlined (empty:
    /// every instruction is its own).
    pub origins: Vec<Vec<Source>>,
}

/// The original instruction an instruction of a decoded chain comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Source {
    /// Its index in the file's chain.
    pub instruction: u32,
    /// The delegate whose call it was lowered from, for the kernel calls of an inlined
    /// delegate.
    pub delegate: Option<u32>,
    /// The node of that delegate's graph it computes (`None` for the copies binding the
    /// call's inputs and outputs).
    pub node: Option<u32>,
}

impl MethodPlan {
    /// Where instruction `k` of chain `chain` comes from.
    pub fn source(&self, chain: usize, k: usize) -> Source {
        self.origins.get(chain).and_then(|o| o.get(k)).copied().unwrap_or(Source {
            instruction: k as u32,
            delegate: None,
            node: None,
        })
    }

    /// Records where each instruction of chain `chain` comes from.
    pub fn set_origins(&mut self, chain: usize, origins: Vec<Source>) {
        if self.origins.len() <= chain {
            self.origins.resize(chain + 1, Vec::new());
        }
        self.origins[chain] = origins;
    }

    /// What value `i` is, as callers see it.
    pub fn meta(&self, i: u32) -> ValueMeta {
        match self.values.get(i as usize) {
            Some(ValueDef::Tensor(t)) => ValueMeta::Tensor(TensorMeta {
                dtype: t.dtype,
                sizes: t.shape.sizes().to_vec(),
                dim_order: t.shape.dim_order().to_vec(),
                dynamic: t.dynamic,
            }),
            Some(ValueDef::Int(_)) => ValueMeta::Int,
            Some(ValueDef::Double(_)) => ValueMeta::Double,
            Some(ValueDef::Bool(_)) => ValueMeta::Bool,
            Some(ValueDef::String(_)) => ValueMeta::String,
            Some(ValueDef::None) | None => ValueMeta::None,
            Some(ValueDef::IntList(_)) => ValueMeta::List("int_list"),
            Some(ValueDef::DoubleList(_)) => ValueMeta::List("double_list"),
            Some(ValueDef::BoolList(_)) => ValueMeta::List("bool_list"),
            Some(ValueDef::TensorList(_)) => ValueMeta::List("tensor_list"),
            Some(ValueDef::OptionalTensorList(_)) => ValueMeta::List("optional_tensor_list"),
        }
    }
}

fn range_in(file: &[u8], part: &[u8]) -> Range<usize> {
    let start = (part.as_ptr() as usize).saturating_sub(file.as_ptr() as usize);
    start..start + part.len()
}

/// Decodes method `m` of `program`; `path` names the file in errors.
pub(crate) fn decode(
    program: &pte::Program<'_>,
    m: &pte::Method<'_>,
    path: &str,
) -> Result<MethodPlan> {
    let name = m.name().to_string();
    let file = program.bytes();
    let fmt = |source| Error::Format { path: path.to_string(), source };
    let bad = |location: String, reason: String| Error::InvalidProgram {
        method: name.clone(),
        location,
        reason,
    };
    let n = m.num_values();
    let mut values = Vec::with_capacity(n);
    for i in 0..n {
        let v = m.value(i).map_err(fmt)?;
        let idx = |x: i64, what: &str| -> Result<u32> {
            u32::try_from(x).ok().filter(|&u| (u as usize) < n).ok_or_else(|| {
                bad(format!("values[{i}].{what}"), format!("index {x} out of range"))
            })
        };
        values.push(match v {
            Value::Null => ValueDef::None,
            Value::Int(x) => ValueDef::Int(x),
            Value::Double(x) => ValueDef::Double(x),
            Value::Bool(x) => ValueDef::Bool(x),
            Value::String(s) => ValueDef::String(Arc::from(s)),
            Value::IntList(items) => ValueDef::IntList(
                items.iter().map(|x| idx(x.get(), "int_list")).collect::<Result<_>>()?,
            ),
            Value::DoubleList(items) => {
                ValueDef::DoubleList(items.iter().map(|x| x.get()).collect())
            }
            Value::BoolList(items) => ValueDef::BoolList(items.iter().collect()),
            Value::TensorList(items) => ValueDef::TensorList(
                items.iter().map(|x| idx(x.into(), "tensor_list")).collect::<Result<_>>()?,
            ),
            Value::OptionalTensorList(items) => ValueDef::OptionalTensorList(
                items
                    .iter()
                    .map(|x| {
                        if x < 0 {
                            Ok(None)
                        } else {
                            idx(x.into(), "optional_tensor_list").map(Some)
                        }
                    })
                    .collect::<Result<_>>()?,
            ),
            Value::Tensor(t) => {
                let loc = || format!("values[{i}].tensor");
                let dtype = t.dtype();
                if !dtype.is_supported() {
                    return Err(Error::NotSupported {
                        method: name.clone(),
                        location: loc(),
                        reason: format!("dtype {dtype}"),
                    });
                }
                if t.dynamism() == ShapeDynamism::DynamicUnbound {
                    return Err(Error::NotSupported {
                        method: name.clone(),
                        location: loc(),
                        reason: "DYNAMIC_UNBOUND tensors (ExecuTorch refuses them too)".into(),
                    });
                }
                let dim_order: Vec<u8> = t.dim_order().iter().collect();
                let shape = Shape::new(&t.shape(), &dim_order).map_err(|e| match e {
                    // Valid for ExecuTorch (16 dimensions), but over what kiln's kernels take.
                    ShapeError::Rank(rank) => Error::NotSupported {
                        method: name.clone(),
                        location: loc(),
                        reason: format!(
                            "rank {rank}: kiln's kernels take at most {MAX_RANK} dimensions"
                        ),
                    },
                    e => bad(loc(), e.to_string()),
                })?;
                let data = match t.data() {
                    TensorData::Runtime => DataDef::Runtime,
                    TensorData::Planned(a) => {
                        DataDef::Planned { memory_id: a.memory_id, offset: a.offset }
                    }
                    TensorData::Constant(idx) => {
                        let bytes = program.constant_data(idx as usize, t.nbytes()).map_err(fmt)?;
                        DataDef::Constant(range_in(file, bytes))
                    }
                    TensorData::PlannedInitialized(a, idx) => {
                        let bytes = program.mutable_data(idx as usize, t.nbytes()).map_err(fmt)?;
                        DataDef::PlannedInit {
                            memory_id: a.memory_id,
                            offset: a.offset,
                            init: range_in(file, bytes),
                        }
                    }
                    TensorData::External(fqn) => DataDef::External(Arc::from(fqn)),
                    TensorData::ExternalPlanned(fqn, a) => DataDef::ExternalPlanned {
                        fqn: Arc::from(fqn),
                        memory_id: a.memory_id,
                        offset: a.offset,
                    },
                };
                ValueDef::Tensor(TensorDef {
                    dtype,
                    shape,
                    dynamic: t.dynamism() != ShapeDynamism::Static,
                    data,
                })
            }
        });
    }
    let to_u32 = |v: Vec<usize>| v.into_iter().map(|x| x as u32).collect::<Vec<u32>>();
    let inputs = to_u32(m.inputs().map_err(fmt)?);
    let outputs = to_u32(m.outputs().map_err(fmt)?);
    let mut chains = Vec::with_capacity(m.num_chains());
    for chain in m.chains() {
        let mut instrs = Vec::with_capacity(chain.num_instructions());
        for ins in chain.instructions() {
            let args = |a: pte::Vector<'_, i32>| a.iter().map(|x| x as u32).collect::<Vec<u32>>();
            instrs.push(match ins.map_err(fmt)? {
                Instruction::Kernel { op_index, args: a } => {
                    InstrDef::Kernel { op: op_index, args: args(a) }
                }
                Instruction::Delegate { delegate_index, args: a } => {
                    InstrDef::Delegate { delegate: delegate_index, args: args(a) }
                }
                Instruction::Move { from, to } => {
                    InstrDef::Move { from: from as u32, to: to as u32 }
                }
                Instruction::JumpFalse { cond, destination } => {
                    InstrDef::JumpFalse { cond: cond as u32, destination }
                }
                Instruction::Free { value } => InstrDef::Free { value: value as u32 },
            });
        }
        chains.push(instrs);
    }
    let operators = m
        .operators()
        .map(|o| o.map(|o| o.full_name()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(fmt)?;
    let mut delegates = Vec::with_capacity(m.num_delegates());
    for d in m.delegates() {
        let d = d.map_err(fmt)?;
        let processed = program.delegate_data(&d).map_err(fmt)?;
        delegates.push(DelegateDef {
            id: d.id.to_string(),
            processed: range_in(file, processed),
            compile_specs: d
                .compile_specs
                .iter()
                .map(|c| (c.key.to_string(), c.value.to_vec()))
                .collect(),
            inlined: false,
            xnodes: Vec::new(),
        });
    }
    Ok(MethodPlan {
        name,
        values,
        inputs,
        outputs,
        chains,
        operators,
        delegates,
        arena_sizes: m.planned_buffer_sizes(),
        origins: Vec::new(),
    })
}
