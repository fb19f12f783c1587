//! What every NPU operator shares: its plan and arg map, the launch transaction it hands out,
//! the `npu_op!` glue from an operator to [`crate::NpuOp`], and the checks of its inputs and
//! constants.

use kiln_format::txn::launch::DTYPE_F32;
use kiln_format::txn::{
    opcode, CustomPayload, DdrPatch, Header, Launch, LaunchKernel, OpKind, Txn,
};

use crate::arg_map::{OpArgMap, ARG_ALIGN};
use crate::arg_type::OpArgType;
use crate::error::{Error, Result};
use crate::op::{ConstBufferIo, ConstTensor, TensorDesc};

/// The element type every operator here runs, as [`TensorDesc::dtype`] spells it.
pub const FLOAT32: &str = "float32";

/// Bytes per float32 element.
const F32_BYTES: u64 = 4;

/// The register that holds launch argument `i`'s address: the address word of shim buffer
/// descriptor `i` (`0x1D004 + 0x20·i`), the register a DMA transaction's DDR_PATCH fills.
pub fn arg_reg(i: usize) -> u64 {
    0x1D004 + 0x20 * i as u64
}

/// What an operator launches for one node's tensors: the kernel, the shapes its constant
/// inputs must have, and the kernel's parameter words.
pub(super) struct Plan {
    /// The kernel.
    pub(super) kernel: LaunchKernel,
    /// The constant inputs' shapes, in order.
    pub(super) consts: Vec<Vec<usize>>,
    /// The parameter words (after the shapes).
    pub(super) params: Vec<u64>,
}

impl Plan {
    /// A plan of `kernel` with no constant inputs.
    pub(super) fn new(kernel: LaunchKernel, params: Vec<u64>) -> Plan {
        Plan { kernel, consts: Vec::new(), params }
    }
}

/// An operator that launches one kernel in the shared layout (see the module docs); the
/// `npu_op!` macro implements [`crate::NpuOp`] from it.
pub(super) trait Launches {
    /// The operator's name in errors.
    const NAME: &'static str;

    /// Checks the node's tensors (their number, ranks and shapes; the element type and the one
    /// output are checked before) and plans the launch.
    fn plan(&self, inputs: &[TensorDesc], output: &TensorDesc) -> Result<Plan>;

    /// Checks the constant inputs and writes them into the const slice. By default the
    /// operator takes none.
    fn write_consts(&self, io: &mut ConstBufferIo<'_>, consts: &[ConstTensor]) -> Result<()> {
        write_packed(Self::NAME, io, consts, &[])
    }
}

/// Implements [`crate::NpuOp`] for a type implementing [`Launches`].
macro_rules! npu_op {
    ($ty:ty) => {
        impl $crate::op::NpuOp for $ty {
            fn buffer_reqs(
                &self,
                inputs: &[$crate::op::TensorDesc],
                outputs: &[$crate::op::TensorDesc],
            ) -> $crate::error::Result<Vec<$crate::arg_map::OpArgMap>> {
                $crate::ops::launch::planned(self, inputs, outputs).map(|(maps, _)| maps)
            }

            fn transaction_bin(
                &self,
                inputs: &[$crate::op::TensorDesc],
                outputs: &[$crate::op::TensorDesc],
            ) -> $crate::error::Result<Vec<u8>> {
                let (maps, plan) = $crate::ops::launch::planned(self, inputs, outputs)?;
                $crate::ops::launch::launch_txn(
                    <$ty as $crate::ops::launch::Launches>::NAME,
                    inputs,
                    outputs,
                    &maps,
                    &plan,
                )
            }

            fn super_kernel_params(
                &self,
                _: &[$crate::op::TensorDesc],
                _: &[$crate::op::TensorDesc],
            ) -> $crate::error::Result<Vec<u8>> {
                Ok(Vec::new())
            }

            fn initialize_const_params(
                &self,
                io: &mut $crate::op::ConstBufferIo<'_>,
                consts: &[$crate::op::ConstTensor],
            ) -> $crate::error::Result<()> {
                $crate::ops::launch::Launches::write_consts(self, io, consts)
            }
        }
    };
}
pub(super) use npu_op;

/// Checks the node (float32 tensors, one output, then the operator's own checks) and returns
/// its arg map with the plan.
pub(super) fn planned<T: Launches>(
    op: &T,
    inputs: &[TensorDesc],
    outputs: &[TensorDesc],
) -> Result<(Vec<OpArgMap>, Plan)> {
    let output = match outputs {
        [output] => output,
        _ => {
            return Err(unsupported(
                T::NAME,
                inputs,
                outputs,
                format!("has one output, not {}", outputs.len()),
            ))
        }
    };
    check_dtype(T::NAME, inputs.iter().chain(outputs))?;
    if inputs.iter().chain(outputs).any(|t| elements(&t.shape) == Some(0)) {
        return Err(unsupported(T::NAME, inputs, outputs, "a tensor has no elements"));
    }
    let plan = op.plan(inputs, output)?;
    let maps = arg_map(T::NAME, inputs, &plan.consts, output)?;
    Ok((maps, plan))
}

/// The arg map of the shared layout: each input packed in kernel argument 1, each constant
/// packed in kernel argument 2, the output in kernel argument 0.
pub(super) fn arg_map(
    op: &'static str,
    inputs: &[TensorDesc],
    consts: &[Vec<usize>],
    output: &TensorDesc,
) -> Result<Vec<OpArgMap>> {
    let overflow = || Error::SizeOverflow { op: op.into() };
    let mut maps = Vec::with_capacity(inputs.len() + consts.len() + 1);
    let mut ends = [0u64; 3];
    let shapes = inputs.iter().map(|t| (OpArgType::Input, 1, &t.shape[..]));
    let shapes = shapes.chain(consts.iter().map(|s| (OpArgType::ConstInput, 2, &s[..])));
    let shapes = shapes.chain([(OpArgType::Output, 0, &output.shape[..])]);
    for (onnx_arg_idx, (arg_type, xrt_arg_idx, shape)) in shapes.enumerate() {
        let size = f32_bytes(op, elements(shape).ok_or_else(overflow)?)?;
        let offset = ends[xrt_arg_idx].checked_next_multiple_of(ARG_ALIGN).ok_or_else(overflow)?;
        ends[xrt_arg_idx] = offset.checked_add(size).ok_or_else(overflow)?;
        maps.push(OpArgMap { arg_type, xrt_arg_idx, onnx_arg_idx, offset, size });
    }
    Ok(maps)
}

/// The header of every operator's transaction: v0.1, AIE2P (DevGen 4), 6 rows, 4 columns,
/// one memory-tile row. Fusion needs all operators of a chain to share it.
pub(super) fn header() -> Header {
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

/// The transaction that launches `plan`'s kernel on float32 data, its buffer arguments at
/// `maps` (inputs, constants, output: the kernel's argument order).
pub(super) fn launch_txn(
    op: &'static str,
    inputs: &[TensorDesc],
    outputs: &[TensorDesc],
    maps: &[OpArgMap],
    plan: &Plan,
) -> Result<Vec<u8>> {
    let shapes: Vec<Vec<u64>> = inputs
        .iter()
        .map(|t| &t.shape)
        .chain(&plan.consts)
        .chain(outputs.iter().map(|t| &t.shape))
        .map(|s| s.iter().map(|&d| d as u64).collect())
        .collect();
    let shapes: Vec<&[u64]> = shapes.iter().map(Vec::as_slice).collect();
    let mut kinds: Vec<OpKind> = maps
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
            kernel: plan.kernel,
            dtype: DTYPE_F32,
            reserved: 0,
            arg_regs: (0..maps.len()).map(arg_reg).collect(),
            dims: Launch::dims_of(&shapes, &plan.params),
        }),
    });
    Txn::from_ops(header(), kinds)
        .and_then(|t| t.to_bytes())
        .map_err(|source| Error::Txn { op: op.into(), source })
}

/// Checks `consts` (their number, element type, ranks `ranks`, and data holding their shapes'
/// bytes), writes each at the next multiple of [`ARG_ALIGN`] of the slice as the arg map
/// places them, and checks that they fill it: constants of other shapes than the node's
/// tensors imply leave a gap or overflow it.
pub(super) fn write_packed(
    op: &'static str,
    io: &mut ConstBufferIo<'_>,
    consts: &[ConstTensor],
    ranks: &[usize],
) -> Result<()> {
    check_consts(op, consts, ranks)?;
    let mut offsets = Vec::with_capacity(consts.len());
    let mut end = 0usize;
    for c in consts {
        let at = end.next_multiple_of(ARG_ALIGN as usize);
        offsets.push(at);
        end = at.saturating_add(c.data.len());
    }
    if end != io.len() {
        return Err(const_error(
            op,
            consts,
            format!("the constants take {end} bytes, but the node's tensors imply {}", io.len()),
        ));
    }
    for (c, at) in consts.iter().zip(offsets) {
        io.write(at, &c.data)?;
    }
    Ok(())
}

/// Checks the number of `consts` (one per rank of `ranks`), their element type and ranks, and
/// that each one's data holds its shape's bytes.
pub(super) fn check_consts(
    op: &'static str,
    consts: &[ConstTensor],
    ranks: &[usize],
) -> Result<()> {
    if consts.len() != ranks.len() {
        return Err(const_error(
            op,
            consts,
            format!("takes {} constant inputs, not {}", ranks.len(), consts.len()),
        ));
    }
    check_dtype(op, consts.iter().map(|c| &c.desc))?;
    for (i, (c, &rank)) in consts.iter().zip(ranks).enumerate() {
        if c.desc.shape.len() != rank {
            return Err(const_error(op, consts, format!("constant {i} must have rank {rank}")));
        }
        let bytes = elements(&c.desc.shape).and_then(|e| e.checked_mul(F32_BYTES));
        if bytes != Some(c.data.len() as u64) {
            return Err(const_error(
                op,
                consts,
                format!(
                    "constant {i} holds {} bytes, but its shape needs {}",
                    c.data.len(),
                    bytes.map_or("more than 2^64".into(), |b| b.to_string())
                ),
            ));
        }
    }
    Ok(())
}

/// An [`Error::UnsupportedShape`] of `op` about its constants.
pub(super) fn const_error(op: &'static str, consts: &[ConstTensor], reason: String) -> Error {
    Error::UnsupportedShape {
        op,
        shapes: consts.iter().map(|c| c.desc.shape.clone()).collect(),
        reason,
    }
}

/// An [`Error::UnsupportedShape`] of `op` about its tensors.
pub(super) fn unsupported(
    op: &'static str,
    inputs: &[TensorDesc],
    outputs: &[TensorDesc],
    reason: impl Into<String>,
) -> Error {
    let shapes = inputs.iter().chain(outputs).map(|t| t.shape.clone()).collect();
    Error::UnsupportedShape { op, shapes, reason: reason.into() }
}

/// Checks that there are `n` inputs, or an error naming `op`.
pub(super) fn check_inputs(
    op: &'static str,
    inputs: &[TensorDesc],
    output: &TensorDesc,
    n: usize,
) -> Result<()> {
    if inputs.len() != n {
        return Err(unsupported(
            op,
            inputs,
            std::slice::from_ref(output),
            format!("takes {n} inputs, not {}", inputs.len()),
        ));
    }
    Ok(())
}

/// Checks that every tensor of `tensors` is float32.
pub(super) fn check_dtype<'a>(
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
pub(super) fn f32_bytes(op: &'static str, elements: u64) -> Result<u64> {
    elements.checked_mul(F32_BYTES).ok_or_else(|| Error::SizeOverflow { op: op.into() })
}

/// The number of elements of `shape`, or `None` on overflow.
pub(super) fn elements(shape: &[usize]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))
}

/// The PyTorch broadcast of shapes `a` and `b` (aligned at the right; each pair of
/// dimensions equal or one of them 1), or `None`.
pub(super) fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        (i + s.len()).checked_sub(rank).map_or(1, |j| s.get(j).copied().unwrap_or(1))
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect()
}

/// A dimension index below `rank`, or the reason.
pub(super) fn check_dim(dim: usize, rank: usize) -> std::result::Result<u64, String> {
    if dim < rank {
        Ok(dim as u64)
    } else {
        Err(format!("dim {dim} is not below the rank {rank}"))
    }
}
