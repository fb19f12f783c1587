//! Resolving DDR_PATCH ops ahead of time: given the DDR address of each kernel argument, write
//! `address + argplus` into the register word that each patch targets.
//!
//! A DDR_PATCH op tells the firmware "write the address of kernel argument `argidx`, plus
//! `argplus`, to register `regaddr`"; the register is normally word 1 (the address) of a DMA
//! buffer descriptor that an earlier BLOCKWRITE (or WRITE) set. Resolving a patch rewrites that
//! earlier word in the transaction, so the transaction carries the final address. The DDR_PATCH
//! ops themselves stay, so that no other byte moves: after resolving, exactly the patched words
//! differ. The address given is the one the firmware sees (for DynamicDispatch, the buffer
//! object's address plus `DDR_AIE_ADDR_OFFSET` 0x80000000); the sum must fit the 32-bit word.

use std::collections::{BTreeMap, BTreeSet};

use super::{opcode, CustomPayload, OpKind, Txn, FORMAT};
use crate::error::{Error, Result};

/// What [`resolve_patches`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchOutcome {
    /// Every word written: one per resolved DDR_PATCH op.
    pub patched: Vec<PatchedWord>,
    /// Indices of DDR_PATCH ops whose argument had no address given, with that argument.
    pub unresolved: Vec<(usize, u64)>,
    /// Arguments given that no DDR_PATCH op uses.
    pub unused_args: Vec<u64>,
}

/// One resolved patch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchedWord {
    /// Index of the DDR_PATCH op.
    pub patch_op: usize,
    /// Index of the WRITE or BLOCKWRITE op whose word was rewritten.
    pub target_op: usize,
    /// Register address patched.
    pub regaddr: u64,
    /// Kernel argument index.
    pub argidx: u64,
    /// Value before.
    pub old: u32,
    /// Value written (`address + argplus`).
    pub new: u32,
}

/// Resolves every DDR_PATCH op whose `argidx` has an address in `args` (argument index →
/// address); see the module docs.
pub fn resolve_patches(txn: &mut Txn, args: &BTreeMap<u64, u64>) -> Result<PatchOutcome> {
    let mut outcome = PatchOutcome::default();
    let mut used = BTreeSet::new();
    let mut writes = Vec::new();
    for (i, op) in txn.ops.iter().enumerate() {
        let OpKind::Custom {
            opcode: opcode::DDR_PATCH, payload: CustomPayload::DdrPatch(p), ..
        } = &op.kind
        else {
            continue;
        };
        let (argidx, regaddr) = (p.argidx(), p.regaddr());
        let Some(&address) = args.get(&argidx) else {
            outcome.unresolved.push((i, argidx));
            continue;
        };
        used.insert(argidx);
        let field = || format!("ops[{i}]");
        let value = address
            .checked_add(p.argplus())
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                Error::invalid(
                    FORMAT,
                    field(),
                    Some(op.offset),
                    format!(
                        "argument {argidx} address 0x{address:x} + argplus 0x{:x} does not fit \
                         the 32-bit register word",
                        p.argplus()
                    ),
                )
            })?;
        let target = txn.ops[..i]
            .iter()
            .enumerate()
            .rev()
            .find_map(|(j, o)| word_index(&o.kind, regaddr).map(|w| (j, w)));
        let Some((j, word)) = target else {
            return Err(Error::invalid(
                FORMAT,
                field(),
                Some(op.offset),
                format!(
                    "DDR_PATCH targets register 0x{regaddr:x}, but no earlier WRITE or \
                     BLOCKWRITE sets it"
                ),
            ));
        };
        writes.push((i, j, word, regaddr, argidx, value));
    }
    for (patch_op, target_op, word, regaddr, argidx, new) in writes {
        let slot = match txn.ops.get_mut(target_op).map(|o| &mut o.kind) {
            Some(OpKind::Write { value, .. }) => Some(value),
            Some(OpKind::BlockWrite { data, .. }) => data.get_mut(word),
            _ => None,
        };
        let Some(slot) = slot else {
            return Err(Error::invalid(
                FORMAT,
                format!("ops[{target_op}]"),
                None,
                "patch target changed while resolving",
            ));
        };
        let old = std::mem::replace(slot, new);
        outcome.patched.push(PatchedWord { patch_op, target_op, regaddr, argidx, old, new });
    }
    outcome.unused_args = args.keys().filter(|k| !used.contains(*k)).copied().collect();
    Ok(outcome)
}

/// The index of the word of `kind` that writes `regaddr` (0 for WRITE), if it writes it.
fn word_index(kind: &OpKind, regaddr: u64) -> Option<usize> {
    match kind {
        OpKind::Write { reg_off, .. } => (*reg_off == regaddr).then_some(0),
        OpKind::BlockWrite { reg_off, data, .. } => {
            let delta = regaddr.checked_sub(u64::from(*reg_off))?;
            let idx = usize::try_from(delta / 4).ok()?;
            (delta % 4 == 0 && idx < data.len()).then_some(idx)
        }
        _ => None,
    }
}
