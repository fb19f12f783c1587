//! How `kiln profile` names and picks the steps of a compiled method: the operators a step
//! stands for, and the steps that are kernels.

use kiln_runtime::{CompiledNode, StepEvent, Timeline};

/// The operator name a compiled step is shown by (see `KernelTime::operator`).
pub(crate) fn operator_of(node: &CompiledNode) -> String {
    let mut names: Vec<&str> = Vec::new();
    for o in &node.operators {
        if names.last() != Some(&o.as_str()) {
            names.push(o);
        }
    }
    let mut name = names.join(" + ");
    if !node.delegate_ops.is_empty() {
        name.push('[');
        name.push_str(&node.delegate_ops.join(", "));
        name.push(']');
    }
    if name.is_empty() {
        name = node.kind.clone();
    }
    name
}

/// Whether a step is a kernel (a kernel call, a compiled kernel or a delegate call), not a
/// move, a jump or a free.
pub(crate) fn is_kernel(node: &CompiledNode) -> bool {
    !matches!(node.kind.as_str(), "MoveCall" | "JumpFalseCall" | "FreeCall")
}

/// The steps of a timeline that are kernels, with their compiled nodes.
pub(crate) fn kernel_events<'a>(
    timeline: &'a Timeline,
    compiled: &'a [CompiledNode],
) -> impl Iterator<Item = (&'a StepEvent, &'a CompiledNode)> {
    timeline
        .events
        .iter()
        .filter_map(|e| compiled.get(e.step).filter(|n| is_kernel(n)).map(|n| (e, n)))
}
