//! `kiln verify FILE`: exit 0 when the file is valid, 1 with a one-line reason when not.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use kiln_format::Kind;

use crate::input::Input;

/// Arguments of `kiln verify`.
#[derive(clap::Args)]
pub struct Args {
    /// The file to verify.
    pub file: PathBuf,
}

/// Runs `kiln verify`.
pub fn run(args: Args) -> Result<ExitCode> {
    let input = Input::open(&args.file)?;
    let outcome: Result<(), String> = match input.kind {
        // Each format registers its verifier here.
        Kind::Pte => super::executorch::verify_pte(&input),
        Kind::Ptd => super::executorch::verify_ptd(&input),
        Kind::Edgetpu => super::edgetpu::verify(&input),
        Kind::Irpa | Kind::Safetensors | Kind::Gguf => super::params::verify_outcome(&input),
        Kind::Circle => super::circle::verify(&input),
        Kind::Txn => super::txn::verify(&input),
        Kind::Tflite => super::tflite::verify(&input),
    };
    match outcome {
        Ok(()) => {
            outln!("{}: ok ({})", args.file.display(), input.kind);
            Ok(ExitCode::SUCCESS)
        }
        Err(reason) => {
            outln!("{}: invalid: {reason}", args.file.display());
            Ok(ExitCode::from(1))
        }
    }
}
