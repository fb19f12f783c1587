//! Executing a KILN_LAUNCH: resolve each buffer argument through its register to (buffer,
//! offset), bounds-check the bytes the kernel touches, and run kiln's CPU kernel on them
//! (`kiln_kernels::compute`: the elementwise [`MapProgram`] for ADD, MUL and SIGMOID, the
//! reference [`gemm_ref`] for MATMUL). Inputs are read into element vectors before the kernel
//! runs, so an output may overlap its inputs (in place).

use std::collections::BTreeMap;

use kiln_format::txn::launch::DTYPE_F32;
use kiln_format::txn::{Launch, LaunchKernel};
use kiln_kernels::compute::elementwise::{BinaryOp, MapInstr, MapProgram, UnaryOp};
use kiln_kernels::compute::gemm::{gemm_ref, Mat, MatMut};

use super::{BUFFERS, DDR_BASE, WINDOW};
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
    // The arity was checked when the op was parsed; a mismatch here is an error, not a panic.
    l.check().map_err(fail)?;
    let counts = element_counts(l).ok_or_else(|| fail("element counts overflow".into()))?;
    let mut spans = Vec::with_capacity(counts.len());
    for (arg, (&reg, &count)) in l.arg_regs.iter().zip(&counts).enumerate() {
        let (buffer, start) = resolve(offset, arg, reg, registers)?;
        let bounds = |len| Error::LaunchBounds {
            offset,
            arg,
            buffer,
            start,
            len,
            buffer_len: buffers[buffer].len() as u64,
        };
        let len = count.checked_mul(F32_BYTES);
        match len.and_then(|len| start.checked_add(len)) {
            Some(end) if end <= buffers[buffer].len() as u64 => {
                spans.push((buffer, start as usize, (end - start) as usize));
            }
            _ => return Err(bounds(len.unwrap_or(u64::MAX))),
        }
    }
    let (out, ins) = spans.split_last().ok_or_else(|| fail("no output argument".into()))?;
    let inputs: Vec<Vec<f32>> =
        ins.iter().map(|&(b, s, len)| read_f32(&buffers[b][s..s + len])).collect();
    let result = compute(l, &inputs, out.2 / F32_BYTES as usize).map_err(fail)?;
    let (b, s, len) = *out;
    for (dst, v) in buffers[b][s..s + len].chunks_exact_mut(4).zip(&result) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

/// Elements of each buffer argument, in argument order; `None` on overflow.
fn element_counts(l: &Launch) -> Option<Vec<u64>> {
    Some(match (l.kernel, l.dims.as_slice()) {
        (LaunchKernel::Add | LaunchKernel::Mul, &[len]) => vec![len; 3],
        (LaunchKernel::Sigmoid, &[len]) => vec![len; 2],
        (LaunchKernel::MatMul, &[m, k, n]) => {
            vec![m.checked_mul(k)?, k.checked_mul(n)?, m.checked_mul(n)?]
        }
        _ => return None,
    })
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

/// Runs the kernel on `inputs`; returns `out_len` output elements.
fn compute(l: &Launch, inputs: &[Vec<f32>], out_len: usize) -> Result<Vec<f32>, String> {
    let mut out = vec![0f32; out_len];
    let instr = match l.kernel {
        LaunchKernel::Add => MapInstr::Binary { op: BinaryOp::Add, a: 0, b: 1 },
        LaunchKernel::Mul => MapInstr::Binary { op: BinaryOp::Mul, a: 0, b: 1 },
        LaunchKernel::Sigmoid => MapInstr::Unary { op: UnaryOp::Sigmoid, a: 0 },
        LaunchKernel::MatMul => {
            let (m, k, n) = match l.dims.as_slice() {
                &[m, k, n] => (usize_of(m)?, usize_of(k)?, usize_of(n)?),
                _ => return Err("MATMUL takes dimensions [m, k, n]".into()),
            };
            let (a, b) = match inputs {
                [a, b] => (a, b),
                _ => return Err("MATMUL takes two inputs".into()),
            };
            let a = Mat { data: a, rs: k, cs: 1 };
            let b = Mat { data: b, rs: n, cs: 1 };
            let c = MatMut { data: &mut out, rs: n, cs: 1 };
            if !gemm_ref(m, n, k, a, b, c, false) {
                return Err("operands do not fit their buffers".into());
            }
            return Ok(out);
        }
    };
    let inputs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
    let program = MapProgram::new(inputs.len(), vec![instr], vec![inputs.len()])
        .map_err(|e| e.to_string())?;
    program.run(&inputs, &mut [out.as_mut_slice()], &mut Vec::new()).map_err(|e| e.to_string())?;
    Ok(out)
}

/// `n` as a `usize`, or a reason.
fn usize_of(n: u64) -> Result<usize, String> {
    usize::try_from(n).map_err(|_| format!("dimension {n} does not fit usize"))
}
