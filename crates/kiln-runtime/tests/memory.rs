//! Memory follows the work, not the file: the whole memory plan is checked against the
//! method's limit before anything is allocated, and planned pages cost nothing until touched.
//!
//! One test in its own test binary (its own process), because it reads the process's peak
//! resident set (`VmHWM`), which other tests running beside it would raise.

use kiln_format::pte::model::ProgramModel;
use kiln_format::pte::{writer, Program as PteProgram};
use kiln_runtime::{Error, LoadOptions, MemoryReason, Program};

mod common;

/// The tiny CNN fixture with its planned arenas declared as `sizes` (entry 0 reserved): the
/// same program, claiming more memory than its tensors use (as one flipped bit can make it).
fn with_arenas(sizes: &[i64]) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/pte/tiny_cnn.pte");
    let bytes = std::fs::read(path).unwrap();
    let mut model = ProgramModel::from_program(&PteProgram::open(&bytes).unwrap()).unwrap();
    model.methods[0].non_const_buffer_sizes = sizes.to_vec();
    writer::write(&model).unwrap()
}

/// Peak resident set of this process, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap();
    line.trim().strip_suffix("kB").unwrap().trim().parse::<u64>().unwrap() * 1024
}

fn load(bytes: Vec<u8>, limit: Option<u64>) -> kiln_runtime::Result<kiln_runtime::Method> {
    let mut options = LoadOptions::default();
    if let Some(limit) = limit {
        options.memory_limit = limit;
    }
    Program::builder().options(options).load_bytes("test.pte", bytes)?.method("forward")
}

#[test]
fn planned_memory_is_budgeted_as_a_whole_and_committed_lazily() {
    const GIB: i64 = 1 << 30;
    // Two 5 GiB arenas: 10 GiB together, over the default limit (at most 8 GiB), refused
    // before either is allocated.
    match load(with_arenas(&[0, 5 * GIB, 5 * GIB]), None) {
        Err(Error::Memory { bytes, reason: MemoryReason::OverLimit, .. }) => {
            assert_eq!(bytes, 10 << 30)
        }
        other => panic!("expected a memory error, got {other:?}"),
    }
    // A 2 GiB arena over a 64 MiB limit.
    match load(with_arenas(&[0, 2 * GIB]), Some(64 << 20)) {
        Err(Error::Memory { bytes, limit, reason: MemoryReason::OverLimit, .. }) => {
            assert_eq!((bytes, limit), (2 << 30, 64 << 20))
        }
        other => panic!("expected a memory error, got {other:?}"),
    }
    // Within the default limit it loads and runs, touching only the pages its tensors use.
    let mut method = load(with_arenas(&[0, 2 * GIB]), None).unwrap();
    common::run_on_zeros(&mut method);
    let peak = peak_rss();
    assert!(peak < 256 << 20, "peak resident set {peak} bytes");
}
