//! The text form of `kiln inspect` and the `kiln dump` arm for ExecuTorch ETDumps (`.etdp`,
//! what ExecuTorch's runtime writes with profiling on, read by its devtools `Inspector`).

use std::process::ExitCode;

use anyhow::{Context, Result};
use kiln_format::etdump::{self, ETDump};

use crate::input::Input;
use crate::output::print_json;

fn parse(input: &Input) -> Result<ETDump> {
    ETDump::parse(input.bytes()).with_context(|| input.file.path().display().to_string())
}

/// `kiln inspect` arm, as text: the version and, per block, its event counts and time span.
pub fn print(input: &Input) -> Result<ExitCode> {
    let dump = parse(input)?;
    outln!("etdump version {}, {} blocks", dump.version, dump.run_data.len());
    for (i, run) in dump.run_data.iter().enumerate() {
        let c = run.event_counts();
        let mut line = format!(
            "  [{i}] {:?}: {} profile, {} allocation, {} debug events",
            run.name, c.profile, c.allocation, c.debug
        );
        if let Some((start, end)) = run.time_span() {
            line += &format!(", {} ticks from {start} to {end}", end.saturating_sub(start));
        }
        if run.bundled_input_index != etdump::UNSET {
            line += &format!(", bundled input {}", run.bundled_input_index);
        }
        if !run.allocators.is_empty() {
            line += &format!(", allocators {}", run.allocators.join(", "));
        }
        outln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `kiln dump` arm: every block and event, as ExecuTorch's Python deserializer gives them.
pub fn dump(input: &Input) -> Result<ExitCode> {
    print_json(&etdump::to_json(&parse(input)?))?;
    Ok(ExitCode::SUCCESS)
}
