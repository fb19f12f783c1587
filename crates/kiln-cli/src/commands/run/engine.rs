//! How `run`, `bench`, `profile`, `report` and `generate` execute: the compile stage, the
//! threads and the memory limit (`--no-compile`, `--threads`, `--max-memory`), as load options.

use anyhow::Result;
use kiln_runtime::{LoadOptions, ThreadCount};

/// How `run` and `bench` execute: the compile stage and the threads.
#[derive(clap::Args, Debug)]
pub struct EngineArgs {
    /// Run every instruction as written, without the compile stage's fusions and prepared
    /// kernels (for bisecting a difference).
    #[arg(long)]
    pub no_compile: bool,
    /// Threads large kernels split their work over, the calling thread included [default: one
    /// per core this process may run on, the big cores only on a CPU with big and little
    /// ones]. Outputs are bit-identical for any count.
    #[arg(long, env = "KILN_THREADS", value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: Option<u16>,
    /// Most memory the method may take: bytes, or with a unit (`64MiB`, `2GiB`, `500MB`).
    /// Constants made at load are counted as they are made, and a method whose predicted
    /// peak (`kiln inspect --memory`: activations, packed weights, constants made, file pages
    /// read in place) passes it is refused once its weights are packed, before its buffers
    /// are mapped [default: the smaller of 8 GiB and half the machine's memory].
    #[arg(long, value_name = "SIZE", value_parser = parse_memory_size)]
    pub max_memory: Option<u64>,
}

/// A size for `--max-memory`: a byte count with an optional unit, binary (`KiB`, `MiB`,
/// `GiB`) or decimal (`KB`, `MB`, `GB`).
fn parse_memory_size(s: &str) -> std::result::Result<u64, String> {
    match parse_size::parse_size(s) {
        Ok(0) => Err("must be more than 0 bytes".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e} (expected bytes or a size such as 64MiB, 2GiB)")),
    }
}

/// The thread count `engine` runs with, and why: the one asked for, or kiln's default.
pub(crate) fn thread_count(engine: &EngineArgs) -> ThreadCount {
    match engine.threads {
        Some(n) => ThreadCount {
            threads: usize::from(n),
            reason: "asked for with --threads or KILN_THREADS".into(),
        },
        None => kiln_runtime::default_thread_count().clone(),
    }
}

/// Load options for `--no-compile`, `--threads` and `--max-memory`: kiln's own
/// ([`kiln_npu::load_options`], with the NPU backend registered) with those applied.
pub fn load_options(engine: &EngineArgs) -> Result<LoadOptions> {
    Ok(kiln_npu::load_options()
        .with_compile(!engine.no_compile)
        .with_threads(engine.threads.map(usize::from))?
        .with_memory_limit(engine.max_memory))
}
