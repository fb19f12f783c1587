//! A transaction binary's model: its header, its ops and their kinds (register writes, polls,
//! DDR patches, custom payloads), as the reader fills them and the writer encodes them.

use super::launch::Launch;

/// Format name used in errors.
pub const FORMAT: &str = "txn";

/// Size of the transaction header in bytes (both layouts).
pub const HEADER_SIZE: u64 = 16;

/// Opcode numbers (`XAie_TxnOpcode`).
pub mod opcode {
    /// Write one 32-bit register.
    pub const WRITE: u8 = 0;
    /// Write consecutive 32-bit registers.
    pub const BLOCKWRITE: u8 = 1;
    /// Fill registers with one value; aie-rt serializes it as BLOCKWRITE, so it never appears.
    pub const BLOCKSET: u8 = 2;
    /// Read-modify-write of a register under a mask.
    pub const MASKWRITE: u8 = 3;
    /// Wait until `register & mask == value`.
    pub const MASKPOLL: u8 = 4;
    /// No operation.
    pub const NOOP: u8 = 5;
    /// Preemption point.
    pub const PREEMPT: u8 = 6;
    /// MASKPOLL that reports busy instead of blocking.
    pub const MASKPOLL_BUSY: u8 = 7;
    /// Load a PDI.
    pub const LOADPDI: u8 = 8;
    /// Start of a program-memory load sequence.
    pub const LOAD_PM_START: u8 = 9;
    /// Create a scratchpad.
    pub const CREATE_SCRATCHPAD: u8 = 10;
    /// Update a state table.
    pub const UPDATE_STATE_TABLE: u8 = 11;
    /// Update a register from a state table.
    pub const UPDATE_REG: u8 = 12;
    /// Update the scratchpad.
    pub const UPDATE_SCRATCH: u8 = 13;
    /// Custom op: task-completion-token sync.
    pub const TCT: u8 = 128;
    /// Custom op: patch a register with a kernel argument's DDR address.
    pub const DDR_PATCH: u8 = 129;
    /// Custom op: read registers.
    pub const READ_REGS: u8 = 130;
    /// Custom op: record a timestamp.
    pub const RECORD_TIMER: u8 = 131;
    /// Custom op: merge sync tokens.
    pub const MERGE_SYNC: u8 = 132;
    /// Custom op: kiln's kernel launch on its reference device ([`crate::txn::launch`]).
    pub const KILN_LAUNCH: u8 = crate::txn::launch::KILN_LAUNCH;
    /// First opcode of the custom range.
    pub const CUSTOM_FIRST: u8 = 128;
}

/// The op layout, from the header's major/minor version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Layout {
    /// Version 0.1: naturally aligned structs.
    V0_1,
    /// Version 1.0: packed "opt" structs.
    V1_0,
}

/// The 16-byte transaction header (`XAie_TxnHeader`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Header {
    /// Major version (0 or 1).
    pub major: u8,
    /// Minor version (1 or 0).
    pub minor: u8,
    /// Device generation (3 = AIE2IPU/Phoenix, 4 = AIE2P/Strix, ...).
    pub dev_gen: u8,
    /// Rows of the array, shim row included.
    pub num_rows: u8,
    /// Columns of the array.
    pub num_cols: u8,
    /// Memory-tile rows.
    pub num_mem_tile_rows: u8,
    /// Bytes 6..8, padding.
    pub padding: u16,
    /// Number of ops.
    pub num_ops: u32,
    /// Total size in bytes, header included.
    pub txn_size: u32,
}

impl Header {
    /// The op layout this header's version selects, or an error for other versions.
    pub fn layout(&self) -> crate::Result<Layout> {
        match (self.major, self.minor) {
            (0, 1) => Ok(Layout::V0_1),
            (1, 0) => Ok(Layout::V1_0),
            (major, minor) => Err(crate::Error::unsupported(
                FORMAT,
                "header.version",
                Some(0),
                format!("version {major}.{minor} (known: 0.1 and 1.0)"),
            )),
        }
    }
}

/// A whole transaction: header and ops in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    /// The header as read. [`Txn::to_bytes`] recomputes `num_ops` and `txn_size`.
    pub header: Header,
    /// The ops in execution order.
    pub ops: Vec<Op>,
}

/// One operation and where it was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// File offset of the op's first byte (0 for ops built in memory).
    pub offset: u64,
    /// What the op is, with every byte of its encoding.
    pub kind: OpKind,
}

/// The bytes after the opcode byte and before an op's first field.
///
/// v0.1 WRITE, MASKWRITE, MASKPOLL and BLOCKWRITE have 7 (`Col`, `Row`, then padding; for
/// BLOCKWRITE bytes 3 and 4 are its own `Col` and `Row`). Custom ops in both layouts and every
/// v1.0 op have 3 (the rest of the array is then zero). Custom ops often carry junk here.
pub type HeaderBytes = [u8; 7];

/// Every kind of op, with all its fields and padding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// WRITE (0): one register.
    Write {
        /// Header bytes after the opcode.
        hdr: HeaderBytes,
        /// Register address (`col << 25 | row << 20 | offset`); 32-bit in v1.0.
        reg_off: u64,
        /// Value written.
        value: u32,
    },
    /// BLOCKWRITE (1): consecutive registers.
    BlockWrite {
        /// Header bytes after the opcode.
        hdr: HeaderBytes,
        /// Address of the first register.
        reg_off: u32,
        /// The words written.
        data: Vec<u32>,
    },
    /// MASKWRITE (3), MASKPOLL (4) or MASKPOLL_BUSY (7).
    Masked {
        /// Which of the three opcodes.
        opcode: u8,
        /// Header bytes after the opcode.
        hdr: HeaderBytes,
        /// Register address; 32-bit in v1.0.
        reg_off: u64,
        /// Value.
        value: u32,
        /// Mask.
        mask: u32,
        /// v0.1 trailing padding (bytes 28..32); 0 in v1.0.
        tail: u32,
    },
    /// NOOP (5).
    Noop {
        /// Padding bytes 1..4.
        pad: [u8; 3],
    },
    /// PREEMPT (6).
    Preempt {
        /// Preemption level (0 NOOP, 1 MEM_TILE, 2 AIE_TILE, 3 AIE_REGISTERS).
        level: u8,
        /// Reserved bytes 2..4.
        reserved: u16,
    },
    /// LOADPDI (8).
    LoadPdi {
        /// Padding byte 1.
        padding: u8,
        /// PDI id.
        pdi_id: u16,
        /// PDI size in bytes.
        pdi_size: u32,
        /// PDI address.
        pdi_address: u64,
    },
    /// LOAD_PM_START (9).
    LoadPmStart {
        /// `LoadSequenceCount` bytes 1..4.
        load_sequence_count: [u8; 3],
        /// Program-memory load id.
        pm_load_id: u32,
    },
    /// CREATE_SCRATCHPAD (10).
    CreateScratchpad {
        /// Usage type.
        usage_type: u8,
        /// Padding bytes 2..4.
        pad: u16,
        /// Size in bytes.
        size: u32,
        /// Scratch offset.
        scratch_offset: u64,
    },
    /// UPDATE_STATE_TABLE (11) or UPDATE_REG (12, which adds `reg_off`).
    StateTable {
        /// Which of the two opcodes.
        opcode: u8,
        /// State table index.
        state_table_idx: u8,
        /// Function.
        func: u8,
        /// Reserved byte 3.
        reserved: u8,
        /// Function argument.
        func_arg: u32,
        /// Register (UPDATE_REG only; `None` for UPDATE_STATE_TABLE).
        reg_off: Option<u32>,
    },
    /// UPDATE_SCRATCH (13).
    UpdateScratch {
        /// Padding bytes 1..4.
        pad: [u8; 3],
    },
    /// A custom op (opcode ≥ 128): 8-byte header with a size, then a payload.
    Custom {
        /// The opcode.
        opcode: u8,
        /// Header bytes 1..4 (often junk); the rest zero.
        hdr: HeaderBytes,
        /// The decoded payload.
        payload: CustomPayload,
    },
}

/// The payload of a custom op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CustomPayload {
    /// TCT (128): `word = direction | row << 8 | col << 16`,
    /// `config = row_num << 8 | col_num << 16 | channel << 24`.
    Tct {
        /// Direction, row and column.
        word: u32,
        /// Row count, column count and channel.
        config: u32,
    },
    /// DDR_PATCH (129).
    DdrPatch(DdrPatch),
    /// READ_REGS (130): `u32 count; u32 pad; u64 address[count]`.
    ReadRegs {
        /// Padding after the count.
        pad: u32,
        /// Register addresses.
        addresses: Vec<u64>,
    },
    /// RECORD_TIMER (131).
    RecordTimer {
        /// Timer id.
        id: u32,
    },
    /// MERGE_SYNC (132): 8 bytes whose meaning is not public.
    MergeSync {
        /// The payload bytes.
        bytes: [u8; 8],
    },
    /// KILN_LAUNCH (133) with kiln's magic: a CPU kernel launch ([`launch`](super::launch)).
    Launch(Launch),
    /// A custom opcode kiln does not know, or 133 without kiln's magic: its payload bytes.
    Raw(Vec<u8>),
}

/// A DDR_PATCH payload: "write the DDR address of kernel argument `argidx`, plus `argplus`, to
/// register `regaddr`".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DdrPatch {
    /// The 40-byte `patch_op_t` of v0.1 (also copied verbatim into some v1.0 files).
    Full {
        /// `op_base.type` (junk or zero in real files).
        op_type: u32,
        /// `op_base.size_in_bytes` (junk or zero in real files).
        op_size: u32,
        /// `action` (0).
        action: u32,
        /// Padding bytes 12..16 of the payload.
        pad: u32,
        /// Register to patch.
        regaddr: u64,
        /// Kernel argument index.
        argidx: u64,
        /// Byte offset added to the argument's address.
        argplus: u64,
    },
    /// The 16-byte packed `patch_op_opt_t` of v1.0.
    Packed {
        /// Register to patch.
        regaddr: u32,
        /// Kernel argument index.
        argidx: u8,
        /// Padding after `argidx`.
        pad: [u8; 3],
        /// Byte offset added to the argument's address.
        argplus: u64,
    },
}

impl DdrPatch {
    /// Register to patch.
    pub fn regaddr(&self) -> u64 {
        match self {
            DdrPatch::Full { regaddr, .. } => *regaddr,
            DdrPatch::Packed { regaddr, .. } => u64::from(*regaddr),
        }
    }

    /// Kernel argument index.
    pub fn argidx(&self) -> u64 {
        match self {
            DdrPatch::Full { argidx, .. } => *argidx,
            DdrPatch::Packed { argidx, .. } => u64::from(*argidx),
        }
    }

    /// Byte offset added to the argument's address.
    pub fn argplus(&self) -> u64 {
        match self {
            DdrPatch::Full { argplus, .. } | DdrPatch::Packed { argplus, .. } => *argplus,
        }
    }

    /// Points the patch at kernel argument `argidx`, `argplus` bytes in, keeping every other
    /// field; an error if `argidx` does not fit the packed form's 8-bit field.
    pub fn set_arg(&mut self, new_argidx: u64, new_argplus: u64) -> crate::Result<()> {
        match self {
            DdrPatch::Full { argidx, argplus, .. } => {
                *argidx = new_argidx;
                *argplus = new_argplus;
            }
            DdrPatch::Packed { argidx, argplus, .. } => {
                *argidx = u8::try_from(new_argidx).map_err(|_| {
                    crate::Error::invalid(
                        FORMAT,
                        "ddr_patch.argidx",
                        None,
                        format!("argument {new_argidx} does not fit the packed 8-bit field"),
                    )
                })?;
                *argplus = new_argplus;
            }
        }
        Ok(())
    }
}

impl OpKind {
    /// The opcode byte.
    pub fn opcode(&self) -> u8 {
        match self {
            OpKind::Write { .. } => opcode::WRITE,
            OpKind::BlockWrite { .. } => opcode::BLOCKWRITE,
            OpKind::Masked { opcode, .. }
            | OpKind::StateTable { opcode, .. }
            | OpKind::Custom { opcode, .. } => *opcode,
            OpKind::Noop { .. } => opcode::NOOP,
            OpKind::Preempt { .. } => opcode::PREEMPT,
            OpKind::LoadPdi { .. } => opcode::LOADPDI,
            OpKind::LoadPmStart { .. } => opcode::LOAD_PM_START,
            OpKind::CreateScratchpad { .. } => opcode::CREATE_SCRATCHPAD,
            OpKind::UpdateScratch { .. } => opcode::UPDATE_SCRATCH,
        }
    }

    /// The op's name as aie-rt spells it without the `XAIE_IO_` prefix (`CUSTOM_<n>` for
    /// unknown custom ops).
    pub fn name(&self) -> String {
        opcode_name(self.opcode())
    }
}

/// The name of an opcode (`UNKNOWN_<n>` below 128, `CUSTOM_<n>` above the known custom ops).
pub fn opcode_name(op: u8) -> String {
    let known = match op {
        opcode::WRITE => "WRITE",
        opcode::BLOCKWRITE => "BLOCKWRITE",
        opcode::BLOCKSET => "BLOCKSET",
        opcode::MASKWRITE => "MASKWRITE",
        opcode::MASKPOLL => "MASKPOLL",
        opcode::NOOP => "NOOP",
        opcode::PREEMPT => "PREEMPT",
        opcode::MASKPOLL_BUSY => "MASKPOLL_BUSY",
        opcode::LOADPDI => "LOADPDI",
        opcode::LOAD_PM_START => "LOAD_PM_START",
        opcode::CREATE_SCRATCHPAD => "CREATE_SCRATCHPAD",
        opcode::UPDATE_STATE_TABLE => "UPDATE_STATE_TABLE",
        opcode::UPDATE_REG => "UPDATE_REG",
        opcode::UPDATE_SCRATCH => "UPDATE_SCRATCH",
        opcode::TCT => "TCT",
        opcode::DDR_PATCH => "DDR_PATCH",
        opcode::READ_REGS => "READ_REGS",
        opcode::RECORD_TIMER => "RECORD_TIMER",
        opcode::MERGE_SYNC => "MERGE_SYNC",
        opcode::KILN_LAUNCH => "KILN_LAUNCH",
        op if op >= opcode::CUSTOM_FIRST => return format!("CUSTOM_{op}"),
        op => return format!("UNKNOWN_{op}"),
    };
    known.to_string()
}
