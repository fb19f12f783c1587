//! `kiln dump FILE`: the whole file as JSON, for debugging.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};

use kiln_format::Kind;

/// Arguments of `kiln dump`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to dump.
    pub file: PathBuf,
}

/// Runs `kiln dump`.
pub fn run(args: Args) -> Result<ExitCode> {
    let input = crate::input::open(&args.file)?;
    match input.kind {
        // Each format registers its dump here.
        Kind::Pte => super::executorch::dump_pte(&input),
        Kind::Ptd => super::executorch::dump_ptd(&input),
        Kind::Edgetpu => super::edgetpu::dump(&input),
        Kind::Irpa | Kind::Safetensors | Kind::Gguf => super::params::dump_json(&input),
        Kind::Circle => super::circle::dump(&input),
        Kind::Txn => super::txn::dump(&input),
        Kind::Npy => super::npy::dump(&input),
        Kind::Etdump => super::etdump::dump(&input),
        kind => bail!("{}: dumping {kind} files is not supported yet", args.file.display()),
    }
}
