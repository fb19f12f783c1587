//! A weight is paid for once: the pages of the program file whose constants the compile stage
//! packed leave the resident set, for a portable and an XNNPACK program, and what a method
//! loaded from bytes holds.
//!
//! Its own test binary (its own process): it reads the resident pages of one mapping of the
//! program file in `/proc/self/smaps` (`Rss`, the pages this process has mapped in, not the
//! page cache `mincore` reports) and the process's resident set, which other tests running
//! beside it would change.

use std::path::{Path, PathBuf};

use kiln_runtime::{LoadOptions, Program};

mod common;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name)
}

/// Resident bytes of this process's mappings of `path` (`Rss` of its entries in smaps).
fn mapping_rss(path: &Path) -> u64 {
    let path = path.canonicalize().unwrap();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut in_file = false;
    let mut rss = 0;
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            // A mapping's header: range perms offset dev inode [path].
            in_file = words.nth(4).is_some_and(|p| Path::new(p) == path);
        } else if in_file && first == "Rss:" {
            rss += words.next().unwrap().parse::<u64>().unwrap() * 1024;
        }
    }
    rss
}

/// Resident bytes of the whole process (`VmRSS`).
fn process_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap();
    line.trim().strip_suffix("kB").unwrap().trim().parse::<u64>().unwrap() * 1024
}

/// Bytes of the file's segments (the constants of a portable program, the delegate payloads
/// with their weights of an XNNPACK one), read by kiln-format.
fn segment_bytes(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    let pte = kiln_format::pte::Program::open(&bytes).unwrap();
    (0..pte.num_segments()).map(|i| pte.segment_bytes(i).unwrap().len() as u64).sum()
}

/// The resident bytes of the program's mapping after loading `path` and executing it once,
/// through the compile stage or (`compile` false) the interpreter, which reads every
/// constant in place.
fn resident_after_a_run(path: &Path, compile: bool) -> u64 {
    let options = LoadOptions { compile, ..LoadOptions::default() };
    let program = Program::builder().options(options).load(path).unwrap();
    let mut method = program.method("forward").unwrap();
    common::run_on_zeros(&mut method);
    mapping_rss(path)
}

/// One test, its parts in turn: each reads what the process holds, which a part running
/// beside it would change.
#[test]
fn weights_are_resident_once() {
    packed_constants_leave_the_resident_set();
    a_program_from_bytes_holds_its_packed_weights_once();
}

fn packed_constants_leave_the_resident_set() {
    for name in ["pte/mobilenet_v2_portable.pte", "pte/mobilenet_v2_xnnpack.pte"] {
        let path = fixture(name);
        let weights = segment_bytes(&path);
        assert!(weights > 10 << 20, "{name}: {weights} bytes of segments");
        // The interpreter reads the weights from the file at every execute: their pages
        // stay (the check that the measure sees them at all).
        let interpreted = resident_after_a_run(&path, false);
        assert!(interpreted >= weights * 9 / 10, "{name}: {interpreted} of {weights} resident");
        // Compiled, every convolution's weights are packed at load and their pages given
        // back: what stays is the few constants steps read in place.
        let compiled = resident_after_a_run(&path, true);
        assert!(
            compiled <= weights / 20,
            "{name}: {compiled} bytes of the file resident after load and a run, of {weights}"
        );
    }
}

fn a_program_from_bytes_holds_its_packed_weights_once() {
    let path = fixture("pte/mobilenet_v2_xnnpack.pte");
    let bytes = std::fs::read(&path).unwrap();
    let len = bytes.len() as u64;
    let before = process_rss();
    let program = Program::builder().load_bytes("mobilenet_v2_xnnpack.pte", bytes).unwrap();
    let mut method = program.method("forward").unwrap();
    common::run_on_zeros(&mut method);
    let grown = process_rss().saturating_sub(before);
    // The packed weights (about the file's size) and the activations, not the file's bytes
    // beside them as well.
    assert!(grown < len * 3 / 2, "grew by {grown} bytes for a {len}-byte program");
}
