//! `kiln dump FILE`: the whole file as JSON, for debugging.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};

use crate::input::Input;

/// Arguments of `kiln dump`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to dump.
    pub file: PathBuf,
}

/// Runs `kiln dump`.
pub fn run(args: Args) -> Result<ExitCode> {
    let input = Input::open(&args.file)?;
    match input.kind {
        // Each format registers its dump here.
        kiln_format::Kind::Circle => super::circle::dump(&input),
        kiln_format::Kind::Txn => super::txn::dump(&input),
        kind => bail!("{}: dumping {kind} files is not supported yet", args.file.display()),
    }
}
