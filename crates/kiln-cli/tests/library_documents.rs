//! What `kiln inspect --json` and `kiln verify --json` print, and the errors they give, are
//! the library's (`kiln_runtime::artifact`): the summaries and verdicts the Python package's
//! `kiln.inspect` and `kiln.verify` return.

mod common;

use std::path::{Path, PathBuf};

use common::{kiln, s, scratch};

/// A file of each kind among the repository's fixtures, and the Circle models, transactions
/// and Edge TPU models of `../shared/testdata` when it is there.
fn files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let fixtures = root.join("tests/fixtures");
    let mut files: Vec<PathBuf> = [
        "pte/tiny_cnn.pte",
        "pte/mobilenet_v2_xnnpack.pte",
        "pte/external_constants.ptd",
        "irpa/typed.irpa",
        "irpa/small.safetensors",
        "irpa/small.gguf",
        "irpa/npy/align4096.k.npy",
        "etdump/tiny_cnn.etdp",
        "pte-compat/xor.pte",
    ]
    .iter()
    .map(|f| fixtures.join(f))
    .collect();
    for (dir, ext) in [("circle", "circle"), ("aie_txn", "bin"), ("edgetpu", "tflite")] {
        let Ok(found) = std::fs::read_dir(root.join("../shared/testdata").join(dir)) else {
            eprintln!("{dir}: ../shared/testdata/{dir} is absent, its files left out");
            continue;
        };
        let mut found: Vec<PathBuf> = found
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        found.sort();
        files.extend(found);
    }
    files
}

#[test]
fn inspect_json_prints_the_library_summary() {
    for path in files() {
        let (code, stdout, stderr) = kiln(&["inspect", "--json", s(&path)]);
        assert_eq!(code, 0, "{}: {stderr}", path.display());
        let summary = kiln_runtime::artifact::open(&path).unwrap().summary().unwrap();
        let printed = serde_json::to_string_pretty(&summary).unwrap() + "\n";
        assert_eq!(stdout, printed, "{}", path.display());
    }
}

#[test]
fn inspect_errors_are_the_library_errors() {
    let dir = scratch("library-documents", "inspect-errors");
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pte/tiny_cnn.pte");
    let truncated = dir.join("truncated.pte");
    std::fs::write(&truncated, &std::fs::read(tiny).unwrap()[..2000]).unwrap();
    let unknown = dir.join("unknown.bin");
    std::fs::write(&unknown, [0u8; 64]).unwrap();
    let opened = kiln_runtime::artifact::open(&truncated).unwrap();
    let invalid = opened.summary().map(|_| ()).unwrap_err();
    let unrecognised = kiln_runtime::artifact::open(&unknown).map(|_| ()).unwrap_err();
    let missing = dir.join("missing.pte");
    let not_found = kiln_runtime::artifact::open(&missing).map(|_| ()).unwrap_err();
    for (path, message) in [
        (&truncated, kiln_runtime::error::message_chain(&invalid)),
        (&unknown, kiln_runtime::error::message_chain(&unrecognised)),
        (&missing, kiln_runtime::error::message_chain(&not_found)),
    ] {
        let (code, _, stderr) = kiln(&["inspect", "--json", s(path)]);
        assert_eq!(code, 1, "{}", path.display());
        assert_eq!(stderr, format!("kiln: error: {message}\n"));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn verify_json_prints_the_library_verdicts() {
    let dir = scratch("library-documents", "verify");
    let mut paths = files();
    let truncated = dir.join("truncated.pte");
    std::fs::write(&truncated, &std::fs::read(&paths[0]).unwrap()[..2000]).unwrap();
    paths.extend([truncated, dir.join("missing.pte"), dir.clone()]);
    for strict in [false, true] {
        let mut args = vec!["verify", "--json"];
        if strict {
            args.push("--strict");
        }
        args.extend(paths.iter().map(|p| s(p)));
        let (_, stdout, _) = kiln(&args);
        let verdicts: Vec<_> =
            paths.iter().map(|p| kiln_runtime::artifact::verify(p, strict)).collect();
        assert_eq!(stdout, serde_json::to_string_pretty(&verdicts).unwrap() + "\n");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
