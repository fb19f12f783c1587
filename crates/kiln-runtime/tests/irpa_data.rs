//! `kiln run model.pte --data weights.irpa`: EXTERNAL tensors resolved from an IREE parameter
//! archive. The archive is the one IREE's `ParameterIndex` wrote from the tensors of
//! `external_constants.ptd` (`tests/fixtures/irpa/from_ptd_external_constants.irpa`, byte-equal
//! to `kiln params convert external_constants.ptd`).

mod common;

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;

use common::{compare, pte_dir, read_npy};
use kiln_format::irpa::builder::Plan;
use kiln_format::irpa::{Archive, BuildEntry, Payload};
use kiln_format::ptd::FlatTensor;
use kiln_runtime::{irpa_sources, Input, NamedDataSource, Output, Program, TensorInput};

fn model() -> PathBuf {
    pte_dir().join("external_constants.pte")
}

fn iree_archive() -> PathBuf {
    pte_dir().join("../irpa/from_ptd_external_constants.irpa")
}

fn tmp(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-runtime-irpa-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Runs forward with the recorded input, or returns the load error (the runtime on this
/// branch has no kernel yet for some of the model's operators).
fn run(program: Program) -> Result<Vec<u8>, String> {
    let mut method = program.method("forward").map_err(|e| e.to_string())?;
    let x = read_npy(&pte_dir().join("external_constants.forward.in0.npy"), None);
    let input = Input::Tensor(TensorInput { dtype: x.dtype, sizes: &x.sizes, data: &x.data });
    let out = method.execute(&[input]).map_err(|e| e.to_string())?;
    let want = read_npy(&pte_dir().join("external_constants.forward.out0.npy"), None);
    compare("external_constants.forward", &out[0], &want, 1e-4)?;
    match out.as_slice() {
        [Output::Tensor(t)] => Ok(t.data.clone()),
        other => Err(format!("expected one tensor output, got {other:?}")),
    }
}

fn with_sources(sources: Vec<Arc<dyn NamedDataSource>>) -> Program {
    sources.into_iter().fold(Program::builder(), |b, s| b.data_source(s)).load(model()).unwrap()
}

#[test]
fn runs_with_external_tensors_from_an_irpa() {
    let from_irpa = run(with_sources(irpa_sources(iree_archive(), &model()).unwrap()));
    let from_ptd =
        run(Program::load_with_data(model(), pte_dir().join("external_constants.ptd")).unwrap());
    // Equal outputs (both checked against ExecuTorch's), or the same load error.
    assert_eq!(from_irpa, from_ptd);
}

/// The .ptd's tensors as build entries, with `edit` applied to each (key, bytes).
fn archive_with(edit: impl Fn(&str, &[u8]) -> Option<Payload<'static>>) -> Vec<u8> {
    let bytes = std::fs::read(pte_dir().join("external_constants.ptd")).unwrap();
    let ptd = FlatTensor::open(&bytes).unwrap();
    let entries: Vec<BuildEntry<'_>> = ptd
        .entries()
        .filter_map(|e| {
            let e = e.unwrap();
            let payload = match edit(e.key, e.data) {
                Some(Payload::Data(_)) => return None,
                Some(p) => p,
                None => Payload::Data(e.data),
            };
            Some(BuildEntry {
                name: Cow::Owned(e.key.as_bytes().to_vec()),
                metadata: Cow::Borrowed(&[]),
                payload,
            })
        })
        .collect();
    Plan::new(&entries, 64).unwrap().to_vec()
}

#[test]
fn splats_are_expanded_to_the_tensor_size() {
    let bytes = archive_with(|k, _| {
        (k == "fc2.bias").then(|| Payload::Splat {
            pattern: Cow::Owned(1.5f32.to_le_bytes().to_vec()),
            length: 32,
        })
    });
    let sources = irpa_sources(tmp("splat.irpa", &bytes), &model()).unwrap();
    assert_eq!(sources.len(), 2);
    let e = sources[1].entry("fc2.bias").unwrap();
    let want: Vec<u8> = (0..8).flat_map(|_| 1.5f32.to_le_bytes()).collect();
    assert_eq!(&sources[1].bytes()[e.range.clone()], want.as_slice());
    assert!(sources[0].entry("fc2.bias").is_none());
    // The other tensors come zero-copy from the map.
    let e = sources[0].entry("fc1.weight").unwrap();
    assert_eq!(e.range.start % 64, 0);
    assert_eq!(e.range.len(), 2048);
}

fn error_of(name: &str, bytes: &[u8]) -> String {
    irpa_sources(tmp(name, bytes), &model()).unwrap_err().to_string()
}

#[test]
fn bad_entries_are_errors_naming_the_key() {
    let missing = archive_with(|k, _| (k == "fc1.bias").then_some(Payload::Data(&[])));
    let err = error_of("missing.irpa", &missing);
    assert!(err.contains("\"fc1.bias\"") && err.contains("no such entry"), "{err}");

    let short = archive_with(|k, d| {
        (k == "fc1.weight")
            .then(|| Payload::Splat { pattern: Cow::Owned(vec![0]), length: d.len() as u64 - 1 })
    });
    let err = error_of("short_splat.irpa", &short);
    assert!(err.contains("\"fc1.weight\"") && err.contains("2047"), "{err}");

    let external = archive_with(|k, d| {
        (k == "fc2.weight").then(|| Payload::External {
            path: Cow::Owned(b"other.bin".to_vec()),
            offset: 0,
            length: d.len() as u64,
        })
    });
    let err = error_of("external.irpa", &external);
    assert!(err.contains("\"fc2.weight\"") && err.contains("EXTERNAL"), "{err}");

    // Erase fc2.bias by turning its entry into SKIP (type code at entry offset + 8).
    let mut erased = std::fs::read(iree_archive()).unwrap();
    let at = {
        let a = Archive::parse(&erased).unwrap();
        a.find(b"fc2.bias").unwrap().entry_offset as usize
    };
    erased[at + 8..at + 12].copy_from_slice(&0u32.to_le_bytes());
    let err = error_of("erased.irpa", &erased);
    assert!(err.contains("\"fc2.bias\"") && err.contains("SKIP"), "{err}");
}

/// `ProgramBuilder::data_file` tells a `.ptd` from an `.irpa` by its magic (whatever the file
/// is called), and refuses any other file naming it and what it is.
#[test]
fn data_files_are_told_apart_by_their_magic() {
    let ptd = std::fs::read(pte_dir().join("external_constants.ptd")).unwrap();
    let irpa = std::fs::read(iree_archive()).unwrap();
    let load = |path: &PathBuf| Program::builder().data_file(path, &model())?.load(model());
    let from_ptd = run(load(&tmp("weights.bin", &ptd)).unwrap());
    let from_irpa = run(load(&tmp("weights.ptd", &irpa)).unwrap());
    assert_eq!(from_ptd, from_irpa);
    let pte = tmp("weights.irpa", &std::fs::read(model()).unwrap());
    let err = load(&pte).unwrap_err();
    assert!(matches!(err, kiln_runtime::Error::DataFile { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("weights.irpa") && message.contains("not a"), "{message}");
    let missing = pte_dir().join("no-such-weights.ptd");
    assert!(matches!(load(&missing).unwrap_err(), kiln_runtime::Error::DataFile { .. }));
}
