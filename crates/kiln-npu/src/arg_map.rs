//! `OpArgMap`: one buffer an operator needs, as DynamicDispatch's operator interface states it.

use crate::arg_type::OpArgType;
use crate::error::{Error, Result};

/// The alignment, in bytes, of every buffer packed into a fused buffer (DD's
/// `TENSOR_PACK_ALIGNMENT`), and of every arg's offset inside its kernel argument.
pub const ARG_ALIGN: u64 = 4;

/// One buffer requirement of an operator (DD's `OpArgMap`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpArgMap {
    /// What kind of buffer.
    pub arg_type: OpArgType,
    /// The kernel data argument it lives in: position among the XRT kernel's buffer arguments
    /// (after opcode, instruction buffer and its size), and the `argidx` of the operator's own
    /// DDR_PATCH ops. Several args may share one (elementwise add's two inputs share 1).
    pub xrt_arg_idx: usize,
    /// For inputs and outputs, the ONNX argument: an index into the node's inputs, then
    /// constant inputs, then outputs. Informational for the other types.
    pub onnx_arg_idx: usize,
    /// Byte offset of the buffer inside kernel argument `xrt_arg_idx`.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

impl OpArgMap {
    /// The end of the buffer in its kernel argument, or `None` on overflow.
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.size)
    }
}

/// The arg a DDR_PATCH of `argidx` + `argplus` falls in, with its index, looked up as DD does:
/// among the args of kernel argument `argidx`, the one with the largest offset not above
/// `argplus`. This is the xrt-to-onnx mapping: the arg carries the ONNX index.
pub fn arg_for_patch(maps: &[OpArgMap], argidx: u64, argplus: u64) -> Option<(usize, &OpArgMap)> {
    maps.iter()
        .enumerate()
        .filter(|(_, m)| m.xrt_arg_idx as u64 == argidx && m.offset <= argplus)
        .max_by_key(|(_, m)| m.offset)
}

/// Checks one operator's arg map: offsets aligned, no two args overlapping in one kernel
/// argument, at most one super-kernel param arg, and every input and output naming one of the
/// node's `inputs` or `outputs` (ONNX indices `inputs + consts ..`).
pub(crate) fn validate(
    op: &str,
    maps: &[OpArgMap],
    inputs: usize,
    consts: usize,
    outputs: usize,
) -> Result<()> {
    let mut super_arg = None;
    for (i, m) in maps.iter().enumerate() {
        if m.offset % ARG_ALIGN != 0 {
            return Err(Error::MisalignedArg {
                op: op.into(),
                arg: i,
                xrt_arg_idx: m.xrt_arg_idx,
                offset: m.offset,
            });
        }
        let end = m.end().ok_or_else(|| Error::SizeOverflow { op: op.into() })?;
        let onnx_ok = match m.arg_type {
            OpArgType::Input => m.onnx_arg_idx < inputs,
            OpArgType::Output => {
                (inputs + consts..inputs + consts + outputs).contains(&m.onnx_arg_idx)
            }
            _ => true,
        };
        if !onnx_ok {
            return Err(Error::OnnxArgOutOfRange {
                op: op.into(),
                arg: i,
                arg_type: m.arg_type,
                onnx_arg_idx: m.onnx_arg_idx,
            });
        }
        if m.arg_type == OpArgType::ConstKernelParamInput {
            if let Some(first) = super_arg {
                return Err(Error::DuplicateSuperParams { op: op.into(), first, second: i });
            }
            super_arg = Some(i);
        }
        let overlap = maps[..i].iter().position(|o| {
            o.xrt_arg_idx == m.xrt_arg_idx
                && o.offset < end
                && m.offset < o.end().unwrap_or(u64::MAX)
        });
        if let Some(first) = overlap {
            return Err(Error::OverlappingArgs {
                op: op.into(),
                first,
                second: i,
                xrt_arg_idx: m.xrt_arg_idx,
            });
        }
    }
    Ok(())
}
