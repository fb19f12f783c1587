//! Executing a KILN_LAUNCH: read each buffer argument's shape from the launch's words, resolve
//! the argument through its register to (buffer, offset), bounds-check the bytes its shape
//! covers, and run the kiln CPU kernel ([`super::aten`]) on copies of the inputs. The output
//! is written back after the kernel, so an output may overlap its inputs (in place).

use std::collections::BTreeMap;

use kiln_format::txn::launch::DTYPE_F32;
use kiln_format::txn::Launch;

use super::aten::{self, Input};
use crate::buffers::{BUFFERS, DDR_BASE, WINDOW};
use crate::error::{Error, Result};

/// Bytes per element of the one element type the device runs (float32).
const F32_BYTES: u64 = 4;

/// Runs launch `l` (the op at byte `offset`) with the addresses in `registers` over `buffers`.
pub(super) fn run(
    offset: u64,
    l: &Launch,
    registers: &BTreeMap<u64, u32>,
    buffers: &mut [Vec<u8>; BUFFERS],
) -> Result<()> {
    let kernel = l.kernel.name();
    let fail = |reason: String| Error::Launch { offset, kernel, reason };
    if l.dtype != DTYPE_F32 {
        return Err(fail(format!(
            "element type {} is not supported (only {DTYPE_F32}, float32)",
            l.dtype
        )));
    }
    // The argument count was checked when the op was parsed; a mismatch here is an error.
    l.check().map_err(fail)?;
    let (shapes, params) = l.shapes().map_err(fail)?;
    let mut sizes = Vec::with_capacity(shapes.len());
    let mut spans = Vec::with_capacity(shapes.len());
    for (arg, (&reg, shape)) in l.arg_regs.iter().zip(&shapes).enumerate() {
        let dims: Vec<usize> =
            shape.iter().map(|&d| usize::try_from(d)).collect::<Result<_, _>>().map_err(|_| {
                fail(format!("argument {arg}'s shape {shape:?} does not fit usize"))
            })?;
        let (buffer, start) = resolve(offset, arg, reg, registers)?;
        let buffer_len = buffers[buffer].len() as u64;
        let len = shape.iter().try_fold(F32_BYTES, |acc, &d| acc.checked_mul(d));
        match len.and_then(|len| Some((len, start.checked_add(len)?))) {
            Some((len, end)) if end <= buffer_len => {
                spans.push((buffer, start as usize, len as usize));
            }
            _ => {
                return Err(Error::LaunchBounds {
                    offset,
                    arg,
                    buffer,
                    start,
                    len: len.unwrap_or(u64::MAX),
                    buffer_len,
                })
            }
        }
        sizes.push(dims);
    }
    let (out, ins) = spans.split_last().ok_or_else(|| fail("no output argument".into()))?;
    let (out_sizes, in_sizes) = sizes.split_last().ok_or_else(|| fail("no output shape".into()))?;
    // Each span was checked to lie inside its buffer above.
    let data: Vec<Vec<f32>> =
        ins.iter().map(|&(b, s, len)| read_f32(&buffers[b][s..s + len])).collect();
    let inputs: Vec<Input<'_>> =
        in_sizes.iter().zip(&data).map(|(sizes, data)| Input { sizes, data }).collect();
    let result = aten::run(l.kernel, &inputs, out_sizes, params).map_err(fail)?;
    let (b, s, len) = *out;
    for (dst, v) in buffers[b][s..s + len].chunks_exact_mut(4).zip(&result) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

/// The buffer and offset that launch argument `arg`'s register `reg` points at.
fn resolve(
    offset: u64,
    arg: usize,
    reg: u64,
    registers: &BTreeMap<u64, u32>,
) -> Result<(usize, u64)> {
    let bad = |what: String| Error::LaunchAddress { offset, arg, reg, what };
    let value = *registers
        .get(&reg)
        .ok_or_else(|| bad("which no op wrote (no DDR_PATCH set its address)".into()))?;
    let rel = u64::from(value)
        .checked_sub(DDR_BASE)
        .filter(|rel| rel / WINDOW < BUFFERS as u64)
        .ok_or_else(|| bad(format!("which holds 0x{value:08x}, an address in no buffer")))?;
    Ok(((rel / WINDOW) as usize, rel % WINDOW))
}

/// Little-endian float32 elements of `bytes` (a multiple of 4 long).
fn read_f32(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()
}
