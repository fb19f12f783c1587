//! The steps a loaded method runs: each instruction of the program resolved at load (a
//! kernel or delegate call with its arguments' roles, a move, a jump, a free), or a call of a
//! prepared kernel the compile stage made.

use std::sync::Arc;

use kiln_kernels::{KernelDef, OutKind};

/// How a call uses one of its argument positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Read.
    In,
    /// Written, of this kind.
    Out(OutKind),
    /// The trailing return value (or an out of a list the kernel writes through another slot).
    Ret,
}

/// What a call step invokes.
pub(crate) enum Callee {
    Kernel(&'static KernelDef),
    Delegate(usize),
    /// A prepared kernel of the compile stage, by index among the compiled method's
    /// prepared kernels.
    Prepared(usize),
}

/// A kernel or delegate call, resolved at load.
pub(crate) struct Call {
    pub callee: Callee,
    /// Operator name or backend id, for errors.
    pub name: Arc<str>,
    /// The original instruction (the first of those a fused step stands for), for errors.
    pub instruction: u32,
    /// Value index per argument position.
    pub args: Box<[u32]>,
    /// Role per argument position.
    pub roles: Box<[Role]>,
    /// Written positions in the order the callee receives them.
    pub outs: Box<[(u32, OutKind)]>,
}

/// One instruction, resolved.
pub(crate) enum Step {
    Call(Call),
    Move { from: u32, to: u32 },
    JumpFalse { cond: u32, destination: usize },
    Free { value: u32 },
}

/// The name a step is shown by: the operator, `delegate:<id>`, the compiled kernel, or the
/// instruction kind.
pub(crate) fn step_kind(step: &Step) -> String {
    match step {
        Step::Call(call) => match call.callee {
            Callee::Kernel(_) | Callee::Prepared(_) => call.name.to_string(),
            Callee::Delegate(_) => format!("delegate:{}", call.name),
        },
        Step::Move { .. } => "MoveCall".into(),
        Step::JumpFalse { .. } => "JumpFalseCall".into(),
        Step::Free { .. } => "FreeCall".into(),
    }
}
