//! A method of a `.pte` as the report draws it: every original instruction an operator node,
//! the tensors between them edges, an XNNPACK delegate call with its own graph inside.

use std::collections::HashMap;

use anyhow::{Context, Result};
use kiln_format::pte::{self, Instruction, TensorData, Value};
use serde::Serialize;

use super::graph::{tensor_type, Edges, Graph, Kind, Node};

/// One original instruction, with what the profile says of it.
#[derive(Debug, Serialize)]
pub struct Op {
    /// Chain index.
    pub chain: usize,
    /// Its index in the chain (what compiled steps' origins name).
    pub instruction: usize,
    /// The operator `name.overload`, `delegate:<backend id>` or the instruction kind.
    pub name: String,
    /// Tensors it reads that an input or an earlier instruction gives, `name: type` each.
    pub reads: Vec<String>,
    /// Tensors it reads that nothing before it writes: weights, buffers.
    pub constants: Vec<String>,
    /// Tensors it writes.
    pub writes: Vec<String>,
    /// Milliseconds per execute: the time of the compiled steps that stand for it, a fused
    /// step's time split evenly over the instructions it stands for.
    pub ms: f64,
    /// `ms` as a share of all steps' time, in percent.
    pub share: f64,
    /// Whether a step standing for it ran in the profiled executes (a branch may skip it).
    pub ran: bool,
    /// The compiled steps that stand for it (indices in the report's step table).
    pub steps: Vec<usize>,
}

/// A method's graph and its instructions.
pub struct MethodGraph {
    /// Inputs, one node per instruction (in chain order), outputs.
    pub graph: Graph,
    /// The instructions, in chain order; graph nodes refer to them by index.
    pub ops: Vec<Op>,
}

/// The shortest name that still says what an operator is: without `aten::` and `.out`.
fn short_name(name: &str) -> &str {
    let name = name.strip_prefix("aten::").unwrap_or(name);
    name.strip_suffix(".out").unwrap_or(name)
}

/// The method's values as the report names and types them.
struct Values<'a> {
    method: pte::Method<'a>,
    /// Method input names by value index.
    names: HashMap<usize, String>,
}

impl Values<'_> {
    /// The tensors value `v` holds: itself, or a list's items.
    fn tensors(&self, v: usize) -> Result<Vec<usize>> {
        Ok(match self.method.value(v)? {
            Value::Tensor(_) => vec![v],
            Value::TensorList(items) => items.iter().map(|i| i as usize).collect(),
            Value::OptionalTensorList(items) => {
                items.iter().filter_map(|i| usize::try_from(i).ok()).collect()
            }
            _ => Vec::new(),
        })
    }

    /// `float[1,3,8,8]` for a tensor, the kind for any other value.
    fn type_of(&self, v: usize) -> Result<String> {
        Ok(match self.method.value(v)? {
            Value::Tensor(t) => tensor_type(t.dtype().schema_name(), &t.shape()),
            other => other.kind().snake_name().to_string(),
        })
    }

    /// `name: type`, the name being the input's, the tensor's fully qualified name or `v<index>`.
    fn describe(&self, v: usize) -> Result<String> {
        let name = match (self.names.get(&v), self.method.value(v)?) {
            (Some(n), _) => n.clone(),
            (None, Value::Tensor(t)) => {
                t.fully_qualified_name().map_or_else(|| format!("v{v}"), str::to_string)
            }
            _ => format!("v{v}"),
        };
        Ok(format!("{name}: {}", self.type_of(v)?))
    }

    /// Where planned tensor `v` lives: its arena and offset.
    fn placement(&self, v: usize) -> Result<Option<(u32, u64)>> {
        Ok(match self.method.value(v)? {
            Value::Tensor(t) => match t.data() {
                TensorData::Planned(a) => Some((a.memory_id, a.offset)),
                _ => None,
            },
            _ => None,
        })
    }

    /// Whether tensor `v` holds data before the method runs (constant or mutable state).
    fn preset(&self, v: usize) -> Result<bool> {
        Ok(matches!(
            self.method.value(v)?,
            Value::Tensor(t) if !matches!(t.data(), TensorData::Runtime | TensorData::Planned(_))
        ))
    }
}

/// An instruction's name and which of its argument positions it writes (`None`: it writes the
/// tensors that nothing wrote before, as a delegate call does with its outputs).
fn instruction_name(
    method: &pte::Method<'_>,
    ins: &Instruction<'_>,
) -> Result<(String, Option<Vec<bool>>)> {
    Ok(match ins {
        Instruction::Kernel { op_index, args } => {
            let name = method.operator(*op_index)?.full_name();
            let writes = kiln_runtime::KernelRegistry::builtin()
                .get(&name)
                .map(|def| (0..args.len()).map(|p| !def.is_input(p)).collect());
            (name, writes)
        }
        Instruction::Delegate { delegate_index, .. } => {
            (format!("delegate:{}", method.delegate(*delegate_index)?.id), None)
        }
        Instruction::Move { .. } => (ins.kind_name().to_string(), Some(vec![false, true])),
        _ => (ins.kind_name().to_string(), Some(Vec::new())),
    })
}

/// An instruction's tooltip: its name and position, then the tensors it reads and writes.
fn describe_op(op: &Op) -> String {
    let mut text = format!("{}\nchain {}, instruction {}", op.name, op.chain, op.instruction);
    let lists = [("reads", &op.reads), ("constant", &op.constants), ("writes", &op.writes)];
    for (what, list) in lists {
        for t in list {
            text.push_str(&format!("\n{what} {t}"));
        }
    }
    text
}

/// The value indices an instruction names, in argument order.
fn arguments(ins: &Instruction<'_>) -> Vec<usize> {
    match ins {
        Instruction::Kernel { args, .. } | Instruction::Delegate { args, .. } => {
            args.iter().filter_map(|a| usize::try_from(a).ok()).collect()
        }
        Instruction::Move { from, to } => vec![*from, *to],
        Instruction::JumpFalse { cond, .. } => vec![*cond],
        Instruction::Free { value } => vec![*value],
    }
}

/// The graph of method `name` of the program in `bytes`; `input_names` are the names the
/// program records for its inputs (or none).
pub fn read(bytes: &[u8], name: &str, input_names: &[Option<String>]) -> Result<MethodGraph> {
    let program = pte::Program::open(bytes)?;
    let method = program.method_by_name(name)?;
    let inputs = method.inputs()?;
    let names =
        inputs.iter().zip(input_names).filter_map(|(&v, n)| n.clone().map(|n| (v, n))).collect();
    let values = Values { method, names };
    let mut nodes = Vec::new();
    let mut writer: HashMap<usize, usize> = HashMap::new();
    // The last node that wrote each planned place: a view the exporter left out is a tensor
    // no instruction writes, planned where the tensor it views is.
    let mut placed: HashMap<(u32, u64), usize> = HashMap::new();
    for (i, &v) in inputs.iter().enumerate() {
        writer.insert(v, nodes.len());
        let label = values.names.get(&v).cloned().unwrap_or_else(|| format!("input {i}"));
        let title = format!("method input {i}\n{}", values.describe(v)?);
        nodes.push(Node::boundary(Kind::Input, label, title, values.type_of(v)?));
    }
    let mut edges = Edges::default();
    let mut ops = Vec::new();
    for (c, chain) in method.chains().enumerate() {
        for (k, ins) in chain.instructions().enumerate() {
            let ins = ins?;
            let at = nodes.len();
            let (op_name, positions) = instruction_name(&method, &ins)?;
            let mut op = Op {
                chain: c,
                instruction: k,
                name: op_name,
                reads: Vec::new(),
                constants: Vec::new(),
                writes: Vec::new(),
                ms: 0.0,
                share: 0.0,
                ran: false,
                steps: Vec::new(),
            };
            let mut written = Vec::new();
            for (p, arg) in arguments(&ins).into_iter().enumerate() {
                for t in values.tensors(arg)? {
                    let writes = match &positions {
                        Some(w) => w.get(p).copied().unwrap_or(false),
                        None => !writer.contains_key(&t) && !values.preset(t)?,
                    };
                    let text = values.describe(t)?;
                    if writes {
                        if !written.contains(&t) {
                            written.push(t);
                            op.writes.push(text);
                        }
                    } else if let Some(&from) = writer
                        .get(&t)
                        .or_else(|| values.placement(t).ok().flatten().and_then(|p| placed.get(&p)))
                    {
                        edges.add(from, at, text.clone());
                        op.reads.push(text);
                    } else {
                        op.constants.push(text);
                    }
                }
            }
            for &t in &written {
                writer.insert(t, at);
                if let Some(p) = values.placement(t)? {
                    placed.insert(p, at);
                }
            }
            let inner = match &ins {
                Instruction::Delegate { delegate_index, .. } => {
                    let d = method.delegate(*delegate_index)?;
                    if d.id == kiln_runtime::xnnpack::BACKEND_ID {
                        let payload =
                            kiln_format::xnnpack::Payload::parse(program.delegate_data(&d)?)
                                .with_context(|| {
                                    format!("instruction {k}: delegate {delegate_index}")
                                })?;
                        Some(super::xnnpack::graph(&payload))
                    } else {
                        None
                    }
                }
                _ => None,
            };
            let tensor = match written.first() {
                Some(&t) => values.type_of(t)?,
                None => String::new(),
            };
            let short = short_name(&op.name);
            nodes.push(Node {
                kind: Kind::Op,
                label: short.strip_prefix("delegate:").unwrap_or(short).to_string(),
                title: describe_op(&op),
                tensor,
                op: Some(ops.len()),
                debug_handle: None,
                inner,
            });
            ops.push(op);
        }
    }
    for (i, v) in method.outputs()?.into_iter().enumerate() {
        let at = nodes.len();
        if let Some(&from) = writer.get(&v) {
            edges.add(from, at, values.describe(v)?);
        }
        let title = format!("method output {i}\n{}", values.describe(v)?);
        nodes.push(Node::boundary(Kind::Output, format!("output {i}"), title, values.type_of(v)?));
    }
    Ok(MethodGraph { graph: Graph { nodes, edges: edges.into_edges() }, ops })
}
