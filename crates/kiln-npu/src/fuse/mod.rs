//! Fusion of a chain of operators into one transaction, as DD's `FusionRuntime` builds it for
//! a subgraph: plan the fused buffers ([`plan`]), fill the const and super-kernel buffers,
//! rewrite every DDR_PATCH into the fused buffers ([`patch`]), and concatenate the transactions
//! under the first one's header with the op count and size of the whole.

mod node;
mod patch;
mod plan;

pub use node::{Node, PackedTensor};

use kiln_format::txn::{Header, OpKind, Txn};

use crate::arg_map::{validate, OpArgMap};
use crate::arg_type::OpArgType;
use crate::buffers::BUFFERS;
use crate::error::{Error, Result};
use crate::op::ConstBufferIo;

/// What one run of the fused kernel needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fused {
    /// The fused transaction binary. Its DDR_PATCH ops name the fused kernel's arguments:
    /// input 0, output 1, scratch 2, const 3, super-kernel params 4.
    pub txn: Vec<u8>,
    /// The const buffer (argument 3), filled by every operator's `initialize_const_params`.
    pub const_buffer: Vec<u8>,
    /// The super-kernel parameter buffer (argument 4), every operator's parameters in place.
    pub super_kernel_params: Vec<u8>,
    /// The fused kernel's arg map: each graph input (ONNX index in input order) in argument 0,
    /// the const buffer as the one constant input, each graph output in argument 1, then the
    /// scratch (argument 2) and super-kernel (argument 4) buffers; empty buffers are left out.
    pub arg_map: Vec<OpArgMap>,
    /// Every tensor of the chain and where it is: graph inputs, graph outputs, intermediates.
    pub tensors: Vec<PackedTensor>,
}

impl Fused {
    /// How many bytes each fused buffer needs (input, output, scratch, const, super-kernel
    /// params, by slot): the largest end of the arg map's args in it; `None` on overflow.
    pub fn buffer_sizes(&self) -> Option<[u64; BUFFERS]> {
        let mut sizes = [0u64; BUFFERS];
        for arg in &self.arg_map {
            let slot = sizes.get_mut(arg.arg_type.fused_slot() as usize)?;
            *slot = (*slot).max(arg.end()?);
        }
        Some(sizes)
    }
}

/// What one node contributes, gathered from its operator.
struct Prepared {
    maps: Vec<OpArgMap>,
    txn: Txn,
    params: Vec<u8>,
}

/// Fuses `nodes`, in execution order, into one kernel run (see the module docs). Tensors
/// connect by name: one no node produces is a graph input, one no node consumes is a graph
/// output, the others are intermediates in the scratch buffer.
pub fn fuse(nodes: &[Node<'_>]) -> Result<Fused> {
    fuse_planned(nodes, None)
}

/// Fuses `nodes` as [`fuse`] does, with `outputs` as the graph outputs: each must be a tensor
/// some node produces; every other produced tensor is an intermediate, even one no node
/// consumes (an output the program never reads). Lowering uses this, since a tensor a later
/// node of the chain consumes may also be read after the chain.
pub fn fuse_with_outputs(nodes: &[Node<'_>], outputs: &[String]) -> Result<Fused> {
    if let Some(missing) =
        outputs.iter().find(|o| !nodes.iter().any(|n| n.outputs.iter().any(|t| &t.name == *o)))
    {
        return Err(Error::UnknownOutput { tensor: missing.clone() });
    }
    fuse_planned(nodes, Some(outputs))
}

fn fuse_planned(nodes: &[Node<'_>], outputs: Option<&[String]>) -> Result<Fused> {
    let first = nodes.first().ok_or(Error::Empty)?;
    let prepared = nodes.iter().map(prepare).collect::<Result<Vec<_>>>()?;
    let header = &prepared[0].txn.header;
    for (node, p) in nodes.iter().zip(&prepared).skip(1) {
        check_header(&node.name, header, &p.txn.header)?;
    }
    let maps: Vec<&[OpArgMap]> = prepared.iter().map(|p| p.maps.as_slice()).collect();
    let plan = plan::Plan::new(nodes, &maps, outputs)?;

    let mut const_buffer = vec![0; to_usize(plan.const_size, &first.name)?];
    let mut super_kernel_params = vec![0; to_usize(plan.super_size, &first.name)?];
    let mut kinds = Vec::new();
    for (i, (node, p)) in nodes.iter().zip(&prepared).enumerate() {
        let (start, end) = plan.const_slices[i];
        let slice = &mut const_buffer[to_usize(start, &node.name)?..to_usize(end, &node.name)?];
        node.op
            .initialize_const_params(&mut ConstBufferIo::new(&node.name, slice), &node.consts)?;
        if let Some(at) = plan.super_offsets[i] {
            let at = to_usize(at, &node.name)?;
            super_kernel_params[at..at + p.params.len()].copy_from_slice(&p.params);
        }
        let mut ops: Vec<OpKind> = p.txn.ops.iter().map(|op| op.kind.clone()).collect();
        patch::rewrite(&mut ops, node, i, &p.maps, &plan)?;
        kinds.extend(ops);
    }
    let last = &nodes[nodes.len() - 1].name;
    let txn_error = |source| Error::Txn { op: last.clone(), source };
    let txn = Txn::from_ops(header.clone(), kinds).and_then(|t| t.to_bytes()).map_err(txn_error)?;
    Ok(Fused {
        txn,
        arg_map: plan.fused_arg_map(),
        tensors: plan.tensors,
        const_buffer,
        super_kernel_params,
    })
}

/// Asks `node`'s operator for its arg map, transaction and super-kernel parameters, and checks
/// them against each other.
fn prepare(node: &Node<'_>) -> Result<Prepared> {
    let (ins, outs) = (&node.inputs, &node.outputs);
    let maps = node.op.buffer_reqs(ins, outs)?;
    validate(&node.name, &maps, ins.len(), node.consts.len(), outs.len())?;
    let bytes = node.op.transaction_bin(ins, outs)?;
    let txn = Txn::parse(&bytes).map_err(|source| Error::Txn { op: node.name.clone(), source })?;
    let params = node.op.super_kernel_params(ins, outs)?;
    let requested =
        maps.iter().find(|m| m.arg_type == OpArgType::ConstKernelParamInput).map_or(0, |m| m.size);
    if params.len() as u64 > requested {
        return Err(Error::SuperParamsSize {
            op: node.name.clone(),
            len: params.len() as u64,
            requested,
        });
    }
    Ok(Prepared { maps, txn, params })
}

/// Checks that `found` (of node `op`) describes the same array and op layout as `first`.
fn check_header(op: &str, first: &Header, found: &Header) -> Result<()> {
    let fields = [
        ("major", first.major, found.major),
        ("minor", first.minor, found.minor),
        ("dev_gen", first.dev_gen, found.dev_gen),
        ("num_rows", first.num_rows, found.num_rows),
        ("num_cols", first.num_cols, found.num_cols),
        ("num_mem_tile_rows", first.num_mem_tile_rows, found.num_mem_tile_rows),
    ];
    match fields.into_iter().find(|(_, a, b)| a != b) {
        Some((field, expected, found)) => Err(Error::IncompatibleTxn {
            op: op.into(),
            field,
            expected: expected.into(),
            found: found.into(),
        }),
        None => Ok(()),
    }
}

/// `n` as a `usize`, or an overflow error naming `op`.
fn to_usize(n: u64, op: &str) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::SizeOverflow { op: op.into() })
}
