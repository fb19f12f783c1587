//! Values that share memory with another value.
//!
//! ExecuTorch's exporter removes no-op views (a `view_copy` whose output has the same bytes as
//! its input) by giving the output the input's place in the memory plan: the program then reads
//! a value that no instruction writes, whose bytes are those of an earlier value at the same
//! place. View kernels (`et_view`) alias explicitly. The compile stage must see both: a read of
//! an alias is a read of the value it aliases (a fusion may not skip that value), and a new
//! memory plan must keep the two together.

use kiln_kernels::{KernelDef, OutKind};

use crate::plan::{DataDef, InstrDef, MethodPlan, ValueDef};
use crate::value::{Storage, Val};

/// For each value, the value whose bytes it shares and its byte offset inside that value.
pub(crate) struct Aliases {
    of: Vec<Option<(u32, usize)>>,
}

impl Aliases {
    /// Makes `v` an alias of `of` at byte offset `delta` inside it.
    pub fn add(&mut self, v: u32, of: u32, delta: usize) {
        if let Some(slot) = self.of.get_mut(v as usize) {
            *slot = Some((of, delta));
        }
    }

    /// The value `v`'s bytes live in, and where: `(v, 0)` for a value of its own.
    pub fn root(&self, mut v: u32) -> (u32, usize) {
        let mut delta = 0usize;
        // Chains are acyclic (each alias names an earlier-written value); the bound guards
        // against a malformed table all the same.
        for _ in 0..self.of.len() {
            match self.of.get(v as usize).copied().flatten() {
                Some((w, d)) => {
                    v = w;
                    delta += d;
                }
                None => break,
            }
        }
        (v, delta)
    }
}

/// The aliases of a single-chain, straight-line method of kernel calls, or `None` when the
/// method has other instructions (moves, jumps, frees, delegates) or reads a planned value
/// that neither an instruction nor an earlier value at the same place explains.
pub(crate) fn aliases(
    plan: &MethodPlan,
    values: &[Val],
    defs: &[Option<&'static KernelDef>],
) -> Option<Aliases> {
    if plan.chains.len() != 1 {
        return None;
    }
    let n = values.len();
    let mut of: Vec<Option<(u32, usize)>> = vec![None; n];
    // Values whose bytes are defined before the first instruction.
    let mut written: Vec<bool> = (0..n)
        .map(|i| match (plan.values.get(i), values.get(i)) {
            (Some(ValueDef::Tensor(t)), Some(Val::Tensor(_))) => {
                !matches!(t.data, DataDef::Planned { .. })
            }
            _ => true,
        })
        .collect();
    for &i in &plan.inputs {
        if let Some(w) = written.get_mut(i as usize) {
            *w = true;
        }
    }
    // (buffer, start, end, value) of every planned write so far, latest last.
    let mut writes: Vec<(u32, usize, usize, u32)> = Vec::new();
    let region = |v: u32| match values.get(v as usize) {
        Some(Val::Tensor(t)) => match t.storage {
            Storage::Buf { buf, offset } => Some((buf, offset, offset + t.cap_bytes)),
            _ => None,
        },
        _ => None,
    };
    let tensors = |v: u32| -> Vec<u32> {
        match values.get(v as usize) {
            Some(Val::Tensor(_)) => vec![v],
            Some(Val::TensorList(items)) => items.to_vec(),
            Some(Val::OptionalTensorList(items)) => items.iter().flatten().copied().collect(),
            _ => Vec::new(),
        }
    };
    for ins in &plan.chains[0] {
        let InstrDef::Kernel { op, args } = ins else { return None };
        let def = defs.get(*op).copied().flatten()?;
        for (p, &a) in args.iter().enumerate() {
            if !def.is_input(p) {
                continue;
            }
            for r in tensors(a) {
                if written[r as usize] {
                    continue;
                }
                // Read before any write: the latest write that holds its bytes.
                let (buf, start, end) = region(r)?;
                let &(_, ws, _, w) = writes
                    .iter()
                    .rev()
                    .find(|&&(b, s, e, _)| b == buf && s <= start && end <= e)?;
                of[r as usize] = Some((w, start - ws));
                written[r as usize] = true;
            }
        }
        for o in def.outs {
            let &a = args.get(o.position as usize)?;
            if let OutKind::View(q) = o.kind {
                of[a as usize] = Some((*args.get(q as usize)?, 0));
            }
            for w in tensors(a) {
                written[w as usize] = true;
                if let Some((buf, s, e)) = region(w) {
                    writes.push((buf, s, e, w));
                }
            }
        }
    }
    Some(Aliases { of })
}
