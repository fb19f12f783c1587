//! Fuzzes the IREE parameter archive reader, verifier, source adapter and builder.
#![no_main]

use kiln_format::irpa::builder::Plan;
use kiln_format::irpa::source::ParamSource;
use kiln_format::irpa::transform::{self, Options};
use kiln_format::irpa::{verify, Archive};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(archive) = Archive::parse(data) else { return };
    let _ = verify::findings(&archive);
    let Ok(entries) = archive.param_entries() else { return };
    let built = transform::apply(&entries, &Options::default());
    if let Ok(plan) = Plan::new(&built, 64) {
        let mut sink = kiln_format::io::WriteSink(std::io::sink());
        let _ = plan.write(&mut sink, &mut |_, _| {});
    }
});
