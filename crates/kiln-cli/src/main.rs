//! `kiln`: read, verify, inspect, edit, link and run the artifacts of on-device ML compilers.
//!
//! Exit codes: 0 success, 1 invalid input or failed check, 2 usage error.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(kiln_cli::run(std::env::args_os()))
}
