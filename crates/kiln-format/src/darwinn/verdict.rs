//! What `kiln verify` checks in an Edge TPU model (or a bare package): every package opens,
//! the driver would accept it (runtime version, executable set), and every executable's DMA
//! hints, layer sizes and bitstream fields are in bounds.

use std::path::Path;

use super::{dma, found, link, relayout, select};

/// Why the model in `bytes`, which messages call `file`, is not valid, or `Ok`.
pub fn check(file: &Path, bytes: &[u8]) -> Result<(), String> {
    let (_, found) = found::open(file, bytes).map_err(|e| e.with_causes())?;
    for f in &found {
        let at = f.place();
        select::select(&f.package, select::CURRENT_RUNTIME_VERSION)
            .map_err(|e| format!("{at}: {e}"))?;
        for (i, e) in f.package.executables().iter().enumerate() {
            let at = format!("{at} executable {i}");
            if e.root().dma_hints().is_some() {
                dma::steps(e, true).map_err(|err| format!("{at}: {err}"))?;
            }
            for (chunk, fields) in
                link::fields(e).map_err(|err| format!("{at}: {err}"))?.iter().enumerate()
            {
                let len = e.bitstreams().get(chunk).map_or(0, |b| b.len());
                for fo in fields {
                    if i64::from(fo.offset_bit) < 0
                        || i64::from(fo.offset_bit) + 32 > 8 * len as i64
                    {
                        return Err(format!(
                            "{at}: {}: field outside the {len}-byte bitstream",
                            fo.path()
                        ));
                    }
                }
            }
            for l in e.output_layers().iter().chain(e.input_layers().iter()) {
                relayout::Geometry::of(l).map_err(|err| {
                    format!("{at}: layer {:?}: {err}", l.name().unwrap_or_default())
                })?;
            }
        }
    }
    Ok(())
}
