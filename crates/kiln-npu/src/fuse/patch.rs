//! Rewriting an operator's DDR_PATCH ops from its own kernel arguments to the fused buffers,
//! as DD's `txn_util::patch` does. A patch of `argidx` + `argplus` falls in arg `a` of the
//! operator's map ([`arg_for_patch`]), `rel = argplus - a.offset` bytes in; it becomes:
//!
//! | arg type | fused argument | new `argplus` |
//! | --- | --- | --- |
//! | input, output | the tensor's buffer (0, 1 or 2) | tensor offset + `rel` |
//! | scratch pad | 2 | shared scratch pad region + `argplus` |
//! | const input | 3 | the arg's const offset + `rel` |
//! | super-kernel params | 4 | the node's super-kernel offset + `rel` |
//!
//! Every other op is left as it is.

use kiln_format::txn::{opcode, CustomPayload, OpKind};

use super::node::Node;
use super::plan::Plan;
use crate::arg_map::{arg_for_patch, OpArgMap};
use crate::arg_type::OpArgType;
use crate::error::{Error, Result};

/// Rewrites the DDR_PATCH ops among `ops`, the transaction of node `index` of the chain,
/// whose arg map is `maps`.
pub(super) fn rewrite(
    ops: &mut [OpKind],
    node: &Node<'_>,
    index: usize,
    maps: &[OpArgMap],
    plan: &Plan,
) -> Result<()> {
    for (txn_op, kind) in ops.iter_mut().enumerate() {
        let OpKind::Custom {
            opcode: opcode::DDR_PATCH, payload: CustomPayload::DdrPatch(p), ..
        } = kind
        else {
            continue;
        };
        let (argidx, argplus) = (p.argidx(), p.argplus());
        let unknown = || Error::UnknownPatchArg { op: node.name.clone(), txn_op, argidx, argplus };
        let (arg_index, arg) = arg_for_patch(maps, argidx, argplus).ok_or_else(unknown)?;
        let rel = argplus - arg.offset;
        if rel >= arg.size {
            return Err(Error::PatchOutsideArg {
                op: node.name.clone(),
                txn_op,
                argidx,
                argplus,
                arg: arg_index,
                end: arg.offset + arg.size,
            });
        }
        let (slot, base) = plan.arg_slots[index][arg_index];
        // A scratch pad region holds the operator's whole scratch argument, so the offset in
        // it is `argplus` itself.
        let rel = if arg.arg_type == OpArgType::ScratchPad { argplus } else { rel };
        let overflow = || Error::SizeOverflow { op: node.name.clone() };
        let new_argplus = base.checked_add(rel).ok_or_else(overflow)?;
        p.set_arg(slot, new_argplus)
            .map_err(|source| Error::Txn { op: node.name.clone(), source })?;
    }
    Ok(())
}
