//! `kiln inspect FILE`: a summary of any supported file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};

use crate::input::Input;

/// Arguments of `kiln inspect`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to inspect.
    pub file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `kiln inspect`.
pub fn run(args: Args) -> Result<ExitCode> {
    let input = Input::open(&args.file)?;
    match input.kind {
        // Each format registers its summary here.
        kiln_format::Kind::Circle => super::circle::inspect(&input, args.json),
        kiln_format::Kind::Txn => super::txn::inspect(&input, args.json),
        kind => bail!("{}: inspecting {kind} files is not supported yet", args.file.display()),
    }
}
