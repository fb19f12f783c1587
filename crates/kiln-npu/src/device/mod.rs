//! A reference device: runs a fused transaction on the CPU, so the whole path from operators
//! to a fused transaction runs, and is checked, without an NPU.
//!
//! The device holds the five fused buffers (input 0, output 1, scratch 2, const 3, super-kernel
//! params 4) as host byte vectors and a map of 32-bit registers (unwritten registers read 0).
//! Buffer `k` lives at device address [`DDR_BASE`] `+ k ×` [`WINDOW`], so every address
//! the device hands out names one buffer and an offset in it. It executes the ops in order:
//!
//! | op | effect |
//! | --- | --- |
//! | WRITE, BLOCKWRITE | write the registers |
//! | MASKWRITE | `reg = (reg & !mask) \| (value & mask)` |
//! | MASKPOLL, MASKPOLL_BUSY | check `reg & mask == value`; nothing else writes registers, so a poll that fails now fails forever: [`Error::PollNeverSucceeds`] |
//! | DDR_PATCH | write buffer `argidx`'s address plus `argplus` to register `regaddr`, as the firmware does |
//! | KILN_LAUNCH | read each argument's shape from the launch's words and its address from its register, resolve it to (buffer, offset), bounds-check the bytes the shape covers, run the kiln CPU kernel on them ([`kiln_format::txn::launch`]) |
//! | TCT | nothing: every launch finishes before the next op, so every task's token is there |
//! | RECORD_TIMER | records its id in [`RunSummary::timers`] |
//! | NOOP | nothing |
//!
//! Any other op is [`Error::UnsupportedOp`]. Register writes do not move data: a DMA buffer
//! descriptor and its queue push only land in the register map; data moves only by launches.
//! Every error names the op's byte offset in the transaction.

mod aten;
mod launch;

use std::collections::BTreeMap;

use kiln_format::npu_delegate::NpuDelegate;
use kiln_format::txn::{opcode, CustomPayload, OpKind, Txn};

use crate::arg_type::OpArgType;
use crate::buffers::{BUFFERS, DDR_BASE, WINDOW};
use crate::error::{Error, Result};
use crate::fuse::Fused;

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Ops executed.
    pub ops: usize,
    /// KILN_LAUNCH ops executed.
    pub launches: usize,
    /// The ids of the RECORD_TIMER ops, in order.
    pub timers: Vec<u32>,
}

/// The reference device (see the module docs).
#[derive(Clone, Debug)]
pub struct Device {
    buffers: [Vec<u8>; BUFFERS],
    registers: BTreeMap<u64, u32>,
}

/// `len` zero bytes for fused buffer `which`, checked against [`WINDOW`] before anything is
/// allocated.
fn zeroed(which: OpArgType, len: u64) -> Result<Vec<u8>> {
    if len > WINDOW {
        return Err(Error::DeviceBuffer { buffer: which as usize, len, max: WINDOW });
    }
    // At most WINDOW (2^28), so it fits a usize.
    Ok(vec![0; len as usize])
}

impl Device {
    /// A device holding `buffers`, in fused-slot order (input, output, scratch, const,
    /// super-kernel params); an error if one exceeds [`WINDOW`].
    pub fn new(buffers: [Vec<u8>; BUFFERS]) -> Result<Device> {
        if let Some((buffer, b)) = buffers.iter().enumerate().find(|(_, b)| b.len() as u64 > WINDOW)
        {
            return Err(Error::DeviceBuffer { buffer, len: b.len() as u64, max: WINDOW });
        }
        Ok(Device { buffers, registers: BTreeMap::new() })
    }

    /// A device for one run of `fused`: `input` as the input buffer, output and scratch
    /// buffers of zeros as large as the fused arg map needs, and the fused const and
    /// super-kernel buffers.
    pub fn for_fused(fused: &Fused, input: Vec<u8>) -> Result<Device> {
        let sizes =
            fused.buffer_sizes().ok_or_else(|| Error::SizeOverflow { op: "device".into() })?;
        Device::new([
            input,
            zeroed(OpArgType::Output, sizes[OpArgType::Output as usize])?,
            zeroed(OpArgType::ScratchPad, sizes[OpArgType::ScratchPad as usize])?,
            fused.const_buffer.clone(),
            fused.super_kernel_params.clone(),
        ])
    }

    /// A device for one run of NPU delegate `d`: input, output and scratch buffers of zeros
    /// of the manifest's sizes, and the delegate's const and super-kernel buffers.
    pub fn for_delegate(d: &NpuDelegate) -> Result<Device> {
        let b = d.manifest.buffers;
        Device::new([
            zeroed(OpArgType::Input, b.input)?,
            zeroed(OpArgType::Output, b.output)?,
            zeroed(OpArgType::ScratchPad, b.scratch)?,
            d.const_buffer.clone(),
            d.super_kernel_params.clone(),
        ])
    }

    /// The bytes of fused buffer `which`.
    pub fn buffer(&self, which: OpArgType) -> &[u8] {
        &self.buffers[which as usize]
    }

    /// The bytes of fused buffer `which`, to fill before a run (the input buffer).
    pub fn buffer_mut(&mut self, which: OpArgType) -> &mut [u8] {
        &mut self.buffers[which as usize]
    }

    /// The value of register `addr`, if an op wrote it.
    pub fn register(&self, addr: u64) -> Option<u32> {
        self.registers.get(&addr).copied()
    }

    /// Parses the transaction `txn` and executes its ops in order (see the module docs).
    /// Stops at the first op that fails; the effects of the ops before it remain.
    pub fn run(&mut self, txn: &[u8]) -> Result<RunSummary> {
        let txn = Txn::parse(txn).map_err(|source| Error::Txn { op: "device".into(), source })?;
        let mut summary = RunSummary::default();
        for op in &txn.ops {
            self.execute(op.offset, &op.kind, &mut summary)?;
            summary.ops += 1;
        }
        Ok(summary)
    }

    /// Executes one op, at byte `offset`.
    fn execute(&mut self, offset: u64, kind: &OpKind, summary: &mut RunSummary) -> Result<()> {
        match kind {
            OpKind::Write { reg_off, value, .. } => {
                self.registers.insert(*reg_off, *value);
            }
            OpKind::BlockWrite { reg_off, data, .. } => {
                for (i, word) in (0u64..).zip(data) {
                    self.registers.insert(u64::from(*reg_off) + 4 * i, *word);
                }
            }
            OpKind::Masked { opcode: opcode::MASKWRITE, reg_off, value, mask, .. } => {
                let old = self.register(*reg_off).unwrap_or(0);
                self.registers.insert(*reg_off, (old & !mask) | (value & mask));
            }
            OpKind::Masked { reg_off, value, mask, .. } => {
                let found = self.register(*reg_off).unwrap_or(0);
                if found & mask != *value {
                    return Err(Error::PollNeverSucceeds {
                        offset,
                        name: kind.name(),
                        reg: *reg_off,
                        value: *value,
                        mask: *mask,
                        found,
                    });
                }
            }
            OpKind::Noop { .. } => {}
            OpKind::Custom { payload, .. } => match payload {
                CustomPayload::DdrPatch(p) => {
                    let (argidx, argplus) = (p.argidx(), p.argplus());
                    let target = || Error::PatchTarget {
                        offset,
                        regaddr: p.regaddr(),
                        argidx,
                        argplus,
                        window: WINDOW,
                    };
                    if argidx >= BUFFERS as u64 || argplus >= WINDOW {
                        return Err(target());
                    }
                    // Below 2^32: DDR_BASE + 4 windows + one window's offset.
                    let address = DDR_BASE + argidx * WINDOW + argplus;
                    let address = u32::try_from(address).map_err(|_| target())?;
                    self.registers.insert(p.regaddr(), address);
                }
                CustomPayload::Launch(l) => {
                    launch::run(offset, l, &self.registers, &mut self.buffers)?;
                    summary.launches += 1;
                }
                CustomPayload::Tct { .. } => {}
                CustomPayload::RecordTimer { id } => summary.timers.push(*id),
                _ => return Err(Error::UnsupportedOp { offset, name: kind.name() }),
            },
            _ => return Err(Error::UnsupportedOp { offset, name: kind.name() }),
        }
        Ok(())
    }
}
