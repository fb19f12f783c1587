//! Writing outputs crash-safely with a progress bar on large files.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_format::io::write_atomic;
use kiln_format::irpa::builder::Progress;
use kiln_format::Error;
use kiln_runtime::MappedFile;

/// Outputs at least this large get a progress bar.
const PROGRESS_THRESHOLD: u64 = 256 << 20;

/// Writes `path` through a temporary file renamed into place; `write` streams `total` bytes and
/// reports progress through its callback, whose chunks of the input `maps` are released from
/// memory once written (so memory use does not grow with the file size).
pub fn write_output<F>(path: &Path, total: u64, maps: &[&MappedFile], write: F) -> Result<()>
where
    F: FnOnce(&mut BufWriter<File>, Progress<'_>) -> std::io::Result<u64>,
{
    let bar = (total >= PROGRESS_THRESHOLD).then(|| {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(format!("writing {}", path.display()));
        bar
    });
    let result = write_atomic(path, |w| {
        let mut progress = |n: u64, chunk: &[u8]| {
            if let Some(bar) = &bar {
                bar.set_position(n);
            }
            if !chunk.is_empty() {
                maps.iter().for_each(|m| m.release(chunk));
            }
        };
        write(w, &mut progress).map(|_| ()).map_err(|e| Error::io(path, e))
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result.with_context(|| format!("writing {}", path.display()))
}
