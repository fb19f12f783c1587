//! `kiln run MODEL.pte`: execute a method of an ExecuTorch program with kiln's runtime.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use kiln_format::npy::Npy;
use kiln_kernels::DType;
use kiln_runtime::{
    Input, LoadOptions, Output, OutputTensor, Program, TensorInput, TensorMeta, Threads, ValueMeta,
};
use serde::Serialize;

/// Arguments of `kiln run`.
#[derive(clap::Args)]
pub struct Args {
    /// The program (.pte).
    pub model: PathBuf,
    /// Method to run.
    #[arg(long, default_value = "forward")]
    pub method: String,
    /// Input arrays (.npy), one per method input in order. Without any, kiln makes
    /// deterministic random inputs of the declared shapes.
    #[arg(long = "input", value_name = "FILE.npy")]
    pub inputs: Vec<PathBuf>,
    /// External constants: an ExecuTorch .ptd or an IREE parameter archive (.irpa) keyed by
    /// the tensors' fully qualified names (detected from the file's magic).
    #[arg(long, value_name = "FILE.ptd|FILE.irpa")]
    pub data: Option<PathBuf>,
    /// Write the outputs as DIR/output0.npy, DIR/output1.npy, ...
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// How `run` and `bench` execute: the compile stage and the threads.
#[derive(clap::Args, Debug)]
pub struct EngineArgs {
    /// Run every instruction as written, without the compile stage's fusions and prepared
    /// kernels (for bisecting a difference).
    #[arg(long)]
    pub no_compile: bool,
    /// Threads large kernels split their work over, the calling thread included [default:
    /// the cores available, at most 2]. Outputs are bit-identical for a given count.
    #[arg(long, env = "KILN_THREADS", value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: Option<u16>,
    /// Most memory the method may take, its planned arenas, the constants it owns and the
    /// compiled memory plan counted together: bytes, or with a unit (`64MiB`, `2GiB`, `500MB`).
    /// A plan over it is refused before anything is allocated [default: the smaller of 8 GiB
    /// and half the machine's memory].
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub max_memory: Option<u64>,
}

/// A size for `--max-memory`: a byte count with an optional unit, binary (`KiB`, `MiB`,
/// `GiB`) or decimal (`KB`, `MB`, `GB`).
fn parse_memory_size(s: &str) -> std::result::Result<u64, String> {
    match parse_size::parse_size(s) {
        Ok(0) => Err("must be more than 0 bytes".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e} (expected bytes or a size such as 64MiB, 2GiB)")),
    }
}

#[derive(Serialize)]
struct OutputSummary {
    index: usize,
    kind: &'static str,
    dtype: Option<&'static str>,
    shape: Option<Vec<usize>>,
    preview: Vec<String>,
    file: Option<String>,
}

#[derive(Serialize)]
struct Summary {
    model: String,
    method: String,
    inputs: Vec<String>,
    random_inputs: bool,
    load_ms: f64,
    execute_ms: f64,
    outputs: Vec<OutputSummary>,
}

/// An input array read from disk or generated.
struct Array {
    dtype: DType,
    sizes: Vec<usize>,
    data: Vec<u8>,
}

fn npy_dtype(descr: &str, want: Option<DType>) -> Option<DType> {
    Some(match descr.trim_start_matches(['<', '|', '=']) {
        "f4" => DType::Float,
        "f8" => DType::Double,
        "f2" => DType::Half,
        "i8" => DType::Long,
        "i4" => DType::Int,
        "i2" => DType::Short,
        "i1" => DType::Char,
        "u1" => DType::Byte,
        "b1" => DType::Bool,
        // bfloat16 has no NumPy dtype: its bits travel as uint16.
        "u2" if want == Some(DType::BFloat16) => DType::BFloat16,
        "u2" => DType::UInt16,
        "u4" => DType::UInt32,
        "u8" => DType::UInt64,
        _ => return None,
    })
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

fn read_input(path: &Path, want: Option<DType>) -> Result<Array> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let npy = Npy::parse(&bytes).with_context(|| format!("{}", path.display()))?;
    if npy.fortran_order {
        bail!("{}: Fortran-order arrays are not supported; save it C-contiguous", path.display());
    }
    let dtype = npy_dtype(&npy.descr, want)
        .with_context(|| format!("{}: dtype {} is not supported", path.display(), npy.descr))?;
    let sizes = npy
        .shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<Vec<_>, _>>()
        .with_context(|| format!("{}: shape too large", path.display()))?;
    Ok(Array { dtype, sizes, data: npy.data.to_vec() })
}

/// splitmix64: a small deterministic generator for reproducible random inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// A random tensor of the declared (upper-bound) shape: floats in [-1, 1), integers in
/// [0, 8), bools.
fn random_tensor(meta: &TensorMeta, rng: &mut Rng) -> Array {
    let n: usize = meta.sizes.iter().product();
    let mut data = Vec::with_capacity(n * meta.dtype.size());
    for _ in 0..n {
        let u = rng.unit();
        let small = (rng.next() % 8) as i64;
        match meta.dtype {
            DType::Float => data.extend_from_slice(&(u as f32).to_le_bytes()),
            DType::Double => data.extend_from_slice(&u.to_le_bytes()),
            DType::Half => data.extend_from_slice(&half::f16::from_f64(u).to_le_bytes()),
            DType::BFloat16 => data.extend_from_slice(&half::bf16::from_f64(u).to_le_bytes()),
            DType::Bool => data.push(u8::from(u >= 0.0)),
            d => data.extend_from_slice(&small.to_le_bytes()[..d.size()]),
        }
    }
    Array { dtype: meta.dtype, sizes: meta.sizes.clone(), data }
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

/// Adds the external data file `path` (a .ptd or an .irpa, by its magic) for `model`.
fn add_data(
    builder: kiln_runtime::ProgramBuilder,
    path: &Path,
    model: &Path,
) -> Result<kiln_runtime::ProgramBuilder> {
    let mut head = Vec::with_capacity(16);
    std::fs::File::open(path)
        .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, 16), &mut head))
        .with_context(|| path.display().to_string())?;
    match kiln_format::detect(&head) {
        Some(kiln_format::Kind::Irpa) => Ok(kiln_runtime::irpa_sources(path, model)?
            .into_iter()
            .fold(builder, |b, s| b.data_source(s))),
        Some(kiln_format::Kind::Ptd) => Ok(builder.ptd(path)?),
        kind => bail!(
            "{}: --data takes a .ptd or an .irpa file, not {}",
            path.display(),
            kind.map_or("an unrecognised file".to_string(), |k| format!("a {k} file"))
        ),
    }
}

/// A method's inputs, read from .npy files or generated, kept for repeated executes.
pub(crate) struct Inputs {
    arrays: Vec<Array>,
    metas: Vec<ValueMeta>,
    /// A label per input: its file, or `"random <dtype><sizes>"`.
    pub names: Vec<String>,
    /// Whether the inputs were generated.
    pub random: bool,
}

impl Inputs {
    /// Reads `paths` (one per method input) or, when there are none, makes deterministic
    /// random inputs of the declared shapes.
    pub(crate) fn prepare(
        method: &kiln_runtime::Method,
        name: &str,
        paths: &[PathBuf],
    ) -> Result<Inputs> {
        let metas = method.inputs();
        let random = paths.is_empty() && !metas.is_empty();
        if !paths.is_empty() && paths.len() != metas.len() {
            bail!(
                "method {} takes {} inputs, {} --input files given",
                name,
                metas.len(),
                paths.len()
            );
        }
        let mut rng = Rng(0x6b69_6c6e);
        let mut arrays: Vec<Array> = Vec::new();
        let mut input_names = Vec::new();
        for (i, meta) in metas.iter().enumerate() {
            let want = match meta {
                ValueMeta::Tensor(t) => Some(t.dtype),
                _ => None,
            };
            if let Some(path) = paths.get(i) {
                arrays.push(read_input(path, want)?);
                input_names.push(path.display().to_string());
            } else if let ValueMeta::Tensor(t) = meta {
                arrays.push(random_tensor(t, &mut rng));
                input_names.push(format!("random {}{:?}", t.dtype.name(), t.sizes));
            } else {
                bail!("method {name} input {i} is a {meta:?} value: give it with --input");
            }
        }
        Ok(Inputs { arrays, metas, names: input_names, random })
    }

    /// The inputs as the runtime takes them.
    pub(crate) fn as_inputs(&self) -> Result<Vec<Input<'_>>> {
        self.arrays
            .iter()
            .zip(&self.metas)
            .map(|(a, meta)| {
                Ok(match meta {
                    ValueMeta::Tensor(_) => Input::Tensor(TensorInput {
                        dtype: a.dtype,
                        sizes: &a.sizes,
                        data: &a.data,
                    }),
                    ValueMeta::Int => Input::Int(i64::from_le_bytes(
                        a.data.get(..8).context("Int input")?.try_into()?,
                    )),
                    ValueMeta::Double => Input::Double(f64::from_le_bytes(
                        a.data.get(..8).context("Double input")?.try_into()?,
                    )),
                    ValueMeta::Bool => Input::Bool(a.data.first().is_some_and(|&b| b != 0)),
                    _ => Input::None,
                })
            })
            .collect::<Result<_>>()
    }
}

/// Load options for `--no-compile`, `--threads` and `--max-memory`.
pub fn load_options(engine: &EngineArgs) -> Result<LoadOptions> {
    let mut options = LoadOptions { compile: !engine.no_compile, ..LoadOptions::default() };
    if let Some(limit) = engine.max_memory {
        options.memory_limit = limit;
    }
    if let Some(n) = engine.threads {
        options.threads = Threads::new(usize::from(n))?;
    }
    Ok(options)
}

/// Runs `kiln run`.
pub fn run(args: Args) -> Result<ExitCode> {
    let started = Instant::now();
    let mut builder = Program::builder().options(load_options(&args.engine)?);
    if let Some(data) = &args.data {
        builder = add_data(builder, data, &args.model)?;
    }
    let program = builder.load(&args.model)?;
    let mut method = program.method(&args.method)?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let prepared = Inputs::prepare(&method, &args.method, &args.inputs)?;
    let inputs = prepared.as_inputs()?;
    let (input_names, random) = (prepared.names.clone(), prepared.random);
    let exec_start = Instant::now();
    let outputs = method.execute(&inputs)?;
    let execute_ms = exec_start.elapsed().as_secs_f64() * 1e3;
    if let Some(dir) = &args.output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut summaries = Vec::new();
    for (i, out) in outputs.iter().enumerate() {
        let tensor = match out {
            Output::Tensor(t) => Some(t.clone()),
            Output::Int(x) => Some(OutputTensor {
                dtype: DType::Long,
                sizes: vec![],
                data: x.to_le_bytes().to_vec(),
            }),
            Output::Double(x) => Some(OutputTensor {
                dtype: DType::Double,
                sizes: vec![],
                data: x.to_le_bytes().to_vec(),
            }),
            Output::Bool(x) => {
                Some(OutputTensor { dtype: DType::Bool, sizes: vec![], data: vec![u8::from(*x)] })
            }
            Output::String(_) | Output::None => None,
        };
        let kind = match out {
            Output::Tensor(_) => "tensor",
            Output::Int(_) => "int",
            Output::Double(_) => "double",
            Output::Bool(_) => "bool",
            Output::String(_) => "string",
            Output::None => "none",
        };
        let mut file = None;
        if let (Some(dir), Some(t)) = (&args.output_dir, &tensor) {
            let path = dir.join(format!("output{i}.npy"));
            let shape: Vec<u64> = t.sizes.iter().map(|&d| d as u64).collect();
            let mut bytes = kiln_format::npy::header(npy_descr(t.dtype), &shape);
            bytes.extend_from_slice(&t.data);
            kiln_format::io::write_bytes_atomic(&path, &bytes)?;
            file = Some(path.display().to_string());
        }
        summaries.push(OutputSummary {
            index: i,
            kind,
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
            file,
        });
    }
    let summary = Summary {
        model: args.model.display().to_string(),
        method: args.method.clone(),
        inputs: input_names,
        random_inputs: random,
        load_ms,
        execute_ms,
        outputs: summaries,
    };
    if args.json {
        crate::output::print_json(&summary)?;
    } else {
        outln!(
            "{} {} ({:.2} ms load, {:.2} ms execute)",
            summary.model,
            summary.method,
            load_ms,
            execute_ms
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
            if let Some(f) = &o.file {
                outln!("    written to {f}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
