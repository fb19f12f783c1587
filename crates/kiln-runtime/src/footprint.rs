//! What a loaded method holds in memory, by kind, known before it runs ([`Footprint`]): the
//! prediction behind `kiln inspect --memory`, the `memory` field of `kiln run --json` and
//! `kiln bench --json`, and the Python `Method.footprint()`. Beside it, the process's own
//! resident set ([`resident`]), the baseline a prediction adds to and the measure it is
//! checked against.
//!
//! Everything counted is what the pages of a run commit, not what is reserved: a state's
//! buffers are anonymous mappings whose pages are committed where a value lies (see
//! [`crate::arena`]), and the program file's pages are resident only where a step reads them
//! in place (the compile stage gives back the pages of the constants it packs).

use std::collections::BTreeMap;

use crate::plan::MethodPlan;
use crate::step::Step;
use crate::value::{Storage, Val};

/// The unit pages are committed in.
const PAGE: u64 = 4096;

/// Bytes a loaded method holds, by what they are. The packed weights, the constants made at
/// load and the mapped pages read in place are shared by every execution state of the
/// method; the activations are per state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Activations one execution state commits: the pages its values span in its buffers
    /// (planned arenas after the compile stage's replanning, runtime tensors).
    pub activations: u64,
    /// The compiled steps' prepared weights (packed, folded, laid out at load).
    pub packed_weights: u64,
    /// Constants made at load: aligned copies of unaligned constants, weights a delegate's
    /// lowering converted (shared with the decoded program, held once).
    pub constants_made: u64,
    /// Pages of the program file and its external data holding constants steps read in
    /// place: resident once a run has read them.
    pub mapped_in_place: u64,
    /// Pages of constant tables steps gather rows of (embeddings), read in place: resident
    /// only where runs read them, so not in [`Footprint::total`] (an upper bound on what they
    /// add).
    pub gathered_tables: u64,
}

impl Footprint {
    /// Everything one execution state of the method holds.
    pub fn total(&self) -> u64 {
        self.activations + self.packed_weights + self.constants_made + self.mapped_in_place
    }

    /// What a method loaded as `fixed` holds.
    pub(crate) fn of(fixed: &LoadedParts<'_>) -> Footprint {
        let touched = touched(fixed);
        let (mapped_in_place, gathered_tables) = mapped_in_place(fixed, &touched);
        Footprint {
            activations: activations(fixed, &touched),
            packed_weights: fixed.packed_weights,
            constants_made: fixed.constants_made,
            mapped_in_place,
            gathered_tables,
        }
    }
}

/// What a footprint is computed from: a loaded method's plan, compiled steps and starting
/// value table, and the bytes its load filled.
pub(crate) struct LoadedParts<'a> {
    pub plan: &'a MethodPlan,
    pub chains: &'a [Vec<Step>],
    pub initial: &'a [Val],
    /// The prepared kernels' weights.
    pub packed_weights: u64,
    /// The constants made at load.
    pub constants_made: u64,
}

/// Pages spanned by byte ranges of one buffer, overlapping ranges counted once.
fn pages(mut ranges: Vec<(u64, u64)>) -> u64 {
    ranges.sort_unstable();
    let mut total = 0;
    let mut end = 0;
    for (start, stop) in ranges {
        let (start, stop) = ((start / PAGE * PAGE).max(end), stop.div_ceil(PAGE) * PAGE);
        if stop > start {
            total += stop - start;
            end = stop;
        }
    }
    total
}

/// The values the steps of `fixed` read or write and the method's inputs and outputs: what a
/// run touches (a value a fused step skips keeps its place but is never written).
fn touched(fixed: &LoadedParts<'_>) -> Vec<u32> {
    let mut out: Vec<u32> = fixed.plan.inputs.iter().chain(&fixed.plan.outputs).copied().collect();
    for step in fixed.chains.iter().flatten() {
        match step {
            Step::Call(call) => out.extend(call.args.iter()),
            Step::Move { from, to } => out.extend([*from, *to]),
            Step::JumpFalse { cond, .. } => out.push(*cond),
            Step::Free { value } => out.push(*value),
        }
    }
    // Tensor lists name their items.
    let items: Vec<u32> = out
        .iter()
        .filter_map(|&v| match fixed.initial.get(v as usize) {
            Some(Val::TensorList(items)) => Some(items.to_vec()),
            Some(Val::OptionalTensorList(items)) => Some(items.iter().flatten().copied().collect()),
            _ => None,
        })
        .flatten()
        .collect();
    out.extend(items);
    out.sort_unstable();
    out.dedup();
    out
}

/// Pages the tensors a run of `fixed` touches (`touched`) span in a state's buffers.
fn activations(fixed: &LoadedParts<'_>, touched: &[u32]) -> u64 {
    let mut by_buffer: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for &v in touched {
        if let Some(Val::Tensor(t)) = fixed.initial.get(v as usize) {
            if let Storage::Buf { buf, offset } = t.storage {
                let start = offset as u64;
                by_buffer.entry(buf).or_default().push((start, start + t.cap_bytes as u64));
            }
        }
    }
    by_buffer.into_values().map(pages).sum()
}

/// Operators whose first argument is a table they gather rows of (an embedding): a constant
/// table is resident only where a run reads it.
const GATHERS: &[&str] = &[
    "aten::embedding.out",
    "aten::index_select.out",
    "aten::index.Tensor_out",
    "aten::gather.out",
    "quantized_decomposed::embedding_byte.out",
    "quantized_decomposed::embedding_4bit.out",
];

/// Pages of mapped constants that the steps of `fixed` read in place (among the `touched`
/// values: arguments of kernel and delegate calls, tensor lists included; a prepared step's
/// weights are its own), and apart from them the pages of constant tables steps gather rows
/// of.
fn mapped_in_place(fixed: &LoadedParts<'_>, touched: &[u32]) -> (u64, u64) {
    let tables: Vec<u32> = fixed
        .chains
        .iter()
        .flatten()
        .filter_map(|s| match s {
            Step::Call(c) if GATHERS.contains(&&*c.name) => c.args.first().copied(),
            _ => None,
        })
        .collect();
    // Key: the source (0 for the program file, 1 + index for external data).
    let mut read: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    let mut gathered: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for &v in touched {
        let Some(Val::Tensor(t)) = fixed.initial.get(v as usize) else { continue };
        let (source, offset) = match t.storage {
            Storage::File { offset } => (0, offset),
            Storage::Ext { source, offset } => (source + 1, offset),
            _ => continue,
        };
        let into = if tables.contains(&v) { &mut gathered } else { &mut read };
        let start = offset as u64;
        into.entry(source).or_default().push((start, start + t.nbytes() as u64));
    }
    (read.into_values().map(pages).sum(), gathered.into_values().map(pages).sum())
}

/// This process's resident set and its peak so far (`VmRSS`, `VmHWM` of
/// `/proc/self/status`), in bytes; `None` where the OS does not say.
pub fn resident() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find_map(|l| l.strip_prefix(name))?;
        let kb = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_count_the_pages_they_span_once() {
        assert_eq!(pages(vec![]), 0);
        assert_eq!(pages(vec![(0, 1)]), PAGE);
        assert_eq!(pages(vec![(0, PAGE), (PAGE, PAGE + 1)]), 2 * PAGE);
        // Overlapping and nested ranges, out of order.
        assert_eq!(pages(vec![(3 * PAGE, 4 * PAGE), (0, 2 * PAGE), (100, 200)]), 3 * PAGE);
        // Two ranges in one page.
        assert_eq!(pages(vec![(10, 20), (30, 40)]), PAGE);
        assert_eq!(pages(vec![(5 * PAGE - 1, 5 * PAGE + 1)]), 2 * PAGE);
    }
}
