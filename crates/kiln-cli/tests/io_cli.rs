//! Where kiln reads and writes: outputs that are not regular files, symbolic links, standard
//! input and output, folders and FIFOs given as inputs.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{kiln, s, scratch};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pte").join(name)
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    fs::symlink_metadata(path).unwrap().file_type().is_fifo()
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

#[test]
fn an_output_that_is_a_fifo_or_a_folder_is_refused_and_left_as_it_was() {
    let dir = scratch("io-cli", "special-out");
    let pte = fixture("tiny_cnn.pte");
    let fifo = dir.join("out.pte");
    mkfifo(&fifo);
    let (code, stdout, stderr) = kiln(&["pte", "rewrite", s(&pte), "-o", s(&fifo)]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("is a FIFO, not a regular file"), "{stderr}");
    assert!(is_fifo(&fifo), "the FIFO was replaced");
    // A link to the FIFO is refused the same way.
    std::os::unix::fs::symlink("out.pte", dir.join("link.pte")).unwrap();
    let (code, _, stderr) = kiln(&["pte", "rewrite", s(&pte), "-o", s(&dir.join("link.pte"))]);
    assert_eq!(code, 1, "{stderr}");
    assert!(is_fifo(&fifo));
    let folder = dir.join("folder");
    fs::create_dir(&folder).unwrap();
    let (code, _, stderr) = kiln(&["pte", "rewrite", s(&pte), "-o", s(&folder)]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("is a directory"), "{stderr}");
    assert!(folder.is_dir() && listing(&folder).is_empty());
    assert_eq!(listing(&dir), ["folder", "link.pte", "out.pte"], "a temporary file was left");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_output_that_is_a_symbolic_link_is_written_through() {
    let dir = scratch("io-cli", "link-out");
    let pte = fixture("tiny_cnn.pte");
    let direct = dir.join("direct.pte");
    assert_eq!(kiln(&["pte", "rewrite", s(&pte), "-o", s(&direct)]).0, 0);
    fs::create_dir(dir.join("real")).unwrap();
    let target = dir.join("real/model.pte");
    fs::write(&target, b"old contents").unwrap();
    let link = dir.join("model.pte");
    std::os::unix::fs::symlink("real/model.pte", &link).unwrap();
    let (code, _, stderr) = kiln(&["pte", "rewrite", s(&pte), "-o", s(&link)]);
    assert_eq!(code, 0, "{stderr}");
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced");
    assert_eq!(fs::read(&target).unwrap(), fs::read(&direct).unwrap());
    assert_eq!(listing(&dir.join("real")), ["model.pte"], "a temporary file was left");
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn standard_output_closed_early_is_quiet_and_a_full_device_is_an_error() {
    let pte = fixture("mobilenet_v2_portable.pte");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["dump", s(&pte)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // Standard output redirected to /dev/full (never given as `-o`).
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["dump", s(&pte)])
        .stdout(fs::OpenOptions::new().write(true).open("/dev/full").unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("writing to standard output") || stderr.contains("No space"),
        "{stderr}"
    );
}

/// Runs `kiln ARGS...` with `stdin` as its standard input.
fn kiln_with_stdin(args: &[&str], stdin: Stdio) -> (i32, String, String) {
    let out =
        Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).stdin(stdin).output().expect("run");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn dash_fifos_and_pipes_are_read_as_streams() {
    let pte = fixture("tiny_cnn.pte");
    let (code, want, stderr) = kiln(&["inspect", "--json", s(&pte)]);
    assert_eq!(code, 0, "{stderr}");
    // `-` with a file on standard input.
    let (code, got, stderr) =
        kiln_with_stdin(&["inspect", "--json", "-"], Stdio::from(fs::File::open(&pte).unwrap()));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(got, want);
    // `-` with a pipe on standard input.
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["inspect", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bytes = fs::read(&pte).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || stdin.write_all(&bytes));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    // A FIFO named on the command line.
    let dir = scratch("io-cli", "fifo-in");
    let fifo = dir.join("model.pte");
    mkfifo(&fifo);
    let feeder = {
        let (fifo, pte) = (fifo.clone(), pte.clone());
        std::thread::spawn(move || fs::write(fifo, fs::read(pte).unwrap()))
    };
    let (code, got, stderr) = kiln(&["inspect", "--json", s(&fifo)]);
    feeder.join().unwrap().unwrap();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(got, want);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_folder_given_as_input_is_named_as_one() {
    let dir = scratch("io-cli", "dir-in");
    for args in [&["inspect", s(&dir)][..], &["verify", s(&dir)], &["run", s(&dir)]] {
        let (code, _, stderr) = kiln(args);
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert!(stderr.contains("is a directory"), "{args:?}: {stderr}");
        assert!(!stderr.contains("No such device"), "{args:?}: {stderr}");
    }
    fs::remove_dir_all(&dir).unwrap();
}
