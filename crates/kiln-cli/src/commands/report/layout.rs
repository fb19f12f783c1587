//! A layered (Sugiyama-style) layout of a directed acyclic graph, top to bottom: longest-path
//! layers, long edges split by dummy nodes, barycentric ordering that keeps the ordering with
//! the fewest crossings, and x positions pulled towards the neighbours' centres.

/// Horizontal space between two boxes of a layer.
const GAP_X: f64 = 22.0;
/// Vertical space between two layers (where the edges bend).
const GAP_Y: f64 = 34.0;
/// The width a long edge takes in the layers it passes.
const DUMMY_WIDTH: f64 = 8.0;
/// Ordering sweeps (each one down and one up).
const ORDER_SWEEPS: usize = 12;
/// Positioning sweeps (each one down and one up).
const POSITION_SWEEPS: usize = 8;
/// Space around the drawing.
pub const MARGIN: f64 = 12.0;

/// Where everything goes.
#[derive(Debug)]
pub struct Layout {
    /// The top-left corner of each node.
    pub nodes: Vec<(f64, f64)>,
    /// Per edge (in the order given), the points its line passes: the source's bottom centre,
    /// the long edge's bends, the target's top centre.
    pub edges: Vec<Vec<(f64, f64)>>,
    /// The drawing's size, margins included.
    pub width: f64,
    /// The drawing's height, margins included.
    pub height: f64,
}

/// Lays out nodes of the given `(width, height)` joined by `edges` (source, target). Edges
/// must go forward in node order (an edge that does not is not drawn: an empty route).
pub fn layered(sizes: &[(f64, f64)], edges: &[(usize, usize)]) -> Layout {
    let forward: Vec<(usize, usize)> =
        edges.iter().copied().filter(|&(a, b)| a < b && b < sizes.len()).collect();
    let rank = ranks(sizes.len(), &forward);
    let mut g = Layered::new(sizes, &rank, &forward);
    g.order();
    g.position();
    let mut forward_routes = g.routes().into_iter();
    let edges = edges
        .iter()
        .map(|&(a, b)| {
            if a < b && b < sizes.len() {
                forward_routes.next().unwrap_or_default()
            } else {
                Vec::new()
            }
        })
        .collect();
    let nodes = (0..sizes.len()).map(|v| (g.x[v], g.y[v])).collect();
    Layout { nodes, edges, width: g.width, height: g.height }
}

/// Longest-path layers from the sources; a source then moves down to just above its first
/// consumer, so an input used late does not hang at the top with a long edge.
fn ranks(n: usize, edges: &[(usize, usize)]) -> Vec<usize> {
    let mut rank = vec![0usize; n];
    // Edges go forward in node order, so node order is a topological order.
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(a, b) in edges {
        preds[b].push(a);
        succs[a].push(b);
    }
    for v in 0..n {
        rank[v] = preds[v].iter().map(|&u| rank[u] + 1).max().unwrap_or(0);
    }
    for v in 0..n {
        if preds[v].is_empty() {
            if let Some(first) = succs[v].iter().map(|&s| rank[s]).min() {
                rank[v] = first.saturating_sub(1);
            }
        }
    }
    rank
}

/// The graph with long edges split: nodes `0..n` are the real ones, the rest dummies.
struct Layered {
    widths: Vec<f64>,
    heights: Vec<f64>,
    rank: Vec<usize>,
    preds: Vec<Vec<usize>>,
    succs: Vec<Vec<usize>>,
    /// Per original edge, the nodes it passes (its source, dummies, its target).
    chains: Vec<Vec<usize>>,
    layers: Vec<Vec<usize>>,
    x: Vec<f64>,
    y: Vec<f64>,
    /// Each layer's top and height.
    bands: Vec<(f64, f64)>,
    width: f64,
    height: f64,
}

impl Layered {
    fn new(sizes: &[(f64, f64)], rank: &[usize], edges: &[(usize, usize)]) -> Layered {
        let mut widths: Vec<f64> = sizes.iter().map(|s| s.0).collect();
        let mut heights: Vec<f64> = sizes.iter().map(|s| s.1).collect();
        let mut rank = rank.to_vec();
        let mut preds = vec![Vec::new(); sizes.len()];
        let mut succs = vec![Vec::new(); sizes.len()];
        let mut chains = Vec::with_capacity(edges.len());
        for &(a, b) in edges {
            let mut chain = vec![a];
            for r in rank[a] + 1..rank[b] {
                let d = widths.len();
                widths.push(DUMMY_WIDTH);
                heights.push(0.0);
                rank.push(r);
                preds.push(Vec::new());
                succs.push(Vec::new());
                chain.push(d);
            }
            chain.push(b);
            for w in chain.windows(2) {
                succs[w[0]].push(w[1]);
                preds[w[1]].push(w[0]);
            }
            chains.push(chain);
        }
        let depth = rank.iter().max().map_or(0, |&r| r + 1);
        let mut layers = vec![Vec::new(); depth];
        for (v, &r) in rank.iter().enumerate() {
            layers[r].push(v);
        }
        let n = widths.len();
        Layered {
            widths,
            heights,
            rank,
            preds,
            succs,
            chains,
            layers,
            x: vec![0.0; n],
            y: vec![0.0; n],
            bands: Vec::new(),
            width: 0.0,
            height: 0.0,
        }
    }

    /// Barycentric ordering: each sweep sorts a layer by the mean position of its neighbours
    /// in the layer before it; the ordering with the fewest crossings is kept.
    fn order(&mut self) {
        let mut best = self.layers.clone();
        let mut best_crossings = self.crossings();
        for _ in 0..ORDER_SWEEPS {
            for l in 1..self.layers.len() {
                self.sort_layer(l, l - 1, true);
            }
            for l in (0..self.layers.len().saturating_sub(1)).rev() {
                self.sort_layer(l, l + 1, false);
            }
            let c = self.crossings();
            if c < best_crossings {
                best_crossings = c;
                best = self.layers.clone();
            }
            if best_crossings == 0 {
                break;
            }
        }
        self.layers = best;
    }

    /// Sorts layer `l` by the mean position of each node's neighbours in layer `by` (its
    /// predecessors when `down`); a node without any keeps its position.
    fn sort_layer(&mut self, l: usize, by: usize, down: bool) {
        let mut pos = vec![0.0; self.widths.len()];
        for (i, &v) in self.layers[by].iter().enumerate() {
            pos[v] = i as f64;
        }
        let mut keyed: Vec<(f64, usize)> = self.layers[l]
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let near = if down { &self.preds[v] } else { &self.succs[v] };
                let key = if near.is_empty() {
                    i as f64
                } else {
                    near.iter().map(|&u| pos[u]).sum::<f64>() / near.len() as f64
                };
                (key, v)
            })
            .collect();
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.layers[l] = keyed.into_iter().map(|(_, v)| v).collect();
    }

    /// Edge crossings between all pairs of adjacent layers.
    fn crossings(&self) -> usize {
        let mut pos = vec![0usize; self.widths.len()];
        for layer in &self.layers {
            for (i, &v) in layer.iter().enumerate() {
                pos[v] = i;
            }
        }
        let mut total = 0;
        for layer in &self.layers {
            let pairs: Vec<(usize, usize)> = layer
                .iter()
                .flat_map(|&u| self.succs[u].iter().map(move |&v| (u, v)))
                .map(|(u, v)| (pos[u], pos[v]))
                .collect();
            for (i, a) in pairs.iter().enumerate() {
                total += pairs[i + 1..]
                    .iter()
                    .filter(|b| (a.0 < b.0 && a.1 > b.1) || (a.0 > b.0 && a.1 < b.1))
                    .count();
            }
        }
        total
    }

    /// x: each layer packed, then pulled towards its neighbours' centres sweep by sweep; y:
    /// the layers stacked, each node centred in its layer's band.
    fn position(&mut self) {
        for l in 0..self.layers.len() {
            let mut x = 0.0;
            for &v in &self.layers[l] {
                self.x[v] = x;
                x += self.widths[v] + GAP_X;
            }
        }
        for _ in 0..POSITION_SWEEPS {
            for l in 1..self.layers.len() {
                self.align_layer(l, true);
            }
            for l in (0..self.layers.len().saturating_sub(1)).rev() {
                self.align_layer(l, false);
            }
        }
        let min_x = self.x.iter().copied().fold(f64::INFINITY, f64::min);
        let shift = if min_x.is_finite() { MARGIN - min_x } else { MARGIN };
        let mut right: f64 = 0.0;
        for v in 0..self.x.len() {
            self.x[v] += shift;
            right = right.max(self.x[v] + self.widths[v]);
        }
        let mut top = MARGIN;
        for layer in &self.layers {
            let band = layer.iter().map(|&v| self.heights[v]).fold(0.0, f64::max);
            for &v in layer {
                self.y[v] = top + (band - self.heights[v]) / 2.0;
            }
            self.bands.push((top, band));
            top += band + GAP_Y;
        }
        self.width = right + MARGIN;
        self.height = top - GAP_Y + MARGIN;
    }

    /// Moves the nodes of layer `l` as close to their neighbours' centres (above when `down`)
    /// as the layer's order and gaps allow: the mean of a left-to-right and a right-to-left
    /// packing, which both keep the order and the gaps, so their mean does too.
    fn align_layer(&mut self, l: usize, down: bool) {
        let layer = &self.layers[l];
        let want: Vec<f64> = layer
            .iter()
            .map(|&v| {
                let near = if down { &self.preds[v] } else { &self.succs[v] };
                if near.is_empty() {
                    self.x[v]
                } else {
                    let centre =
                        near.iter().map(|&u| self.x[u] + self.widths[u] / 2.0).sum::<f64>()
                            / near.len() as f64;
                    centre - self.widths[v] / 2.0
                }
            })
            .collect();
        let mut left = vec![0.0; layer.len()];
        let mut limit = f64::NEG_INFINITY;
        for (i, &v) in layer.iter().enumerate() {
            left[i] = want[i].max(limit);
            limit = left[i] + self.widths[v] + GAP_X;
        }
        let mut right = vec![0.0; layer.len()];
        let mut limit = f64::INFINITY;
        for (i, &v) in layer.iter().enumerate().rev() {
            right[i] = want[i].min(limit - self.widths[v]);
            limit = right[i] - GAP_X;
        }
        for (i, &v) in layer.iter().enumerate() {
            self.x[v] = (left[i] + right[i]) / 2.0;
        }
    }

    /// The points of every edge: down from its source, through the layers a long edge
    /// passes (straight through each band), into its target.
    fn routes(&self) -> Vec<Vec<(f64, f64)>> {
        self.chains
            .iter()
            .map(|chain| {
                let centre = |v: usize| self.x[v] + self.widths[v] / 2.0;
                let (first, last) = (chain[0], chain[chain.len() - 1]);
                let mut points = vec![(centre(first), self.y[first] + self.heights[first])];
                for &d in &chain[1..chain.len() - 1] {
                    let (top, band) = self.bands[self.rank[d]];
                    points.push((centre(d), top));
                    points.push((centre(d), top + band));
                }
                points.push((centre(last), self.y[last]));
                points
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlaps(l: &Layout, sizes: &[(f64, f64)]) -> bool {
        (0..sizes.len()).any(|a| {
            (a + 1..sizes.len()).any(|b| {
                let (ax, ay) = l.nodes[a];
                let (bx, by) = l.nodes[b];
                ax < bx + sizes[b].0
                    && bx < ax + sizes[a].0
                    && ay < by + sizes[b].1
                    && by < ay + sizes[a].1
            })
        })
    }

    #[test]
    fn a_chain_with_a_skip_edge_is_layered_top_to_bottom() {
        // 0 -> 1 -> 2 -> 3 and a residual 0 -> 3.
        let sizes = [(100.0, 30.0); 4];
        let edges = [(0, 1), (1, 2), (2, 3), (0, 3)];
        let l = layered(&sizes, &edges);
        for w in l.nodes.windows(2) {
            assert!(w[1].1 > w[0].1, "{:?}", l.nodes);
        }
        assert!(!overlaps(&l, &sizes));
        // The skip edge passes two layers: its route bends through both bands.
        assert_eq!(l.edges[3].len(), 2 + 2 * 2);
        assert!(l.width >= 100.0 + 2.0 * MARGIN && l.height > 4.0 * 30.0);
    }

    #[test]
    fn crossings_are_undone_and_backward_edges_are_not_drawn() {
        // Two sources, each feeding the other's column: 0 -> 3, 1 -> 2.
        let sizes = [(50.0, 20.0); 4];
        let l = layered(&sizes, &[(0, 3), (1, 2), (3, 1)]);
        let (x0, x1) = (l.nodes[0].0, l.nodes[1].0);
        let (x2, x3) = (l.nodes[2].0, l.nodes[3].0);
        assert_eq!(x0 < x1, x3 < x2, "{:?}", l.nodes);
        assert!(l.edges[2].is_empty());
        assert!(!overlaps(&l, &sizes));
    }
}
