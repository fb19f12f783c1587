//! Helpers shared by the integration tests of `kiln-format`: fixture paths, the shared
//! third-party test data (skipped visibly when absent) and a deterministic byte mutator.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/fixtures/<rel>` under the repository root.
pub fn fixture(rel: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(rel)
}

/// `../shared/testdata/<sub>` beside the repository, or `None` (after printing a visible skip
/// message naming `test`) when that folder is absent.
pub fn shared_testdata(sub: &str, test: &str) -> Option<PathBuf> {
    let dir = repo_root().join("../shared/testdata").join(sub);
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("SKIPPED {test}: {} is absent", dir.display());
        None
    }
}

/// A small deterministic PRNG (xorshift64*), so mutation tests are reproducible.
pub struct Rng(u64);

impl Rng {
    /// A generator from a non-zero seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// A copy of `original` with 1 to 4 random edits: a byte set to a random or boundary value,
/// a 32-bit word overwritten, or the file truncated.
pub fn mutate(original: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut bytes = original.to_vec();
    if bytes.is_empty() {
        return bytes;
    }
    let edits = 1 + rng.below(4);
    for _ in 0..edits {
        let len = bytes.len() as u64;
        if len == 0 {
            break;
        }
        let at = rng.below(len) as usize;
        match rng.below(10) {
            0 => bytes.truncate(at),
            1..=3 => {
                let word: [u8; 4] = match rng.below(4) {
                    0 => 0xffff_ffffu32.to_le_bytes(),
                    1 => 0x7fff_ffffu32.to_le_bytes(),
                    2 => 0x8000_0000u32.to_le_bytes(),
                    _ => (rng.next_u64() as u32).to_le_bytes(),
                };
                for (i, b) in word.iter().enumerate() {
                    if let Some(slot) = bytes.get_mut(at + i) {
                        *slot = *b;
                    }
                }
            }
            _ => bytes[at] = rng.next_u64() as u8,
        }
    }
    bytes
}

/// The kind of error `result` holds (the variant's name), for tests that expect a failure of
/// a given kind; panics when `result` is `Ok`.
pub fn error_kind<T: std::fmt::Debug>(result: kiln_format::Result<T>) -> &'static str {
    use kiln_format::Error;
    match result.expect_err("expected an error") {
        Error::Truncated { .. } => "Truncated",
        Error::BadMagic { .. } => "BadMagic",
        Error::Invalid { .. } => "Invalid",
        Error::Unsupported { .. } => "Unsupported",
        Error::Limit { .. } => "Limit",
        Error::Flatbuffer { .. } => "Flatbuffer",
        Error::NotFound { .. } => "NotFound",
        Error::Io { .. } => "Io",
        other => panic!("an error kind this helper does not know: {other:?}"),
    }
}
