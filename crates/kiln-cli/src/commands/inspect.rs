//! `kiln inspect FILE`: a summary of any supported file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use kiln_format::Kind;

use crate::output::print_json;

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

/// Runs `kiln inspect`: the file's summary ([`kiln_runtime::Artifact::summary`]) as JSON, or
/// each format's text form of it.
pub fn run(args: Args) -> Result<ExitCode> {
    let input = crate::input::open(&args.file)?;
    if args.compiled && input.kind != Kind::Pte {
        eprintln!(
            "kiln: error: --compiled needs an ExecuTorch program (.pte); {} is not one",
            args.file.display()
        );
        return Ok(ExitCode::from(2));
    }
    if args.compiled {
        return super::executorch::inspect_compiled(&args.file, args.method.as_deref(), args.json);
    }
    if args.json {
        print_json(&input.summary()?)?;
        return Ok(ExitCode::SUCCESS);
    }
    match input.kind {
        // Each format registers its text form here (its summary in `kiln_format::summary`).
        Kind::Pte => super::executorch::print_pte(&input),
        Kind::Ptd => super::executorch::print_ptd(&input),
        Kind::Edgetpu => super::edgetpu::inspect(&input, false),
        Kind::Irpa | Kind::Safetensors | Kind::Gguf => super::params::print(&input),
        Kind::Circle => super::circle::print(&input),
        Kind::Txn => super::txn::print(&input),
        Kind::Tflite => super::tflite::print(&input),
        Kind::Npy => super::npy::print(&input),
        Kind::Etdump => super::etdump::print(&input),
    }
}
