//! `kiln verify FILE...`: exit 0 when every file is valid, 1 when any is not, with a one-line
//! reason per failing file on standard error (or all results as JSON with `--json`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use kiln_format::verdict::Verdict;

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

/// Runs `kiln verify`: each file's verdict ([`kiln_runtime::artifact::verdict`]).
pub fn run(args: Args) -> Result<ExitCode> {
    let verdicts: Vec<Verdict> = args
        .files
        .iter()
        .map(|f| kiln_runtime::artifact::verdict(f, crate::input::open(f), args.strict))
        .collect();
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
