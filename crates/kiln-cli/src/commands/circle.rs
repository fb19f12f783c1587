//! `kiln circle`: Circle models. `origins dump` and `origins set` read and write the
//! luci-profile origin tables; also the text form of `kiln inspect` and the `kiln dump` arm
//! for Circle.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kiln_format::circle::origins::{read_tables, subgraph_origins, write_tables, OriginTables};
use kiln_format::circle::summary::{self, tables_json};
use kiln_format::circle::{CircleEditor, CircleModel};
use kiln_format::origins::{OpTable, OriginMap, SourceTable};
use kiln_format::Kind;
use serde_json::{json, Value};

use crate::input::Input;
use crate::output::{human_bytes, print_json, Table};
use crate::Usage;

/// Arguments of `kiln circle`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// The luci-profile origin tables (`ONE_source_table`, `ONE_op_table`).
    Origins {
        #[command(subcommand)]
        command: OriginsCommand,
    },
}

#[derive(clap::Subcommand)]
enum OriginsCommand {
    /// Print both tables (empty when absent; an empty op table means "no origin information")
    /// and every operator's origin as luci's importer builds it: the named sources of its op
    /// table entry, or, without one, its own index named after its first output tensor.
    Dump {
        /// The Circle model.
        file: PathBuf,
        /// Print `{"source_table": {"ID": "name"}, "op_table": {"OP_ID": [ID, ...]},
        /// "operators": [{"subgraph", "operator", "origin": [{"id", "name"}, ...]}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Replace both tables with the given entries and write the model to OUT.
    Set {
        /// The Circle model.
        file: PathBuf,
        /// Output file.
        #[arg(short, long)]
        output: PathBuf,
        /// A source-table entry: origin id and name.
        #[arg(long = "source", value_name = "ID=NAME", value_parser = parse_source)]
        sources: Vec<(u32, String)>,
        /// An op-table entry: operator index and the origin ids it comes from.
        #[arg(long = "op", value_name = "OP_ID=ID,ID...", value_parser = parse_op)]
        ops: Vec<(u32, BTreeSet<u32>)>,
    },
}

/// Runs `kiln circle`.
pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Origins { command: OriginsCommand::Dump { file, json } } => {
            let input = open(&file)?;
            let model = parse(&input)?;
            let tables = read_tables(&model).with_context(|| file.display().to_string())?;
            let origins = operator_origins(&model).with_context(|| file.display().to_string())?;
            if json {
                let mut v = tables_json(&tables);
                v["operators"] = origins_json(&origins);
                print_json(&v)?;
            } else {
                out!("{}{}", tables_text(&tables), origins_text(&origins));
            }
        }
        Command::Origins { command: OriginsCommand::Set { file, output, sources, ops } } => {
            set(&file, &output, sources, ops)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_source(s: &str) -> Result<(u32, String), String> {
    let (id, name) = s.split_once('=').ok_or_else(|| format!("{s:?} is not ID=NAME"))?;
    let id = id.trim().parse().map_err(|e| format!("id {id:?}: {e}"))?;
    Ok((id, name.to_string()))
}

fn parse_op(s: &str) -> Result<(u32, BTreeSet<u32>), String> {
    let (op, ids) = s.split_once('=').ok_or_else(|| format!("{s:?} is not OP_ID=ID,ID..."))?;
    let op = op.trim().parse().map_err(|e| format!("operation id {op:?}: {e}"))?;
    let ids = ids
        .split(',')
        .map(|i| i.trim().parse::<u32>().map_err(|e| format!("origin id {i:?}: {e}")))
        .collect::<Result<BTreeSet<_>, _>>()?;
    Ok((op, ids))
}

fn open(path: &Path) -> Result<Input> {
    let input = crate::input::open(path)?;
    crate::input::expect(&input, Kind::Circle)?;
    Ok(input)
}

fn parse(input: &Input) -> Result<CircleModel<'_>> {
    CircleModel::parse(input.bytes()).with_context(|| input.file.path().display().to_string())
}

fn set(
    file: &Path,
    output: &Path,
    sources: Vec<(u32, String)>,
    ops: Vec<(u32, BTreeSet<u32>)>,
) -> Result<()> {
    let mut source_table = SourceTable::new();
    for (id, name) in sources {
        if source_table.insert(id, name).is_some() {
            return Err(Usage(format!("--source {id} given twice")).into());
        }
    }
    let mut op_table = OpTable::new();
    for (op, ids) in ops {
        if let Some(missing) = ids.iter().find(|i| !source_table.contains_key(i)) {
            bail!("--op {op}: origin id {missing} has no --source entry (luci's importer would reject the file)");
        }
        if op_table.insert(op, ids).is_some() {
            return Err(Usage(format!("--op {op} given twice")).into());
        }
    }
    let input = open(file)?;
    let model = parse(&input)?;
    let max_ops = model
        .model()
        .subgraphs()
        .iter()
        .flatten()
        .map(|sg| sg.operators().map_or(0, |o| o.len()))
        .max()
        .unwrap_or(0);
    if let Some(op) = op_table.keys().find(|op| **op as usize >= max_ops) {
        bail!("--op {op}: no subgraph has an operator {op} (the largest has {max_ops})");
    }
    let mut editor = CircleEditor::new(model);
    write_tables(&mut editor, &source_table, &op_table)?;
    let bytes = editor.to_bytes()?;
    // Check what is written reads back with the same tables before replacing anything.
    let reread = CircleModel::parse(&bytes).context("the rewritten model does not verify")?;
    let tables = read_tables(&reread)?;
    if tables.source_table.as_ref() != Some(&source_table)
        || tables.op_table.as_ref() != Some(&op_table)
    {
        bail!("the rewritten model does not read back with the tables written");
    }
    kiln_format::io::write_bytes_atomic(output, &bytes)?;
    eprintln!(
        "{}: {} sources, {} operations with origins",
        output.display(),
        source_table.len(),
        op_table.len()
    );
    Ok(())
}

/// Per subgraph, the origin of each operator as luci's importer builds it.
fn operator_origins(model: &CircleModel<'_>) -> Result<Vec<OriginMap<u32>>> {
    let subgraphs = model.model().subgraphs().map_or(0, |s| s.len());
    (0..subgraphs).map(|s| Ok(subgraph_origins(model, s)?)).collect()
}

fn origins_json(origins: &[OriginMap<u32>]) -> Value {
    let mut ops = Vec::new();
    for (s, graph) in origins.iter().enumerate() {
        for (op, origin) in graph.iter() {
            let sources: Vec<Value> =
                origin.sources().map(|src| json!({ "id": src.id, "name": src.name })).collect();
            ops.push(json!({ "subgraph": s, "operator": op, "origin": sources }));
        }
    }
    Value::Array(ops)
}

fn origins_text(origins: &[OriginMap<u32>]) -> String {
    let mut out = String::new();
    for (s, graph) in origins.iter().enumerate() {
        out.push_str(&format!("subgraph {s}: origins of {} operators\n", graph.len()));
        for (op, origin) in graph.iter() {
            let sources: Vec<String> =
                origin.sources().map(|src| format!("{} {:?}", src.id, src.name)).collect();
            out.push_str(&format!("  [{op} : {}]\n", sources.join(", ")));
        }
    }
    out
}

fn tables_text(tables: &OriginTables) -> String {
    let mut out = String::new();
    match &tables.source_table {
        None => out.push_str("source_table: absent\n"),
        Some(t) => {
            out.push_str(&format!("source_table: {} entries\n", t.len()));
            for (id, name) in t {
                out.push_str(&format!("  [{id} : {name}]\n"));
            }
        }
    }
    match &tables.op_table {
        None => out.push_str("op_table: absent\n"),
        Some(t) if t.is_empty() => out.push_str("op_table: empty (no origin information)\n"),
        Some(t) => {
            out.push_str(&format!("op_table: {} entries\n", t.len()));
            for (op, ids) in t {
                let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
                out.push_str(&format!("  [{op} : {}]\n", ids.join(", ")));
            }
        }
    }
    out
}

/// `kiln inspect` arm for Circle models, as text: the model, each subgraph's tensors, the
/// operator histogram of its summary ([`summary`]), the metadata and the origin tables.
pub fn print(input: &Input) -> Result<ExitCode> {
    let model = parse(input)?;
    let summary = summary::summarize(&model, false)
        .with_context(|| input.file.path().display().to_string())?;
    let m = model.model();
    outln!(
        "Circle model, schema version {}, description {:?}, {} buffers, {}",
        m.version(),
        m.description().unwrap_or_default(),
        m.buffers().map_or(0, |b| b.len()),
        human_bytes(input.bytes().len() as u64)
    );
    for (s, sg) in m.subgraphs().iter().flatten().enumerate() {
        outln!(
            "\nsubgraph {s} {:?}: {} operators, inputs {:?}, outputs {:?}",
            sg.name().unwrap_or_default(),
            sg.operators().map_or(0, |o| o.len()),
            sg.inputs().map(|v| v.iter().collect::<Vec<i32>>()).unwrap_or_default(),
            sg.outputs().map(|v| v.iter().collect::<Vec<i32>>()).unwrap_or_default(),
        );
        let mut table = Table::new(["#", "name", "type", "shape", "buffer", "data"]);
        for (i, t) in sg.tensors().iter().flatten().enumerate() {
            let shape = t.shape().map(|s| s.iter().collect::<Vec<i32>>()).unwrap_or_default();
            let data = model.buffer_data(t.buffer()).map_or(0, <[u8]>::len);
            table.row([
                i.to_string(),
                t.name().unwrap_or_default().to_string(),
                summary::type_name(t.type_()),
                format!("{shape:?}"),
                t.buffer().to_string(),
                if data == 0 { "-".to_string() } else { human_bytes(data as u64) },
            ]);
        }
        out!("{}", table.render());
    }
    outln!("\noperators:");
    let mut table = Table::new(["operator", "count"]);
    if let Some(h) = summary["operator_histogram"].as_object() {
        for (name, count) in h {
            table.row([name.clone(), count.to_string()]);
        }
    }
    out!("{}", table.render());
    let metadata = model.metadata();
    if metadata.is_empty() {
        outln!("\nmetadata: none");
    } else {
        outln!("\nmetadata:");
        for e in &metadata {
            let size = model.buffer_data(e.buffer).map_or(0, <[u8]>::len);
            outln!("  {} (buffer {}, {})", e.name, e.buffer, human_bytes(size as u64));
        }
    }
    let tables = read_tables(&model)?;
    if tables.source_table.is_some() || tables.op_table.is_some() {
        outln!("\norigins:");
        out!("{}", tables_text(&tables));
    }
    Ok(ExitCode::SUCCESS)
}

/// `kiln dump` arm: the model's structure as JSON (operators, tensors with quantization,
/// buffers, metadata, origin tables).
pub fn dump(input: &Input) -> Result<ExitCode> {
    let model = parse(input)?;
    print_json(&summary::summarize(&model, true)?)?;
    Ok(ExitCode::SUCCESS)
}
