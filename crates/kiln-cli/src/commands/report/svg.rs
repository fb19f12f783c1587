//! The graph as SVG: boxes sized to their text, placed by [`super::layout`], operators filled
//! by their time, a delegate's graph drawn inside its box.

use std::collections::HashMap;
use std::fmt::Write;

use super::graph::{Graph, Kind};
use super::layout::{layered, Layout};
use super::program::Op;

/// `s` safe as HTML or SVG text and as a quoted attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Width of a character of the label (12px monospace).
const LABEL_CHAR: f64 = 7.3;
/// Width of a character of the tensor line (10px monospace).
const TENSOR_CHAR: f64 = 6.1;
/// Longest label and tensor line drawn (the tooltip has the whole text).
const MAX_CHARS: usize = 44;
/// Height of a box with a tensor line.
const BOX_HEIGHT: f64 = 36.0;
/// Height of a delegate box's title bar.
const HEAD: f64 = 24.0;
/// Space between a delegate box and the graph inside it.
const PAD: f64 = 10.0;

/// The heat scale, cold to hot: light yellow, orange, red, dark red.
const HEAT: [(u8, u8, u8); 5] =
    [(255, 247, 204), (254, 217, 118), (253, 141, 60), (227, 26, 28), (128, 0, 38)];

/// The colour of a time `t` between 0 (none) and 1 (the slowest operator) on [`HEAT`].
pub fn heat(t: f64) -> String {
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 };
    let x = t * (HEAT.len() - 1) as f64;
    let i = (x.floor() as usize).min(HEAT.len() - 2);
    let f = x - i as f64;
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (HEAT[i], HEAT[i + 1]);
    format!("#{:02x}{:02x}{:02x}", mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// At most [`MAX_CHARS`] characters of `s`, an ellipsis marking a cut.
fn clip(s: &str) -> String {
    if s.chars().count() <= MAX_CHARS {
        s.to_string()
    } else {
        s.chars().take(MAX_CHARS - 1).chain(['…']).collect()
    }
}

/// A graph laid out, with the layouts of the graphs inside its nodes.
struct Placed {
    sizes: Vec<(f64, f64)>,
    layout: Layout,
    inner: Vec<Option<Placed>>,
}

/// Sizes every node (a delegate's from the graph inside it) and lays the graph out.
fn place(graph: &Graph) -> Placed {
    let mut sizes = Vec::with_capacity(graph.nodes.len());
    let mut inner = Vec::with_capacity(graph.nodes.len());
    for node in &graph.nodes {
        let chars = |s: &str| s.chars().count().min(MAX_CHARS) as f64;
        let text_width =
            (chars(&node.label) * LABEL_CHAR).max(chars(&node.tensor) * TENSOR_CHAR) + 20.0;
        match &node.inner {
            Some(g) => {
                let p = place(g);
                let title_width = (chars(&node.label) + 12.0) * LABEL_CHAR;
                sizes.push((
                    (p.layout.width + 2.0 * PAD).max(title_width),
                    HEAD + p.layout.height + PAD,
                ));
                inner.push(Some(p));
            }
            None => {
                sizes.push((text_width.max(64.0), BOX_HEIGHT));
                inner.push(None);
            }
        }
    }
    let edges: Vec<(usize, usize)> = graph.edges.iter().map(|e| (e.from, e.to)).collect();
    let layout = layered(&sizes, &edges);
    Placed { sizes, layout, inner }
}

/// An edge's path through its points: straight down where it keeps its x, an S-curve where it
/// moves sideways between two layers.
fn path(points: &[(f64, f64)]) -> String {
    let mut d = String::new();
    if let Some(&(x, y)) = points.first() {
        let _ = write!(d, "M{x:.1},{y:.1}");
    }
    for w in points.windows(2) {
        let ((x0, y0), (x1, y1)) = (w[0], w[1]);
        if (x0 - x1).abs() < 0.5 {
            let _ = write!(d, " L{x1:.1},{y1:.1}");
        } else {
            let ym = (y0 + y1) / 2.0;
            let _ = write!(d, " C{x0:.1},{ym:.1} {x1:.1},{ym:.1} {x1:.1},{y1:.1}");
        }
    }
    d
}

/// The SVG of a method's graph, operators coloured by their time relative to the slowest, and
/// delegate graph nodes by theirs (`handles`: milliseconds by debug handle).
pub fn render(graph: &Graph, ops: &[Op], handles: &HashMap<u32, f64>) -> String {
    let placed = place(graph);
    let slowest = ops.iter().map(|o| o.ms).fold(0.0, f64::max);
    let mut out = String::new();
    let (w, h) = (placed.layout.width, placed.layout.height);
    let _ = write!(
        out,
        r##"<svg id="graph" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" data-width="{w:.0}" data-height="{h:.0}"><defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#6b7280"/></marker></defs>"##
    );
    emit(&mut out, graph, &placed, &Times { ops, handles, slowest });
    out.push_str("</svg>");
    out
}

/// What nodes are coloured by.
struct Times<'a> {
    ops: &'a [Op],
    handles: &'a HashMap<u32, f64>,
    /// The slowest operator's milliseconds: the top of the heat scale.
    slowest: f64,
}

/// Writes the edges, then the nodes, of a placed graph.
fn emit(out: &mut String, graph: &Graph, placed: &Placed, times: &Times<'_>) {
    let (ops, slowest) = (times.ops, times.slowest);
    for (edge, points) in graph.edges.iter().zip(&placed.layout.edges) {
        if points.is_empty() {
            continue;
        }
        let d = path(points);
        let _ = write!(
            out,
            r#"<g class="edge"><title>{}</title><path class="hit" d="{d}"/><path class="line" d="{d}" marker-end="url(#arrow)"/></g>"#,
            escape(&edge.tensors.join("\n"))
        );
    }
    for (i, node) in graph.nodes.iter().enumerate() {
        let (x, y) = placed.layout.nodes[i];
        let (w, h) = placed.sizes[i];
        let op = node.op.and_then(|o| ops.get(o).map(|op| (o, op)));
        let mut title = node.title.clone();
        let (fill, ink) = match op {
            Some((_, op)) if !op.ran => {
                title.push_str("\ndid not run in the profiled executes");
                (String::new(), "#6b7280")
            }
            Some((_, op)) => {
                let t = if slowest > 0.0 { op.ms / slowest } else { 0.0 };
                let _ = write!(title, "\ntime {:.4} ms per execute ({:.1}%)", op.ms, op.share);
                (heat(t), if t > 0.55 { "#ffffff" } else { "#1f2937" })
            }
            None => match node.debug_handle.and_then(|h| times.handles.get(&h)) {
                Some(&ms) => {
                    let t = if slowest > 0.0 { ms / slowest } else { 0.0 };
                    let _ = write!(
                        title,
                        "\ntime {ms:.4} ms per execute (a kiln step's time split over the \
                         delegate nodes it computes)"
                    );
                    (heat(t), if t > 0.55 { "#ffffff" } else { "#1f2937" })
                }
                None => (String::new(), "#1f2937"),
            },
        };
        let class = match (node.kind, &node.inner, op) {
            (Kind::Input, ..) => "node input",
            (Kind::Output, ..) => "node output",
            (Kind::Op, Some(_), _) => "node group",
            (Kind::Op, None, Some((_, op))) if !op.ran => "node op idle",
            (Kind::Op, None, Some(_)) => "node op",
            (Kind::Op, None, None) => "node inner",
        };
        let data = op.map(|(o, _)| format!(r#" data-op="{o}""#)).unwrap_or_default();
        let _ = write!(
            out,
            r#"<g class="{class}"{data} transform="translate({x:.1},{y:.1})"><title>{}</title>"#,
            escape(&title)
        );
        let label = escape(&clip(&node.label));
        let style =
            if fill.is_empty() { String::new() } else { format!(r#" style="fill:{fill}""#) };
        match &placed.inner[i] {
            Some(inner) => {
                let count = node
                    .inner
                    .as_ref()
                    .map_or(0, |g| g.nodes.iter().filter(|n| n.kind == Kind::Op).count());
                let _ = write!(
                    out,
                    r#"<rect class="box" width="{w:.1}" height="{h:.1}" rx="6"/><rect class="head" width="{w:.1}" height="{HEAD}" rx="6"{style}/><text class="label" x="10" y="16" fill="{ink}">{label} · {count} nodes</text><g transform="translate({:.1},{HEAD})">"#,
                    (w - inner.layout.width) / 2.0
                );
                if let Some(g) = &node.inner {
                    emit(out, g, inner, times);
                }
                out.push_str("</g>");
            }
            None => {
                let rx = if node.kind == Kind::Op { 4.0 } else { h / 2.0 };
                let _ = write!(
                    out,
                    r#"<rect class="box" width="{w:.1}" height="{h:.1}" rx="{rx:.1}"{style}/><text class="label" x="{:.1}" y="15" fill="{ink}">{label}</text><text class="tensor" x="{:.1}" y="29" fill="{ink}">{}</text>"#,
                    w / 2.0,
                    w / 2.0,
                    escape(&clip(&node.tensor))
                );
            }
        }
        out.push_str("</g>");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::report::graph::{Edge, Node};

    #[test]
    fn heat_runs_from_pale_to_dark() {
        assert_eq!(heat(0.0), "#fff7cc");
        assert_eq!(heat(1.0), "#800026");
        assert_eq!(heat(f64::NAN), heat(0.0));
        assert_eq!(heat(0.5), "#fd8d3c");
    }

    #[test]
    fn names_from_the_file_are_escaped() {
        let node = |kind, label: &str| Node {
            kind,
            label: label.into(),
            title: "<script>alert(1)</script>".into(),
            tensor: "float[1]".into(),
            op: None,
            debug_handle: None,
            inner: None,
        };
        let graph = Graph {
            nodes: vec![node(Kind::Input, "a\"b<c>&"), node(Kind::Output, "</svg>")],
            edges: vec![Edge { from: 0, to: 1, tensors: vec!["x<y: float[1]".into()] }],
        };
        let svg = render(&graph, &[], &HashMap::new());
        assert!(!svg.contains("<script") && !svg.contains("</svg><"), "{svg}");
        assert!(svg.contains("a&quot;b&lt;c&gt;&amp;") && svg.contains("x&lt;y"));
        assert_eq!(svg.matches("<g class=\"node").count(), 2);
    }
}
