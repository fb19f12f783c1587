//! The summary behind `kiln inspect` for a plain TFLite model: version, description, buffers,
//! and per subgraph its inputs, outputs and operator counts.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{builtin_operator_name, tensor_type_name, Model, TensorInfo, BUILTIN_CUSTOM};
use crate::error::{Error, Result};

/// `kiln inspect --json` for a TFLite model.
#[derive(Serialize)]
pub struct Summary {
    /// Schema version.
    pub version: u32,
    /// `description`.
    pub description: Option<String>,
    /// Number of buffers.
    pub buffers: usize,
    /// Every subgraph, in order.
    pub subgraphs: Vec<SubgraphSummary>,
}

/// One subgraph.
#[derive(Serialize)]
pub struct SubgraphSummary {
    /// Number of tensors.
    pub tensors: usize,
    /// Number of operators.
    pub operators: usize,
    /// The subgraph's inputs.
    pub inputs: Vec<TensorSummary>,
    /// The subgraph's outputs.
    pub outputs: Vec<TensorSummary>,
    /// Operator name (builtin name, or the custom code) -> number of uses.
    pub operator_counts: BTreeMap<String, usize>,
}

/// One input or output tensor.
#[derive(Serialize)]
pub struct TensorSummary {
    /// Index in the subgraph's tensors.
    pub index: usize,
    /// Name.
    pub name: Option<String>,
    /// Element type ([`tensor_type_name`]).
    pub dtype: &'static str,
    /// Shape.
    pub shape: Vec<i32>,
    /// Quantization scales (left out when absent).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scale: Vec<f32>,
    /// Quantization zero points (left out when absent).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub zero_point: Vec<i64>,
}

impl From<TensorInfo<'_>> for TensorSummary {
    fn from(t: TensorInfo<'_>) -> Self {
        TensorSummary {
            index: t.index,
            name: t.name.map(str::to_string),
            dtype: tensor_type_name(t.dtype),
            shape: t.shape,
            scale: t.scale,
            zero_point: t.zero_point,
        }
    }
}

/// Opens `bytes` as a TFLite model and summarises it; fails where the model does not verify,
/// an operator's code index is out of range, or a subgraph's input or output index is.
pub fn summarize(bytes: &[u8]) -> Result<Summary> {
    let model = Model::open(bytes)?;
    let operators = model.operators()?;
    let mut subgraphs = Vec::with_capacity(model.num_subgraphs());
    for index in 0..model.num_subgraphs() {
        let (inputs, outputs, tensors, num_ops) = model.subgraph_io(index)?;
        let io = |list: Vec<i32>| -> Result<Vec<TensorSummary>> {
            list.into_iter().map(|t| Ok(model.tensor(index, t)?.into())).collect()
        };
        let mut operator_counts = BTreeMap::new();
        for op in operators.iter().filter(|op| op.subgraph == index) {
            let code = op.code.ok_or_else(|| Error::OutOfRange {
                field: format!("subgraphs[{index}].operators[{}].opcode_index", op.index),
                index: op.opcode_index.into(),
                count: model.operator_codes().len() as u64,
                what: "operator codes",
            })?;
            let name = match code.custom_code {
                Some(custom) if code.code() == BUILTIN_CUSTOM => format!("CUSTOM:{custom}"),
                _ => builtin_operator_name(code.code())
                    .map_or_else(|| format!("BUILTIN_{}", code.code()), str::to_string),
            };
            *operator_counts.entry(name).or_insert(0) += 1;
        }
        subgraphs.push(SubgraphSummary {
            tensors,
            operators: num_ops,
            inputs: io(inputs)?,
            outputs: io(outputs)?,
            operator_counts,
        });
    }
    Ok(Summary {
        version: model.version(),
        description: model.description().map(str::to_string),
        buffers: model.num_buffers(),
        subgraphs,
    })
}
