//! The first concrete operators: float32 [`Add`], [`Mul`] and [`Sigmoid`] over tensors of equal
//! shape, and [`MatMul`] (`[m, k] × [k, n]` with the weight a constant input).
//!
//! Each one's transaction launches one kernel of kiln's KILN_LAUNCH op
//! ([`kiln_format::txn::launch`]): a DDR_PATCH per buffer argument, writing the argument's
//! address (its own kernel argument plus offset, as its arg map places it) into the register
//! [`arg_reg`] names, then the launch, whose arguments are those registers. Fusion rewrites the
//! patches, so a fused chain's launches read and write the fused buffers. None of them needs
//! super-kernel parameters. The kernel-argument order follows DD's elementwise operators:
//! output in kernel argument 0, the tensor inputs in 1 (one after the other), constants in 2.

mod elementwise;
mod matmul;

pub use elementwise::{Add, Mul, Sigmoid};
pub use matmul::{MatMul, WeightLayout};

use kiln_format::txn::launch::DTYPE_F32;
use kiln_format::txn::{
    opcode, CustomPayload, DdrPatch, Header, Launch, LaunchKernel, OpKind, Txn,
};

use crate::arg_map::OpArgMap;
use crate::error::{Error, Result};
use crate::op::TensorDesc;

/// The element type every operator here runs, as [`TensorDesc::dtype`] spells it.
pub const FLOAT32: &str = "float32";

/// Bytes per float32 element.
const F32_BYTES: u64 = 4;

/// The register that holds launch argument `i`'s address: the address word of shim buffer
/// descriptor `i` (`0x1D004 + 0x20·i`), the register a DMA transaction's DDR_PATCH fills.
pub fn arg_reg(i: usize) -> u64 {
    0x1D004 + 0x20 * i as u64
}

/// The header of every operator's transaction: v0.1, AIE2P (DevGen 4), 6 rows, 4 columns,
/// one memory-tile row. Fusion needs all operators of a chain to share it.
fn header() -> Header {
    Header {
        major: 0,
        minor: 1,
        dev_gen: 4,
        num_rows: 6,
        num_cols: 4,
        num_mem_tile_rows: 1,
        padding: 0,
        num_ops: 0,
        txn_size: 0,
    }
}

/// The transaction that launches `kernel` over `dims` on float32 data, its buffer arguments
/// at `args` (kernel argument and byte offset each, in the kernel's argument order).
fn launch_txn(
    op: &'static str,
    kernel: LaunchKernel,
    dims: Vec<u64>,
    args: &[&OpArgMap],
) -> Result<Vec<u8>> {
    let mut kinds: Vec<OpKind> = args
        .iter()
        .enumerate()
        .map(|(i, a)| OpKind::Custom {
            opcode: opcode::DDR_PATCH,
            hdr: [0; 7],
            payload: CustomPayload::DdrPatch(DdrPatch::Full {
                op_type: 0,
                op_size: 0,
                action: 0,
                pad: 0,
                regaddr: arg_reg(i),
                argidx: a.xrt_arg_idx as u64,
                argplus: a.offset,
            }),
        })
        .collect();
    kinds.push(OpKind::Custom {
        opcode: kiln_format::txn::launch::KILN_LAUNCH,
        hdr: [0; 7],
        payload: CustomPayload::Launch(Launch {
            kernel,
            dtype: DTYPE_F32,
            reserved: 0,
            arg_regs: (0..args.len()).map(arg_reg).collect(),
            dims,
        }),
    });
    Txn::from_ops(header(), kinds)
        .and_then(|t| t.to_bytes())
        .map_err(|source| Error::Txn { op: op.into(), source })
}

/// The shapes of `inputs` then `outputs`, for errors.
fn shapes(inputs: &[TensorDesc], outputs: &[TensorDesc]) -> Vec<Vec<usize>> {
    inputs.iter().chain(outputs).map(|t| t.shape.clone()).collect()
}

/// Checks that there are `n_in` inputs and `n_out` outputs, all float32.
fn check_tensors(
    op: &'static str,
    inputs: &[TensorDesc],
    outputs: &[TensorDesc],
    n_in: usize,
    n_out: usize,
) -> Result<()> {
    if inputs.len() != n_in || outputs.len() != n_out {
        return Err(Error::UnsupportedShape {
            op,
            shapes: shapes(inputs, outputs),
            reason: format!(
                "takes {n_in} inputs and {n_out} outputs, not {} and {}",
                inputs.len(),
                outputs.len()
            ),
        });
    }
    check_dtype(op, inputs.iter().chain(outputs))
}

/// Checks that every tensor of `tensors` is float32.
fn check_dtype<'a>(
    op: &'static str,
    tensors: impl IntoIterator<Item = &'a TensorDesc>,
) -> Result<()> {
    match tensors.into_iter().find(|t| t.dtype != FLOAT32) {
        Some(t) => {
            Err(Error::UnsupportedDtype { op, tensor: t.name.clone(), dtype: t.dtype.clone() })
        }
        None => Ok(()),
    }
}

/// The byte size of `elements` float32 values, or an overflow error.
fn f32_bytes(op: &'static str, elements: u64) -> Result<u64> {
    elements.checked_mul(F32_BYTES).ok_or_else(|| Error::SizeOverflow { op: op.into() })
}

/// The number of elements of `shape`, or `None` on overflow.
fn elements(shape: &[usize]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
}
