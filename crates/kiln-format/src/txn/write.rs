//! Encoding a [`Txn`] back to bytes, from its fields only.

use super::model::{
    opcode, CustomPayload, DdrPatch, HeaderBytes, Layout, OpKind, Txn, FORMAT, HEADER_SIZE,
};
use crate::error::{Error, Result};

/// Encodes `txn`; `num_ops` and `txn_size` come from the ops.
pub(super) fn encode(txn: &Txn) -> Result<Vec<u8>> {
    let layout = txn.layout()?;
    let mut out = Vec::new();
    let h = &txn.header;
    out.extend_from_slice(&[h.major, h.minor, h.dev_gen, h.num_rows, h.num_cols]);
    out.push(h.num_mem_tile_rows);
    out.extend_from_slice(&h.padding.to_le_bytes());
    let num_ops = u32::try_from(txn.ops.len())
        .map_err(|_| Error::invalid(FORMAT, "ops", None, "more than 2^32 - 1 ops"))?;
    out.extend_from_slice(&num_ops.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // txn_size, filled below
    for (i, op) in txn.ops.iter().enumerate() {
        encode_op(&op.kind, layout, &mut out)
            .map_err(|reason| Error::invalid(FORMAT, format!("ops[{i}]"), None, reason))?;
    }
    let size = u32::try_from(out.len())
        .map_err(|_| Error::invalid(FORMAT, "header.txn_size", None, "over 4 GiB"))?;
    out[12..16].copy_from_slice(&size.to_le_bytes());
    debug_assert!(out.len() as u64 >= HEADER_SIZE);
    Ok(out)
}

/// The encoded size of one op.
pub(super) fn op_size(kind: &OpKind, layout: Layout) -> Result<u64> {
    let mut buf = Vec::new();
    encode_op(kind, layout, &mut buf).map_err(|r| Error::invalid(FORMAT, "op", None, r))?;
    Ok(buf.len() as u64)
}

fn u32le(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn u64le(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Writes the 3 header bytes of a packed op; the other 4 must be zero.
fn hdr3(out: &mut Vec<u8>, hdr: &HeaderBytes) -> Result<(), String> {
    if hdr[3..] != [0; 4] {
        return Err(format!("header bytes {:?} do not fit the 3 bytes this op has", hdr));
    }
    out.extend_from_slice(&hdr[..3]);
    Ok(())
}

fn reg32(reg_off: u64) -> Result<u32, String> {
    u32::try_from(reg_off)
        .map_err(|_| format!("register 0x{reg_off:x} does not fit the 32-bit v1.0 field"))
}

fn encode_op(kind: &OpKind, layout: Layout, out: &mut Vec<u8>) -> Result<(), String> {
    check_opcode(kind)?;
    out.push(kind.opcode());
    match (kind, layout) {
        (OpKind::Write { hdr, reg_off, value }, Layout::V0_1) => {
            out.extend_from_slice(hdr);
            u64le(out, *reg_off);
            u32le(out, *value);
            u32le(out, 24);
        }
        (OpKind::Write { hdr, reg_off, value }, Layout::V1_0) => {
            hdr3(out, hdr)?;
            u32le(out, reg32(*reg_off)?);
            u32le(out, *value);
        }
        (OpKind::BlockWrite { hdr, reg_off, data }, _) => {
            let fixed = match layout {
                Layout::V0_1 => {
                    out.extend_from_slice(hdr);
                    16u64
                }
                Layout::V1_0 => {
                    hdr3(out, hdr)?;
                    12
                }
            };
            let size = (data.len() as u64)
                .checked_mul(4)
                .and_then(|n| n.checked_add(fixed))
                .and_then(|n| u32::try_from(n).ok())
                .ok_or("BLOCKWRITE over 4 GiB")?;
            u32le(out, *reg_off);
            u32le(out, size);
            for w in data {
                u32le(out, *w);
            }
        }
        (OpKind::Masked { hdr, reg_off, value, mask, tail, .. }, Layout::V0_1) => {
            out.extend_from_slice(hdr);
            u64le(out, *reg_off);
            u32le(out, *value);
            u32le(out, *mask);
            u32le(out, 32);
            u32le(out, *tail);
        }
        (OpKind::Masked { hdr, reg_off, value, mask, tail, .. }, Layout::V1_0) => {
            if *tail != 0 {
                return Err("v1.0 masked ops have no trailing padding".into());
            }
            hdr3(out, hdr)?;
            u32le(out, reg32(*reg_off)?);
            u32le(out, *value);
            u32le(out, *mask);
        }
        (OpKind::Noop { pad } | OpKind::UpdateScratch { pad }, _) => out.extend_from_slice(pad),
        (OpKind::Preempt { level, reserved }, _) => {
            out.push(*level);
            out.extend_from_slice(&reserved.to_le_bytes());
        }
        (OpKind::LoadPdi { padding, pdi_id, pdi_size, pdi_address }, _) => {
            out.push(*padding);
            out.extend_from_slice(&pdi_id.to_le_bytes());
            u32le(out, *pdi_size);
            u64le(out, *pdi_address);
        }
        (OpKind::LoadPmStart { load_sequence_count, pm_load_id }, _) => {
            out.extend_from_slice(load_sequence_count);
            u32le(out, *pm_load_id);
        }
        (OpKind::CreateScratchpad { usage_type, pad, size, scratch_offset }, _) => {
            out.push(*usage_type);
            out.extend_from_slice(&pad.to_le_bytes());
            u32le(out, *size);
            u64le(out, *scratch_offset);
        }
        (
            OpKind::StateTable { opcode: code, state_table_idx, func, reserved, func_arg, reg_off },
            _,
        ) => {
            out.extend_from_slice(&[*state_table_idx, *func, *reserved]);
            u32le(out, *func_arg);
            match (*code, reg_off) {
                (opcode::UPDATE_REG, Some(reg)) => u32le(out, *reg),
                (opcode::UPDATE_STATE_TABLE, None) => {}
                _ => return Err("UPDATE_REG needs reg_off and UPDATE_STATE_TABLE has none".into()),
            }
        }
        (OpKind::Custom { opcode: code, hdr, payload }, _) => {
            if *code < opcode::CUSTOM_FIRST {
                return Err(format!("custom op with opcode {code} below 128"));
            }
            hdr3(out, hdr)?;
            let size_at = out.len();
            u32le(out, 0);
            let start = out.len();
            encode_custom(payload, layout, out)?;
            let size = u32::try_from(out.len() - start + 8).map_err(|_| "custom op over 4 GiB")?;
            out[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
        }
    }
    Ok(())
}

/// Rejects ops whose opcode does not match their variant (possible only for ops built in
/// memory), so that what is written reads back as the same op.
fn check_opcode(kind: &OpKind) -> Result<(), String> {
    let ok = match kind {
        OpKind::Masked { opcode: code, .. } => {
            matches!(*code, opcode::MASKWRITE | opcode::MASKPOLL | opcode::MASKPOLL_BUSY)
        }
        OpKind::Custom { opcode: code, payload, .. } => match payload {
            CustomPayload::Tct { .. } => *code == opcode::TCT,
            CustomPayload::DdrPatch(_) => *code == opcode::DDR_PATCH,
            CustomPayload::ReadRegs { .. } => *code == opcode::READ_REGS,
            CustomPayload::RecordTimer { .. } => *code == opcode::RECORD_TIMER,
            CustomPayload::MergeSync { .. } => *code == opcode::MERGE_SYNC,
            CustomPayload::Launch(_) => *code == opcode::KILN_LAUNCH,
            // A raw 133 with kiln's magic would read back as a launch.
            CustomPayload::Raw(bytes) => {
                *code > opcode::MERGE_SYNC
                    && !(*code == opcode::KILN_LAUNCH && bytes.starts_with(&super::launch::MAGIC))
            }
        },
        _ => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("opcode {} does not match the op's fields", kind.opcode()))
    }
}

fn encode_custom(payload: &CustomPayload, layout: Layout, out: &mut Vec<u8>) -> Result<(), String> {
    match payload {
        CustomPayload::Tct { word, config } => {
            u32le(out, *word);
            u32le(out, *config);
        }
        CustomPayload::DdrPatch(DdrPatch::Full {
            op_type,
            op_size,
            action,
            pad,
            regaddr,
            argidx,
            argplus,
        }) => {
            for w in [op_type, op_size, action, pad] {
                u32le(out, *w);
            }
            for w in [regaddr, argidx, argplus] {
                u64le(out, *w);
            }
        }
        CustomPayload::DdrPatch(DdrPatch::Packed { regaddr, argidx, pad, argplus }) => {
            if layout != Layout::V1_0 {
                return Err("the packed DDR_PATCH payload exists only in v1.0".into());
            }
            u32le(out, *regaddr);
            out.push(*argidx);
            out.extend_from_slice(pad);
            u64le(out, *argplus);
        }
        CustomPayload::ReadRegs { pad, addresses } => {
            u32le(out, u32::try_from(addresses.len()).map_err(|_| "too many READ_REGS")?);
            u32le(out, *pad);
            for a in addresses {
                u64le(out, *a);
            }
        }
        CustomPayload::RecordTimer { id } => u32le(out, *id),
        CustomPayload::MergeSync { bytes } => out.extend_from_slice(bytes),
        CustomPayload::Launch(launch) => launch.encode(out)?,
        CustomPayload::Raw(bytes) => out.extend_from_slice(bytes),
    }
    Ok(())
}
