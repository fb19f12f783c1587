//! The `kiln inspect` and `kiln verify` arms for plain TFLite models (models without an Edge
//! TPU package): version, description, and per subgraph its inputs, outputs and operator counts.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kiln_format::tflite::{
    builtin_operator_name, tensor_type_name, Model, TensorInfo, BUILTIN_CUSTOM,
};
use serde::Serialize;

use crate::input::Input;
use crate::output::{human_bytes, print_json, Table};

#[derive(Serialize)]
struct JsonModel {
    version: u32,
    description: Option<String>,
    buffers: usize,
    subgraphs: Vec<JsonSubgraph>,
}

#[derive(Serialize)]
struct JsonSubgraph {
    tensors: usize,
    operators: usize,
    inputs: Vec<JsonTensor>,
    outputs: Vec<JsonTensor>,
    /// Operator name (builtin name, or the custom code) -> number of uses.
    operator_counts: BTreeMap<String, usize>,
}

#[derive(Serialize)]
struct JsonTensor {
    index: usize,
    name: Option<String>,
    dtype: &'static str,
    shape: Vec<i32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    scale: Vec<f32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    zero_point: Vec<i64>,
}

impl From<TensorInfo<'_>> for JsonTensor {
    fn from(t: TensorInfo<'_>) -> Self {
        JsonTensor {
            index: t.index,
            name: t.name.map(str::to_string),
            dtype: tensor_type_name(t.dtype),
            shape: t.shape,
            scale: t.scale,
            zero_point: t.zero_point,
        }
    }
}

/// `kiln verify` arm: the flatbuffer verifies, and every operator's code and every subgraph
/// input/output index are in range.
pub fn verify(input: &Input) -> Result<(), String> {
    summarize(input.bytes()).map(|_| ()).map_err(|e| format!("{e:#}"))
}

/// `kiln inspect` arm.
pub fn inspect(input: &Input, json: bool) -> Result<ExitCode> {
    let path = input.file.path();
    let model = summarize(input.bytes()).with_context(|| path.display().to_string())?;
    if json {
        print_json(&model)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{}: TFLite v{} ({}), {} subgraph(s), {} buffer(s)",
        path.display(),
        model.version,
        human_bytes(input.bytes().len() as u64),
        model.subgraphs.len(),
        model.buffers
    );
    if let Some(d) = &model.description {
        outln!("description: {d}");
    }
    for (i, sg) in model.subgraphs.iter().enumerate() {
        outln!("\nsubgraph {i}: {} tensors, {} operators", sg.tensors, sg.operators);
        let mut table = Table::new(["io", "index", "dtype", "shape", "quantization", "name"]);
        for (kind, list) in [("input", &sg.inputs), ("output", &sg.outputs)] {
            for t in list {
                let quant = if t.scale.is_empty() {
                    String::new()
                } else {
                    format!("scale {:?} zero_point {:?}", t.scale, t.zero_point)
                };
                table.row([
                    kind.to_string(),
                    t.index.to_string(),
                    t.dtype.to_string(),
                    format!("{:?}", t.shape),
                    quant,
                    t.name.clone().unwrap_or_default(),
                ]);
            }
        }
        out!("{}", table.render());
        let mut ops = Table::new(["operator", "count"]);
        for (name, count) in &sg.operator_counts {
            ops.row([name.clone(), count.to_string()]);
        }
        out!("{}", ops.render());
    }
    Ok(ExitCode::SUCCESS)
}

fn summarize(bytes: &[u8]) -> Result<JsonModel> {
    let model = Model::open(bytes)?;
    let operators = model.operators()?;
    let mut subgraphs = Vec::with_capacity(model.num_subgraphs());
    for index in 0..model.num_subgraphs() {
        let (inputs, outputs, tensors, num_ops) = model.subgraph_io(index)?;
        let io = |list: Vec<i32>| -> Result<Vec<JsonTensor>> {
            list.into_iter().map(|t| Ok(model.tensor(index, t)?.into())).collect()
        };
        let mut operator_counts = BTreeMap::new();
        for op in operators.iter().filter(|op| op.subgraph == index) {
            let code = op.code.with_context(|| {
                format!(
                    "subgraphs[{index}].operators[{}].opcode_index {} is not below the {} \
                     operator codes",
                    op.index,
                    op.opcode_index,
                    model.operator_codes().len()
                )
            })?;
            let name = match code.custom_code {
                Some(custom) if code.code() == BUILTIN_CUSTOM => format!("CUSTOM:{custom}"),
                _ => builtin_operator_name(code.code())
                    .map_or_else(|| format!("BUILTIN_{}", code.code()), str::to_string),
            };
            *operator_counts.entry(name).or_insert(0) += 1;
        }
        subgraphs.push(JsonSubgraph {
            tensors,
            operators: num_ops,
            inputs: io(inputs)?,
            outputs: io(outputs)?,
            operator_counts,
        });
    }
    Ok(JsonModel {
        version: model.version(),
        description: model.description().map(str::to_string),
        buffers: model.num_buffers(),
        subgraphs,
    })
}
