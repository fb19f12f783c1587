//! The delegate payloads of a program that kiln reads: each `XnnpackBackend` delegate's
//! XNNPACK graph and each `KilnNpuBackend` delegate's data must parse, for `kiln verify`.

use super::program::Program;
use crate::error::Result;
use crate::xnnpack;

/// Checks that every XNNPACK payload and every NPU delegate's data of `program` parses; an
/// error names the method and the delegate.
pub fn verify(program: &Program<'_>) -> Result<()> {
    for m in program.methods() {
        for (i, d) in m.delegates().enumerate() {
            let d = d?;
            let checked = match d.id {
                "XnnpackBackend" => xnnpack::Payload::parse(program.delegate_data(&d)?).map(|_| ()),
                #[cfg(feature = "all-formats")]
                crate::npu_delegate::BACKEND_ID => {
                    crate::npu_delegate::NpuDelegate::parse(program.delegate_data(&d)?).map(|_| ())
                }
                _ => continue,
            };
            checked.map_err(|e| {
                e.context(format!("method {:?}, delegate {i} ({})", m.name(), d.id))
            })?;
        }
    }
    Ok(())
}
