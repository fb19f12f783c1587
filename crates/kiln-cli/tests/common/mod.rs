//! Shared by the CLI tests: running the `kiln` binary.

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
