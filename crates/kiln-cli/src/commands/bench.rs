//! `kiln bench MODEL.pte`: latency of a method (median, min, p90 over timed executes) and, with
//! `--profile`, where the time goes per operator.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use kiln_runtime::InstructionTime;
use serde::Serialize;

use super::run::{MethodArgs, Session};
use crate::output::{human_bytes, Table};

/// Arguments of `kiln bench`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: MethodArgs,
    /// Timed executes (at least 1).
    #[arg(long, default_value_t = 50,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub iters: usize,
    /// Untimed executes before the timed ones.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Threads calling the method at once, each running `--iters` executes with its own
    /// execution state of the one loaded program (the compiled steps and packed weights are
    /// shared); the summary adds the executes per second of all of them together.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub callers: usize,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
    /// After the timed executes, run `--iters` more with per-instruction timing on and print
    /// the time per operator (the latency figures come from the unprofiled executes).
    #[arg(long)]
    pub profile: bool,
    /// With `--profile`: one row per compiled step (named by its kernel and the original
    /// instructions it stands for) instead of one per operator.
    #[arg(long, requires = "profile")]
    pub by_step: bool,
}

/// Time of one operator over the profiled executes.
#[derive(Serialize)]
struct OpTime {
    op: String,
    /// Calls over all profiled executes.
    count: u64,
    total_ms: f64,
    /// Share of the summed instruction time, in percent.
    share: f64,
}

#[derive(Serialize)]
struct Summary {
    model: String,
    method: String,
    inputs: Vec<String>,
    warmup: usize,
    iters: usize,
    /// Threads calling the method at once.
    callers: usize,
    /// Timed executes of all callers together per second of wall time.
    executes_per_s: f64,
    /// Threads kernels split their work over, the calling thread included, and why.
    threads: usize,
    threads_reason: String,
    load_ms: f64,
    /// `load_ms` by stage: the program's mapping, verification and decoding, the method's
    /// compile stage and weight packing.
    load_split: LoadSplit,
    /// Load and the first execute (of the warmup ones, or the timed ones without warmup).
    first_output_ms: f64,
    median_ms: f64,
    min_ms: f64,
    p90_ms: f64,
    /// The method's predicted peak memory, by kind, and the process's measured peak after
    /// the timed executes.
    memory: super::run::MemoryReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<Vec<OpTime>>,
}

/// [`kiln_runtime::LoadTimes`] in milliseconds.
#[derive(Serialize)]
struct LoadSplit {
    map_ms: f64,
    verify_ms: f64,
    decode_ms: f64,
    compile_ms: f64,
    pack_ms: f64,
}

impl From<kiln_runtime::LoadTimes> for LoadSplit {
    fn from(t: kiln_runtime::LoadTimes) -> Self {
        LoadSplit {
            map_ms: ms(t.map),
            verify_ms: ms(t.verify),
            decode_ms: ms(t.decode),
            compile_ms: ms(t.compile),
            pack_ms: ms(t.pack),
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Nearest-rank percentile `q` (0-100) of sorted samples.
fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Median of sorted samples (mean of the middle two for an even count).
pub(crate) fn median(sorted: &[Duration]) -> Duration {
    match sorted.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
    }
}

/// Sums step times per operator (or per step, named `[origins] kernel`), largest total first.
fn per_operator(times: &[InstructionTime], by_step: bool) -> Vec<OpTime> {
    let mut by_op: HashMap<String, (u64, Duration)> = HashMap::new();
    for t in times {
        let key = if by_step {
            let (first, last) = (t.origins.first(), t.origins.last());
            match (first, last) {
                (Some(a), Some(b)) if a != b => format!("[{a}-{b}] {}", t.op),
                (Some(a), _) => format!("[{a}] {}", t.op),
                _ => t.op.clone(),
            }
        } else {
            t.op.clone()
        };
        let e = by_op.entry(key).or_default();
        e.0 += t.count;
        e.1 += t.total;
    }
    let all: Duration = by_op.values().map(|e| e.1).sum();
    let mut ops: Vec<OpTime> = by_op
        .into_iter()
        .map(|(op, (count, total))| OpTime {
            op,
            count,
            total_ms: ms(total),
            share: if all.is_zero() {
                0.0
            } else {
                total.as_secs_f64() / all.as_secs_f64() * 100.0
            },
        })
        .collect();
    ops.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then_with(|| a.op.cmp(&b.op)));
    ops
}

/// Runs `kiln bench`.
pub fn run(args: Args) -> Result<ExitCode> {
    let mut session = Session::open(&args.target)?;
    session.execute_callers(args.callers, args.warmup, "warming up")?;
    let (mut samples, wall) = session.execute_callers(args.callers, args.iters, "timing")?;
    let memory = session.memory();
    samples.sort_unstable();
    let profile = if args.profile {
        Some(per_operator(&session.profile(args.iters)?, args.by_step))
    } else {
        None
    };
    let summary = Summary {
        model: args.target.model.display().to_string(),
        method: session.loaded.method.clone(),
        inputs: session.inputs.names.clone(),
        warmup: args.warmup,
        iters: args.iters,
        callers: args.callers,
        executes_per_s: samples.len() as f64 / wall.as_secs_f64().max(1e-9),
        threads: session.threads.threads,
        threads_reason: session.threads.reason.clone(),
        load_ms: ms(session.load),
        load_split: session.method.load_times().into(),
        first_output_ms: ms(session.load + session.first.unwrap_or_default()),
        median_ms: ms(median(&samples)),
        min_ms: ms(samples[0]),
        p90_ms: ms(percentile(&samples, 90.0)),
        memory,
        profile,
    };
    if args.json {
        crate::output::print_json(&summary)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{} {}: median {:.3} ms, min {:.3} ms, p90 {:.3} ms ({} iters, {} warmup; {} thread{}, \
         {}; load {:.2} ms)",
        summary.model,
        summary.method,
        summary.median_ms,
        summary.min_ms,
        summary.p90_ms,
        summary.iters,
        summary.warmup,
        summary.threads,
        if summary.threads == 1 { "" } else { "s" },
        summary.threads_reason,
        summary.load_ms
    );
    let m = &summary.memory;
    outln!(
        "  memory: {} predicted ({} packed weights, {} activations, {} read in place from the \
         file, {} process), {} peak",
        human_bytes(m.predicted_peak_bytes),
        human_bytes(m.packed_weights_bytes),
        human_bytes(m.activations_bytes),
        human_bytes(m.mapped_in_place_bytes),
        human_bytes(m.process_bytes),
        m.measured_peak_bytes.map_or("unknown".to_string(), human_bytes)
    );
    if summary.callers > 1 {
        outln!(
            "  {} callers at once: {:.1} executes/s in all",
            summary.callers,
            summary.executes_per_s
        );
    }
    for (i, name) in summary.inputs.iter().enumerate() {
        outln!("  input {i}: {name}");
    }
    if let Some(ops) = &summary.profile {
        let mut table = Table::new(["operator", "count", "total ms", "mean us", "share"]);
        for o in ops {
            table.row([
                o.op.clone(),
                o.count.to_string(),
                format!("{:.3}", o.total_ms),
                format!("{:.2}", o.total_ms * 1e3 / o.count.max(1) as f64),
                format!("{:.1}%", o.share),
            ]);
        }
        outln!("per operator over {} profiled executes:", summary.iters);
        out!("{}", table.render());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn statistics_follow_nearest_rank() {
        let s: Vec<Duration> = (1..=10).map(d).collect();
        assert_eq!(median(&s), Duration::from_micros(5500));
        assert_eq!(percentile(&s, 90.0), d(9));
        assert_eq!(percentile(&s, 100.0), d(10));
        assert_eq!(median(&s[..3]), d(2));
        assert_eq!(percentile(&s[..1], 90.0), d(1));
    }

    #[test]
    fn operators_are_summed_and_ranked() {
        let t = |op: &str, count, total| InstructionTime {
            step: 0,
            chain: 0,
            instruction: 0,
            op: op.into(),
            origins: vec![0],
            operators: vec![op.into()],
            count,
            total: d(total),
        };
        let times = [t("aten::add.out", 2, 1), t("aten::mm.out", 2, 6), t("aten::add.out", 2, 1)];
        let ops = per_operator(&times, false);
        assert_eq!(ops.len(), 2);
        assert_eq!((ops[0].op.as_str(), ops[0].count), ("aten::mm.out", 2));
        assert_eq!((ops[1].op.as_str(), ops[1].count), ("aten::add.out", 4));
        assert!((ops[0].share - 75.0).abs() < 1e-9 && (ops[1].share - 25.0).abs() < 1e-9);
    }
}
