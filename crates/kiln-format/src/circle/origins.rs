//! Reading and writing the luci-profile origin tables of a Circle model, and the origins
//! luci's importer gives each operator.

use super::{CircleEditor, CircleModel};
use crate::error::{Error, Result};
use crate::origins::{
    decode_op_table, decode_source_table, encode_op_table, encode_source_table, graph_origins,
    origin_table, OpTable, OriginMap, SourceTable, OP_TABLE_NAME, SOURCE_TABLE_NAME,
};

/// The origin tables found in a model; `None` when the metadata entry is absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginTables {
    /// `ONE_source_table`, decoded.
    pub source_table: Option<SourceTable>,
    /// `ONE_op_table`, decoded (often present but empty, see [`crate::origins::tables`]).
    pub op_table: Option<OpTable>,
}

/// Decodes the `ONE_source_table` and `ONE_op_table` metadata of `model`, strictly.
pub fn read_tables(model: &CircleModel<'_>) -> Result<OriginTables> {
    let source_table =
        model.metadata_data(SOURCE_TABLE_NAME)?.map(decode_source_table).transpose()?;
    let op_table = model.metadata_data(OP_TABLE_NAME)?.map(decode_op_table).transpose()?;
    Ok(OriginTables { source_table, op_table })
}

/// Sets both tables (source table first, then op table, the order luci appends them in).
pub fn write_tables(
    editor: &mut CircleEditor<'_>,
    sources: &SourceTable,
    ops: &OpTable,
) -> Result<()> {
    editor.set_metadata(SOURCE_TABLE_NAME, encode_source_table(sources)?)?;
    editor.set_metadata(OP_TABLE_NAME, encode_op_table(ops)?)
}

/// The node name luci gives each operator of `subgraph`: the name of its first output tensor,
/// `(noname)` when that name is empty or the operator has no output.
pub fn operator_names(model: &CircleModel<'_>, subgraph: usize) -> Result<Vec<String>> {
    let sg = model
        .model()
        .subgraphs()
        .filter(|s| subgraph < s.len())
        .map(|s| s.get(subgraph))
        .ok_or_else(|| {
            Error::invalid(
                super::FORMAT,
                format!("subgraphs[{subgraph}]"),
                None,
                "no such subgraph",
            )
        })?;
    let tensors = sg.tensors();
    Ok(sg
        .operators()
        .iter()
        .flatten()
        .map(|op| {
            let first = op.outputs().filter(|o| !o.is_empty()).map(|o| o.get(0));
            let name = first
                .and_then(|t| usize::try_from(t).ok())
                .and_then(|t| tensors.filter(|ts| t < ts.len()).map(|ts| ts.get(t)))
                .and_then(|t| t.name())
                .unwrap_or_default();
            if name.is_empty() {
                "(noname)".to_string()
            } else {
                name.to_string()
            }
        })
        .collect())
}

/// The origin of every operator of `subgraph` as luci's importer assigns it: from the tables
/// when both are present and non-empty, else `single(index, name)`.
pub fn subgraph_origins(model: &CircleModel<'_>, subgraph: usize) -> Result<OriginMap<u32>> {
    let tables = read_tables(model)?;
    let table = match (&tables.source_table, &tables.op_table) {
        (Some(s), Some(o)) => origin_table(s, o)?,
        _ => None,
    };
    graph_origins(table.as_ref(), &operator_names(model, subgraph)?)
}
