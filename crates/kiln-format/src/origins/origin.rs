//! Node origins: which nodes of the original model a node of a transformed model comes from,
//! and the three rules that keep that information through graph rewrites (ONE's luci-profile
//! `CircleNodeOrigin`, "Preserve origin information").
//!
//! An [`Origin`] is a non-empty set of [`Source`]s (id and name of an original node). luci
//! builds origins as trees (`single_origin`, `composite_origin`) but only ever reads their
//! flattened, de-duplicated source set, so kiln stores that set directly. [`OriginMap`] holds
//! the origin of each node of one graph and applies the rules:
//! 1. [`OriginMap::absorb`]: a node absorbs another existing node; its origin becomes the union.
//! 2. [`OriginMap::fuse`]: several nodes fuse into a new node, which gets the union of theirs.
//! 3. [`OriginMap::replace`]: a new node replaces an old one and gets the old node's origin.

use std::collections::{BTreeMap, BTreeSet};

use super::tables::{OpTable, SourceTable};
use crate::error::{Error, Result};

const FORMAT: &str = "origins";

/// One node of the original model: its id and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Source {
    /// Origin id (for a fresh Circle model, the operator index).
    pub id: u32,
    /// Name (for a fresh Circle model, the name of the operator's first output tensor).
    pub name: String,
}

/// Where a node comes from: one or more sources, never none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    sources: BTreeSet<Source>,
}

impl Origin {
    /// A node that is its own origin (luci `single_origin`).
    pub fn single(id: u32, name: impl Into<String>) -> Origin {
        Origin { sources: BTreeSet::from([Source { id, name: name.into() }]) }
    }

    /// The union of several origins (luci `composite_origin`); missing ones (`None`) are
    /// skipped, and a list with no origin at all is an error, as in luci ("No origins
    /// provided").
    pub fn composite<'a>(parts: impl IntoIterator<Item = Option<&'a Origin>>) -> Result<Origin> {
        let sources: BTreeSet<Source> =
            parts.into_iter().flatten().flat_map(|o| o.sources.iter().cloned()).collect();
        if sources.is_empty() {
            return Err(Error::invalid(FORMAT, "composite", None, "no origins provided"));
        }
        Ok(Origin { sources })
    }

    /// The sources, ordered by id.
    pub fn sources(&self) -> impl Iterator<Item = &Source> {
        self.sources.iter()
    }

    /// The source ids, ascending.
    pub fn ids(&self) -> BTreeSet<u32> {
        self.sources.iter().map(|s| s.id).collect()
    }
}

/// The origins of the nodes of one graph, by node key (for Circle, the operator index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginMap<K: Ord> {
    by_node: BTreeMap<K, Origin>,
}

impl<K: Ord> Default for OriginMap<K> {
    fn default() -> Self {
        OriginMap { by_node: BTreeMap::new() }
    }
}

impl<K: Ord + Clone + std::fmt::Debug> OriginMap<K> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// The origin of `node`, if it has one.
    pub fn get(&self, node: &K) -> Option<&Origin> {
        self.by_node.get(node)
    }

    /// Sets (replaces) the origin of `node` (luci `add_origin`).
    pub fn set(&mut self, node: K, origin: Origin) {
        self.by_node.insert(node, origin);
    }

    /// Removes `node` (when it leaves the graph), returning its origin.
    pub fn remove(&mut self, node: &K) -> Option<Origin> {
        self.by_node.remove(node)
    }

    /// Every node with its origin, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &Origin)> {
        self.by_node.iter()
    }

    /// Number of nodes with an origin.
    pub fn len(&self) -> usize {
        self.by_node.len()
    }

    /// True when no node has an origin.
    pub fn is_empty(&self) -> bool {
        self.by_node.is_empty()
    }

    /// Rule 1: `existing` absorbs `absorbed`; `existing`'s origin becomes the union of both.
    /// `absorbed` keeps its entry until the caller removes the node. When neither has an origin
    /// there is nothing to preserve and nothing changes.
    pub fn absorb(&mut self, existing: &K, absorbed: &K) {
        if let Ok(origin) = Origin::composite([self.get(existing), self.get(absorbed)]) {
            self.set(existing.clone(), origin);
        }
    }

    /// Rule 2: `parts` fuse into the new node `new`, which gets the union of their origins.
    /// Fails when none of the parts has an origin.
    pub fn fuse(&mut self, new: K, parts: &[K]) -> Result<()> {
        let origin = Origin::composite(parts.iter().map(|p| self.get(p))).map_err(|_| {
            Error::invalid(
                FORMAT,
                format!("{new:?}"),
                None,
                format!("no part of {parts:?} has an origin"),
            )
        })?;
        self.set(new, origin);
        Ok(())
    }

    /// Rule 3: `new` replaces `old` and gets a copy of its origin (none if `old` has none).
    pub fn replace(&mut self, new: K, old: &K) {
        match self.get(old).cloned() {
            Some(origin) => self.set(new, origin),
            None => {
                self.remove(&new);
            }
        }
    }
}

/// The model-wide origin table as luci's importer builds it (`origin_table()`): op index →
/// origin, only when both tables are non-empty ("no origin information" otherwise, which
/// covers the empty op table ONE's exporter writes). Fails when an op names an id the source
/// table lacks.
pub fn origin_table(sources: &SourceTable, ops: &OpTable) -> Result<Option<OriginMap<u32>>> {
    if sources.is_empty() || ops.is_empty() {
        return Ok(None);
    }
    let mut map = OriginMap::new();
    for (op, ids) in ops {
        let mut origin = BTreeSet::new();
        for id in ids {
            let name = sources.get(id).ok_or_else(|| {
                Error::invalid(
                    "ONE_op_table",
                    format!("operation {op}"),
                    None,
                    format!("origin id {id} is not in ONE_source_table"),
                )
            })?;
            origin.insert(Source { id: *id, name: name.clone() });
        }
        map.set(*op, Origin { sources: origin });
    }
    Ok(Some(map))
}

/// The origins of one graph's operators as luci's importer assigns them: operator `i` gets its
/// entry in `table` if there is one, else `single(i, names[i])` (`names[i]` is the name of its
/// first output tensor).
pub fn graph_origins(table: Option<&OriginMap<u32>>, names: &[String]) -> Result<OriginMap<u32>> {
    let mut map = OriginMap::new();
    for (i, name) in names.iter().enumerate() {
        let i = u32::try_from(i)
            .map_err(|_| Error::invalid(FORMAT, "operators", None, "more than 2^32 operators"))?;
        let origin =
            table.and_then(|t| t.get(&i)).cloned().unwrap_or_else(|| Origin::single(i, name));
        map.set(i, origin);
    }
    Ok(map)
}

/// The two tables that describe `graphs` (one origin map per subgraph, keyed by operator
/// index), as luci's exporter writes them: the source table holds every source used; the op
/// table is model-wide, so equal operator indices of different subgraphs have their ids merged.
/// Fails when one id has two different names.
pub fn to_tables(graphs: &[&OriginMap<u32>]) -> Result<(SourceTable, OpTable)> {
    let mut sources = SourceTable::new();
    let mut ops = OpTable::new();
    for graph in graphs {
        for (op, origin) in graph.iter() {
            for s in origin.sources() {
                if let Some(name) = sources.get(&s.id) {
                    if *name != s.name {
                        return Err(Error::invalid(
                            FORMAT,
                            format!("source {}", s.id),
                            None,
                            format!("named both {name:?} and {:?}", s.name),
                        ));
                    }
                } else {
                    sources.insert(s.id, s.name.clone());
                }
            }
            ops.entry(*op).or_default().extend(origin.ids());
        }
    }
    Ok((sources, ops))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's starting graph: node1..node4 with ids 1..4.
    fn circle1() -> OriginMap<&'static str> {
        let mut m = OriginMap::new();
        for (i, n) in ["node1", "node2", "node3", "node4"].into_iter().enumerate() {
            m.set(n, Origin::single(i as u32 + 1, n));
        }
        m
    }

    fn ids<K: Ord + Clone + std::fmt::Debug>(m: &OriginMap<K>, k: K) -> Vec<u32> {
        m.get(&k).map(|o| o.ids().into_iter().collect()).unwrap_or_default()
    }

    #[test]
    fn rule_absorb_into_existing_node() {
        let mut m = circle1();
        m.absorb(&"node3", &"node4");
        m.remove(&"node4");
        assert_eq!(ids(&m, "node3"), [3, 4]);
        let names: Vec<_> = m.get(&"node3").unwrap().sources().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["node3", "node4"]);
        // Absorbing a node without origin keeps the existing one.
        m.absorb(&"node3", &"gone");
        assert_eq!(ids(&m, "node3"), [3, 4]);
    }

    #[test]
    fn rule_fuse_into_new_node() {
        let mut m = circle1();
        m.fuse("node5", &["node1", "node2"]).unwrap();
        assert_eq!(ids(&m, "node5"), [1, 2]);
        assert!(m.fuse("node7", &["x", "y"]).is_err());
        assert!(m.fuse("node7", &[]).is_err());
    }

    #[test]
    fn rule_replace_node() {
        let mut m = circle1();
        m.fuse("node5", &["node1", "node2"]).unwrap();
        m.replace("node6", &"node5");
        m.remove(&"node5");
        assert_eq!(ids(&m, "node6"), [1, 2]);
        assert_eq!(m.get(&"node5"), None);
    }

    #[test]
    fn readme_pipeline_gives_readme_origins_and_tables() {
        // circle1 -> optimizer -> circle2 -> quantizer -> circle3, keyed by op index of circle3:
        // node6 = op 0 (origin [1,2]), node3 = op 1 (origin [3,4]).
        let mut m = circle1();
        m.fuse("node5", &["node1", "node2"]).unwrap();
        m.absorb(&"node3", &"node4");
        m.replace("node6", &"node5");
        let mut by_index = OriginMap::new();
        by_index.set(0u32, m.get(&"node6").unwrap().clone());
        by_index.set(1u32, m.get(&"node3").unwrap().clone());
        let (sources, ops) = to_tables(&[&by_index]).unwrap();
        assert_eq!(sources.len(), 4);
        assert_eq!(ops[&0], BTreeSet::from([1, 2]));
        assert_eq!(ops[&1], BTreeSet::from([3, 4]));
        let back = origin_table(&sources, &ops).unwrap().unwrap();
        assert_eq!(back, by_index);
    }

    #[test]
    fn composite_skips_missing_and_refuses_empty() {
        let a = Origin::single(1, "a");
        let c = Origin::composite([None, Some(&a), Some(&a)]).unwrap();
        assert_eq!(c, a);
        assert!(Origin::composite([None, None]).is_err());
    }

    #[test]
    fn tables_become_origins_like_lucis_importer() {
        let sources = SourceTable::from([(1, "a".to_string()), (2, "b".to_string())]);
        let ops = OpTable::from([(1, BTreeSet::from([1, 2]))]);
        // An empty op table is "no origin information".
        assert_eq!(origin_table(&sources, &OpTable::new()).unwrap(), None);
        let table = origin_table(&sources, &ops).unwrap().unwrap();
        let names = ["t0".to_string(), "t1".to_string(), "t2".to_string()];
        let g = graph_origins(Some(&table), &names).unwrap();
        assert_eq!(g.get(&0), Some(&Origin::single(0, "t0")));
        assert_eq!(ids(&g, 1), [1, 2]);
        assert_eq!(g.get(&2), Some(&Origin::single(2, "t2")));
        let bad = OpTable::from([(0, BTreeSet::from([9]))]);
        assert!(origin_table(&sources, &bad).unwrap_err().to_string().contains("id 9"));
        // Conflicting names for one id cannot be written.
        let mut other = OriginMap::new();
        other.set(0u32, Origin::single(1, "not a"));
        let mut first = OriginMap::new();
        first.set(0u32, Origin::single(1, "a"));
        assert!(to_tables(&[&first, &other]).is_err());
    }
}
