//! The graph inside an XNNPACK delegate call: its payload's nodes between its external inputs
//! and outputs ([`kiln_format::xnnpack`] parses and verifies the payload).

use std::collections::HashMap;

use kiln_format::xnnpack::{Payload, Value, FLAG_EXTERNAL_INPUT, FLAG_EXTERNAL_OUTPUT};

use super::graph::{tensor_type, Edges, Graph, Kind, Node};

/// A value's type as drawn: `fp32[1,8,8,16]` (physical dims: NHWC for channels-last values).
fn value_type(v: &Value) -> String {
    let name = v.datatype.name();
    tensor_type(name.strip_prefix("xnn_datatype_").unwrap_or(name), &v.dims)
}

/// How value `id` is named in tooltips: its external argument, or its id.
fn value_name(id: u32, v: &Value) -> String {
    match v.external_id {
        Some(e) if v.flags & (FLAG_EXTERNAL_INPUT | FLAG_EXTERNAL_OUTPUT) != 0 => {
            format!("argument {e}")
        }
        _ => format!("value {id}"),
    }
}

/// The graph of a parsed payload: a node per external input, one per XNNPACK node (in
/// execution order) and one per external output; constants are listed in their readers'
/// tooltips.
pub fn graph(payload: &Payload<'_>) -> Graph {
    let g = &payload.graph;
    let describe = |id: u32| {
        let v = &g.values[id as usize];
        format!("{}: {}", value_name(id, v), value_type(v))
    };
    let mut nodes = Vec::new();
    let mut writer: HashMap<u32, usize> = HashMap::new();
    // The external values with `flag`, in argument order.
    let externals = |flag: u32| {
        let mut ids: Vec<(u32, u32)> = (0u32..)
            .zip(&g.values)
            .filter(|(_, v)| v.flags & flag != 0)
            .map(|(id, v)| (v.external_id.unwrap_or(id), id))
            .collect();
        ids.sort_unstable();
        ids.into_iter().map(|(_, id)| id)
    };
    let boundary = |kind, label: String, what: &str, id: u32| {
        let title = format!("{what}\n{}", describe(id));
        Node::boundary(kind, label, title, value_type(&g.values[id as usize]))
    };
    for (k, id) in externals(FLAG_EXTERNAL_INPUT).enumerate() {
        writer.insert(id, nodes.len());
        nodes.push(boundary(Kind::Input, format!("in {k}"), "external input", id));
    }
    let mut edges = Edges::default();
    for (i, n) in g.nodes.iter().enumerate() {
        let at = nodes.len();
        let mut title = format!("{} (node {i}, debug handle {})", n.kind, n.debug_handle);
        if let Some((lo, hi)) = n.min_max {
            title.push_str(&format!("\noutput clamped to [{lo}, {hi}]"));
        }
        for id in n.op.inputs() {
            match writer.get(&id) {
                Some(&from) => edges.add(from, at, describe(id)),
                None => title.push_str(&format!("\nconstant {}", describe(id))),
            }
        }
        let outputs = n.op.outputs();
        for &id in &outputs {
            writer.insert(id, at);
            title.push_str(&format!("\nwrites {}", describe(id)));
        }
        nodes.push(Node {
            kind: Kind::Op,
            label: n.kind.strip_prefix("XNN").unwrap_or(n.kind).to_string(),
            title,
            tensor: outputs
                .first()
                .map(|&id| value_type(&g.values[id as usize]))
                .unwrap_or_default(),
            op: None,
            debug_handle: Some(n.debug_handle),
            inner: None,
        });
    }
    for (k, id) in externals(FLAG_EXTERNAL_OUTPUT).enumerate() {
        let at = nodes.len();
        if let Some(&from) = writer.get(&id) {
            edges.add(from, at, describe(id));
        }
        nodes.push(boundary(Kind::Output, format!("out {k}"), "external output", id));
    }
    Graph { nodes, edges: edges.into_edges() }
}
