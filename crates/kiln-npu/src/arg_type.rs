//! [`OpArgType`]: the five kinds of buffer an NPU operator's arguments live in.

/// What kind of buffer an arg is. The discriminant is also the fused kernel's argument slot
/// that fusion rewrites DDR_PATCH ops to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpArgType {
    /// A tensor input of the node.
    Input = 0,
    /// A tensor output of the node.
    Output = 1,
    /// Working memory of the operator, shared by all operators of a fused chain.
    ScratchPad = 2,
    /// Constant data (weights, LUTs) that `initialize_const_params` writes.
    ConstInput = 3,
    /// Runtime ("super-kernel") parameters for the AIE cores.
    ConstKernelParamInput = 4,
}

impl OpArgType {
    /// The fused kernel's argument slot for this type (input 0, output 1, scratch 2, const 3,
    /// super-kernel params 4).
    pub fn fused_slot(self) -> u64 {
        self as u64
    }
}
