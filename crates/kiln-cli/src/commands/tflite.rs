//! The text form of `kiln inspect` for plain TFLite models (models without an Edge TPU
//! package): version, description, and per subgraph its inputs, outputs and operator counts.

use std::process::ExitCode;

use anyhow::{Context, Result};
use kiln_format::tflite::summary::summarize;

use crate::input::Input;
use crate::output::{human_bytes, Table};

/// `kiln inspect` arm, as text: the model's summary ([`summarize`]).
pub fn print(input: &Input) -> Result<ExitCode> {
    let path = input.file.path();
    let model = summarize(input.bytes()).with_context(|| path.display().to_string())?;
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
