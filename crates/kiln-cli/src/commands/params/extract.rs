//! `kiln params extract`: one entry to a .npy file or raw bytes, streamed.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kiln_format::irpa::Payload;
use kiln_format::npy;

use super::sources;
use super::write::write_output;

/// Runs `kiln params extract`.
pub fn run(file: &Path, key: &str, output: &Path, raw: bool) -> Result<ExitCode> {
    let input = crate::input::open(file)?;
    let parsed = sources::parse(&input)?;
    let entries = parsed.source().param_entries().with_context(|| file.display().to_string())?;
    let entry = entries
        .iter()
        .find(|e| &*e.key == key.as_bytes())
        .with_context(|| format!("{}: no entry named `{key}`", file.display()))?;
    let length = entry.payload.length();
    let as_npy = !raw && output.extension().is_some_and(|e| e.eq_ignore_ascii_case("npy"));
    let header = if as_npy {
        // The recorded dtype and shape when NumPy has the type and they match the length,
        // otherwise a flat byte array.
        let typed = entry.numpy_type().map(|(descr, shape)| npy::header(descr, shape));
        if typed.is_none() {
            if let Some(t) = &entry.tensor {
                eprintln!(
                    "kiln: note: {} has no NumPy dtype; writing {length} bytes as uint8",
                    t.dtype
                );
            }
        }
        typed.unwrap_or_else(|| npy::header("|u1", &[length]))
    } else {
        Vec::new()
    };
    let total = header.len() as u64 + length;
    match &entry.payload {
        Payload::Data(bytes) => write_output(output, total, &[&input.file], |w, progress| {
            w.write_all(&header)?;
            let mut n = header.len() as u64;
            for chunk in bytes.chunks(8 << 20) {
                w.copy(chunk)?;
                n += chunk.len() as u64;
                progress(n, chunk);
            }
            Ok(n)
        })?,
        Payload::Splat { pattern, length } => {
            let block: Vec<u8> = pattern
                .iter()
                .copied()
                .cycle()
                .take((64 << 10) / pattern.len().max(1) * pattern.len())
                .collect();
            write_output(output, total, &[], |w, progress| {
                w.write_all(&header)?;
                let mut left = *length;
                while left > 0 {
                    let k = left.min(block.len() as u64);
                    w.write_all(&block[..k as usize])?;
                    left -= k;
                    progress(total - left, &[]);
                }
                Ok(total)
            })?
        }
        Payload::External { path, .. } => {
            bail!(
                "`{key}` is an external entry stored in {}; extract it from that file",
                String::from_utf8_lossy(path)
            )
        }
    }
    Ok(ExitCode::SUCCESS)
}
