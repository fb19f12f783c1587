//! The compiled steps with their profiled time, and each original instruction's share of it.

use std::collections::HashMap;

use kiln_runtime::{CompiledNode, InstructionTime};
use serde::Serialize;

use super::program::Op;

/// One step of the compiled method.
#[derive(Debug, Serialize)]
pub struct Step {
    /// Chain index.
    pub chain: usize,
    /// What it runs: an operator, a compiled kernel, `delegate:<id>`, an instruction kind.
    pub kind: String,
    /// The original instruction indices it stands for.
    pub origins: Vec<u32>,
    /// Their operators.
    pub operators: Vec<String>,
    /// Inside an XNNPACK delegate: the debug handles of the delegate graph's nodes it computes.
    pub debug_handles: Vec<u32>,
    /// The report's operators it stands for (indices in its operator table).
    pub ops: Vec<usize>,
    /// A convolution's layouts, a mean's or a pooling's layout.
    pub layout: Option<String>,
    /// How a compiled kernel with a choice computes.
    pub algorithm: Option<String>,
    /// Runs over the profiled executes.
    pub calls: u64,
    /// Milliseconds per execute.
    pub ms: f64,
    /// Share of all steps' time, in percent.
    pub share: f64,
}

/// Milliseconds per execute of each delegate graph node, by debug handle: a step's time split
/// evenly over the nodes it computes.
pub fn per_debug_handle(steps: &[Step]) -> HashMap<u32, f64> {
    let mut ms = HashMap::new();
    for s in steps.iter().filter(|s| !s.debug_handles.is_empty()) {
        for &h in &s.debug_handles {
            *ms.entry(h).or_default() += s.ms / s.debug_handles.len() as f64;
        }
    }
    ms
}

/// Joins the compiled steps with the profile of `iters` executes (entries for the steps that
/// ran, in step order) and gives each of `ops` its share: a step's time split evenly over the
/// instructions it stands for.
pub fn steps(
    compiled: &[CompiledNode],
    profile: &[InstructionTime],
    iters: usize,
    ops: &mut [Op],
) -> Vec<Step> {
    let mut timed = profile.iter().peekable();
    let mut steps: Vec<Step> = compiled
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let time = timed.next_if(|t| t.step == i);
            let op_of = |&o: &u32| {
                ops.iter().position(|op| op.chain == node.chain && op.instruction == o as usize)
            };
            Step {
                chain: node.chain,
                kind: node.kind.clone(),
                origins: node.origins.clone(),
                operators: node.operators.clone(),
                debug_handles: node.debug_handles.clone(),
                ops: node.origins.iter().filter_map(op_of).collect(),
                layout: node.layout.clone(),
                algorithm: node.algorithm.clone(),
                calls: time.map_or(0, |t| t.count),
                ms: time.map_or(0.0, |t| t.total.as_secs_f64() * 1e3 / iters.max(1) as f64),
                share: 0.0,
            }
        })
        .collect();
    let total: f64 = steps.iter().map(|s| s.ms).sum();
    let share = |ms: f64| if total > 0.0 { ms / total * 100.0 } else { 0.0 };
    for (i, step) in steps.iter_mut().enumerate() {
        step.share = share(step.ms);
        for &o in &step.ops {
            ops[o].ms += step.ms / step.ops.len() as f64;
            ops[o].ran |= step.calls > 0;
            ops[o].steps.push(i);
        }
    }
    for op in ops.iter_mut() {
        op.share = share(op.ms);
    }
    steps
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn op(instruction: usize, name: &str) -> Op {
        Op {
            chain: 0,
            instruction,
            name: name.into(),
            reads: vec![],
            constants: vec![],
            writes: vec![],
            ms: 0.0,
            share: 0.0,
            ran: false,
            steps: vec![],
        }
    }

    fn node(kind: &str, origins: Vec<u32>) -> CompiledNode {
        CompiledNode {
            chain: 0,
            kind: kind.into(),
            operators: vec![],
            origins,
            debug_handles: vec![],
            delegate_ops: vec![],
            layout: None,
            algorithm: None,
        }
    }

    #[test]
    fn a_fused_step_is_split_over_its_instructions() {
        let mut ops = vec![op(0, "aten::convolution.out"), op(1, "aten::relu.out"), op(2, "x")];
        let compiled = [node("conv2d[relu]", vec![0, 1]), node("x", vec![2])];
        // The second step never ran: the profile has no entry for it.
        let profile = [InstructionTime {
            step: 0,
            chain: 0,
            instruction: 0,
            op: "conv2d[relu]".into(),
            origins: vec![0, 1],
            operators: vec![],
            count: 4,
            total: Duration::from_millis(8),
        }];
        let steps = steps(&compiled, &profile, 4, &mut ops);
        assert_eq!(steps[0].ops, [0, 1]);
        assert!((steps[0].ms - 2.0).abs() < 1e-9 && steps[0].calls == 4);
        assert!((steps[0].share - 100.0).abs() < 1e-9);
        assert_eq!((steps[1].calls, steps[1].ms), (0, 0.0));
        assert!((ops[0].ms - 1.0).abs() < 1e-9 && (ops[1].share - 50.0).abs() < 1e-9);
        assert_eq!((ops[1].steps.as_slice(), ops[2].ms), (&[0][..], 0.0));
        assert!(ops[1].ran && !ops[2].ran);
    }

    #[test]
    fn delegate_nodes_share_the_time_of_the_steps_computing_them() {
        let mut ops = vec![op(0, "delegate:XnnpackBackend")];
        let mut compiled = [node("conv2d", vec![0]), node("linear", vec![0])];
        compiled[0].debug_handles = vec![3, 4];
        compiled[1].debug_handles = vec![4];
        let time = |step, ms| InstructionTime {
            step,
            chain: 0,
            instruction: 0,
            op: String::new(),
            origins: vec![0],
            operators: vec![],
            count: 1,
            total: Duration::from_millis(ms),
        };
        let steps = steps(&compiled, &[time(0, 2), time(1, 1)], 1, &mut ops);
        let ms = per_debug_handle(&steps);
        assert_eq!(ms.len(), 2);
        assert!((ms[&3] - 1.0).abs() < 1e-9 && (ms[&4] - 2.0).abs() < 1e-9, "{ms:?}");
        assert!((ops[0].ms - 3.0).abs() < 1e-9);
    }
}
