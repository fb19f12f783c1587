//! Planning the fused buffers, as DD's `analyze_buffer_reqs` does: every tensor, const arg and
//! super-kernel parameter block at the next multiple of [`ARG_ALIGN`] in its buffer.
//!
//! - input (0) and output (1): graph inputs and outputs in order of first appearance;
//! - scratch (2): the intermediates in order of production, then one region that every
//!   operator's scratch pad shares (operators run one after another), as large as the largest
//!   scratch pad arg's end rounded up to [`ARG_ALIGN`];
//! - const (3): per node, its `ConstInput` args in arg-map order;
//! - super-kernel params (4): per node, its `ConstKernelParamInput` arg.

use std::collections::{BTreeMap, BTreeSet};

use super::node::{Node, PackedTensor};
use crate::arg_map::{OpArgMap, ARG_ALIGN};
use crate::arg_type::OpArgType;
use crate::error::{Error, Result};

/// Where everything goes in the fused buffers.
pub(super) struct Plan {
    /// Every tensor, graph inputs first, then graph outputs, then intermediates.
    pub tensors: Vec<PackedTensor>,
    /// Size of the scratch buffer.
    scratch_size: u64,
    /// Per node, per arg: the fused argument the arg lands in and the offset there of the
    /// arg's first byte (for scratch pads, of the operator's whole scratch argument).
    pub arg_slots: Vec<Vec<(u64, u64)>>,
    /// Per node, its slice `[start, end)` of the const buffer.
    pub const_slices: Vec<(u64, u64)>,
    /// Size of the const buffer.
    pub const_size: u64,
    /// Per node, the offset of its super-kernel parameters, if it has that arg.
    pub super_offsets: Vec<Option<u64>>,
    /// Size of the super-kernel parameter buffer.
    pub super_size: u64,
}

/// Places `size` bytes at the next aligned offset after `*running`, and advances it.
fn place(running: &mut u64, size: u64, op: &str) -> Result<u64> {
    let overflow = || Error::SizeOverflow { op: op.into() };
    let at = running.checked_next_multiple_of(ARG_ALIGN).ok_or_else(overflow)?;
    *running = at.checked_add(size).ok_or_else(overflow)?;
    Ok(at)
}

/// The tensor an input or output arg of `node` names (validated to exist).
fn tensor_of<'n>(node: &'n Node<'_>, arg: &OpArgMap) -> &'n str {
    match arg.arg_type {
        OpArgType::Input => &node.inputs[arg.onnx_arg_idx].name,
        _ => &node.outputs[arg.onnx_arg_idx - node.inputs.len() - node.consts.len()].name,
    }
}

impl Plan {
    /// Plans the buffers of `nodes`, whose validated arg maps are `maps`. With `outputs`, the
    /// produced tensors it names are the graph outputs and every other produced tensor is an
    /// intermediate; without, the produced tensors no node consumes are the outputs.
    pub fn new(
        nodes: &[Node<'_>],
        maps: &[&[OpArgMap]],
        outputs: Option<&[String]>,
    ) -> Result<Plan> {
        let produced: BTreeSet<&str> =
            nodes.iter().flat_map(|n| n.outputs.iter().map(|t| t.name.as_str())).collect();
        let consumed: BTreeSet<&str> =
            nodes.iter().flat_map(|n| n.inputs.iter().map(|t| t.name.as_str())).collect();
        // Sizes: the largest request for each tensor, over all nodes.
        let mut sizes: BTreeMap<&str, u64> = BTreeMap::new();
        let mut order: Vec<(&str, &str)> = Vec::new(); // (tensor, node that first names it)
        for node in nodes {
            for t in node.inputs.iter().chain(&node.outputs) {
                if !sizes.contains_key(t.name.as_str()) {
                    sizes.insert(&t.name, 0);
                    order.push((&t.name, &node.name));
                }
            }
        }
        for (node, maps) in nodes.iter().zip(maps) {
            for arg in maps.iter() {
                if matches!(arg.arg_type, OpArgType::Input | OpArgType::Output) {
                    let size = sizes.entry(tensor_of(node, arg)).or_default();
                    *size = (*size).max(arg.size);
                }
            }
        }
        let mut tensors = Vec::new();
        let mut scratch_end = 0;
        for buffer in [OpArgType::Input, OpArgType::Output, OpArgType::ScratchPad] {
            let mut running = 0;
            for &(name, op) in &order {
                let output = match outputs {
                    Some(outputs) => outputs.iter().any(|o| o == name),
                    None => !consumed.contains(name),
                };
                let kind = match (produced.contains(name), output) {
                    (false, _) => OpArgType::Input,
                    (true, true) => OpArgType::Output,
                    (true, false) => OpArgType::ScratchPad,
                };
                if kind == buffer {
                    let size = sizes[name];
                    let offset = place(&mut running, size, op)?;
                    tensors.push(PackedTensor { name: name.into(), buffer, offset, size });
                }
            }
            scratch_end = running;
        }
        let by_name: BTreeMap<&str, usize> =
            tensors.iter().enumerate().map(|(i, t)| (t.name.as_str(), i)).collect();

        let mut pad = 0u64;
        for (node, maps) in nodes.iter().zip(maps) {
            for arg in maps.iter().filter(|a| a.arg_type == OpArgType::ScratchPad) {
                let end = arg.end().ok_or_else(|| Error::SizeOverflow { op: node.name.clone() })?;
                pad = pad.max(end);
            }
        }
        let overflow = || Error::SizeOverflow { op: nodes[0].name.clone() };
        let pad = pad.checked_next_multiple_of(ARG_ALIGN).ok_or_else(overflow)?;
        let mut scratch_size = scratch_end;
        let scratch_base = place(&mut scratch_size, pad, &nodes[0].name)?;

        let (mut const_size, mut super_size) = (0, 0);
        let mut arg_slots = Vec::new();
        let mut const_slices = Vec::new();
        let mut super_offsets = Vec::new();
        for (node, maps) in nodes.iter().zip(maps) {
            let start = const_size;
            let mut slots = Vec::with_capacity(maps.len());
            let mut first_const = None;
            let mut super_at = None;
            for arg in maps.iter() {
                let base = match arg.arg_type {
                    OpArgType::Input | OpArgType::Output => {
                        let tensor = &tensors[by_name[tensor_of(node, arg)]];
                        (tensor.buffer.fused_slot(), tensor.offset)
                    }
                    OpArgType::ScratchPad => (arg.arg_type.fused_slot(), scratch_base),
                    OpArgType::ConstInput => {
                        let at = place(&mut const_size, arg.size, &node.name)?;
                        first_const.get_or_insert(at);
                        (arg.arg_type.fused_slot(), at)
                    }
                    OpArgType::ConstKernelParamInput => {
                        let at = place(&mut super_size, arg.size, &node.name)?;
                        super_at = Some(at);
                        (arg.arg_type.fused_slot(), at)
                    }
                };
                slots.push(base);
            }
            const_slices.push((first_const.unwrap_or(start), const_size));
            arg_slots.push(slots);
            super_offsets.push(super_at);
        }
        Ok(Plan {
            tensors,
            scratch_size,
            arg_slots,
            const_slices,
            const_size,
            super_offsets,
            super_size,
        })
    }

    /// The fused kernel's arg map (see [`super::Fused::arg_map`]).
    pub fn fused_arg_map(&self) -> Vec<OpArgMap> {
        let of = |buffer: OpArgType| self.tensors.iter().filter(move |t| t.buffer == buffer);
        let entry = |arg_type: OpArgType, onnx_arg_idx, offset, size| OpArgMap {
            arg_type,
            xrt_arg_idx: arg_type.fused_slot() as usize,
            onnx_arg_idx,
            offset,
            size,
        };
        let mut map: Vec<OpArgMap> = of(OpArgType::Input)
            .enumerate()
            .map(|(k, t)| entry(OpArgType::Input, k, t.offset, t.size))
            .collect();
        let inputs = map.len();
        if self.const_size > 0 {
            map.push(entry(OpArgType::ConstInput, inputs, 0, self.const_size));
        }
        let before_outputs = map.len();
        map.extend(
            of(OpArgType::Output)
                .enumerate()
                .map(|(j, t)| entry(OpArgType::Output, before_outputs + j, t.offset, t.size)),
        );
        if self.scratch_size > 0 {
            map.push(entry(OpArgType::ScratchPad, 0, 0, self.scratch_size));
        }
        if self.super_size > 0 {
            map.push(entry(OpArgType::ConstKernelParamInput, 0, 0, self.super_size));
        }
        map
    }
}
