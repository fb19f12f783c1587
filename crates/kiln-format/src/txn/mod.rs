//! AIE transaction binaries ("txn"): the register-write programs that AMD's NPU runtimes
//! (DynamicDispatch, XRT, mlir-aie) hand to the NPU firmware.
//!
//! A transaction is a 16-byte [`Header`] followed by `num_ops` operations. Two layouts exist
//! (aie-rt `TransactionHeaderVersion_Major/Minor`):
//! - **v0.1** ([`Layout::V0_1`]): naturally aligned C structs; WRITE is 24 bytes, MASKWRITE and
//!   MASKPOLL 32, BLOCKWRITE 16 + 4·N, custom ops 8 + payload.
//! - **v1.0** ([`Layout::V1_0`]): the packed "opt" structs; WRITE 12, MASKWRITE/MASKPOLL 16,
//!   BLOCKWRITE 12 + 4·N, custom ops 8 + payload.
//!
//! Opcodes 0–4 and the custom ops (≥ 128) are stable across aie-rt versions; opcodes 5–13 are
//! decoded with the numbering of current aie-rt (NOOP, PREEMPT, MASKPOLL_BUSY, LOADPDI,
//! LOAD_PM_START, CREATE_SCRATCHPAD, UPDATE_STATE_TABLE, UPDATE_REG, UPDATE_SCRATCH); older
//! aie-rt used 5 and 6 for internal commands that are never serialized. Any other opcode below
//! 128 is reported as unknown, with its file offset, because its size cannot be known.
//!
//! The reader accounts for every byte: each op keeps its padding and "junk" header bytes as
//! fields, and the writer encodes ops from those fields only, so `to_bytes(parse(x)) == x` is a
//! real check that nothing was skipped. Custom ops with an opcode kiln does not know (such as
//! the timer-like 134 seen in DynamicDispatch files) carry a size field, so they are kept as raw
//! payload bytes and reported by name `CUSTOM_<n>`. Opcode 133 with kiln's magic is kiln's own
//! KILN_LAUNCH ([`launch`]), the kernel launch of kiln's reference NPU device.
//!
//! [`summary`] is the JSON of a transaction that `kiln inspect` and `kiln dump` print.

pub mod launch;
mod model;
mod patch;
mod read;
pub mod registers;
pub mod summary;
mod text;
mod write;

pub use model::{
    opcode, opcode_name, CustomPayload, DdrPatch, Header, HeaderBytes, Layout, Op, OpKind, Txn,
    FORMAT, HEADER_SIZE,
};

pub use launch::{Launch, LaunchKernel};
pub use patch::{resolve_patches, PatchOutcome};
pub use text::{binary_of, from_hex_text, is_hex_text, to_hex_text};

impl Txn {
    /// Parses and checks a binary transaction (see the module docs for what is checked).
    pub fn parse(bytes: &[u8]) -> crate::Result<Txn> {
        read::parse(bytes)
    }

    /// Builds a transaction from `header` and ops in order: each op's `offset` is where it
    /// will stand in the encoding, and the header's `num_ops` and `txn_size` count them, so
    /// the result equals what [`Txn::parse`] gives for its [`Txn::to_bytes`].
    pub fn from_ops(mut header: Header, kinds: Vec<OpKind>) -> crate::Result<Txn> {
        let layout = header.layout()?;
        let mut ops = Vec::with_capacity(kinds.len());
        let mut offset = HEADER_SIZE;
        for kind in kinds {
            let size = write::op_size(&kind, layout)?;
            ops.push(Op { offset, kind });
            offset += size;
        }
        let too_big = |field: &str, what: &str| {
            crate::Error::invalid(FORMAT, field, None, format!("{what} do not fit 32 bits"))
        };
        header.num_ops =
            u32::try_from(ops.len()).map_err(|_| too_big("header.num_ops", "the ops"))?;
        header.txn_size =
            u32::try_from(offset).map_err(|_| too_big("header.txn_size", "the bytes"))?;
        Ok(Txn { header, ops })
    }

    /// The op layout of this transaction.
    pub fn layout(&self) -> crate::Result<Layout> {
        self.header.layout()
    }

    /// Encodes the transaction; `num_ops` and `txn_size` in the header are recomputed from the
    /// ops, every other byte comes from the fields.
    pub fn to_bytes(&self) -> crate::Result<Vec<u8>> {
        write::encode(self)
    }

    /// The encoded size of `op` in this transaction's layout.
    pub fn op_size(&self, op: &Op) -> crate::Result<u64> {
        write::op_size(&op.kind, self.layout()?)
    }
}
