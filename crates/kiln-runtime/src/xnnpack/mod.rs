//! ExecuTorch's XNNPACK delegate, run on kiln's own kernels: each `XnnpackBackend` delegate
//! call of a method is replaced, when the method is decoded, by the kernel calls its graph
//! stands for ([`lower`]), so the compile stage sees one method and applies the same passes to
//! delegated and portable code (convolution lifting and packing, epilogue fusion, channels-last
//! layouts, the memory plan).
//!
//! The payload is parsed and verified by [`kiln_format::xnnpack`]; constants come from the
//! payload's constant region or from the program's named data (the `.pte`'s named segments or
//! a `.ptd`/`.irpa` source, [`ProgramData`]).

mod float;
mod lower;
mod quant;

use crate::data::ProgramData;
use crate::plan::{InstrDef, MethodPlan, Source};

/// The delegate id this backend handles.
pub const BACKEND_ID: &str = "XnnpackBackend";

/// Replaces every `XnnpackBackend` delegate call of `plan` by the kernel calls of its graph.
/// Errors name the delegate and the node.
pub(crate) fn inline_delegates(
    plan: &mut MethodPlan,
    file: &[u8],
    named: &ProgramData<'_>,
) -> Result<(), String> {
    if !plan.delegates.iter().any(|d| d.id == BACKEND_ID) {
        return Ok(());
    }
    for c in 0..plan.chains.len() {
        let chain = std::mem::take(&mut plan.chains[c]);
        let mut out = Vec::with_capacity(chain.len());
        let mut origins = Vec::with_capacity(chain.len());
        // Where each old instruction starts in the new chain, for jump destinations.
        let mut start = Vec::with_capacity(chain.len() + 1);
        for (k, ins) in chain.into_iter().enumerate() {
            start.push(out.len());
            let src = plan.source(c, k);
            let k = src.instruction;
            let InstrDef::Delegate { delegate, args } = &ins else {
                out.push(ins);
                origins.push(src);
                continue;
            };
            let Some(d) = plan.delegates.get(*delegate).filter(|d| d.id == BACKEND_ID) else {
                out.push(ins);
                origins.push(src);
                continue;
            };
            let bytes = file.get(d.processed.clone()).unwrap_or(&[]);
            let context =
                |e: String| format!("instruction {k}, delegate {delegate} ({BACKEND_ID}): {e}");
            let lowered = lower::lower(plan, bytes, file, named, args).map_err(context)?;
            let delegate = *delegate as u32;
            origins.extend(lowered.nodes.iter().map(|&node| Source {
                instruction: k,
                delegate: Some(delegate),
                node,
            }));
            out.extend(lowered.instrs);
            if let Some(d) = plan.delegates.get_mut(delegate as usize) {
                d.xnodes = lowered.xnodes;
            }
        }
        start.push(out.len());
        for ins in &mut out {
            if let InstrDef::JumpFalse { destination, .. } = ins {
                *destination = start.get(*destination).copied().unwrap_or(*destination);
            }
        }
        plan.chains[c] = out;
        plan.set_origins(c, origins);
    }
    for d in &mut plan.delegates {
        if d.id == BACKEND_ID {
            d.inlined = true;
        }
    }
    Ok(())
}
