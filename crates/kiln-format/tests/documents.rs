//! The documents kiln gives for any file (`kiln inspect --json`'s summary, `kiln verify`'s
//! verdict) over mutated copies of the real files under `tests/fixtures/` and, where present,
//! the third-party Circle, Edge TPU and transaction files of `../shared/testdata/`: whatever
//! the bytes,
//! detection, the summary (and its JSON) and the strict and plain checks end in a value or an
//! error, never a panic.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{fixture, mutate, shared_testdata, Rng};
use kiln_format::detect::Kind;
use kiln_format::{summary, verdict};

/// Files up to this size take part (the larger ones add time, not formats).
const MAX_BYTES: u64 = 1 << 20;
/// Files per kind, the smallest first.
const PER_KIND: usize = 3;
/// Mutants per file.
const MUTANTS: usize = 150;

/// Every file under `dir`, recursively.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Up to [`PER_KIND`] of the smallest files of each kind kiln recognises.
fn samples() -> BTreeMap<String, Vec<(PathBuf, Vec<u8>)>> {
    let mut all = Vec::new();
    files(&fixture(""), &mut all);
    for sub in ["circle", "edgetpu", "aie_txn"] {
        if let Some(dir) = shared_testdata(sub, "mutated_fixtures_give_documents_or_errors") {
            files(&dir, &mut all);
        }
    }
    all.retain(|p| std::fs::metadata(p).is_ok_and(|m| m.len() <= MAX_BYTES));
    all.sort_by_key(|p| (std::fs::metadata(p).map_or(0, |m| m.len()), p.clone()));
    let mut by_kind: BTreeMap<String, Vec<(PathBuf, Vec<u8>)>> = BTreeMap::new();
    for path in all {
        let bytes = std::fs::read(&path).unwrap();
        let Some(kind) = kiln_format::detect(&bytes) else { continue };
        let list = by_kind.entry(format!("{kind:?}")).or_default();
        if list.len() < PER_KIND {
            list.push((path, bytes));
        }
    }
    by_kind
}

/// The summary, its JSON and both checks of `bytes` as a file of `kind`.
fn documents(path: &Path, bytes: &[u8], kind: Kind) {
    if let Ok(s) = summary::summarize(path, bytes, kind) {
        serde_json::to_string(&s).expect("a summary serializes");
    }
    let _ = verdict::check(path, bytes, kind, false);
    let _ = verdict::check(path, bytes, kind, true);
}

#[test]
fn mutated_fixtures_give_documents_or_errors() {
    let samples = samples();
    // The formats whose fixtures the repository holds.
    for kind in ["Pte", "Ptd", "Irpa", "Safetensors", "Gguf", "Npy", "Etdump"] {
        assert!(samples.contains_key(kind), "no fixture of kind {kind} under tests/fixtures");
    }
    let mut rng = Rng::new(0xd0c5);
    let mut recognised = 0;
    for (kind, files) in &samples {
        for (path, original) in files {
            let k = kiln_format::detect(original).unwrap();
            documents(path, original, k);
            for _ in 0..MUTANTS {
                let bytes = mutate(original, &mut rng);
                if let Some(k) = kiln_format::detect(&bytes) {
                    recognised += 1;
                    documents(path, &bytes, k);
                }
            }
        }
        eprintln!("{kind}: {} files", files.len());
    }
    eprintln!("{recognised} mutants were still recognised and documented");
}
