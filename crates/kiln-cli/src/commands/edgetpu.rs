//! `kiln edgetpu`: inspect, extract, link, re-layout and pack Edge TPU (DarwiNN) packages inside
//! `*_edgetpu.tflite` files. Every command that reads a model also takes a bare package (`DWN1`),
//! as `extract` (`package.dwn`) and `pack` write them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use kiln_format::darwinn::found::{self, Found};
use kiln_format::darwinn::{
    self, link, numerics, relayout, schema, select, writer, Executable, Package,
};
use kiln_format::io::write_bytes_atomic;
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
    /// Write each package, its MultiExecutable, executables, parameters and bitstreams to files.
    Extract(ExtractArgs),
    /// Patch device addresses into the instruction bitstreams and write the linked copies.
    Link(LinkArgs),
    /// Re-lay out a raw output buffer of a layer into a dense YXZ .npy array.
    Relayout(RelayoutArgs),
    /// Build a DarwiNN package (DWN1) from serialized executables.
    Pack(PackArgs),
}

/// Which package of a model: `--package N` counts every package in subgraph/operator order.
#[derive(clap::Args)]
struct PackageChoice {
    /// Index of the package among all Edge TPU packages of the model (see `inspect`).
    #[arg(long, default_value_t = 0)]
    package: usize,
}

/// Arguments of `kiln edgetpu extract`.
#[derive(clap::Args)]
struct ExtractArgs {
    /// A `*_edgetpu.tflite` model.
    model: PathBuf,
    /// Output folder (created if missing).
    #[arg(long, value_name = "DIR")]
    out_dir: PathBuf,
}

/// Arguments of `kiln edgetpu link`.
#[derive(clap::Args)]
struct LinkArgs {
    /// A `*_edgetpu.tflite` model.
    model: PathBuf,
    #[command(flatten)]
    choice: PackageChoice,
    /// Input layer address, `NAME=ADDR` (decimal or 0x hex); repeat a name for batches 1, 2, ...
    #[arg(long = "input-addr", value_name = "NAME=ADDR", value_parser = parse_named_addr)]
    inputs: Vec<(String, u64)>,
    /// Output layer address, `NAME=ADDR`; repeat a name for batches 1, 2, ...
    #[arg(long = "output-addr", value_name = "NAME=ADDR", value_parser = parse_named_addr)]
    outputs: Vec<(String, u64)>,
    /// Parameter buffer address.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    parameters: Option<u64>,
    /// Scratch buffer address.
    #[arg(long, value_name = "ADDR", value_parser = parse_addr)]
    scratch: Option<u64>,
    /// Output folder for `exe<E>_chunk<C>.linked.bin` files (created if missing).
    #[arg(long, value_name = "DIR")]
    out_dir: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `kiln edgetpu relayout`.
#[derive(clap::Args)]
struct RelayoutArgs {
    /// A `*_edgetpu.tflite` model.
    model: PathBuf,
    /// The raw output buffer of one batch as the device wrote it (size_bytes x executions).
    raw: PathBuf,
    #[command(flatten)]
    choice: PackageChoice,
    /// Output layer name.
    #[arg(long)]
    layer: String,
    /// Write float32 values `(raw - zero_point) * dequantization_factor` instead of the integers.
    #[arg(long)]
    dequantize: bool,
    /// Output .npy file (default: RAW with the extension .npy).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

/// Arguments of `kiln edgetpu pack`.
#[derive(clap::Args)]
struct PackArgs {
    /// Serialized Executable flatbuffers, in MultiExecutable order.
    #[arg(required = true)]
    executables: Vec<PathBuf>,
    /// Output package file.
    #[arg(short, long)]
    output: PathBuf,
    /// `min_runtime_version` of the package.
    #[arg(long, default_value_t = 13)]
    min_runtime_version: i32,
    /// `compiler_version` of the package.
    #[arg(long, default_value = "kiln")]
    compiler_version: String,
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
            let input = crate::input::open(&a.model)?;
            inspect(&input, a.json)
        }
        Command::Extract(a) => extract(&a),
        Command::Link(a) => link(&a),
        Command::Relayout(a) => relayout(&a),
        Command::Pack(a) => pack(&a),
    }
}

/// `kiln dump` on an Edge TPU model: every decoded field of every package as JSON (byte
/// blobs as their length).
pub fn dump(input: &Input) -> Result<ExitCode> {
    let (_, found) = found::open(input.file.path(), input.bytes())?;
    let packages: Vec<serde_json::Value> = found.iter().map(dump_package).collect();
    print_json(&serde_json::json!({ "packages": packages }))?;
    Ok(ExitCode::SUCCESS)
}

fn dump_package(f: &Found<'_>) -> serde_json::Value {
    use serde_json::json;
    let r = f.package.root();
    json!({
        "subgraph": f.op.as_ref().map(|op| op.subgraph),
        "operator": f.op.as_ref().map(|op| op.operator),
        "index": f.index,
        "file_offset": f.file_offset(),
        "custom_options": f.op.as_ref().map(|op| &op.data.keys),
        "identifier_ok": f.package.has_identifier(),
        "min_runtime_version": r.min_runtime_version(),
        "serialized_multi_executable_bytes": f.package.multi_executable_bytes().len(),
        "signature_bytes": r.signature().map_or(0, |v| v.len()),
        "keypair_version": r.keypair_version(),
        "compiler_version": r.compiler_version(),
        "virtual_chip_id": r.virtual_chip_id(),
        "multi_chip_package": r.multi_chip_package().map_or(0, |v| v.len()),
        "model_identifier": r.model_identifier(),
        "executables": f.package.executables().iter().map(dump_executable).collect::<Vec<_>>(),
    })
}

fn dump_meta(m: Option<schema::Meta<'_>>) -> serde_json::Value {
    m.map_or(serde_json::Value::Null, |m| {
        serde_json::json!({
            "desc": darwinn::description_name(m.desc()),
            "batch": m.batch(),
            "name": m.name(),
            "position": darwinn::position_kind(m.position()),
        })
    })
}

fn dump_layer(l: &schema::Layer<'_>) -> serde_json::Value {
    use serde_json::json;
    let spec = writer::LayerSpec::from_layer(*l);
    let out = match &spec.kind {
        writer::LayerKind::Output { layout, data_type, shape_info } => json!({
            "data_type": darwinn::data_type_name(*data_type),
            "layout": layout.as_ref().map(|m| json!({
                "y_coordinate_to_linear_tile_id_map": m.y_coordinate_to_linear_tile_id_map,
                "x_coordinate_to_linear_tile_id_map": m.x_coordinate_to_linear_tile_id_map,
                "linearized_tile_byte_offset": m.linearized_tile_byte_offset,
                "x_coordinate_to_local_byte_offset": m.x_coordinate_to_local_byte_offset,
                "y_coordinate_to_local_y_offset": m.y_coordinate_to_local_y_offset,
                "x_coordinate_to_local_y_row_size": m.x_coordinate_to_local_y_row_size,
            })),
            "shape_info": shape_info.as_ref().map(|si| json!({
                "slice_layout": si.slice_layout.iter().map(|t| json!({"shape": t.shape, "stride": t.stride})).collect::<Vec<_>>(),
                "slice_offset": si.slice_offset,
            })),
        }),
        writer::LayerKind::Input => json!("input"),
        writer::LayerKind::None => serde_json::Value::Null,
    };
    json!({
        "name": spec.name,
        "size_bytes": spec.size_bytes,
        "y_dim": spec.y_dim,
        "x_dim": spec.x_dim,
        "z_dim": spec.z_dim,
        "zero_point": spec.numerics.map(|n| n.0),
        "dequantization_factor": spec.numerics.map(|n| n.1),
        "data_type": darwinn::data_type_name(spec.data_type),
        "execution_count_per_inference": spec.execution_count_per_inference,
        "cache_on_dram": spec.cache_on_dram,
        "shape": spec.shape,
        "any_layer": out,
    })
}

fn dump_executable(e: &Executable<'_>) -> serde_json::Value {
    use serde_json::json;
    let r = e.root();
    let hints = r.dma_hints().map(|h| {
        let list: Vec<serde_json::Value> = h
            .hints()
            .iter()
            .flatten()
            .map(|x| {
                let dir = x.direction().variant_name().unwrap_or("UNKNOWN");
                if let Some(d) = x.any_hint_as_dma_descriptor_hint() {
                    json!({"dma": {"meta": dump_meta(d.meta()), "offset_in_bytes": d.offset_in_bytes(), "size_in_bytes": d.size_in_bytes()}, "direction": dir})
                } else if let Some(i) = x.any_hint_as_instruction_hint() {
                    json!({"instruction_chunk_index": i.instruction_chunk_index(), "direction": dir})
                } else if let Some(i) = x.any_hint_as_interrupt_hint() {
                    json!({"interrupt": i.type_().0, "direction": dir})
                } else if x.any_hint_as_fence_hint().is_some() {
                    json!({"fence": true, "direction": dir})
                } else {
                    json!({"none": x.any_hint_type().0, "direction": dir})
                }
            })
            .collect();
        json!({"fully_deterministic": h.fully_deterministic(), "hints": list})
    });
    json!({
        "offset_in_package": e.offset_in_package(),
        "bytes": e.data().len(),
        "version": r.version(),
        "name": r.name(),
        "type": darwinn::executable_type_name(r.type_()),
        "chip": r.chip(),
        "serialized_model_bytes": r.serialized_model().map_or(0, |v| v.len()),
        "batch_size": r.batch_size(),
        "scratch_size_bytes": r.scratch_size_bytes(),
        "parameters_bytes": e.parameters().len(),
        "parameters_offset": e.parameters_offset(),
        "parameter_caching_token": format!("0x{:016x}", r.parameter_caching_token()),
        "use_tpu_dram_for_parameters": r.use_tpu_dram_for_parameters(),
        "estimated_cycles": r.estimated_cycles(),
        "estimated_cycles_64bit": r.estimated_cycles_64bit(),
        "used_narrow_memory_bytes_per_tile": r.used_narrow_memory_bytes_per_tile(),
        "instruction_bitstreams": r.instruction_bitstreams().iter().flatten().map(|b| json!({
            "bytes": b.bitstream().map_or(0, |x| x.len()),
            "field_offsets": b.field_offsets().iter().flatten().map(|fo| json!({
                "offset_bit": fo.offset_bit(),
                "meta": dump_meta(fo.meta()),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "dma_hints": hints,
        "input_layers": e.input_layers().iter().map(dump_layer).collect::<Vec<_>>(),
        "output_layers": e.output_layers().iter().map(dump_layer).collect::<Vec<_>>(),
    })
}

/// Parses `0x...` hex or decimal.
fn parse_addr(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.map_err(|e| format!("{s:?} is not an address: {e}"))
}

/// `NAME=ADDR` (the name may itself hold `=`; the address follows the last one).
fn parse_named_addr(s: &str) -> Result<(String, u64), String> {
    let (name, addr) = s.rsplit_once('=').ok_or_else(|| format!("{s:?} is not NAME=ADDR"))?;
    if name.is_empty() {
        return Err(format!("{s:?} has no layer name before '='"));
    }
    Ok((name.to_string(), parse_addr(addr)?))
}

/// The addresses per layer name, in the order given (batches 1, 2, ...).
fn by_name(list: &[(String, u64)]) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (name, addr) in list {
        out.entry(name.clone()).or_default().push(*addr);
    }
    out
}

fn choose<'f, 'a>(found: &'f [Found<'a>], choice: &PackageChoice) -> Result<&'f Found<'a>> {
    found.get(choice.package).with_context(|| {
        format!(
            "--package {} but the model has {} Edge TPU package(s)",
            choice.package,
            found.len()
        )
    })
}

fn extract(a: &ExtractArgs) -> Result<ExitCode> {
    let input = crate::input::open(&a.model)?;
    let (_, found) = found::open(&a.model, input.bytes())?;
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    let mut written = Vec::new();
    let mut put = |path: PathBuf, bytes: &[u8]| -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        write_bytes_atomic(&path, bytes)?;
        written.push((path, bytes.len()));
        Ok(())
    };
    for (pi, f) in found.iter().enumerate() {
        let dir = match &f.op {
            Some(op) => {
                let dir =
                    a.out_dir.join(format!("package{pi}_sg{}_op{}", op.subgraph, op.operator));
                put(dir.join("custom_options.flexbuf"), op.custom_options.bytes)?;
                dir
            }
            None => a.out_dir.join(format!("package{pi}")),
        };
        put(dir.join("package.dwn"), f.package.data())?;
        put(dir.join("multi_executable.bin"), f.package.multi_executable_bytes())?;
        for (ei, e) in f.package.executables().iter().enumerate() {
            let kind = darwinn::executable_type_name(e.root().type_()).to_lowercase();
            let edir = dir.join(format!("exe{ei}_{kind}"));
            put(edir.join("executable.bin"), e.data())?;
            put(edir.join("parameters.bin"), e.parameters())?;
            for (ci, b) in e.bitstreams().iter().enumerate() {
                put(edir.join(format!("bitstream{ci}.bin")), b)?;
            }
        }
    }
    for (path, len) in &written {
        outln!("{:>10}  {}", len, path.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Serialize)]
struct JsonLinkField {
    executable: usize,
    chunk: usize,
    offset_bit: i32,
    desc: String,
    name: String,
    batch: i32,
    position: String,
    value: Option<String>,
    reason: Option<String>,
}

fn link(a: &LinkArgs) -> Result<ExitCode> {
    let input = crate::input::open(&a.model)?;
    let (_, found) = found::open(&a.model, input.bytes())?;
    let f = choose(&found, &a.choice)?;
    let addrs = link::Addresses {
        inputs: by_name(&a.inputs),
        outputs: by_name(&a.outputs),
        parameters: a.parameters,
        scratch: a.scratch,
    };
    for name in addrs.inputs.keys().chain(addrs.outputs.keys()) {
        if !f.package.executables().iter().any(|e| e.layer(name).is_some()) {
            bail!("no layer named {name:?} in package {}", a.choice.package);
        }
    }
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    let mut rows = Vec::new();
    for (ei, e) in f.package.executables().iter().enumerate() {
        // Input/output names belong to the executables that have those layers.
        let mine = |m: &BTreeMap<String, Vec<u64>>| -> BTreeMap<String, Vec<u64>> {
            m.iter()
                .filter(|(n, _)| e.layer(n).is_some())
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect()
        };
        let local = link::Addresses {
            inputs: mine(&addrs.inputs),
            outputs: mine(&addrs.outputs),
            ..addrs.clone()
        };
        let (linked, report) = link::link(e, &local).with_context(|| format!("executable {ei}"))?;
        for (ci, b) in linked.iter().enumerate() {
            let path = a.out_dir.join(format!("exe{ei}_chunk{ci}.linked.bin"));
            write_bytes_atomic(&path, b)?;
            if !a.json {
                outln!("wrote {} ({} bytes)", path.display(), b.len());
            }
        }
        let row = |fo: &link::Field, value: Option<u32>, reason: Option<&String>| JsonLinkField {
            executable: ei,
            chunk: fo.chunk,
            offset_bit: fo.offset_bit,
            desc: darwinn::description_kind(fo.desc),
            name: fo.name.clone(),
            batch: fo.batch,
            position: darwinn::position_kind(fo.position),
            value: value.map(|v| format!("0x{v:08x}")),
            reason: reason.cloned(),
        };
        rows.extend(report.patched.iter().map(|(fo, v)| row(fo, Some(*v), None)));
        rows.extend(report.unpatched.iter().map(|(fo, r)| row(fo, None, Some(r))));
    }
    rows.sort_by_key(|r| (r.executable, r.chunk, r.offset_bit));
    if a.json {
        print_json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(["exe", "chunk", "bit", "field", "value / left unpatched because"]);
    for r in &rows {
        t.row([
            r.executable.to_string(),
            r.chunk.to_string(),
            r.offset_bit.to_string(),
            format!("{} {:?} batch {} {}", r.desc, r.name, r.batch, r.position),
            r.value.clone().or_else(|| r.reason.clone()).unwrap_or_default(),
        ]);
    }
    out!("{}", t.render());
    let unpatched = rows.iter().filter(|r| r.value.is_none()).count();
    outln!("{} field(s) patched, {unpatched} left unpatched", rows.len() - unpatched);
    Ok(ExitCode::SUCCESS)
}

fn relayout(a: &RelayoutArgs) -> Result<ExitCode> {
    let input = crate::input::open(&a.model)?;
    let (_, found) = found::open(&a.model, input.bytes())?;
    let f = choose(&found, &a.choice)?;
    let (sel, _) = select::select(&f.package, select::CURRENT_RUNTIME_VERSION)?;
    let exe = sel.main.1;
    let layer =
        exe.output_layers().into_iter().find(|l| l.name() == Some(a.layer.as_str())).with_context(
            || {
                let names: Vec<String> = exe
                    .output_layers()
                    .iter()
                    .map(|l| format!("{:?}", l.name().unwrap_or_default()))
                    .collect();
                format!("no output layer {:?}; output layers: {}", a.layer, names.join(", "))
            },
        )?;
    let raw = crate::input::read(&a.raw)?;
    let mut dense = kiln_format::darwinn::relayout::relayout(&layer, raw.bytes())?;
    let g = kiln_format::darwinn::relayout::Geometry::of(&layer)?;
    let mut shape: Vec<usize> = match &g.shape {
        Some(dims) => {
            dims.iter().map(|&(s, e)| (i64::from(e) - i64::from(s) + 1) as usize).collect()
        }
        None => vec![g.y, g.x, g.z],
    };
    if g.executions > 1 {
        shape.insert(0, g.executions);
    }
    let out = a.output.clone().unwrap_or_else(|| a.raw.with_extension("npy"));
    if a.dequantize {
        let values = numerics::dequantize(&layer, &dense)?;
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        npy::write(&out, "<f4", &shape, &bytes)?;
    } else {
        numerics::transform_signed(&mut dense, layer.data_type())?;
        npy::write(&out, npy_descr(layer.data_type()), &shape, &dense)?;
    }
    outln!("wrote {} (shape {:?})", out.display(), shape);
    Ok(ExitCode::SUCCESS)
}

/// The numpy type of a layer's host data (after the signed transform).
fn npy_descr(t: schema::DataType) -> &'static str {
    use schema::DataType as D;
    match t {
        D::SIGNED_FIXED_POINT8 => "|i1",
        D::FIXED_POINT16 | D::BFLOAT => "<u2",
        D::SIGNED_FIXED_POINT16 => "<i2",
        D::SIGNED_FIXED_POINT32 => "<i4",
        D::HALF => "<f2",
        D::SINGLE => "<f4",
        _ => "|u1",
    }
}

fn pack(a: &PackArgs) -> Result<ExitCode> {
    let mut blobs = Vec::new();
    for p in &a.executables {
        let bytes = crate::input::read(p)?.bytes().to_vec();
        Executable::open(&bytes, 0)
            .with_context(|| format!("{}: not a DarwiNN executable", p.display()))?;
        blobs.push(bytes);
    }
    let spec = writer::PackageSpec {
        min_runtime_version: a.min_runtime_version,
        compiler_version: a.compiler_version.clone(),
        ..Default::default()
    };
    let refs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
    let bytes = writer::write_package(&spec, &refs)?;
    let package = Package::open(&bytes)?;
    let (_, warnings) = select::select(&package, select::CURRENT_RUNTIME_VERSION)
        .context("the driver would refuse this package")?;
    for w in warnings {
        eprintln!("kiln: warning: {w}");
    }
    write_bytes_atomic(&a.output, &bytes)?;
    outln!("wrote {} ({} executables, {} bytes)", a.output.display(), blobs.len(), bytes.len());
    Ok(ExitCode::SUCCESS)
}

/// A minimal `.npy` (format 1.0) writer, private to this command.
mod npy {
    use std::path::Path;

    use anyhow::Result;

    /// Writes `data` as an array of numpy type `descr` and `shape`.
    pub fn write(path: &Path, descr: &str, shape: &[usize], data: &[u8]) -> Result<()> {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        let shape = if dims.len() == 1 {
            format!("({},)", dims[0])
        } else {
            format!("({})", dims.join(", "))
        };
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        // Magic (6) + version (2) + length (2) + header + newline, padded to 64 bytes.
        let total = (10 + header.len() + 1).div_ceil(64) * 64;
        while 10 + header.len() + 1 < total {
            header.push(' ');
        }
        header.push('\n');
        let mut out = Vec::with_capacity(total + data.len());
        out.extend_from_slice(b"\x93NUMPY\x01\x00");
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        kiln_format::io::write_bytes_atomic(path, &out)?;
        Ok(())
    }
}

/// `kiln edgetpu inspect` and `kiln inspect` on an Edge TPU model.
pub fn inspect(input: &Input, json: bool) -> Result<ExitCode> {
    let path = input.file.path();
    let (model, found) = found::open(path, input.bytes())?;
    if json {
        print_json(&darwinn::summary::summarize(&found))?;
        return Ok(ExitCode::SUCCESS);
    }
    out!("{}", render_text(path, model.as_ref(), &found));
    Ok(ExitCode::SUCCESS)
}

fn render_text(path: &Path, model: Option<&Model<'_>>, found: &[Found<'_>]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = match model {
        Some(model) => writeln!(
            s,
            "{}: TFLite v{} ({}), {} Edge TPU package(s)",
            path.display(),
            model.version(),
            human_bytes(model.data().len() as u64),
            found.len()
        ),
        None => writeln!(s, "{}: DarwiNN package (DWN1, no TFLite model)", path.display()),
    };
    for f in found {
        let root = f.package.root();
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Package {} of {} (file offset {}, {}):",
            f.index,
            f.op.as_ref().map_or("the file".to_string(), |op| format!(
                "subgraph {} operator {}",
                op.subgraph, op.operator
            )),
            f.file_offset().unwrap_or(0),
            human_bytes(f.package.data().len() as u64)
        );
        let ident = if f.package.has_identifier() {
            "DWN1".to_string()
        } else {
            "missing (libedgetpu warns)".to_string()
        };
        let opts = f
            .op
            .as_ref()
            .map_or(serde_json::Value::Null, |op| serde_json::Value::Object(op.data.keys.clone()));
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
        if layers.is_empty() {
            let _ = writeln!(s, "    {title}: none");
            continue;
        }
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

/// A short description of how an output layer is tiled: the tile grid and the z padding.
fn tiling(l: &schema::Layer<'_>) -> String {
    let Some(out) = l.any_layer_as_output_layer() else { return "-".to_string() };
    if let Some(si) = out.shape_info() {
        return format!("shape_info, {} slice(s)", si.slice_layout().map_or(0, |v| v.len()));
    }
    if l.y_dim() <= 1 && l.x_dim() <= 1 {
        return "1-D".to_string();
    }
    let Some(layout) = out.layout() else { return "no OutputLayout".to_string() };
    let Ok(g) = relayout::Geometry::of(l) else { return "invalid dims".to_string() };
    let Ok(maps) = relayout::TileMaps::new(layout, g.y, g.x) else {
        return "invalid OutputLayout".to_string();
    };
    let (rows, cols) = maps.grid(g.y, g.x);
    let step = if g.x > 1 { maps.buffer_index(0, 1, 0) } else { maps.buffer_index(1, 0, 0) };
    let padded = match (step, maps.buffer_index(0, 0, 0)) {
        (Ok(b), Ok(a)) if b >= a => (b - a) * g.dts,
        _ => return format!("{rows}x{cols} tiles, invalid map"),
    };
    if padded == g.z_bytes() {
        format!("{rows}x{cols} tiles")
    } else {
        format!("{rows}x{cols} tiles, z {} B padded to {padded} B", g.z_bytes())
    }
}
