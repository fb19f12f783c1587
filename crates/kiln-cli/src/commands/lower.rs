//! `kiln lower MODEL.pte --to npu -o OUT.pte`: every maximal run of instructions kiln's NPU
//! operators take becomes one `KilnNpuBackend` delegate call holding the run fused into one
//! transaction (`kiln_npu::lower`). `kiln run OUT.pte` runs those delegates on kiln's
//! reference NPU device; `kiln inspect OUT.pte` lists their operators and buffers.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use kiln_format::pte::{self, Program};
use serde::Serialize;

use crate::output::{print_json, Table};
use crate::Usage;

/// Arguments of `kiln lower`.
#[derive(clap::Args)]
pub struct Args {
    /// The ExecuTorch program to lower.
    input: PathBuf,
    /// The target: `npu` (kiln's NPU operators, fused transactions run by `KilnNpuBackend`).
    #[arg(long, value_name = "TARGET")]
    to: String,
    /// Where to write the lowered program (atomically).
    #[arg(short, long)]
    output: PathBuf,
    /// Print what was lowered as JSON.
    #[arg(long)]
    json: bool,
}

/// `--json`: per method, the instruction counts, the delegates and what stayed outside.
#[derive(Serialize)]
struct Report {
    output: String,
    bytes: usize,
    methods: Vec<kiln_npu::lower::MethodReport>,
}

/// Runs `kiln lower`.
pub fn run(args: Args) -> Result<ExitCode> {
    if args.to != "npu" {
        return Err(Usage(format!("--to {}: the one target is `npu`", args.to)).into());
    }
    let file = crate::input::open(&args.input)?;
    let program = Program::open(file.bytes()).with_context(|| args.input.display().to_string())?;
    let model = pte::model::ProgramModel::from_program(&program)?;
    let lowered = kiln_npu::lower::lower(&model)?;
    let bytes = pte::writer::write(&lowered.model)?;
    // Never write a file kiln itself would reject.
    Program::open(&bytes).context("the lowered program does not verify")?;
    kiln_format::io::write_bytes_atomic(&args.output, &bytes)?;
    let report = Report {
        output: args.output.display().to_string(),
        bytes: bytes.len(),
        methods: lowered.methods,
    };
    if args.json {
        print_json(&report)?;
    } else {
        print_report(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_report(r: &Report) {
    outln!("{}: wrote {} bytes", r.output, r.bytes);
    for m in &r.methods {
        if let Some(why) = &m.skipped {
            outln!("method {:?}: left as it is: {why}", m.method);
            continue;
        }
        let lowered: usize = m.delegates.iter().map(|d| d.instructions.len()).sum();
        outln!(
            "method {:?}: {} instructions -> {} ({} NPU delegates holding {lowered}; {} outside)",
            m.method,
            m.instructions_before,
            m.instructions_after,
            m.delegates.len(),
            m.outside
        );
        if !m.delegates.is_empty() {
            let mut t = Table::new(["delegate", "nodes", "operators", "bytes"]);
            for d in &m.delegates {
                t.row([
                    d.delegate.to_string(),
                    d.ops.len().to_string(),
                    summarize_ops(&d.ops),
                    d.size.to_string(),
                ]);
            }
            outln!("{}", t.render().trim_end());
        }
        if !m.left.is_empty() {
            let left: Vec<String> = m.left.iter().map(|(op, n)| format!("{op} ×{n}")).collect();
            outln!("  outside: {}", left.join(", "));
        }
    }
}

/// `conv2d ×3, relu ×2` for a list of operator names, in order of first appearance.
fn summarize_ops(ops: &[String]) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for op in ops {
        match counts.iter_mut().find(|(o, _)| o == op) {
            Some((_, n)) => *n += 1,
            None => counts.push((op, 1)),
        }
    }
    counts
        .iter()
        .map(|(op, n)| if *n == 1 { op.to_string() } else { format!("{op} ×{n}") })
        .collect::<Vec<_>>()
        .join(", ")
}
