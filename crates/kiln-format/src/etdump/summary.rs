//! The summary behind `kiln inspect --json` for an ETDump: its version and, per block, its
//! name, bundled input, allocators, event counts and time span.

use serde_json::{json, Value};

use super::model::{ETDump, RunData};

/// `kiln inspect --json` for an ETDump.
pub fn summarize(dump: &ETDump) -> Value {
    json!({
        "version": dump.version,
        "run_data": dump.run_data.iter().map(block).collect::<Vec<_>>(),
    })
}

/// One block as JSON: name, bundled input, allocators, event counts, time span.
fn block(run: &RunData) -> Value {
    let counts = run.event_counts();
    let span = run.time_span();
    json!({
        "name": run.name,
        "bundled_input_index": run.bundled_input_index,
        "allocators": run.allocators,
        "events": {
            "profile": counts.profile,
            "allocation": counts.allocation,
            "debug": counts.debug,
        },
        "start_time": span.map(|(start, _)| start),
        "end_time": span.map(|(_, end)| end),
        "duration": span.map(|(start, end)| end.saturating_sub(start)),
    })
}
