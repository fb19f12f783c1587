//! Parsing a binary transaction into [`Txn`].

use super::model::{
    opcode, CustomPayload, DdrPatch, Header, HeaderBytes, Layout, Op, OpKind, Txn, FORMAT,
    HEADER_SIZE,
};
use crate::bytes::ByteReader;
use crate::error::{Error, Result};

/// Parses `bytes`: the header, then exactly `num_ops` ops that end exactly at `txn_size`, which
/// must be the length of `bytes`.
/// Most ops [`parse`] reserves room for before reading them.
const MAX_RESERVED_OPS: usize = 1 << 16;

pub(super) fn parse(bytes: &[u8]) -> Result<Txn> {
    let r = ByteReader::new(bytes, FORMAT);
    let header = Header {
        major: r.u8(0, "header.major")?,
        minor: r.u8(1, "header.minor")?,
        dev_gen: r.u8(2, "header.dev_gen")?,
        num_rows: r.u8(3, "header.num_rows")?,
        num_cols: r.u8(4, "header.num_cols")?,
        num_mem_tile_rows: r.u8(5, "header.num_mem_tile_rows")?,
        padding: r.u16(6, "header.padding")?,
        num_ops: r.u32(8, "header.num_ops")?,
        txn_size: r.u32(12, "header.txn_size")?,
    };
    let layout = header.layout()?;
    let len = bytes.len() as u64;
    if u64::from(header.txn_size) != len {
        return Err(Error::invalid(
            FORMAT,
            "header.txn_size",
            Some(12),
            format!("is {} but the data is {len} bytes", header.txn_size),
        ));
    }
    // The smallest op is 4 bytes, so the file bounds the number of ops.
    let max_ops = (len - HEADER_SIZE) / 4;
    if u64::from(header.num_ops) > max_ops {
        return Err(Error::invalid(
            FORMAT,
            "header.num_ops",
            Some(8),
            format!("{} ops cannot fit in {} bytes of ops", header.num_ops, len - HEADER_SIZE),
        ));
    }
    // Reserved up front only up to a bound: an op takes more memory than its 4 smallest
    // bytes, so a count the file merely permits must not size the allocation.
    let mut ops = Vec::with_capacity((header.num_ops as usize).min(MAX_RESERVED_OPS));
    let mut offset = HEADER_SIZE;
    for i in 0..header.num_ops {
        if offset == len {
            return Err(Error::invalid(
                FORMAT,
                "header.num_ops",
                Some(8),
                format!("is {} but the data ends after {i} ops", header.num_ops),
            ));
        }
        let (kind, size) = parse_op(&r, offset, layout, i)?;
        ops.push(Op { offset, kind });
        offset += size;
    }
    if offset != len {
        return Err(Error::invalid(
            FORMAT,
            format!("ops[{}]", header.num_ops),
            Some(offset),
            format!(
                "{} bytes follow the last of the {} ops announced by the header",
                len - offset,
                header.num_ops
            ),
        ));
    }
    Ok(Txn { header, ops })
}

/// Reads the op at `at`; returns it and its size.
fn parse_op(r: &ByteReader<'_>, at: u64, layout: Layout, index: u32) -> Result<(OpKind, u64)> {
    let f = |name: &str| format!("ops[{index}].{name}");
    let code = r.u8(at, &f("opcode"))?;
    let hdr3 = |r: &ByteReader<'_>| -> Result<HeaderBytes> {
        let b: [u8; 3] = r.array(at + 1, &f("header"))?;
        Ok([b[0], b[1], b[2], 0, 0, 0, 0])
    };
    match (code, layout) {
        (opcode::WRITE, Layout::V0_1) => {
            check_size(r, at, 20, 24, &f("size"))?;
            let kind = OpKind::Write {
                hdr: r.array(at + 1, &f("header"))?,
                reg_off: r.u64(at + 8, &f("reg_off"))?,
                value: r.u32(at + 16, &f("value"))?,
            };
            Ok((kind, 24))
        }
        (opcode::WRITE, Layout::V1_0) => {
            let kind = OpKind::Write {
                hdr: hdr3(r)?,
                reg_off: u64::from(r.u32(at + 4, &f("reg_off"))?),
                value: r.u32(at + 8, &f("value"))?,
            };
            Ok((kind, 12))
        }
        (opcode::BLOCKWRITE, _) => {
            let (hdr, reg_at, size_at, fixed) = match layout {
                Layout::V0_1 => (r.array(at + 1, &f("header"))?, 8, 12, 16),
                Layout::V1_0 => (hdr3(r)?, 4, 8, 12),
            };
            let reg_off = r.u32(at + reg_at, &f("reg_off"))?;
            let size = u64::from(r.u32(at + size_at, &f("size"))?);
            if size < fixed || (size - fixed) % 4 != 0 {
                return Err(Error::invalid(
                    FORMAT,
                    f("size"),
                    Some(at + size_at),
                    format!("BLOCKWRITE size {size} is not {fixed} + 4·N"),
                ));
            }
            let words = r.slice(at + fixed, size - fixed, &f("data"))?;
            let data = words
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect();
            Ok((OpKind::BlockWrite { hdr, reg_off, data }, size))
        }
        (opcode::MASKWRITE | opcode::MASKPOLL | opcode::MASKPOLL_BUSY, Layout::V0_1) => {
            check_size(r, at, 24, 32, &f("size"))?;
            let kind = OpKind::Masked {
                opcode: code,
                hdr: r.array(at + 1, &f("header"))?,
                reg_off: r.u64(at + 8, &f("reg_off"))?,
                value: r.u32(at + 16, &f("value"))?,
                mask: r.u32(at + 20, &f("mask"))?,
                tail: r.u32(at + 28, &f("padding"))?,
            };
            Ok((kind, 32))
        }
        (opcode::MASKWRITE | opcode::MASKPOLL | opcode::MASKPOLL_BUSY, Layout::V1_0) => {
            let kind = OpKind::Masked {
                opcode: code,
                hdr: hdr3(r)?,
                reg_off: u64::from(r.u32(at + 4, &f("reg_off"))?),
                value: r.u32(at + 8, &f("value"))?,
                mask: r.u32(at + 12, &f("mask"))?,
                tail: 0,
            };
            Ok((kind, 16))
        }
        (opcode::NOOP, _) => Ok((OpKind::Noop { pad: r.array(at + 1, &f("padding"))? }, 4)),
        (opcode::PREEMPT, _) => {
            let kind = OpKind::Preempt {
                level: r.u8(at + 1, &f("level"))?,
                reserved: r.u16(at + 2, &f("reserved"))?,
            };
            Ok((kind, 4))
        }
        (opcode::LOADPDI, _) => {
            let kind = OpKind::LoadPdi {
                padding: r.u8(at + 1, &f("padding"))?,
                pdi_id: r.u16(at + 2, &f("pdi_id"))?,
                pdi_size: r.u32(at + 4, &f("pdi_size"))?,
                pdi_address: r.u64(at + 8, &f("pdi_address"))?,
            };
            Ok((kind, 16))
        }
        (opcode::LOAD_PM_START, _) => {
            let kind = OpKind::LoadPmStart {
                load_sequence_count: r.array(at + 1, &f("load_sequence_count"))?,
                pm_load_id: r.u32(at + 4, &f("pm_load_id"))?,
            };
            Ok((kind, 8))
        }
        (opcode::CREATE_SCRATCHPAD, _) => {
            let kind = OpKind::CreateScratchpad {
                usage_type: r.u8(at + 1, &f("usage_type"))?,
                pad: r.u16(at + 2, &f("padding"))?,
                size: r.u32(at + 4, &f("size"))?,
                scratch_offset: r.u64(at + 8, &f("scratch_offset"))?,
            };
            Ok((kind, 16))
        }
        (opcode::UPDATE_STATE_TABLE | opcode::UPDATE_REG, _) => {
            let reg_off =
                if code == opcode::UPDATE_REG { Some(r.u32(at + 8, &f("reg_off"))?) } else { None };
            let kind = OpKind::StateTable {
                opcode: code,
                state_table_idx: r.u8(at + 1, &f("state_table_idx"))?,
                func: r.u8(at + 2, &f("func"))?,
                reserved: r.u8(at + 3, &f("reserved"))?,
                func_arg: r.u32(at + 4, &f("func_arg"))?,
                reg_off,
            };
            Ok((kind, if reg_off.is_some() { 12 } else { 8 }))
        }
        (opcode::UPDATE_SCRATCH, _) => {
            Ok((OpKind::UpdateScratch { pad: r.array(at + 1, &f("padding"))? }, 4))
        }
        (code, _) if code >= opcode::CUSTOM_FIRST => {
            let size = u64::from(r.u32(at + 4, &f("size"))?);
            if size < 8 {
                return Err(Error::invalid(
                    FORMAT,
                    f("size"),
                    Some(at + 4),
                    format!("custom op size {size} is smaller than its 8-byte header"),
                ));
            }
            let payload_at = at + 8;
            let payload = r.slice(payload_at, size - 8, &f("payload"))?;
            let payload = parse_custom(code, payload, payload_at, layout, &f("payload"))?;
            Ok((OpKind::Custom { opcode: code, hdr: hdr3(r)?, payload }, size))
        }
        (code, _) => Err(Error::unsupported(
            FORMAT,
            f("opcode"),
            Some(at),
            format!(
                "unknown opcode {code} ({}); its size is not known, so the rest cannot be read",
                super::opcode_name(code)
            ),
        )),
    }
}

/// Checks the `Size` field at `at + size_at` of a fixed-size v0.1 op.
fn check_size(r: &ByteReader<'_>, at: u64, size_at: u64, want: u32, field: &str) -> Result<()> {
    let size = r.u32(at + size_at, field)?;
    if size != want {
        return Err(Error::invalid(
            FORMAT,
            field,
            Some(at + size_at),
            format!("is {size}, but this op is always {want} bytes"),
        ));
    }
    Ok(())
}

/// Decodes a custom op's payload (the bytes after its 8-byte header).
fn parse_custom(
    code: u8,
    payload: &[u8],
    at: u64,
    layout: Layout,
    field: &str,
) -> Result<CustomPayload> {
    let r = ByteReader::new(payload, FORMAT);
    let len = payload.len() as u64;
    let wrong = |want: &str| {
        Err(Error::invalid(
            FORMAT,
            field,
            Some(at),
            format!("{} payload is {len} bytes, expected {want}", super::opcode_name(code)),
        ))
    };
    match code {
        opcode::TCT if len == 8 => {
            Ok(CustomPayload::Tct { word: r.u32(0, field)?, config: r.u32(4, field)? })
        }
        opcode::TCT => wrong("8"),
        opcode::DDR_PATCH if len == 40 => Ok(CustomPayload::DdrPatch(DdrPatch::Full {
            op_type: r.u32(0, field)?,
            op_size: r.u32(4, field)?,
            action: r.u32(8, field)?,
            pad: r.u32(12, field)?,
            regaddr: r.u64(16, field)?,
            argidx: r.u64(24, field)?,
            argplus: r.u64(32, field)?,
        })),
        opcode::DDR_PATCH if len == 16 && layout == Layout::V1_0 => {
            Ok(CustomPayload::DdrPatch(DdrPatch::Packed {
                regaddr: r.u32(0, field)?,
                argidx: r.u8(4, field)?,
                pad: r.array(5, field)?,
                argplus: r.u64(8, field)?,
            }))
        }
        opcode::DDR_PATCH => wrong(match layout {
            Layout::V0_1 => "40",
            Layout::V1_0 => "40 or 16",
        }),
        opcode::READ_REGS => {
            let count = u64::from(r.u32(0, field)?);
            if len < 8 || (len - 8) / 8 != count || !(len - 8).is_multiple_of(8) {
                return wrong(&format!("8 + 8 × count ({count})"));
            }
            let addresses = (0..count).map(|i| r.u64(8 + 8 * i, field)).collect::<Result<_>>()?;
            Ok(CustomPayload::ReadRegs { pad: r.u32(4, field)?, addresses })
        }
        opcode::RECORD_TIMER if len == 4 => Ok(CustomPayload::RecordTimer { id: r.u32(0, field)? }),
        opcode::RECORD_TIMER => wrong("4"),
        opcode::MERGE_SYNC if len == 8 => {
            Ok(CustomPayload::MergeSync { bytes: r.array(0, field)? })
        }
        opcode::MERGE_SYNC => wrong("8"),
        opcode::KILN_LAUNCH if payload.starts_with(&super::launch::MAGIC) => {
            super::Launch::decode(payload)
                .map(CustomPayload::Launch)
                .map_err(|reason| Error::invalid(FORMAT, field, Some(at), reason))
        }
        _ => Ok(CustomPayload::Raw(payload.to_vec())),
    }
}
