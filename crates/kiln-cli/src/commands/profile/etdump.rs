//! `kiln profile --etdump`: the timeline as an ETDump that ExecuTorch's devtools `Inspector`
//! reads, shaped as ExecuTorch's runtime writes one ([`kiln_format::etdump`] has the facts).
//! One `Execute` block per profiled execute; events in the order they end:
//! - a kernel outside a delegate: `native_call_<op>` then `OPERATOR_CALL`, both over the
//!   kernel's span, with the chain and the index of the first original instruction it stands
//!   for (what an ETRecord's debug handle map is keyed by) and that instruction's operator;
//! - a kernel inside an XNNPACK delegate: a delegate operator event with the delegate call's
//!   instruction and, as its integer delegate debug id, the debug handle of the first delegate
//!   graph node it computes (ExecuTorch's default handle only when it computes nothing else);
//! - a call into a delegate kiln does not inline: `DELEGATE_CALL`;
//! - `Method::execute` over the whole execute, last.

use std::time::{Duration, Instant};

use anyhow::Result;
use kiln_format::etdump::{
    native_call_name, DelegateDebugId, ETDump, ProfileEvent, RunData, METHOD_EXECUTE,
};
use kiln_runtime::{CompiledNode, Timeline};

use super::steps::kernel_events;

/// The debug handle ExecuTorch's XNNPACK preprocessing gives nodes that stand for no node of
/// the exported graph (`DEFAULT_DEBUG_HANDLE`, e.g. the layout transposes it inserts).
const DEFAULT_DEBUG_HANDLE: u32 = 65535;

/// Nanoseconds, as ETDump times are.
fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `aten::convolution.out` as (`aten::convolution`, `out`).
fn split_overload(operator: &str) -> (&str, &str) {
    let namespace = operator.rfind("::").map_or(0, |i| i + 2);
    match operator[namespace..].rfind('.') {
        Some(dot) => (&operator[..namespace + dot], &operator[namespace + dot + 1..]),
        None => (operator, ""),
    }
}

/// The events of one executed kernel, in the order ExecuTorch would write them.
fn kernel_events_of(node: &CompiledNode, start: u64, end: u64) -> Vec<ProfileEvent> {
    let chain = i32::try_from(node.chain).unwrap_or(i32::MAX);
    let instruction = node.origins.first().map_or(-1, |&o| i32::try_from(o).unwrap_or(i32::MAX));
    if !node.debug_handles.is_empty() {
        let handle = node
            .debug_handles
            .iter()
            .copied()
            .find(|&h| h != DEFAULT_DEBUG_HANDLE)
            .unwrap_or(DEFAULT_DEBUG_HANDLE);
        let id = DelegateDebugId::Int(i32::try_from(handle).unwrap_or(i32::MAX));
        return vec![ProfileEvent::delegate_operator(id, chain, instruction, start, end)];
    }
    match node.operators.first() {
        Some(op) if op.starts_with("delegate:") => {
            vec![ProfileEvent::delegate_call(chain, instruction, start, end)]
        }
        Some(op) => {
            let (name, overload) = split_overload(op);
            vec![
                ProfileEvent::instruction(
                    native_call_name(name, overload),
                    chain,
                    instruction,
                    start,
                    end,
                ),
                ProfileEvent::operator_call(chain, instruction, start, end),
            ]
        }
        None => Vec::new(),
    }
}

/// The ETDump of `timeline`, one block per execute in `executes` (start and end of each).
pub(super) fn etdump_of(
    timeline: &Timeline,
    compiled: &[CompiledNode],
    executes: &[(Instant, Instant)],
) -> Result<Vec<u8>> {
    let kernels: Vec<_> = kernel_events(timeline, compiled).collect();
    let mut blocks = Vec::with_capacity(executes.len());
    let mut next = 0;
    for &(start, end) in executes {
        let (start, end) = (
            start.saturating_duration_since(timeline.epoch),
            end.saturating_duration_since(timeline.epoch),
        );
        let mut events = Vec::new();
        while let Some(&(e, node)) = kernels.get(next).filter(|(e, _)| e.start < end) {
            next += 1;
            if e.start >= start {
                events.extend(kernel_events_of(node, ns(e.start), ns(e.start + e.duration)));
            }
        }
        events.push(ProfileEvent::method(METHOD_EXECUTE, ns(start), ns(end)));
        blocks.push(RunData::execute(events));
    }
    Ok(kiln_format::etdump::write(&ETDump::new(blocks))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overloads_split_after_the_namespace() {
        assert_eq!(split_overload("aten::convolution.out"), ("aten::convolution", "out"));
        assert_eq!(split_overload("aten::add.Scalar_out"), ("aten::add", "Scalar_out"));
        assert_eq!(split_overload("aten::relu"), ("aten::relu", ""));
        assert_eq!(split_overload("my.ns::op"), ("my.ns::op", ""));
    }
}
