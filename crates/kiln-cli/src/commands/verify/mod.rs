//! `kiln verify FILE...`: exit 0 when every file is valid, 1 when any is not, with a one-line
//! reason per failing file on standard error (or all results as JSON with `--json`).

mod strict;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use serde::Serialize;

use kiln_format::Kind;

use crate::input::Input;

/// Arguments of `kiln verify`.
#[derive(clap::Args)]
pub struct Args {
    /// The files to verify (`-` for standard input).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Print a JSON array with one `{"file", "kind", "ok", "error"}` object per file instead of
    /// text (`kind` is null when the file could not be read or recognised, `error` is null when
    /// `ok`).
    #[arg(long)]
    pub json: bool,
    /// Also reject files that are valid but suspect. For an ExecuTorch program (.pte) with an
    /// extended header: bytes after the end of the segment data (or, without segments, after
    /// the program), and, for any .pte, 8-byte values (int64/double scalars and lists, segment
    /// offsets and sizes) at offsets that are not multiples of 8, and a planned memory arena more than 4 times as large as
    /// the furthest byte its tensors reach and at least 64 KiB over it. Other kinds have no
    /// strict checks beyond the normal ones.
    #[arg(long)]
    pub strict: bool,
}

/// The outcome for one file, as `--json` prints it.
#[derive(Serialize, Debug, Clone)]
pub struct Verdict {
    /// The file as given.
    pub file: String,
    /// Its kind (`pte`, `irpa`, ...), `None` when it could not be read or recognised.
    pub kind: Option<String>,
    /// Whether it passed.
    pub ok: bool,
    /// Why not, on one line (`None` when `ok`).
    pub error: Option<String>,
}

/// Runs `kiln verify`.
pub fn run(args: Args) -> Result<ExitCode> {
    let verdicts: Vec<Verdict> = args.files.iter().map(|f| verify(f, args.strict)).collect();
    if args.json {
        crate::output::print_json(&verdicts)?;
    } else {
        for v in &verdicts {
            match (&v.kind, &v.error) {
                (Some(kind), None) => outln!("{}: ok ({kind})", v.file),
                (_, error) => eprintln!("{}: invalid: {}", v.file, error.as_deref().unwrap_or("")),
            }
        }
    }
    Ok(if verdicts.iter().all(|v| v.ok) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Verifies one file as `kiln verify [--strict]` does; every failure, reading included,
/// becomes the verdict's one-line error.
pub fn verify(path: &Path, strict: bool) -> Verdict {
    let file = path.display().to_string();
    let input = match crate::input::open(path) {
        Ok(input) => input,
        Err(err) => {
            let error = Some(one_line(&kiln_runtime::error::message_chain(&err)));
            return Verdict { file, kind: None, ok: false, error };
        }
    };
    let outcome = check(&input).and_then(|()| if strict { strict::check(&input) } else { Ok(()) });
    Verdict {
        file,
        kind: Some(input.kind.to_string()),
        ok: outcome.is_ok(),
        error: outcome.err().map(|reason| one_line(&reason)),
    }
}

/// The normal verifier of the input's kind.
fn check(input: &Input) -> Result<(), String> {
    match input.kind {
        // Each format registers its verifier here.
        Kind::Pte => super::executorch::verify_pte(input),
        Kind::Ptd => super::executorch::verify_ptd(input),
        Kind::Edgetpu => kiln_format::darwinn::verdict::check(input.file.path(), input.bytes()),
        Kind::Irpa | Kind::Safetensors | Kind::Gguf => super::params::verify_outcome(input),
        Kind::Circle => super::circle::verify(input),
        Kind::Txn => super::txn::verify(input),
        Kind::Tflite => super::tflite::verify(input),
        Kind::Npy => super::npy::verify(input),
        Kind::Etdump => super::etdump::verify(input),
    }
}

/// `reason` on one line: its non-empty lines, trimmed, joined by "; ".
fn one_line(reason: &str) -> String {
    let lines: Vec<&str> = reason.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join("; ")
}

#[cfg(test)]
mod tests {
    use super::one_line;

    #[test]
    fn reasons_fold_onto_one_line() {
        assert_eq!(one_line("a\n  b: c\n\n d\n"), "a; b: c; d");
        assert_eq!(one_line("plain"), "plain");
    }
}
