//! `kiln report MODEL.pte -o report.html`: one self-contained HTML page that draws a method as
//! a graph of its original instructions (an XNNPACK delegate call with its own graph inside),
//! coloured by profiled time, with the time per operator and the compiled steps mapped back to
//! the instructions they stand for.
//!
//! ```text
//! program.rs, xnnpack.rs  the .pte -> graph (graph.rs) and operator table
//! timing.rs               compiled steps + profile -> time per step and per operator
//! layout.rs, svg.rs       layered layout -> SVG
//! html.rs                 the page: SVG, data (JSON), style and script inline
//! ```

mod graph;
mod html;
mod layout;
mod page;
mod program;
mod svg;
mod timing;
mod xnnpack;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use super::run::{MethodArgs, Session};
use page::Report;

/// Arguments of `kiln report`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: MethodArgs,
    /// The HTML file to write.
    #[arg(short, long, value_name = "FILE.html")]
    pub output: PathBuf,
    /// Profiled executes (at least 1); times are their mean.
    #[arg(long, default_value_t = 20,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub iters: usize,
    /// Unprofiled executes before the profiled ones (first-execute costs such as page faults
    /// and cold caches stay out of the times).
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
}

/// Runs `kiln report`.
pub fn run(args: Args) -> Result<ExitCode> {
    let mut session = Session::open(&args.target)?;
    session.execute(args.warmup, "warming up")?;
    let profile = session.profile(args.iters)?;
    let names = session.loaded.input_names(session.method.inputs().len());
    let method = program::read(session.loaded.bytes(), &session.loaded.method, &names)?;
    let mut ops = method.ops;
    let steps = timing::steps(session.method.compiled(), &profile, args.iters, &mut ops);
    let report = Report {
        model: args.target.model.display().to_string(),
        method: session.loaded.method.clone(),
        inputs: session.inputs.names.clone(),
        iters: args.iters,
        threads: session.threads.threads,
        compiled: !args.target.engine.no_compile,
        total_ms: steps.iter().fold(0.0, |sum, s| sum + s.ms),
        steps,
        ops,
    };
    let handles = timing::per_debug_handle(&report.steps);
    let svg = svg::render(&method.graph, &report.ops, &handles);
    let page = html::page(&report, &svg)?;
    kiln_format::io::write_bytes_atomic(&args.output, page.as_bytes())?;
    outln!(
        "{}: {} instructions, {} compiled steps, {:.3} ms per execute over {} profiled executes",
        args.output.display(),
        report.ops.len(),
        report.steps.len(),
        report.total_ms,
        report.iters
    );
    Ok(ExitCode::SUCCESS)
}
