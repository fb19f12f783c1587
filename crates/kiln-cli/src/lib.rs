//! The `kiln` command as a library: [`run`] runs it on an argument list (the `kiln` binary and
//! the Python package's `kiln` entry point both call it); that is all it offers. What the
//! commands say of files comes from the library crates, which the Python package calls
//! directly: the document `kiln inspect --json` prints is a file's summary and the verdict
//! `kiln verify` reaches is its verdict ([`kiln_runtime::artifact`], over each format's own in
//! `kiln-format`), the load options are `kiln_npu::load_options`, and error messages are
//! [`kiln_runtime::error::message_chain`] of the error.
//!
//! Exit codes: 0 success, 1 invalid input or failed check, 2 usage error.

#[macro_use]
mod output;
mod commands;
mod input;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// `kiln --version`: the package version, the commit and the build profile (see build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("KILN_COMMIT"),
    ", ",
    env!("KILN_PROFILE"),
    " build)"
);

/// binutils plus a loader for ML artifacts.
///
/// `-o/--output` always names an output file and `--out-dir` an output folder; `-` reads
/// standard input wherever a file is read.
#[derive(Parser)]
#[command(name = "kiln", version = VERSION, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a method of an ExecuTorch program (`kiln run model.pte`; random inputs by default).
    Run(commands::run::Args),
    /// Generate text with a language model exported by ExecuTorch's LLM exporter (KV cache):
    /// `kiln generate llama.pte --prompt-tokens 1,17,300 --max-new-tokens 16`.
    Generate(commands::generate::Args),
    /// Chat with a language model exported by ExecuTorch's LLM exporter, its KV cache kept
    /// from turn to turn: `kiln chat llama.pte --tokenizer tokenizer.json`.
    Chat(commands::chat::Args),
    /// Time a method of an ExecuTorch program: median/min/p90 latency, per-operator profile.
    Bench(commands::bench::Args),
    /// Profile a method: every executed kernel timed and attributed to the program's own
    /// instructions; a table, `--json`, a Chrome trace (`--trace`).
    Profile(commands::profile::Args),
    /// Draw a method as an HTML page: its operators as a graph coloured by profiled time, the
    /// time per operator and the compiled steps (`kiln report model.pte -o report.html`).
    Report(commands::report::Args),
    /// Packed f32 GEMM throughput (B packed once, and both packed per call) against the FMA peak.
    BenchGemm(commands::bench_gemm::Args),
    /// Summarise any supported file (kind detected from its magic bytes).
    Inspect(commands::inspect::Args),
    /// Verify supported files: exit 0 when all are valid, 1 with a one-line reason per file when
    /// any is not.
    Verify(commands::verify::Args),
    /// Print the whole file as JSON, for debugging.
    Dump(commands::dump::Args),
    /// Lower an ExecuTorch program's supported operators into fused NPU delegates
    /// (`kiln lower model.pte --to npu -o model.npu.pte`).
    Lower(commands::lower::Args),
    /// ExecuTorch program tools (`kiln pte rewrite IN.pte -o OUT.pte`).
    Pte(commands::executorch::PteArgs),
    /// Edge TPU (DarwiNN) packages: inspect, extract, link, relayout, pack.
    Edgetpu(commands::edgetpu::Args),
    /// IREE parameter archives: dump, create, convert, extract, verify and edit.
    Params(commands::params::Args),
    /// Circle models: origin tables.
    Circle(commands::circle::Args),
    /// AIE transaction binaries: inspect and patch.
    Txn(commands::txn::Args),
    /// Print a shell completion script (`kiln completions bash > /etc/bash_completion.d/kiln`).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

/// Runs the `kiln` command on `args` (the first is the program name, as in
/// `std::env::args_os`) and returns its exit status: 0 success, 1 invalid input or failed
/// check, 2 usage error. `--help` and `--version` print and return 0.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let code = match Cli::try_parse_from(args) {
        Ok(cli) => execute(cli),
        Err(err) => {
            // Help and version go to standard output, mistakes to standard error.
            let _ = err.print();
            return u8::try_from(err.exit_code()).unwrap_or(2);
        }
    };
    [0, 1, 2].into_iter().find(|&n| code == ExitCode::from(n)).unwrap_or(1)
}

/// Runs a parsed command line.
fn execute(cli: Cli) -> ExitCode {
    if let Err(message) = kiln_kernels::compute::cpu::isa_cap() {
        eprintln!("kiln: error: {message}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Inspect(args) => commands::inspect::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Dump(args) => commands::dump::run(args),
        Command::Pte(args) => commands::executorch::run_pte(args),
        Command::Lower(args) => commands::lower::run(args),
        Command::Edgetpu(args) => commands::edgetpu::run(args),
        Command::Params(args) => commands::params::run(args),
        Command::Circle(args) => commands::circle::run(args),
        Command::Txn(args) => commands::txn::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Generate(args) => commands::generate::run(args),
        Command::Chat(args) => commands::chat::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Profile(args) => commands::profile::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::BenchGemm(args) => commands::bench_gemm::run(args),
        Command::Completions { shell } => completions(shell),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("kiln: error: {}", kiln_runtime::error::message_chain(err.as_ref()));
            ExitCode::from(if err.is::<Usage>() { 2 } else { 1 })
        }
    }
}

/// A usage error found after parsing (arguments that clash with each other): exit 2, like
/// clap's own.
#[derive(Debug)]
pub(crate) struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Writes the completion script for `shell` to standard output.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "kiln", &mut script);
    out!("{}", String::from_utf8_lossy(&script));
    Ok(ExitCode::SUCCESS)
}
