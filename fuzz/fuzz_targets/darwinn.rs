//! Fuzz the DarwiNN readers and algorithms: the input is tried as a Package and as an
//! Executable; whatever opens goes through selection, the DMA walk, linking and re-layout.
#![no_main]

use kiln_format::darwinn::link::{self, Addresses};
use kiln_format::darwinn::{dma, relayout, select, Executable, Package};
use libfuzzer_sys::fuzz_target;

fn exercise(e: &Executable<'_>) {
    let _ = dma::steps(e, true);
    let mut addrs = Addresses { parameters: Some(0x1234_5678_9abc), scratch: Some(0x40), ..Default::default() };
    for l in e.input_layers() {
        addrs.inputs.insert(l.name().unwrap_or_default().to_string(), vec![0x1000]);
    }
    for l in e.output_layers() {
        addrs.outputs.insert(l.name().unwrap_or_default().to_string(), vec![0x2000]);
    }
    let _ = link::link(e, &addrs);
    for l in e.output_layers() {
        if let Ok(g) = relayout::Geometry::of(&l) {
            if g.padded_size <= 1 << 20 {
                let _ = relayout::relayout(&l, &vec![0x5a; g.padded_size]);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Package::open(data) {
        let _ = select::select(&p, select::CURRENT_RUNTIME_VERSION);
        for e in p.executables() {
            exercise(e);
        }
    }
    if let Ok(e) = Executable::open(data, 0) {
        exercise(&e);
    }
    let _ = kiln_format::darwinn::multi::MultiExecutable::parse(data);
});
