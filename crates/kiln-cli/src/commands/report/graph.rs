//! The graph a report draws: operators as nodes, tensors as edges, a delegate's own graph
//! nested inside its node.

use std::collections::BTreeMap;

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A value flowing in (a method input, a delegate's external input).
    Input,
    /// A value flowing out.
    Output,
    /// An operator: an original instruction, or a node of a delegate's graph.
    Op,
}

/// One node.
#[derive(Debug)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    /// The name drawn.
    pub label: String,
    /// The text shown on hover: full name and tensors.
    pub title: String,
    /// The type (`float[1,3,224,224]`) of the first tensor it writes (or is), drawn under the
    /// label.
    pub tensor: String,
    /// Its index in the report's operator table, for an original instruction.
    pub op: Option<usize>,
    /// Its debug handle, for a node of a delegate's graph.
    pub debug_handle: Option<u32>,
    /// A delegate's own graph, drawn inside the node.
    pub inner: Option<Graph>,
}

impl Node {
    /// A node for a value flowing into or out of a graph.
    pub fn boundary(kind: Kind, label: String, title: String, tensor: String) -> Node {
        Node { kind, label, title, tensor, op: None, debug_handle: None, inner: None }
    }
}

/// Tensors from one node to another.
#[derive(Debug)]
pub struct Edge {
    /// Source node.
    pub from: usize,
    /// Target node (after `from`).
    pub to: usize,
    /// The tensors it carries, `name: type` each.
    pub tensors: Vec<String>,
}

/// Nodes in an order in which every edge goes forward, and edges.
#[derive(Debug, Default)]
pub struct Graph {
    /// The nodes.
    pub nodes: Vec<Node>,
    /// The edges, at most one per pair of nodes.
    pub edges: Vec<Edge>,
}

/// Collects a graph's edges, merging the tensors that flow between the same two nodes.
#[derive(Default)]
pub struct Edges(BTreeMap<(usize, usize), Vec<String>>);

impl Edges {
    /// Adds tensor `tensor` flowing from node `from` to node `to`.
    pub fn add(&mut self, from: usize, to: usize, tensor: String) {
        let tensors = self.0.entry((from, to)).or_default();
        if !tensors.contains(&tensor) {
            tensors.push(tensor);
        }
    }

    /// The edges, ordered by their nodes.
    pub fn into_edges(self) -> Vec<Edge> {
        self.0.into_iter().map(|((from, to), tensors)| Edge { from, to, tensors }).collect()
    }
}

/// A tensor's type as drawn: `dtype[d0,d1,...]`.
pub fn tensor_type(dtype: &str, dims: &[usize]) -> String {
    let dims: Vec<String> = dims.iter().map(usize::to_string).collect();
    format!("{dtype}[{}]", dims.join(","))
}
