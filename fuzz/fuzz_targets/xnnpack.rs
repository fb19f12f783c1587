#![no_main]
//! Fuzzes the XNNPACK delegate payload reader: whatever it accepts must summarize and dump
//! without panicking, and every id it hands out must index the decoded tables.

use kiln_format::xnnpack::{dump, summarize, Constant, Payload};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Payload::parse(data) else { return };
    let _ = summarize(&p);
    let _ = dump(&p);
    let g = &p.graph;
    for n in &g.nodes {
        for id in n.op.inputs().into_iter().chain(n.op.outputs()) {
            assert!((id as usize) < g.values.len());
        }
    }
    for v in &g.values {
        if let Some(c) = v.constant {
            assert!((c as usize) < g.constants.len());
        }
    }
    for (i, c) in g.constants.iter().enumerate() {
        if let Some(Constant::Region(r) | Constant::Inline(r)) = c {
            assert!(r.end <= data.len());
            assert!(p.constant_bytes(i as u32).is_some());
        }
    }
});
