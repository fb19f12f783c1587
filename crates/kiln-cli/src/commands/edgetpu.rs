//! `kiln edgetpu`: inspect, extract, link, re-layout and pack Edge TPU (DarwiNN) packages inside
//! `*_edgetpu.tflite` files.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use kiln_format::darwinn::custom_op::{self, EdgetpuOp};
use kiln_format::darwinn::{self, schema, Executable, Package};
use kiln_format::tflite::Model;
use serde::Serialize;

use crate::input::Input;
use crate::output::{human_bytes, print_json, Table};

/// Arguments of `kiln edgetpu`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Package header, executables, bitstreams and layers of every Edge TPU node.
    Inspect(InspectArgs),
}

/// Arguments of `kiln edgetpu inspect`.
#[derive(clap::Args)]
struct InspectArgs {
    /// A `*_edgetpu.tflite` model.
    model: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `kiln edgetpu`.
pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Inspect(a) => {
            let input = Input::open(&a.model)?;
            inspect(&input, a.json)
        }
    }
}

/// One package found in a model, with the node it belongs to.
struct Found<'a> {
    op: EdgetpuOp<'a>,
    /// Index among the node's packages (0 = key "4").
    index: usize,
    package: Package<'a>,
}

/// Opens `bytes` as an Edge TPU model and verifies every package in it.
fn load<'a>(path: &Path, bytes: &'a [u8]) -> Result<(Model<'a>, Vec<Found<'a>>)> {
    let model = Model::open(bytes)
        .with_context(|| format!("{}: not a readable TFLite model", path.display()))?;
    let ops = custom_op::find_ops(&model)
        .with_context(|| format!("{}: bad edgetpu-custom-op", path.display()))?;
    if ops.is_empty() {
        bail!("{}: no {} operator in this model", path.display(), custom_op::CUSTOM_OP);
    }
    let mut found = Vec::new();
    for op in ops {
        for (index, blob) in op.data.packages.iter().enumerate() {
            let package = Package::open(blob.bytes).with_context(|| {
                format!(
                    "{}: subgraph {} operator {}: package {index} at file offset {}",
                    path.display(),
                    op.subgraph,
                    op.operator,
                    blob.file_offset
                )
            })?;
            found.push(Found { op: op.clone(), index, package });
        }
    }
    Ok((model, found))
}

#[derive(Serialize)]
struct JsonModel {
    packages: Vec<JsonPackage>,
}

#[derive(Serialize)]
struct JsonPackage {
    subgraph: usize,
    operator: usize,
    min_runtime_version: i32,
    compiler_version: String,
    executables: Vec<JsonExecutable>,
}

#[derive(Serialize)]
struct JsonExecutable {
    #[serde(rename = "type")]
    type_: String,
    name: String,
    chip: String,
    batch_size: i32,
    scratch_size_bytes: i32,
    parameters_bytes: usize,
    parameter_caching_token: String,
    instruction_bitstreams: Vec<JsonBitstream>,
    input_layers: Vec<JsonLayer>,
    output_layers: Vec<JsonLayer>,
}

#[derive(Serialize)]
struct JsonBitstream {
    bytes: usize,
    field_offsets: Vec<JsonField>,
}

#[derive(Serialize)]
struct JsonField {
    offset_bit: i32,
    desc: String,
    name: String,
    batch: i32,
    position: String,
}

#[derive(Serialize)]
struct JsonLayer {
    name: String,
    size_bytes: i32,
    y_dim: i32,
    x_dim: i32,
    z_dim: i32,
    data_type: String,
    zero_point: i32,
    dequantization_factor: f32,
    execution_count_per_inference: i32,
}

fn json_layer(l: &schema::Layer<'_>) -> JsonLayer {
    let numerics = l.numerics();
    JsonLayer {
        name: l.name().unwrap_or_default().to_string(),
        size_bytes: l.size_bytes(),
        y_dim: l.y_dim(),
        x_dim: l.x_dim(),
        z_dim: l.z_dim(),
        data_type: darwinn::data_type_name(l.data_type()),
        zero_point: numerics.map_or(0, |n| n.zero_point()),
        dequantization_factor: numerics.map_or(0.0, |n| n.dequantization_factor()),
        execution_count_per_inference: l.execution_count_per_inference(),
    }
}

fn json_executable(e: &Executable<'_>) -> JsonExecutable {
    let root = e.root();
    let bitstreams = root
        .instruction_bitstreams()
        .map(|v| {
            v.iter()
                .map(|b| JsonBitstream {
                    bytes: b.bitstream().map_or(0, |x| x.len()),
                    field_offsets: b
                        .field_offsets()
                        .map(|f| f.iter().map(|fo| json_field(&fo)).collect())
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    JsonExecutable {
        type_: darwinn::executable_type_name(root.type_()),
        name: root.name().unwrap_or_default().to_string(),
        chip: root.chip().unwrap_or_default().to_string(),
        batch_size: root.batch_size(),
        scratch_size_bytes: root.scratch_size_bytes(),
        parameters_bytes: e.parameters().len(),
        parameter_caching_token: format!("0x{:016x}", root.parameter_caching_token()),
        instruction_bitstreams: bitstreams,
        input_layers: e.input_layers().iter().map(json_layer).collect(),
        output_layers: e.output_layers().iter().map(json_layer).collect(),
    }
}

fn json_field(fo: &schema::FieldOffset<'_>) -> JsonField {
    let meta = fo.meta();
    JsonField {
        offset_bit: fo.offset_bit(),
        desc: meta.map_or_else(|| "NONE".to_string(), |m| darwinn::description_kind(m.desc())),
        name: meta.and_then(|m| m.name()).unwrap_or_default().to_string(),
        batch: meta.map_or(0, |m| m.batch()),
        position: meta.map_or_else(|| "NONE".to_string(), |m| darwinn::position_kind(m.position())),
    }
}

/// `kiln edgetpu inspect` and `kiln inspect` on an Edge TPU model.
pub fn inspect(input: &Input, json: bool) -> Result<ExitCode> {
    let path = input.file.path();
    let (model, found) = load(path, input.bytes())?;
    if json {
        let packages = found
            .iter()
            .map(|f| {
                let root = f.package.root();
                JsonPackage {
                    subgraph: f.op.subgraph,
                    operator: f.op.operator,
                    min_runtime_version: root.min_runtime_version(),
                    compiler_version: root.compiler_version().unwrap_or_default().to_string(),
                    executables: f.package.executables().iter().map(json_executable).collect(),
                }
            })
            .collect();
        print_json(&JsonModel { packages })?;
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", render_text(path, &model, &found));
    Ok(ExitCode::SUCCESS)
}

fn render_text(path: &Path, model: &Model<'_>, found: &[Found<'_>]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: TFLite v{} ({}), {} Edge TPU package(s)",
        path.display(),
        model.version(),
        human_bytes(model.data().len() as u64),
        found.len()
    );
    for f in found {
        let root = f.package.root();
        let blob = f.op.data.packages.get(f.index);
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Package {} of subgraph {} operator {} (file offset {}, {}):",
            f.index,
            f.op.subgraph,
            f.op.operator,
            blob.map_or(0, |b| b.file_offset),
            human_bytes(f.package.data().len() as u64)
        );
        let ident = if f.package.has_identifier() {
            "DWN1".to_string()
        } else {
            "missing (libedgetpu warns)".to_string()
        };
        let opts = serde_json::Value::Object(f.op.data.keys.clone());
        let rows = [
            ("Identifier", ident),
            ("Min runtime version", root.min_runtime_version().to_string()),
            ("Compiler version", root.compiler_version().unwrap_or_default().to_string()),
            ("Keypair version", root.keypair_version().to_string()),
            ("Signature", human_bytes(root.signature().map_or(0, |v| v.len()) as u64)),
            ("Virtual chip id", root.virtual_chip_id().to_string()),
            ("Multi-chip packages", root.multi_chip_package().map_or(0, |v| v.len()).to_string()),
            ("Model identifier", format!("{:?}", root.model_identifier().unwrap_or_default())),
            ("Custom options", opts.to_string()),
        ];
        for (k, v) in rows {
            let _ = writeln!(s, "  {:<21}{v}", format!("{k}:"));
        }
        for (i, e) in f.package.executables().iter().enumerate() {
            render_executable(&mut s, i, e);
        }
    }
    s
}

fn render_executable(s: &mut String, i: usize, e: &Executable<'_>) {
    use std::fmt::Write;
    let r = e.root();
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "  Executable {i}: {} {:?} for chip {:?} (package offset {}, {})",
        darwinn::executable_type_name(r.type_()),
        r.name().unwrap_or_default(),
        r.chip().unwrap_or_default(),
        e.offset_in_package(),
        human_bytes(e.data().len() as u64)
    );
    let hints = r.dma_hints();
    let rows = [
        ("Parameter cache token", format!("0x{:016x}", r.parameter_caching_token())),
        ("Batch size", r.batch_size().to_string()),
        ("Scratch", human_bytes(u64::try_from(r.scratch_size_bytes()).unwrap_or(0))),
        ("Parameters", human_bytes(e.parameters().len() as u64)),
        ("Narrow bytes/tile", r.used_narrow_memory_bytes_per_tile().to_string()),
        ("Estimated cycles", r.estimated_cycles_64bit().to_string()),
        (
            "DMA hints",
            match hints {
                Some(h) => format!(
                    "{} ({}fully deterministic)",
                    h.hints().map_or(0, |v| v.len()),
                    if h.fully_deterministic() { "" } else { "not " }
                ),
                None => "none".to_string(),
            },
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(s, "    {:<23}{v}", format!("{k}:"));
    }
    let mut t = Table::new(["chunk", "bytes", "fields", "INPUT", "OUTPUT", "PARAMETER", "SCRATCH"]);
    if let Some(bs) = r.instruction_bitstreams() {
        for (ci, b) in bs.iter().enumerate() {
            let mut counts = [0usize; 4];
            let mut total = 0;
            for fo in b.field_offsets().iter().flatten() {
                total += 1;
                if let Some(m) = fo.meta() {
                    match m.desc() {
                        schema::Description::BASE_ADDRESS_INPUT_ACTIVATION => counts[0] += 1,
                        schema::Description::BASE_ADDRESS_OUTPUT_ACTIVATION => counts[1] += 1,
                        schema::Description::BASE_ADDRESS_PARAMETER => counts[2] += 1,
                        schema::Description::BASE_ADDRESS_SCRATCH => counts[3] += 1,
                        _ => {}
                    }
                }
            }
            let bytes = b.bitstream().map_or(0, |x| x.len());
            let mut row = vec![ci.to_string(), bytes.to_string(), total.to_string()];
            row.extend(counts.iter().map(|c| c.to_string()));
            t.row(row);
        }
    }
    let _ = writeln!(s, "    Instruction bitstreams:");
    for line in t.render().lines() {
        let _ = writeln!(s, "      {line}");
    }
    for (title, layers) in
        [("Input layers", e.input_layers()), ("Output layers", e.output_layers())]
    {
        let _ = writeln!(s, "    {title}:");
        let mut t = Table::new([
            "name",
            "YxXxZ",
            "type",
            "zero_point",
            "scale",
            "bytes",
            "count",
            "tiling",
        ]);
        for l in &layers {
            let n = l.numerics();
            t.row([
                l.name().unwrap_or_default().to_string(),
                format!("{}x{}x{}", l.y_dim(), l.x_dim(), l.z_dim()),
                darwinn::data_type_name(l.data_type()),
                n.map_or(0, |n| n.zero_point()).to_string(),
                format!("{}", n.map_or(0.0, |n| n.dequantization_factor())),
                l.size_bytes().to_string(),
                l.execution_count_per_inference().to_string(),
                tiling(l),
            ]);
        }
        for line in t.render().lines() {
            let _ = writeln!(s, "      {line}");
        }
    }
}

/// A short description of how an output layer is tiled.
fn tiling(l: &schema::Layer<'_>) -> String {
    let Some(out) = l.any_layer_as_output_layer() else { return "-".to_string() };
    if out.shape_info().is_some() {
        let n = out.shape_info().and_then(|si| si.slice_layout()).map_or(0, |v| v.len());
        return format!("shape_info, {n} slice(s)");
    }
    let Some(layout) = out.layout() else { return "none".to_string() };
    if l.y_dim() <= 1 && l.x_dim() <= 1 {
        return "1-D".to_string();
    }
    let distinct = |mut xs: Vec<i32>| {
        xs.dedup();
        xs.len()
    };
    let ys =
        layout.y_coordinate_to_linear_tile_id_map().map(|v| v.iter().collect()).unwrap_or_default();
    let xs =
        layout.x_coordinate_to_linear_tile_id_map().map(|v| v.iter().collect()).unwrap_or_default();
    format!("{}x{} tiles", distinct(ys), distinct(xs))
}
