//! `kiln profile MODEL.pte`: runs the compiled method with every executed kernel timed, and
//! attributes the time to the program's own instructions: each compiled step carries the
//! original instructions it stands for (its origins) and, inside an XNNPACK delegate, the
//! debug handles of the delegate graph's nodes. Prints a table by kernel, `--json` for
//! scripts, a Chrome trace (`--trace`) and an ETDump (`--etdump`).

mod etdump;
mod steps;
mod trace;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kiln_runtime::{Method, Timeline};
use serde::Serialize;

use super::bench::median;
use super::run::{MethodArgs, Session};
use crate::output::{progress, Table};
use steps::{is_kernel, operator_of};

/// Most executed steps a timeline keeps (`--trace`, `--etdump`); 40 bytes each.
const MAX_EVENTS: usize = 4 << 20;

/// Arguments of `kiln profile`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: MethodArgs,
    /// Profiled executes (at least 1); as many unprofiled executes run between them, to
    /// measure what profiling costs.
    #[arg(long, default_value_t = 10,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub iters: usize,
    /// Untimed executes before the others.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Print JSON instead of the table: `{"kernels": [{"operator", "origins", "calls",
    /// "total_ms", ...}], ...}`.
    #[arg(long)]
    pub json: bool,
    /// Write a Chrome trace (trace event format, for Perfetto and chrome://tracing): one
    /// complete event per executed kernel, one track per thread.
    #[arg(long, value_name = "T.json")]
    pub trace: Option<PathBuf>,
    /// Write an ETDump (ExecuTorch's profiling file, for its devtools `Inspector`): a block
    /// per profiled execute, events per executed kernel carrying the original instruction
    /// and, inside an XNNPACK delegate, the node's debug handle.
    #[arg(long, value_name = "E.etdp")]
    pub etdump: Option<PathBuf>,
}

/// One compiled step that ran: what it stands for and its time over the profiled executes.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct KernelTime {
    /// The program's operators it stands for, with the delegate graph's nodes inside a
    /// delegate: `aten::convolution.out + aten::relu.out`,
    /// `delegate:XnnpackBackend[XNNConv2d, XNNAdd]`.
    pub operator: String,
    /// The original instructions (indices in the method's chain) it stands for, ascending.
    pub origins: Vec<u32>,
    /// Executes of the step over all profiled executes.
    pub calls: u64,
    pub total_ms: f64,
    /// Share of the summed kernel time, in percent.
    pub share: f64,
    /// The step, an index in the compiled plan (`kiln inspect --compiled`).
    pub step: usize,
    /// What kiln runs: the operator, a compiled kernel (`conv2d`), or `delegate:<id>`.
    pub kernel: String,
    /// Inside an XNNPACK delegate: the debug handles of the delegate graph's nodes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub debug_handles: Vec<u32>,
}

/// What `--json` prints.
#[derive(Serialize)]
struct Report {
    model: String,
    method: String,
    iters: usize,
    threads: usize,
    /// Median execute time with profiling on.
    profiled_median_ms: f64,
    /// Median execute time of the unprofiled executes run between them.
    unprofiled_median_ms: f64,
    kernels: Vec<KernelTime>,
}

/// The kernels that ran, largest total first.
fn kernel_times(method: &Method) -> Vec<KernelTime> {
    let compiled = method.compiled();
    let profile = method.profile();
    let times: Vec<_> = profile
        .iter()
        .filter_map(|t| compiled.get(t.step).filter(|n| is_kernel(n)).map(|node| (t, node)))
        .collect();
    let all: Duration = times.iter().map(|(t, _)| t.total).sum();
    let mut kernels: Vec<KernelTime> = times
        .into_iter()
        .map(|(t, node)| KernelTime {
            operator: operator_of(node),
            origins: node.origins.clone(),
            calls: t.count,
            total_ms: t.total.as_secs_f64() * 1e3,
            share: if all.is_zero() {
                0.0
            } else {
                t.total.as_secs_f64() / all.as_secs_f64() * 100.0
            },
            step: t.step,
            kernel: node.kind.clone(),
            debug_handles: node.debug_handles.clone(),
        })
        .collect();
    kernels.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then(a.step.cmp(&b.step)));
    kernels
}

/// What the profiled executes measured.
struct Measured {
    /// The timeline, when kept.
    timeline: Option<Timeline>,
    /// When each profiled execute started and ended.
    executes: Vec<(Instant, Instant)>,
    /// Profiled execute times, sorted.
    profiled: Vec<Duration>,
    /// Unprofiled execute times, sorted.
    plain: Vec<Duration>,
}

/// The profiled executes, each after an unprofiled one.
fn measure(session: &mut Session, iters: usize, keep_timeline: bool) -> Result<Measured> {
    let inputs = session.inputs.as_inputs()?;
    let method = &mut session.method;
    let mut executes = Vec::with_capacity(iters);
    let mut plain = Vec::with_capacity(iters);
    let bar = progress(iters, "profiling");
    if keep_timeline {
        method.start_timeline(MAX_EVENTS);
    } else {
        method.set_profiling(true);
    }
    for _ in 0..iters {
        method.pause_profiling(true);
        let start = Instant::now();
        method.run(&inputs)?;
        plain.push(start.elapsed());
        method.pause_profiling(false);
        let start = Instant::now();
        method.run(&inputs)?;
        executes.push((start, Instant::now()));
        bar.inc(1);
    }
    bar.finish_and_clear();
    let mut profiled: Vec<Duration> = executes.iter().map(|(a, b)| *b - *a).collect();
    profiled.sort_unstable();
    plain.sort_unstable();
    let timeline = method.timeline();
    Ok(Measured { timeline, executes, profiled, plain })
}

/// Runs `kiln profile`.
pub fn run(args: Args) -> Result<ExitCode> {
    let mut session = Session::open(&args.target)?;
    session.execute(args.warmup, "warming up")?;
    let keep_timeline = args.trace.is_some() || args.etdump.is_some();
    let measured = measure(&mut session, args.iters, keep_timeline)?;
    let method = &session.method;
    let kernels = kernel_times(method);
    if let Some(timeline) = &measured.timeline {
        if timeline.workers_dropped > 0 {
            eprintln!(
                "kiln: warning: the trace keeps the first {} worker spans; {} more are left out",
                timeline.workers.len(),
                timeline.workers_dropped
            );
        }
        if timeline.dropped > 0 {
            eprintln!(
                "kiln: warning: the timeline keeps the first {} executed steps; {} more are \
                 left out of the trace and the ETDump",
                timeline.events.len(),
                timeline.dropped
            );
        }
        if let Some(path) = &args.trace {
            let json = trace::chrome_trace(timeline, method.compiled(), session.threads.threads)?;
            kiln_format::io::write_bytes_atomic(path, &json)
                .with_context(|| format!("writing the trace {}", path.display()))?;
        }
        if let Some(path) = &args.etdump {
            let bytes = etdump::etdump_of(timeline, method.compiled(), &measured.executes)?;
            kiln_format::io::write_bytes_atomic(path, &bytes)
                .with_context(|| format!("writing the ETDump {}", path.display()))?;
        }
    }
    let report = Report {
        model: args.target.model.display().to_string(),
        method: session.loaded.method.clone(),
        iters: args.iters,
        threads: session.threads.threads,
        profiled_median_ms: ms(median(&measured.profiled)),
        unprofiled_median_ms: ms(median(&measured.plain)),
        kernels,
    };
    if args.json {
        crate::output::print_json(&report)?;
    } else {
        print_table(&report);
    }
    Ok(ExitCode::SUCCESS)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Widest operator shown in the table (`--json` has the whole name).
const OPERATOR_WIDTH: usize = 72;

/// `s` cut to `width` characters, an ellipsis marking the cut.
fn clip(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn print_table(r: &Report) {
    outln!(
        "{} {}: {} profiled executes, median {:.3} ms (unprofiled {:.3} ms, {:+.1}%), {} thread{}",
        r.model,
        r.method,
        r.iters,
        r.profiled_median_ms,
        r.unprofiled_median_ms,
        (r.profiled_median_ms / r.unprofiled_median_ms.max(f64::MIN_POSITIVE) - 1.0) * 100.0,
        r.threads,
        if r.threads == 1 { "" } else { "s" }
    );
    let delegated = r.kernels.iter().any(|k| !k.debug_handles.is_empty());
    let mut header = vec!["operator", "origins", "calls", "total ms", "mean us", "share"];
    if delegated {
        header.push("debug handles");
    }
    let mut t = Table::new(header);
    for k in &r.kernels {
        let mut row = vec![
            clip(&k.operator, OPERATOR_WIDTH),
            super::executorch::ranges(&k.origins),
            k.calls.to_string(),
            format!("{:.3}", k.total_ms),
            format!("{:.2}", k.total_ms * 1e3 / k.calls.max(1) as f64),
            format!("{:.1}%", k.share),
        ];
        if delegated {
            row.push(super::executorch::ranges(&k.debug_handles));
        }
        t.row(row);
    }
    out!("{}", t.render());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_operator_names_are_clipped_on_a_character_boundary() {
        assert_eq!(clip("aten::relu.out", 72), "aten::relu.out");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("ééééé", 3), "éé…");
    }
}
