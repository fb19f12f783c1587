//! `kiln inspect FILE`: a summary of any supported file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use kiln_format::Kind;

use crate::input::Input;

/// Arguments of `kiln inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to inspect.
    pub file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// For a .pte: load each method (or `--method`) through the compile stage and print its
    /// compiled steps, the operators each fuses and their original instruction indices.
    #[arg(long)]
    pub compiled: bool,
    /// With `--compiled`: only this method.
    #[arg(long, requires = "compiled")]
    pub method: Option<String>,
}

/// The document `kiln inspect --json FILE` prints.
pub fn document(file: &std::path::Path) -> Result<serde_json::Value> {
    let args = Args { file: file.to_path_buf(), json: true, compiled: false, method: None };
    let (result, document) = crate::output::capture_json(|| run(args));
    result?;
    document.ok_or_else(|| anyhow::anyhow!("{}: no summary was produced", file.display()))
}

/// Runs `kiln inspect`.
pub fn run(args: Args) -> Result<ExitCode> {
    let input = Input::open(&args.file)?;
    if args.compiled && input.kind != Kind::Pte {
        eprintln!(
            "kiln: error: --compiled needs an ExecuTorch program (.pte); {} is not one",
            args.file.display()
        );
        return Ok(ExitCode::from(2));
    }
    match input.kind {
        // Each format registers its summary here.
        Kind::Pte if args.compiled => {
            super::executorch::inspect_compiled(&args.file, args.method.as_deref(), args.json)
        }
        Kind::Pte => super::executorch::inspect_pte(&input, args.json),
        Kind::Ptd => super::executorch::inspect_ptd(&input, args.json),
        Kind::Edgetpu => super::edgetpu::inspect(&input, args.json),
        Kind::Irpa | Kind::Safetensors | Kind::Gguf => super::params::inspect(&input, args.json),
        Kind::Circle => super::circle::inspect(&input, args.json),
        Kind::Txn => super::txn::inspect(&input, args.json),
        Kind::Tflite => super::tflite::inspect(&input, args.json),
        Kind::Npy => super::npy::inspect(&input, args.json),
        Kind::Etdump => super::etdump::inspect(&input, args.json),
    }
}
