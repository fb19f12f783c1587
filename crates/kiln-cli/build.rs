//! Records the commit and the build profile for `kiln --version`. A tree without git (a source
//! tarball) or without a repository builds all the same, with the commit "unknown".

use std::path::PathBuf;
use std::process::Command;

/// `git ARGS...` in this package's folder: its trimmed output, or `None` when git is missing,
/// fails, or prints nothing.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git").args(args).current_dir(dir).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

/// Whether git's work tree here is this workspace's own (and not, say, a repository that a
/// source tarball was unpacked inside).
fn in_own_repository() -> bool {
    let workspace = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(|d| PathBuf::from(d).join("../.."))
        .and_then(|d| d.canonicalize().ok());
    let top =
        git(&["rev-parse", "--show-toplevel"]).and_then(|t| PathBuf::from(t).canonicalize().ok());
    workspace.is_some() && workspace == top
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GIT_DIR");
    let commit = in_own_repository().then(|| git(&["rev-parse", "--short=12", "HEAD"])).flatten();
    if commit.is_some() {
        // Build again when HEAD moves: HEAD itself, the branch it points at, packed refs.
        let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
        watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
        for name in watched {
            let path = git(&["rev-parse", "--path-format=absolute", "--git-path", &name]);
            if let Some(path) = path.filter(|p| PathBuf::from(p).exists()) {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    println!("cargo:rustc-env=KILN_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    let profile = std::env::var("PROFILE").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=KILN_PROFILE={profile}");
}
