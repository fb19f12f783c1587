//! A memory plan for the compiled steps.
//!
//! The program's own plan (`allocation_info`) gives each planned tensor an offset that is safe
//! for the instruction order the exporter saw. Fused steps read and write other values at other
//! times (a convolution absorbing its batch norm and activation reads its input and writes the
//! activation's output in one step), so the compile stage places every planned activation again
//! from the lifetimes in the compiled order: first and last step that touches it, views
//! sharing their source's lifetime, method inputs alive from the start and outputs to the end.
//! Placement is greedy by size, largest first, at the lowest 64-byte aligned offset that no
//! value alive at the same time occupies (XNNPACK's `memory-planner.c` does the same). Values
//! no step touches (the intermediates a fusion skips) get no memory.
//!
//! Only methods whose [`aliases`](super::alias) are known are re-planned (one chain of kernel
//! calls: their lifetimes are plain intervals); tensors with initial contents (mutable
//! buffers, planned external data), state that persists from run to run (a KV cache: read, or
//! updated in place, before anything writes it whole) and their aliases keep the program's
//! placement, where nothing else lives.

use super::alias::Aliases;
use crate::plan::{DataDef, MethodPlan, ValueDef};
use crate::step::{Callee, Role, Step};
use crate::value::{Storage, Val};

/// Alignment of every placed tensor, in bytes (a cache line; what SIMD kernels like).
const ALIGN: usize = 64;

/// The tensors each step touches, each with whether the step needs its earlier contents:
/// it reads it, or a kernel updates it in place ([`kiln_kernels::KernelDef::in_place`]).
fn touched(step: &Step, values: &[Val], out: &mut Vec<(u32, bool)>) {
    out.clear();
    let Step::Call(call) = step else { return };
    let in_place = matches!(call.callee, Callee::Kernel(def) if def.in_place);
    for (&v, role) in call.args.iter().zip(call.roles.iter()) {
        let keeps = match role {
            Role::In => true,
            Role::Out(_) => in_place,
            Role::Ret => false,
        };
        match values.get(v as usize) {
            Some(Val::TensorList(items)) => out.extend(items.iter().map(|&i| (i, keeps))),
            Some(Val::OptionalTensorList(items)) => {
                out.extend(items.iter().flatten().map(|&i| (i, keeps)))
            }
            Some(Val::Tensor(_)) => out.push((v, keeps)),
            _ => {}
        }
    }
}

/// Places the planned tensors of a straight-line method again for the order of `steps`, in a
/// new buffer `new_buf`; an alias goes where the value it aliases goes, at its offset inside
/// it. Returns that buffer's size in bytes, or `None` when nothing was placed (the program's
/// plan stays).
pub(crate) fn replan(
    plan: &MethodPlan,
    values: &mut [Val],
    aliases: &Aliases,
    steps: &[Step],
    new_buf: u32,
) -> Option<usize> {
    let n = values.len();
    let movable = |i: usize| {
        matches!(
            (plan.values.get(i), values.get(i)),
            (Some(ValueDef::Tensor(t)), Some(Val::Tensor(s)))
                if matches!(t.data, DataDef::Planned { .. })
                    && matches!(s.storage, Storage::Buf { .. })
        )
    };
    // Lifetimes of the roots: first and last step touching any of their aliases.
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    // State: a root whose first touch needs its earlier contents (a KV cache updated in place,
    // or read before any write) holds what the previous run left there.
    let mut state = vec![false; n];
    let mut live = |v: u32, s: usize, keeps: bool| {
        let r = aliases.root(v).0 as usize;
        if r < n {
            if first[r] == usize::MAX || first[r] == s && keeps {
                state[r] = keeps;
            }
            first[r] = first[r].min(s);
            last[r] = last[r].max(s);
        }
    };
    for &i in &plan.inputs {
        live(i, 0, false);
    }
    let mut scratch = Vec::new();
    for (s, step) in steps.iter().enumerate() {
        touched(step, values, &mut scratch);
        for &(v, keeps) in &scratch {
            live(v, s, keeps);
        }
    }
    for &o in &plan.outputs {
        live(o, steps.len(), false);
    }
    // Bytes of each root: the end of its furthest alias. A root that cannot move keeps its
    // aliases where they are.
    let mut bytes = vec![0usize; n];
    let mut fixed = vec![false; n];
    for v in 0..n {
        let Some(Val::Tensor(t)) = values.get(v) else { continue };
        let (r, delta) = aliases.root(v as u32);
        let r = r as usize;
        if r >= n {
            continue;
        }
        bytes[r] = bytes[r].max(delta + t.cap_bytes);
        if !movable(v) || !movable(r) || state[r] {
            fixed[r] = true;
        }
    }
    let mut items: Vec<(usize, usize)> = (0..n)
        .filter(|&r| aliases.root(r as u32).0 as usize == r && !fixed[r] && first[r] != usize::MAX)
        .filter(|&r| matches!(values.get(r), Some(Val::Tensor(_))))
        .map(|r| (bytes[r], r))
        .collect();
    if items.is_empty() {
        return None;
    }
    items.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    // (offset, end, first, last) of the placed roots; the offset of each root.
    let mut placed: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(items.len());
    let mut offset_of: Vec<Option<usize>> = vec![None; n];
    let mut size = 0usize;
    let mut overlapping: Vec<(usize, usize)> = Vec::new();
    for &(len, r) in &items {
        let (f, l) = (first[r], last[r]);
        overlapping.clear();
        overlapping.extend(placed.iter().filter(|p| p.2 <= l && f <= p.3).map(|p| (p.0, p.1)));
        overlapping.sort_unstable();
        let mut offset = 0usize;
        for &(a, b) in &overlapping {
            if offset + len <= a {
                break;
            }
            offset = offset.max(b.div_ceil(ALIGN) * ALIGN);
        }
        placed.push((offset, offset + len, f, l));
        size = size.max(offset + len);
        offset_of[r] = Some(offset);
    }
    for v in 0..n {
        let (r, delta) = aliases.root(v as u32);
        let storage = match offset_of.get(r as usize).copied().flatten() {
            Some(base) => Storage::Buf { buf: new_buf, offset: base + delta },
            // A root that stays keeps its aliases inside it.
            None => match values.get(r as usize) {
                Some(Val::Tensor(t)) if r as usize != v => match t.storage {
                    Storage::Buf { buf, offset } => Storage::Buf { buf, offset: offset + delta },
                    _ => continue,
                },
                _ => continue,
            },
        };
        if let Some(Val::Tensor(t)) = values.get_mut(v) {
            t.storage = storage;
        }
    }
    Some(size)
}
