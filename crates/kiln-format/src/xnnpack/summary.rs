//! What `kiln inspect` shows of one XNNPACK delegate: its node histogram, value count,
//! constant bytes and quantization kinds.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::model::{Constant, Payload};

/// A summary of one payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Node count per kind (`XNNConv2d`, ...).
    pub nodes: BTreeMap<&'static str, usize>,
    /// `xvalues` entries.
    pub values: usize,
    /// `constant_data` entries (the reserved entry 0 included, as the table holds it).
    pub constants: usize,
    /// The sum of the constants' sizes (named data and the constant region), saturating.
    pub constant_bytes: u64,
    /// The distinct quantization kinds of the values, `datatype/params`
    /// (`xnn_datatype_qcint8/PerChannelQuant`), sorted.
    pub quant: Vec<String>,
    /// The payload's flatbuffer identifier.
    pub identifier: String,
}

/// Summarizes a verified payload.
pub fn summarize(p: &Payload<'_>) -> Summary {
    let mut nodes = BTreeMap::new();
    for n in &p.graph.nodes {
        *nodes.entry(n.kind).or_insert(0) += 1;
    }
    let constant_bytes = p
        .graph
        .constants
        .iter()
        .flatten()
        .map(|c| match c {
            Constant::Region(r) | Constant::Inline(r) => r.len() as u64,
            Constant::Named { size, .. } => *size,
        })
        // Named sizes are unchecked numbers of the payload.
        .fold(0u64, u64::saturating_add);
    let quant: BTreeSet<String> = p
        .graph
        .values
        .iter()
        .filter_map(|v| Some(format!("{}/{}", v.datatype.name(), v.quant.as_ref()?.name())))
        .collect();
    Summary {
        nodes,
        values: p.graph.values.len(),
        constants: p.graph.constants.len(),
        constant_bytes,
        quant: quant.into_iter().collect(),
        identifier: String::from_utf8_lossy(&p.identifier).into_owned(),
    }
}
