//! `kiln profile --trace`: the timeline in the Chrome trace event format (the JSON object
//! form: `{"traceEvents": [...], "displayTimeUnit": "ns"}`), which Perfetto and
//! chrome://tracing open. One process; track 0 is the thread that runs the method, track
//! `1 + w` is worker thread `w`. Each executed kernel is a complete event (`"ph": "X"`, times
//! in microseconds) named by its operator, with its origins, step and kernel in `args`; a
//! worker's span is named after the kernel running on the calling thread when it started.

use anyhow::Result;
use kiln_runtime::{CompiledNode, Timeline};
use serde_json::{json, Value};

use super::steps::{kernel_events, operator_of};

/// Microseconds, as trace timestamps are.
fn us(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The trace of `timeline` as JSON bytes; `threads` counts the calling thread and workers.
pub(super) fn chrome_trace(
    timeline: &Timeline,
    compiled: &[CompiledNode],
    threads: usize,
) -> Result<Vec<u8>> {
    let mut events = vec![json!({
        "name": "process_name", "ph": "M", "pid": 1, "tid": 0,
        "args": { "name": "kiln" },
    })];
    for tid in 0..threads.max(1) {
        let name = if tid == 0 { "main".to_string() } else { format!("kiln-worker-{}", tid - 1) };
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": 1, "tid": tid,
            "args": { "name": name },
        }));
    }
    let kernels: Vec<_> = kernel_events(timeline, compiled).collect();
    for &(e, node) in &kernels {
        events.push(json!({
            "name": operator_of(node),
            "cat": "kernel",
            "ph": "X",
            "ts": us(e.start),
            "dur": us(e.duration),
            "pid": 1,
            "tid": 0,
            "args": args_of(e.step, node),
        }));
    }
    for w in &timeline.workers {
        let start = w.start.saturating_duration_since(timeline.epoch);
        let end = w.end.saturating_duration_since(timeline.epoch);
        // The kernel that was running on the calling thread when the worker started.
        let at = kernels.partition_point(|(e, _)| e.start <= start);
        let Some(&(e, node)) = at.checked_sub(1).and_then(|i| kernels.get(i)) else { continue };
        events.push(json!({
            "name": operator_of(node),
            "cat": "worker",
            "ph": "X",
            "ts": us(start),
            "dur": us(end - start),
            "pid": 1,
            "tid": 1 + w.worker,
            "args": args_of(e.step, node),
        }));
    }
    let trace = json!({ "traceEvents": events, "displayTimeUnit": "ns" });
    Ok(serde_json::to_vec(&trace)?)
}

/// What a kernel's events carry in `args`.
fn args_of(step: usize, node: &CompiledNode) -> Value {
    let mut args = json!({
        "origins": node.origins,
        "step": step,
        "kernel": node.kind,
        "operators": node.operators,
    });
    if !node.debug_handles.is_empty() {
        args["debug_handles"] = json!(node.debug_handles);
        args["delegate_ops"] = json!(node.delegate_ops);
    }
    args
}
