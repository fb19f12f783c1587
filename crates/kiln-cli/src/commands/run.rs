//! `kiln run MODEL.pte`: execute a method of an ExecuTorch program with kiln's runtime.

mod check;
mod engine;
mod inputs;
mod loaded;
mod memory;
mod session;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use kiln_kernels::DType;
use kiln_runtime::{Output, OutputTensor, Program};
use serde::Serialize;

use engine::thread_count;
pub use engine::{load_options, EngineArgs};
use inputs::{Inputs, DEFAULT_SEED};
use loaded::Loaded;
pub(crate) use memory::{MemoryReport, Process};
pub use session::MethodArgs;
pub(crate) use session::Session;

/// Arguments of `kiln run`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub target: MethodArgs,
    /// External constants: an ExecuTorch .ptd or an IREE parameter archive (.irpa) keyed by
    /// the tensors' fully qualified names (detected from the file's magic).
    #[arg(long, value_name = "FILE.ptd|FILE.irpa")]
    pub data: Option<PathBuf>,
    /// Write the outputs as DIR/output0.npy, DIR/output1.npy, ... (`--output-dir`, its old
    /// spelling, is still accepted: scripts such as the ExecuTorch backend-suite harness use it;
    /// it means the same folder, so no flag changes meaning).
    #[arg(long, value_name = "DIR", alias = "output-dir")]
    pub out_dir: Option<PathBuf>,
    /// The expected outputs, one .npy per output in order: exit 1 when an output differs by
    /// more than `--atol` anywhere, naming the output, the worst index and both values.
    #[arg(long = "expect", value_name = "FILE.npy")]
    pub expect: Vec<PathBuf>,
    /// The largest absolute difference `--expect` accepts.
    #[arg(long, value_name = "A", default_value_t = 1e-5, requires = "expect",
          value_parser = parse_atol)]
    pub atol: f64,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct OutputSummary {
    index: usize,
    kind: &'static str,
    dtype: Option<&'static str>,
    shape: Option<Vec<usize>>,
    preview: Vec<String>,
    /// Min/max/mean/NaN count of a numeric output.
    stats: Option<check::Stats>,
    file: Option<String>,
}

#[derive(Serialize)]
struct Summary {
    model: String,
    method: String,
    inputs: Vec<String>,
    random_inputs: bool,
    /// Threads kernels split their work over, the calling thread included, and why.
    threads: usize,
    threads_reason: String,
    load_ms: f64,
    execute_ms: f64,
    /// The method's predicted peak memory, by kind, and the process's measured peak.
    memory: MemoryReport,
    outputs: Vec<OutputSummary>,
}

/// `--atol`: a finite number, zero or more.
fn parse_atol(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(a) if a.is_finite() && a >= 0.0 => Ok(a),
        Ok(_) => Err(format!("{s} is not a finite tolerance of zero or more")),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

fn npy_descr(dtype: DType) -> &'static str {
    match dtype {
        DType::Float => "<f4",
        DType::Double => "<f8",
        DType::Half => "<f2",
        DType::Long => "<i8",
        DType::Int => "<i4",
        DType::Short => "<i2",
        DType::Char => "|i1",
        DType::Byte => "|u1",
        DType::Bool => "|b1",
        DType::UInt32 => "<u4",
        DType::UInt64 => "<u8",
        // bfloat16 and the storage-only types: raw bits.
        d if d.size() == 2 => "<u2",
        d if d.size() == 4 => "<u4",
        d if d.size() == 8 => "<u8",
        _ => "|u1",
    }
}

fn preview(t: &OutputTensor, max: usize) -> Vec<String> {
    let size = t.dtype.size();
    t.data
        .chunks_exact(size)
        .take(max)
        .map(|c| match t.dtype {
            DType::Float => format!("{:.6}", f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            DType::Double => format!("{:.6}", f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))),
            DType::Half => format!("{:.4}", half::f16::from_le_bytes([c[0], c[1]]).to_f32()),
            DType::BFloat16 => format!("{:.4}", half::bf16::from_le_bytes([c[0], c[1]]).to_f32()),
            DType::Bool => (c[0] != 0).to_string(),
            DType::Char => (c[0] as i8).to_string(),
            DType::Byte => c[0].to_string(),
            DType::Short => i16::from_le_bytes([c[0], c[1]]).to_string(),
            DType::Int => i32::from_le_bytes([c[0], c[1], c[2], c[3]]).to_string(),
            DType::Long => i64::from_le_bytes(c.try_into().unwrap_or([0; 8])).to_string(),
            _ => format!("0x{}", c.iter().rev().map(|b| format!("{b:02x}")).collect::<String>()),
        })
        .collect()
}

/// The value of an output as an array (`None` for strings and None).
fn as_tensor(out: &Output) -> Option<OutputTensor> {
    Some(match out {
        Output::Tensor(t) => t.clone(),
        Output::Int(x) => {
            OutputTensor { dtype: DType::Long, sizes: vec![], data: x.to_le_bytes().to_vec() }
        }
        Output::Double(x) => {
            OutputTensor { dtype: DType::Double, sizes: vec![], data: x.to_le_bytes().to_vec() }
        }
        Output::Bool(x) => {
            OutputTensor { dtype: DType::Bool, sizes: vec![], data: vec![u8::from(*x)] }
        }
        Output::String(_) | Output::None => return None,
    })
}

fn kind_name(out: &Output) -> &'static str {
    match out {
        Output::Tensor(_) => "tensor",
        Output::Int(_) => "int",
        Output::Double(_) => "double",
        Output::Bool(_) => "bool",
        Output::String(_) => "string",
        Output::None => "none",
    }
}

/// Compares the outputs with the `--expect` files: one line per differing output.
fn expect(outputs: &[Output], files: &[PathBuf], atol: f64) -> Result<Vec<String>> {
    if files.len() != outputs.len() {
        bail!("the method has {} outputs, {} --expect files given", outputs.len(), files.len());
    }
    let mut failures = Vec::new();
    for (i, (out, path)) in outputs.iter().zip(files).enumerate() {
        let at = || format!("output {i} (--expect {})", path.display());
        let got = as_tensor(out)
            .with_context(|| format!("{}: a {} cannot be compared", at(), kind_name(out)))?;
        let want = inputs::read_npy(path, Some(got.dtype))?;
        if want.sizes != got.sizes {
            failures.push(format!("{}: shape {:?}, expected {:?}", at(), got.sizes, want.sizes));
            continue;
        }
        let (Some(g), Some(w)) =
            (check::values(got.dtype, &got.data), check::values(want.dtype, &want.data))
        else {
            bail!(
                "{}: dtypes {} and {} cannot be compared",
                at(),
                got.dtype.name(),
                want.dtype.name()
            );
        };
        if let Some(m) = check::compare(&g, &w, atol) {
            failures.push(format!(
                "{}: {} of {} values differ by more than {atol}; worst at index {:?}: got {}, expected {}",
                at(),
                m.count,
                g.len(),
                check::unravel(m.index, &got.sizes),
                m.got,
                m.want
            ));
        }
    }
    Ok(failures)
}

/// Runs `kiln run`.
pub fn run(args: Args) -> Result<ExitCode> {
    let process = Process::before_load();
    let started = Instant::now();
    let mut builder = Program::builder().options(load_options(&args.target.engine)?);
    let threads = thread_count(&args.target.engine);
    if let Some(data) = &args.data {
        builder = builder.data_file(data, &args.target.model)?;
    }
    let loaded = Loaded::load(builder, &args.target.model, args.target.method.as_deref())?;
    let mut method = loaded.program.method(&loaded.method)?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let process = process.loaded(&method.footprint());
    let names = loaded.input_names(method.inputs().len());
    let seed = args.target.seed.unwrap_or(DEFAULT_SEED);
    let prepared = Inputs::prepare(&method, &loaded.method, &names, &args.target.inputs, seed)?;
    let inputs = prepared.as_inputs()?;
    let (input_names, random) = (prepared.names.clone(), prepared.random);
    let exec_start = Instant::now();
    let outputs = method.execute(&inputs)?;
    let execute_ms = exec_start.elapsed().as_secs_f64() * 1e3;
    let failures = if args.expect.is_empty() {
        Vec::new()
    } else {
        expect(&outputs, &args.expect, args.atol)?
    };
    if let Some(dir) = &args.out_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut summaries = Vec::new();
    for (i, out) in outputs.iter().enumerate() {
        let tensor = as_tensor(out);
        let mut file = None;
        if let (Some(dir), Some(t)) = (&args.out_dir, &tensor) {
            let path = dir.join(format!("output{i}.npy"));
            let shape: Vec<u64> = t.sizes.iter().map(|&d| d as u64).collect();
            let mut bytes = kiln_format::npy::header(npy_descr(t.dtype), &shape);
            bytes.extend_from_slice(&t.data);
            kiln_format::io::write_bytes_atomic(&path, &bytes)?;
            file = Some(path.display().to_string());
        }
        summaries.push(OutputSummary {
            index: i,
            kind: kind_name(out),
            dtype: tensor.as_ref().map(|t| t.dtype.name()),
            shape: match out {
                Output::Tensor(t) => Some(t.sizes.clone()),
                _ => None,
            },
            preview: match (out, &tensor) {
                (Output::String(s), _) => vec![s.clone()],
                (_, Some(t)) => preview(t, 8),
                _ => vec![],
            },
            stats: tensor
                .as_ref()
                .and_then(|t| check::values(t.dtype, &t.data))
                .map(|v| check::stats(&v)),
            file,
        });
    }
    let summary = Summary {
        model: args.target.model.display().to_string(),
        method: loaded.method.clone(),
        inputs: input_names,
        random_inputs: random,
        threads: threads.threads,
        threads_reason: threads.reason,
        load_ms,
        execute_ms,
        memory: MemoryReport::predict(process, method.footprint(), 1)
            .measured(method.scratch_bytes()),
        outputs: summaries,
    };
    if args.json {
        crate::output::print_json(&summary)?;
    } else {
        print_text(&summary);
    }
    for f in &failures {
        eprintln!("kiln: mismatch: {f}");
    }
    Ok(if failures.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The summary for people.
fn print_text(summary: &Summary) {
    outln!(
        "{} {} ({:.2} ms load, {:.2} ms execute)",
        summary.model,
        summary.method,
        summary.load_ms,
        summary.execute_ms
    );
    for (i, name) in summary.inputs.iter().enumerate() {
        outln!("  input {i}: {name}");
    }
    for o in &summary.outputs {
        let shape = o.shape.as_ref().map(|s| format!("{s:?}")).unwrap_or_default();
        let more = match &o.shape {
            Some(s) if s.iter().product::<usize>() > o.preview.len() => ", ...",
            _ => "",
        };
        outln!(
            "  output {}: {} {}{} [{}{}]",
            o.index,
            o.kind,
            o.dtype.unwrap_or(""),
            shape,
            o.preview.join(", "),
            more
        );
        if let Some(s) = &o.stats {
            let num = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.6}"));
            outln!(
                "    min {}, max {}, mean {}, NaN {}",
                num(s.min),
                num(s.max),
                num(s.mean),
                s.nan
            );
        }
        if let Some(f) = &o.file {
            outln!("    written to {f}");
        }
    }
}
