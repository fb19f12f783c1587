//! ExecuTorch `.pte` programs and `.ptd` external data: the text form of `kiln inspect`,
//! `kiln inspect --compiled`, `kiln dump` and `kiln pte rewrite`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use kiln_format::ptd::FlatTensor;
use kiln_format::pte::{self, Instruction, Program};

use crate::input::Input;
use crate::output::{human_bytes, print_json, Table};

fn open_pte(input: &Input) -> Result<Program<'_>> {
    Program::open(input.bytes()).with_context(|| input.file.path().display().to_string())
}

/// One method's compiled steps, for `kiln inspect --compiled --json`.
#[derive(serde::Serialize)]
struct CompiledMethod {
    name: String,
    /// Instructions of the method as written.
    instructions: usize,
    steps: Vec<CompiledStep>,
}

#[derive(serde::Serialize)]
struct CompiledStep {
    chain: usize,
    kind: String,
    operators: Vec<String>,
    origins: Vec<u32>,
    /// Debug handles of the delegate graph nodes the step computes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    debug_handles: Vec<u32>,
    /// Their schema kinds, in the same order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    delegate_ops: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    layout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    algorithm: Option<String>,
}

/// `kiln inspect --compiled`: each method (or `method`) loaded through the compile stage.
/// `kiln inspect --memory`: per method (or only `method`), the peak memory kiln predicts
/// for running it, by kind, from the method loaded (weights packed) but not executed.
pub fn inspect_memory(path: &Path, method: Option<&str>, json: bool) -> Result<ExitCode> {
    let before = super::run::Process::before_load();
    let (program, names) = load_for_inspect(path, method)?;
    let mut methods = Vec::new();
    for name in names {
        let m = program.method(&name)?;
        let process = before.loaded(&m.footprint());
        let report = super::run::MemoryReport::predict(process, m.footprint(), 1);
        methods.push(serde_json::json!({ "name": name, "memory": report }));
        if !json {
            outln!("method {name:?}: {} predicted peak", human_bytes(report.predicted_peak_bytes));
            let mut t = Table::new(["held", "bytes", "size"]);
            for (what, bytes) in [
                ("packed weights (shared by states)", report.packed_weights_bytes),
                ("activations (one state)", report.activations_bytes),
                ("constants made at load", report.constants_made_bytes),
                ("file pages read in place", report.mapped_in_place_bytes),
                ("tables gathered from (as read; not counted)", report.gathered_tables_bytes),
                ("method, for --max-memory (the above)", report.method_bytes),
                ("process: code, libraries, heap (after loading)", report.process_bytes),
            ] {
                t.row([what.to_string(), bytes.to_string(), human_bytes(bytes)]);
            }
            out!("{}", t.render());
        }
    }
    if json {
        print_json(&serde_json::json!({ "methods": methods }))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The program at `path` loaded with every kernel kiln has, and the methods to inspect:
/// `method`, or all of them.
fn load_for_inspect(
    path: &Path,
    method: Option<&str>,
) -> Result<(kiln_runtime::Program, Vec<String>)> {
    let program = kiln_runtime::Program::builder().options(kiln_npu::load_options()).load(path)?;
    let names: Vec<String> = match method {
        Some(m) => vec![m.to_string()],
        None => program.method_names().iter().map(|s| s.to_string()).collect(),
    };
    Ok((program, names))
}

pub fn inspect_compiled(path: &Path, method: Option<&str>, json: bool) -> Result<ExitCode> {
    let (program, names) = load_for_inspect(path, method)?;
    let mut methods = Vec::new();
    for name in names {
        let m = program.method(&name)?;
        let steps = m
            .compiled()
            .iter()
            .map(|n| CompiledStep {
                chain: n.chain,
                kind: n.kind.clone(),
                operators: n.operators.clone(),
                origins: n.origins.clone(),
                debug_handles: n.debug_handles.clone(),
                delegate_ops: n.delegate_ops.clone(),
                layout: n.layout.clone(),
                algorithm: n.algorithm.clone(),
            })
            .collect();
        methods.push(CompiledMethod { name, instructions: m.num_instructions(), steps });
    }
    if json {
        print_json(&serde_json::json!({ "methods": methods }))?;
        return Ok(ExitCode::SUCCESS);
    }
    for (i, m) in methods.iter().enumerate() {
        if i > 0 {
            outln!();
        }
        outln!(
            "method {:?}: {} instructions compiled to {} steps",
            m.name,
            m.instructions,
            m.steps.len()
        );
        let delegated = m.steps.iter().any(|s| !s.debug_handles.is_empty());
        let mut header = vec!["step", "kernel", "layout", "algorithm", "fuses", "origins"];
        if delegated {
            header.push("delegate nodes (debug handle)");
        }
        let mut t = Table::new(header);
        for (k, s) in m.steps.iter().enumerate() {
            let fuses =
                if s.operators.len() > 1 { fused_list(&s.operators) } else { String::new() };
            // A compiled kernel's kind lists what it fuses; the table shows that in "fuses".
            let kernel = s.kind.split('[').next().unwrap_or(&s.kind).to_string();
            let layout = s.layout.clone().unwrap_or_default();
            let algorithm = s.algorithm.clone().unwrap_or_default();
            let mut row = vec![k.to_string(), kernel, layout, algorithm, fuses, ranges(&s.origins)];
            if delegated {
                row.push(delegate_nodes(&s.delegate_ops, &s.debug_handles));
            }
            t.row(row);
        }
        out!("{}", t.render());
    }
    Ok(ExitCode::SUCCESS)
}

/// Delegate graph nodes as `Kind handle`, the schema's `XNN` prefix dropped:
/// `Conv2d 3, Clamp 4`.
fn delegate_nodes(kinds: &[String], handles: &[u32]) -> String {
    let shown: Vec<String> = kinds
        .iter()
        .zip(handles)
        .map(|(k, h)| format!("{} {h}", k.strip_prefix("XNN").unwrap_or(k)))
        .collect();
    shown.join(", ")
}

/// Operators in order, `aten::` dropped, runs of one operator counted: `a + b x3 + c`.
fn fused_list(ops: &[String]) -> String {
    let mut parts: Vec<(String, usize)> = Vec::new();
    for o in ops {
        let name = o.strip_prefix("aten::").unwrap_or(o).to_string();
        match parts.last_mut() {
            Some((last, n)) if *last == name => *n += 1,
            _ => parts.push((name, 1)),
        }
    }
    let shown: Vec<String> = parts
        .into_iter()
        .map(|(name, n)| if n > 1 { format!("{name} x{n}") } else { name })
        .collect();
    shown.join(" + ")
}

/// Ascending indices as ranges: `0,3-7,9`.
pub(crate) fn ranges(ids: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        out.push(if j > i { format!("{}-{}", ids[i], ids[j]) } else { ids[i].to_string() });
        i = j + 1;
    }
    out.join(",")
}

/// `kiln inspect` for a `.pte`, as text: its summary ([`pte::summary`]) with each operator's
/// calls and each delegate's size, calls and compile specs.
pub fn print_pte(input: &Input) -> Result<ExitCode> {
    let program = open_pte(input)?;
    let summary = pte::summary::summarize(&program)?;
    outln!(
        "{}: ExecuTorch program (.pte), {} ({} bytes), {}",
        input.file.path().display(),
        human_bytes(summary.file_size),
        summary.file_size,
        if summary.extended_header { "eh00 header" } else { "no extended header" }
    );
    outln!(
        "constants: {} in {} buffers; named data: {} entries",
        human_bytes(summary.constants_size),
        summary.constant_buffers,
        summary.named_data.len()
    );
    for (m, ms) in program.methods().zip(&summary.methods) {
        outln!();
        outln!(
            "method {:?}: {} values, {} instructions, planned arenas {:?}",
            ms.name,
            ms.values,
            ms.instructions,
            ms.planned_buffers
        );
        let mut io = Table::new(["", "#", "dtype", "shape or value"]);
        for (dir, list) in [("input", &ms.inputs), ("output", &ms.outputs)] {
            for (i, v) in list.iter().enumerate() {
                let shape = match (&v.shape, v.value) {
                    (Some(s), _) => format!("{s:?}"),
                    (None, Some(value)) => format!("= {value}"),
                    (None, None) => "-".to_string(),
                };
                io.row([dir.to_string(), i.to_string(), v.dtype.clone(), shape]);
            }
        }
        out!("{}", indent(&io.render()));
        let mut calls: BTreeMap<usize, usize> = BTreeMap::new();
        let mut delegate_calls: BTreeMap<usize, usize> = BTreeMap::new();
        for chain in m.chains() {
            for ins in chain.instructions() {
                match ins? {
                    Instruction::Kernel { op_index, .. } => {
                        *calls.entry(op_index).or_default() += 1
                    }
                    Instruction::Delegate { delegate_index, .. } => {
                        *delegate_calls.entry(delegate_index).or_default() += 1
                    }
                    _ => {}
                }
            }
        }
        if !ms.operators.is_empty() {
            let mut ops = Table::new(["calls", "operator"]);
            let mut rows: Vec<(usize, &String)> = ms
                .operators
                .iter()
                .enumerate()
                .map(|(i, name)| (calls.get(&i).copied().unwrap_or(0), name))
                .collect();
            rows.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
            for (count, name) in rows {
                ops.row([count.to_string(), name.clone()]);
            }
            out!("{}", indent(&ops.render()));
        }
        for (i, d) in m.delegates().enumerate() {
            let d = d?;
            let blob = program.delegate_data(&d)?;
            outln!(
                "  delegate {i}: {} ({}, {} calls, {} compile specs)",
                d.id,
                human_bytes(blob.len() as u64),
                delegate_calls.get(&i).copied().unwrap_or(0),
                d.compile_specs.len()
            );
            if let Some(x) = ms.xnnpack.iter().find(|x| x.delegate == i) {
                print_xnnpack(x);
            }
            if let Some(n) = ms.npu.iter().find(|n| n.delegate == i) {
                print_npu(n);
            }
        }
    }
    if !summary.segments.is_empty() {
        outln!();
        outln!("segments (base offset {}):", summary.segment_base_offset);
        let mut t = Table::new(["#", "offset", "size", "size (human)"]);
        for (i, s) in summary.segments.iter().enumerate() {
            t.row([i.to_string(), s.offset.to_string(), s.size.to_string(), human_bytes(s.size)]);
        }
        out!("{}", indent(&t.render()));
    }
    Ok(ExitCode::SUCCESS)
}

/// The lines `kiln inspect` prints under an NPU delegate: its nodes with their origins, and
/// the fused buffers with the tensors in them.
fn print_npu(n: &pte::summary::NpuDelegateSummary) {
    let Some(m) = &n.manifest else {
        outln!("    invalid NPU delegate: {}", n.error.as_deref().unwrap_or("?"));
        return;
    };
    outln!(
        "    NPU: {} fused nodes, transaction {}, const buffer {}",
        m.nodes.len(),
        human_bytes(n.transaction_bytes),
        human_bytes(n.const_bytes)
    );
    let mut nodes = Table::new(["node", "op", "instructions", "operators"]);
    for node in &m.nodes {
        let instrs: Vec<String> = node.instructions.iter().map(|i| i.to_string()).collect();
        nodes.row([
            node.name.clone(),
            node.op.clone(),
            instrs.join(","),
            node.operators.join(", "),
        ]);
    }
    out!("{}", indent(&indent(&nodes.render())));
    let b = m.buffers;
    outln!(
        "    buffers: input {} B, output {} B, scratch {} B, const {} B",
        b.input,
        b.output,
        b.scratch,
        n.const_bytes
    );
    let mut tensors = Table::new(["tensor", "buffer", "offset", "bytes", "shape", "call"]);
    for t in &m.tensors {
        let call = match (
            m.inputs.iter().position(|x| *x == t.name),
            m.outputs.iter().position(|x| *x == t.name),
        ) {
            (Some(k), _) => format!("input {k}"),
            (_, Some(k)) => format!("output {k}"),
            _ => String::new(),
        };
        tensors.row([
            t.name.clone(),
            format!("{:?}", t.buffer).to_lowercase(),
            t.offset.to_string(),
            t.size.to_string(),
            format!("{:?}", t.shape),
            call,
        ]);
    }
    out!("{}", indent(&indent(&tensors.render())));
}

/// The lines `kiln inspect` prints under an XNNPACK delegate.
fn print_xnnpack(x: &pte::summary::XnnpackDelegate) {
    let Some(s) = &x.summary else {
        outln!("    invalid XNNPACK payload: {}", x.error.as_deref().unwrap_or("?"));
        return;
    };
    let nodes: usize = s.nodes.values().sum();
    outln!(
        "    XNNPACK graph ({}): {nodes} nodes, {} values, {} constants ({})",
        s.identifier,
        s.values,
        s.constants,
        human_bytes(s.constant_bytes)
    );
    let mut hist: Vec<(&&str, &usize)> = s.nodes.iter().collect();
    hist.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let hist: Vec<String> =
        hist.iter().map(|(k, v)| format!("{} x{v}", k.trim_start_matches("XNN"))).collect();
    outln!("    nodes: {}", hist.join(", "));
    if !s.quant.is_empty() {
        outln!("    quantization: {}", s.quant.join(", "));
    }
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

fn open_ptd(input: &Input) -> Result<FlatTensor<'_>> {
    FlatTensor::open(input.bytes()).with_context(|| input.file.path().display().to_string())
}

/// `kiln inspect` for a `.ptd`, as text: its size and each named tensor's dtype, shape,
/// segment and size.
pub fn print_ptd(input: &Input) -> Result<ExitCode> {
    let ft = open_ptd(input)?;
    let entries = ft.entries().collect::<Result<Vec<_>, _>>()?;
    outln!(
        "{}: ExecuTorch external data (.ptd), {} ({} bytes), {} entries in {} segments",
        input.file.path().display(),
        human_bytes(input.bytes().len() as u64),
        input.bytes().len(),
        ft.len(),
        ft.num_segments()
    );
    let mut t = Table::new(["key", "dtype", "shape", "segment", "size"]);
    for e in entries {
        let (dtype, shape) = match &e.layout {
            Some(l) => (l.scalar_type.schema_name().to_string(), format!("{:?}", l.sizes)),
            None => ("-".to_string(), "-".to_string()),
        };
        t.row([
            e.key.to_string(),
            dtype,
            shape,
            e.segment_index.to_string(),
            e.data.len().to_string(),
        ]);
    }
    out!("{}", indent(&t.render()));
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `kiln pte`.
#[derive(clap::Args)]
pub struct PteArgs {
    #[command(subcommand)]
    command: PteCommand,
}

#[derive(clap::Subcommand)]
enum PteCommand {
    /// Read a .pte into kiln's in-memory model and write it back with ExecuTorch's layout rules.
    Rewrite {
        /// The program to read.
        input: PathBuf,
        /// Where to write (atomically).
        #[arg(short, long)]
        output: PathBuf,
    },
}

/// Runs `kiln pte ...`.
pub fn run_pte(args: PteArgs) -> Result<ExitCode> {
    match args.command {
        PteCommand::Rewrite { input, output } => rewrite(&input, &output),
    }
}

fn rewrite(input: &Path, output: &Path) -> Result<ExitCode> {
    let file = crate::input::open(input)?;
    let program = open_pte(&file)?;
    let model = pte::model::ProgramModel::from_program(&program)?;
    let bytes = pte::writer::write(&model)?;
    // Never write a file kiln itself would reject.
    Program::open(&bytes).context("the rewritten program does not verify")?;
    kiln_format::io::write_bytes_atomic(output, &bytes)?;
    outln!("{}: wrote {} bytes", output.display(), bytes.len());
    Ok(ExitCode::SUCCESS)
}

/// `kiln dump` for a `.pte`.
/// The program's JSON gets `"xnnpack_payloads"`: each XNNPACK delegate's payload decoded
/// (`{"method", "delegate", "payload"}`, or `"error"` when it does not parse).
pub fn dump_pte(input: &Input) -> Result<ExitCode> {
    let program = open_pte(input)?;
    let mut json = pte::dump::dump(&program);
    let mut payloads = Vec::new();
    for m in program.methods() {
        for (i, d) in m.delegates().enumerate() {
            let d = d?;
            if d.id != "XnnpackBackend" {
                continue;
            }
            let entry = match kiln_format::xnnpack::Payload::parse(program.delegate_data(&d)?) {
                Ok(p) => serde_json::json!({
                    "method": m.name(), "delegate": i,
                    "payload": kiln_format::xnnpack::dump(&p),
                }),
                Err(e) => serde_json::json!({
                    "method": m.name(), "delegate": i, "error": e.to_string(),
                }),
            };
            payloads.push(entry);
        }
    }
    if let Some(obj) = json.as_object_mut() {
        obj.insert("xnnpack_payloads".into(), serde_json::Value::Array(payloads));
    }
    print_json(&json)?;
    Ok(ExitCode::SUCCESS)
}

/// `kiln dump` for a `.ptd`.
pub fn dump_ptd(input: &Input) -> Result<ExitCode> {
    print_json(&open_ptd(input)?.dump())?;
    Ok(ExitCode::SUCCESS)
}
