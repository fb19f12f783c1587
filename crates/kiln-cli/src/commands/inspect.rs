//! `kiln inspect FILE`: a summary of any supported file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use kiln_format::Kind;

use crate::output::print_json;

/// Arguments of `kiln inspect`.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("per_method").args(["compiled", "memory"])))]
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
    /// For a .pte: load each method (or `--method`) and print, before any execute, the peak
    /// memory kiln will hold running it: packed weights, activations, constants made at
    /// load, the file's pages read in place (together what `--max-memory` bounds) and what
    /// the process holds beside them once loaded.
    #[arg(long)]
    pub memory: bool,
    /// With `--compiled` or `--memory`: only this method.
    #[arg(long, requires = "per_method")]
    pub method: Option<String>,
}

/// Runs `kiln inspect`: the file's summary ([`kiln_runtime::Artifact::summary`]) as JSON, or
/// each format's text form of it.
pub fn run(args: Args) -> Result<ExitCode> {
    let input = crate::input::open(&args.file)?;
    let flag = if args.compiled { Some("--compiled") } else { args.memory.then_some("--memory") };
    if let Some(flag) = flag.filter(|_| input.kind != Kind::Pte) {
        eprintln!(
            "kiln: error: {flag} needs an ExecuTorch program (.pte); {} is not one",
            args.file.display()
        );
        return Ok(ExitCode::from(2));
    }
    if args.compiled {
        return super::executorch::inspect_compiled(&args.file, args.method.as_deref(), args.json);
    }
    if args.memory {
        return super::executorch::inspect_memory(&args.file, args.method.as_deref(), args.json);
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
