//! Memory follows the work, not the file: the limit bounds what a method is predicted to
//! hold (the pages its values span, not the arenas its plan declares), checked before a
//! state's buffers are mapped, and planned pages cost nothing until touched.
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
fn planned_memory_is_budgeted_by_what_its_values_span_and_committed_lazily() {
    const GIB: i64 = 1 << 30;
    // Two 5 GiB arenas (10 GiB, over the default limit of at most 8 GiB, as a flipped bit can
    // declare them) for values of a few kilobytes: the compiled memory plan replaces them, so
    // neither is mapped; the program loads under a 64 MiB limit and runs in a small process.
    let mut method = load(with_arenas(&[0, 5 * GIB, 5 * GIB]), Some(64 << 20)).unwrap();
    let predicted = method.footprint();
    assert!(predicted.activations < 1 << 20, "{predicted:?}");
    common::run_on_zeros(&mut method);
    let peak = peak_rss();
    assert!(peak < 256 << 20, "peak resident set {peak} bytes");
    // A limit under the prediction is refused before a state's buffers are mapped, naming it.
    let limit = predicted.total() - 1;
    match load(with_arenas(&[0, 5 * GIB, 5 * GIB]), Some(limit)) {
        Err(Error::Memory { what, bytes, reason: MemoryReason::OverLimit, .. }) => {
            assert!(what.contains("predicted peak"), "{what}");
            assert_eq!(bytes, predicted.total());
        }
        other => panic!("expected a memory error, got {other:?}"),
    }
    // Arenas whose sizes overflow the address space are an error, not a crash.
    match load(with_arenas(&[0, i64::MAX, i64::MAX]), None) {
        Err(Error::Memory { .. } | Error::InvalidProgram { .. }) => {}
        other => panic!("expected an error, got {other:?}"),
    }
}
