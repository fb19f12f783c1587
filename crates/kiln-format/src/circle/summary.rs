//! The summary behind `kiln inspect` and `kiln dump` for a Circle model: version,
//! description, per subgraph its inputs, outputs and tensors, the operator histogram, the
//! metadata entries and the origin tables; for `dump` also every operator, the tensors'
//! quantization and the buffers.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::origins::{read_tables, OriginTables};
use super::read::CircleModel;
use super::schema::{SubGraph, TensorType};
use crate::error::Result;

/// The model's structure as JSON: what `kiln inspect --json` prints, or, `full`, what `kiln
/// dump` prints (with operators, quantization, shape signatures and buffers).
pub fn summarize(model: &CircleModel<'_>, full: bool) -> Result<Value> {
    let m = model.model();
    let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
    let mut subgraphs = Vec::new();
    for sg in m.subgraphs().iter().flatten() {
        let ops: Vec<Value> = sg
            .operators()
            .iter()
            .flatten()
            .map(|op| {
                let name = model.operator_name(op.opcode_index());
                *histogram.entry(name.clone()).or_default() += 1;
                json!({
                    "opcode": name,
                    "inputs": op.inputs().map(|v| v.iter().collect::<Vec<i32>>()),
                    "outputs": op.outputs().map(|v| v.iter().collect::<Vec<i32>>()),
                    "builtin_options": op.builtin_options_type().variant_name(),
                })
            })
            .collect();
        let mut s = json!({
            "name": sg.name().unwrap_or_default(),
            "inputs": sg.inputs().map(|v| v.iter().collect::<Vec<i32>>()),
            "outputs": sg.outputs().map(|v| v.iter().collect::<Vec<i32>>()),
            "num_operators": ops.len(),
            "tensors": tensors(model, &sg, full),
        });
        if full {
            s["operators"] = json!(ops);
        }
        subgraphs.push(s);
    }
    let metadata: Vec<Value> = model
        .metadata()
        .iter()
        .map(|e| {
            let size = model.buffer_data(e.buffer).map_or(0, <[u8]>::len);
            json!({ "name": e.name, "buffer": e.buffer, "size": size })
        })
        .collect();
    let tables = read_tables(model)?;
    let origins = if tables.source_table.is_some() || tables.op_table.is_some() {
        tables_json(&tables)
    } else {
        Value::Null
    };
    let mut v = json!({
        "kind": "circle",
        "version": m.version(),
        "description": m.description(),
        "subgraphs": subgraphs,
        "operator_histogram": histogram,
        "num_buffers": m.buffers().map_or(0, |b| b.len()),
        "metadata": metadata,
        "origins": origins,
    });
    if full {
        let buffers: Vec<Value> = m
            .buffers()
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, b)| {
                let size = model.buffer_data(i as u32).map_or(0, <[u8]>::len);
                json!({ "index": i, "size": size, "external_offset": (b.offset() > 1).then_some(b.offset()) })
            })
            .collect();
        v["buffers"] = json!(buffers);
    }
    Ok(v)
}

/// The origin tables as JSON: `{"source_table": {"ID": "name"}, "op_table": {"OP_ID": [ID,
/// ...]}}` (an absent table as an empty object).
pub fn tables_json(tables: &OriginTables) -> Value {
    let sources: serde_json::Map<String, Value> = tables
        .source_table
        .iter()
        .flatten()
        .map(|(id, name)| (id.to_string(), json!(name)))
        .collect();
    let ops: serde_json::Map<String, Value> =
        tables.op_table.iter().flatten().map(|(op, ids)| (op.to_string(), json!(ids))).collect();
    json!({ "source_table": sources, "op_table": ops })
}

/// The schema name of a tensor type (`TYPE_<n>` for values outside the enum).
pub fn type_name(t: TensorType) -> String {
    t.variant_name().map_or_else(|| format!("TYPE_{}", t.0), str::to_string)
}

fn tensors(model: &CircleModel<'_>, sg: &SubGraph<'_>, full: bool) -> Vec<Value> {
    sg.tensors()
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            let data = model.buffer_data(t.buffer()).map_or(0, <[u8]>::len);
            let mut v = json!({
                "index": i,
                "name": t.name().unwrap_or_default(),
                "type": type_name(t.type_()),
                "shape": t.shape().map(|s| s.iter().collect::<Vec<i32>>()),
                "buffer": t.buffer(),
                "data_size": data,
            });
            if full {
                if let Some(q) = t.quantization() {
                    v["quantization"] = json!({
                        "scale": q.scale().map(|s| s.iter().collect::<Vec<f32>>()),
                        "zero_point": q.zero_point().map(|z| z.iter().collect::<Vec<i64>>()),
                        "quantized_dimension": q.quantized_dimension(),
                    });
                }
                v["shape_signature"] =
                    json!(t.shape_signature().map(|s| s.iter().collect::<Vec<i32>>()));
                v["is_variable"] = json!(t.is_variable());
            }
            v
        })
        .collect()
}
