//! Shared by the CLI tests: running the `kiln` binary, scratch folders.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs `kiln ARGS...`: its exit code (-1 for a signal), stdout and stderr.
pub fn kiln(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().expect("run kiln");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A path as `&str` (test paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A fresh, empty folder for test `test` of test file `file`.
pub fn scratch(file: &str, test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-{file}-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
