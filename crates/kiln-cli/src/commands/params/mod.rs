//! `kiln params`: IREE parameter archives (`.irpa`) and the formats they are made from.
//!
//! `dump`, `create`, `convert`, `extract` and `verify` follow IREE's tools
//! (`iree-dump-parameters`, `iree-create-parameters`, `iree-convert-parameters`) and, with
//! `--no-tensor-metadata`, produce byte-identical archives for the same inputs; the edit
//! commands (append, erase, replace, concat, repack, strip, splat, rename, exclude) write a new
//! file and never touch the input.
//! Every output is written through a temporary file renamed into place, with payloads copied
//! from the inputs' files by the kernel (see `write`). Tensors' dtypes and shapes are kept in
//! entry metadata (IREE's `TENSORv0:` form) unless `--no-tensor-metadata`, and two entries
//! with one key are refused unless `--allow-duplicates`.

mod args;
mod edit;
mod extract;
mod sources;
mod summary;
mod table;
mod write;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use kiln_format::irpa::builder::Plan;
use kiln_format::irpa::transform::{self, Options};
use kiln_format::irpa::verify::{findings, Severity};
use kiln_format::Kind;
use kiln_runtime::MappedFile;

use crate::input::Input;
use args::KeyFlags;
use kiln_format::irpa::ParamFile;
use write::write_plan;

pub use summary::{dump_json, print};

/// Arguments of `kiln params`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the entry table of parameter files (.irpa, .safetensors, .gguf, .ptd, .pte) like
    /// iree-dump-parameters: start, end, length, key.
    Dump {
        /// Files to dump; their entries are listed together, in order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print `{"entries": [{key, type, length, offset, metadata}]}` instead.
        #[arg(long)]
        json: bool,
    },
    /// Create an archive from .npy (or raw) files and splats; a .npy array's dtype and shape
    /// are kept in its entry's metadata (`TENSORv0:`, as IREE's Python helpers write them).
    Create {
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        new: edit::NewEntries,
        #[command(flatten)]
        keys: KeyFlags,
    },
    /// Convert and merge .irpa, .safetensors, .gguf, .ptd and .pte files into one archive
    /// (the flags of iree-convert-parameters); tensors' dtypes and shapes are kept in their
    /// entries' metadata.
    Convert {
        /// Input files, in order.
        #[arg(required = true)]
        inputs: Vec<PathBuf>,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
        /// Leave out the entry with this (original) key.
        #[arg(long, value_name = "KEY")]
        exclude: Vec<String>,
        /// Rename an entry.
        #[arg(long, value_name = "OLD=NEW", value_parser = args::rename)]
        rename: Vec<(Vec<u8>, Vec<u8>)>,
        /// Turn every entry into a zero splat of the same length.
        #[arg(long)]
        strip: bool,
        /// Turn the entry with this (new) key into a splat: a zero byte, or the hex pattern.
        #[arg(long, value_name = "KEY[=HEXPATTERN]", value_parser = args::splat_key)]
        splat: Vec<(Vec<u8>, Vec<u8>)>,
        #[command(flatten)]
        keys: KeyFlags,
    },
    /// Write one entry's bytes to a .npy file (when the output ends in .npy) or raw bytes.
    Extract {
        /// The parameter file.
        file: PathBuf,
        /// The entry's key.
        key: String,
        /// Output file.
        #[arg(short, long)]
        output: PathBuf,
        /// Write raw bytes even when the output ends in .npy.
        #[arg(long)]
        raw: bool,
    },
    /// Check parameter files (everything `dump` reads): exit 1 on any error; warnings are
    /// printed.
    Verify {
        /// Files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print the findings as JSON.
        #[arg(long)]
        json: bool,
    },
    #[command(flatten)]
    Edit(edit::EditCommand),
}

/// Runs `kiln params`.
pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Dump { files, json } => dump(&files, json),
        Command::Create { output, new, keys } => {
            let loaded = new.load()?;
            let entries = loaded.entries(!keys.no_tensor_metadata)?;
            keys.check(&entries)?;
            let plan = Plan::new(&entries, new.alignment)?;
            write_plan(&output, &plan, &loaded.maps())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Convert { inputs, output, exclude, rename, strip, splat, keys } => {
            let exclude = exclude.iter().map(|k| k.as_bytes().to_vec()).collect();
            let untyped = keys.no_tensor_metadata;
            let options = Options { exclude, rename, splat, strip, untyped };
            let opened = sources::open_all(&inputs)?;
            let parsed = sources::parse_all(&opened)?;
            let paths: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
            let all = sources::entries_of(&parsed, &paths)?;
            warn_unmatched(&all, &options);
            let entries = transform::apply(&all, &options);
            keys.check(&entries)?;
            let plan = Plan::new(&entries, kiln_format::irpa::DEFAULT_DATA_ALIGNMENT)?;
            let maps: Vec<&MappedFile> = opened.iter().map(|i| &i.file).collect();
            write_plan(&output, &plan, &maps)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Extract { file, key, output, raw } => extract::run(&file, &key, &output, raw),
        Command::Verify { files, json } => verify(&files, json),
        Command::Edit(cmd) => edit::run(cmd),
    }
}

fn warn_unmatched(all: &[kiln_format::irpa::SourceEntry<'_>], o: &Options) {
    let has = |k: &[u8]| all.iter().any(|e| &*e.key == k);
    for k in o.exclude.iter().chain(o.rename.iter().map(|(k, _)| k)) {
        if !has(k) {
            eprintln!("kiln: warning: no entry named `{}`", String::from_utf8_lossy(k));
        }
    }
}

fn dump(files: &[PathBuf], json: bool) -> Result<ExitCode> {
    let opened = sources::open_all(files)?;
    let parsed = sources::parse_all(&opened)?;
    // Archives are listed from their tables (SKIP entries included, for --json); other formats
    // through their source entries.
    let source_entries = parsed
        .iter()
        .zip(files)
        .map(|(p, path)| match p {
            ParamFile::Irpa(_) => Ok(Vec::new()),
            _ => p.source().param_entries().with_context(|| path.display().to_string()),
        })
        .collect::<Result<Vec<_>>>()?;
    let mut rows = Vec::new();
    for (p, entries) in parsed.iter().zip(&source_entries) {
        match p {
            ParamFile::Irpa(a) => rows.extend(table::archive_rows(a)),
            _ => rows.extend(table::source_rows(entries)),
        }
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    if json {
        #[derive(serde::Serialize)]
        struct Dump<'a> {
            entries: &'a [table::Row<'a>],
        }
        serde_json::to_writer_pretty(&mut out, &Dump { entries: &rows })?;
        out.write_all(b"\n")?;
    } else {
        table::write_table(&mut out, &rows)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn verify(files: &[PathBuf], json: bool) -> Result<ExitCode> {
    let mut failed = false;
    let mut report = Vec::new();
    for path in files {
        let input = crate::input::open(path)?;
        let found = check(&input);
        failed |= found.iter().any(|f| f.severity == Severity::Error);
        if !json {
            for f in &found {
                let sev = if f.severity == Severity::Error { "error" } else { "warning" };
                let at = f.offset.map(|o| format!(" at offset {o}")).unwrap_or_default();
                outln!("{}: {sev}: {}{at}: {}", path.display(), f.field, f.message);
            }
            if !found.iter().any(|f| f.severity == Severity::Error) {
                outln!("{}: ok ({})", path.display(), input.kind);
            }
        }
        report.push(serde_json::json!({ "file": path, "kind": input.kind, "findings": found }));
    }
    if json {
        crate::output::print_json(&report)?;
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Every finding for a parameter file (parse failures become one error finding).
fn check(input: &Input) -> Vec<kiln_format::irpa::verify::Finding> {
    let error = |e: kiln_format::Error| {
        vec![kiln_format::irpa::verify::Finding {
            severity: Severity::Error,
            field: String::new(),
            offset: None,
            message: e.to_string(),
        }]
    };
    let bytes = input.bytes();
    match input.kind {
        Kind::Irpa => match kiln_format::irpa::Archive::parse(bytes) {
            Ok(a) => findings(&a),
            Err(e) => error(e),
        },
        Kind::Safetensors => match kiln_format::safetensors::SafeTensors::parse(bytes) {
            Ok(_) => Vec::new(),
            Err(e) => error(e),
        },
        Kind::Gguf => match kiln_format::gguf::Gguf::parse(bytes).and_then(|g| g.verify()) {
            Ok(()) => Vec::new(),
            Err(e) => error(e),
        },
        // Everything `params dump` reads: an ExecuTorch file verified as `kiln verify` does,
        // then its tensors listed as archive entries.
        Kind::Ptd | Kind::Pte => {
            let verified = kiln_format::verdict::check(input.file.path(), bytes, input.kind, false);
            let listed = verified.and_then(|()| {
                let parsed = sources::parse(input).map_err(|e| format!("{e:#}"))?;
                parsed.source().param_entries().map(|_| ()).map_err(|e| e.to_string())
            });
            match listed {
                Ok(()) => Vec::new(),
                Err(message) => vec![kiln_format::irpa::verify::Finding {
                    severity: Severity::Error,
                    field: String::new(),
                    offset: None,
                    message,
                }],
            }
        }
        kind => error(kiln_format::Error::unsupported(
            "params",
            "kind",
            None,
            format!("{kind} is not a parameter file"),
        )),
    }
}
