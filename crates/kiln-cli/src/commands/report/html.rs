//! The report page: one HTML file with its style, script, graph and data inline, so it opens
//! anywhere without a network.

use std::fmt::Write;

use anyhow::Result;

use super::page::Report;
use super::svg::{escape, heat};

/// The page's style.
const CSS: &str = include_str!("page.css");
/// The page's script (charts, table, links between them and the graph).
const JS: &str = include_str!("page.js");

/// `value` as JSON that can stand inside a `<script>` element: `<`, `>` and `&` (which JSON
/// holds only inside strings) written as `\u` escapes, so no `</script>` can end it early.
fn script_json<T: serde::Serialize>(value: &T) -> Result<String> {
    Ok(serde_json::to_string(value)?
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026"))
}

/// The whole page for `report`, with the graph's SVG `svg`.
pub fn page(report: &Report, svg: &str) -> Result<String> {
    let title = format!("{} · {}", report.model, report.method);
    let slowest = report.ops.iter().map(|o| o.ms).fold(0.0, f64::max);
    let gradient: Vec<String> = (0..=4).map(|i| heat(f64::from(i) / 4.0)).collect();
    let fused = report.steps.iter().filter(|s| s.origins.len() > 1).count();
    let mut summary = format!(
        "{:.3} ms per execute (the sum of the steps' times, mean of {} profiled executes) · {} \
         thread{} · {} instructions, {} compiled steps ({} standing for several instructions)",
        report.total_ms,
        report.iters,
        report.threads,
        if report.threads == 1 { "" } else { "s" },
        report.ops.len(),
        report.steps.len(),
        fused,
    );
    if !report.compiled {
        summary.push_str(" · --no-compile");
    }
    let inputs = report.inputs.join(", ");
    let mut html = String::with_capacity(svg.len() + 64 * 1024);
    let _ = write!(
        html,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kiln report: {title}</title>
<style>{CSS}</style>
</head>
<body>
<div id="errors" hidden></div>
<script>window.addEventListener("error", function (e) {{ var d = document.getElementById("errors"); d.hidden = false; d.setAttribute("data-errors", "1"); d.appendChild(document.createTextNode(String(e.message) + "\n")); }});</script>
<header><h1>{model} <span class="method">{method}</span></h1><p>{summary}</p><p>inputs: {inputs}</p></header>
<main>
<section id="graph-panel">
<div class="toolbar"><button id="zoom-out" title="zoom out">−</button><span id="zoom">100%</span><button id="zoom-in" title="zoom in">+</button><button id="zoom-fit">fit</button><button id="zoom-one">1:1</button>
<span class="legend">time per execute <span class="scale" style="background: linear-gradient(to right, {gradient})"></span> 0 – {slowest:.4} ms · <span class="swatch" style="background:#dbeafe"></span> input <span class="swatch" style="background:#dcfce7"></span> output <span class="swatch" style="background:#eef2ff"></span> delegate node <span class="swatch" style="background:#f3f4f6; border-style:dashed"></span> did not run</span></div>
<div id="graph-scroll">{svg}</div>
</section>
<aside>
<h2>Operator</h2>
<div id="info"></div>
<h2>Time per operator</h2>
<p class="note">A fused step's time is split evenly over the instructions it stands for; a delegate call's time is the sum of its kernels, and each node drawn inside it gets the time of the kernels computing it (by debug handle).</p>
<div class="tabs"><button class="on" data-by="instruction">per instruction</button><button data-by="name">per operator name</button></div>
<div id="bars" class="bars"></div>
<h2>Compiled steps</h2>
<p class="note">Hover or click a step to see the instructions it stands for in the graph.</p>
<table><thead><tr><th>#</th><th>step</th><th>origins</th><th>how</th><th>calls</th><th>ms</th><th>share</th></tr></thead><tbody id="steps"></tbody></table>
</aside>
</main>
<script type="application/json" id="report-data">{data}</script>
<script>{JS}</script>
</body></html>
"#,
        title = escape(&title),
        model = escape(&report.model),
        method = escape(&report.method),
        summary = escape(&summary),
        inputs = escape(&inputs),
        gradient = gradient.join(", "),
        data = script_json(report)?,
    );
    Ok(html)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_json_cannot_break_out() {
        assert_eq!(escape(r#"<a href='x'>&"#), "&lt;a href=&#39;x&#39;&gt;&amp;");
        let json = script_json(&["</script><script>alert(1)</script>"]).unwrap();
        assert!(!json.contains('<') && !json.contains('>'));
        let back: Vec<String> = serde_json::from_str(&json).unwrap();
        assert_eq!(back[0], "</script><script>alert(1)</script>");
    }
}
