//! The JSON of a transaction, behind `kiln inspect --json` and `kiln dump`: the header and
//! every op with its fields and the names of the registers it touches.

use serde_json::{json, Map, Value};

use super::model::{CustomPayload, DdrPatch, Layout, OpKind, Txn};
use super::registers::register_name;
use crate::error::Result;

/// The JSON shape scripts rely on: `{"header": {...}, "ops": [{offset, opcode, name, size,
/// ...fields}]}`: what `kiln inspect --json` prints. With `raw` (`kiln dump`), header and op
/// padding bytes are included too.
pub fn summarize(txn: &Txn, raw: bool) -> Result<Value> {
    let h = &txn.header;
    let mut header = json!({
        "major": h.major, "minor": h.minor, "dev_gen": h.dev_gen, "num_rows": h.num_rows,
        "num_cols": h.num_cols, "num_mem_tile_rows": h.num_mem_tile_rows, "num_ops": h.num_ops,
        "txn_size": h.txn_size,
    });
    if raw {
        header["padding"] = json!(h.padding);
    }
    let layout = txn.layout()?;
    let mut ops = Vec::with_capacity(txn.ops.len());
    for op in &txn.ops {
        let mut m = Map::new();
        m.insert("offset".into(), json!(op.offset));
        m.insert("opcode".into(), json!(op.kind.opcode()));
        m.insert("name".into(), json!(op.kind.name()));
        m.insert("size".into(), json!(txn.op_size(op)?));
        op_fields(&op.kind, layout, h.num_mem_tile_rows, raw, &mut m);
        ops.push(Value::Object(m));
    }
    Ok(json!({ "header": header, "ops": ops }))
}

fn op_fields(kind: &OpKind, layout: Layout, mem_rows: u8, raw: bool, m: &mut Map<String, Value>) {
    let mut set = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    let register = |addr: u64| json!(register_name(addr, mem_rows).to_string());
    match kind {
        OpKind::Write { hdr, reg_off, value } => {
            if layout == Layout::V0_1 {
                set("col", json!(hdr[0]));
                set("row", json!(hdr[1]));
            }
            set("reg_off", json!(reg_off));
            set("register", register(*reg_off));
            set("value", json!(value));
            if raw {
                set("header_bytes", json!(hex(hdr)));
            }
        }
        OpKind::BlockWrite { hdr, reg_off, data } => {
            if layout == Layout::V0_1 {
                set("col", json!(hdr[2]));
                set("row", json!(hdr[3]));
            }
            set("reg_off", json!(reg_off));
            set("register", register(u64::from(*reg_off)));
            set("data", json!(data));
            if raw {
                set("header_bytes", json!(hex(hdr)));
            }
        }
        OpKind::Masked { hdr, reg_off, value, mask, tail, .. } => {
            if layout == Layout::V0_1 {
                set("col", json!(hdr[0]));
                set("row", json!(hdr[1]));
            }
            set("reg_off", json!(reg_off));
            set("register", register(*reg_off));
            set("value", json!(value));
            set("mask", json!(mask));
            if raw {
                set("header_bytes", json!(hex(hdr)));
                set("padding", json!(tail));
            }
        }
        OpKind::Noop { pad } | OpKind::UpdateScratch { pad } => {
            if raw {
                set("padding", json!(hex(pad)));
            }
        }
        OpKind::Preempt { level, reserved } => {
            set("level", json!(level));
            if raw {
                set("reserved", json!(reserved));
            }
        }
        OpKind::LoadPdi { padding, pdi_id, pdi_size, pdi_address } => {
            set("pdi_id", json!(pdi_id));
            set("pdi_size", json!(pdi_size));
            set("pdi_address", json!(pdi_address));
            if raw {
                set("padding", json!(padding));
            }
        }
        OpKind::LoadPmStart { load_sequence_count, pm_load_id } => {
            set("load_sequence_count", json!(hex(load_sequence_count)));
            set("pm_load_id", json!(pm_load_id));
        }
        OpKind::CreateScratchpad { usage_type, pad, size, scratch_offset } => {
            set("usage_type", json!(usage_type));
            set("scratch_size", json!(size));
            set("scratch_offset", json!(scratch_offset));
            if raw {
                set("padding", json!(pad));
            }
        }
        OpKind::StateTable { state_table_idx, func, reserved, func_arg, reg_off, .. } => {
            set("state_table_idx", json!(state_table_idx));
            set("func", json!(func));
            set("func_arg", json!(func_arg));
            if let Some(r) = reg_off {
                set("reg_off", json!(r));
                set("register", register(u64::from(*r)));
            }
            if raw {
                set("reserved", json!(reserved));
            }
        }
        OpKind::Custom { hdr, payload, .. } => {
            if raw {
                set("header_bytes", json!(hex(&hdr[..3])));
            }
            match payload {
                CustomPayload::Tct { word, config } => {
                    set("word", json!(word));
                    set("config", json!(config));
                }
                CustomPayload::DdrPatch(p) => {
                    set("regaddr", json!(p.regaddr()));
                    set("register", register(p.regaddr()));
                    set("argidx", json!(p.argidx()));
                    set("argplus", json!(p.argplus()));
                    if raw {
                        match p {
                            DdrPatch::Full { op_type, op_size, action, pad, .. } => {
                                set("op_type", json!(op_type));
                                set("op_size", json!(op_size));
                                set("action", json!(action));
                                set("padding", json!(pad));
                            }
                            DdrPatch::Packed { pad, .. } => set("padding", json!(hex(pad))),
                        }
                    }
                }
                CustomPayload::ReadRegs { pad, addresses } => {
                    set("addresses", json!(addresses));
                    if raw {
                        set("padding", json!(pad));
                    }
                }
                CustomPayload::RecordTimer { id } => set("id", json!(id)),
                CustomPayload::MergeSync { bytes } => set("payload", json!(hex(bytes))),
                CustomPayload::Launch(l) => {
                    set("kernel", json!(l.kernel.name()));
                    set("dtype", json!(l.dtype));
                    set("arg_regs", json!(l.arg_regs));
                    set(
                        "arg_registers",
                        json!(l.arg_regs.iter().map(|a| register(*a)).collect::<Vec<_>>()),
                    );
                    set("dims", json!(l.dims));
                    match l.shapes() {
                        Ok((shapes, params)) => {
                            set("shapes", json!(shapes));
                            set("params", json!(params));
                        }
                        Err(reason) => set("shapes_error", json!(reason)),
                    }
                    if raw {
                        set("reserved", json!(l.reserved));
                    }
                }
                CustomPayload::Raw(bytes) => set("payload", json!(hex(bytes))),
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
