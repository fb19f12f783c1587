//! Writing outputs crash-safely, with payloads moved inside the kernel and a progress bar on
//! large files.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use kiln_format::io::{write_atomic, Sink};
use kiln_format::irpa::builder::{Plan, Progress};
use kiln_format::Error;
use kiln_runtime::MappedFile;

/// Outputs at least this large get a progress bar.
const PROGRESS_THRESHOLD: u64 = 256 << 20;

/// Payloads at least this large are copied file to file by the kernel; smaller ones go through
/// the output's buffer (a system call each would cost more than the copy).
const KERNEL_COPY_MIN: usize = 256 << 10;

/// Writes `path` through a temporary file renamed into place (synced once, before the rename);
/// `write` streams `total` bytes and reports progress through its callback. Payloads borrowed
/// from the input `maps` are copied from their files with `std::io::copy`, which on Linux moves
/// them inside the kernel (`copy_file_range`, a reflink on file systems that share extents)
/// instead of through this process's memory; chunks read through a map anyway are released
/// from memory once written, so memory use does not grow with the file size.
pub fn write_output<F>(path: &Path, total: u64, maps: &[&MappedFile], write: F) -> Result<()>
where
    F: FnOnce(&mut dyn Sink, Progress<'_>) -> std::io::Result<u64>,
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
        let mut sink = FileSink { out: w, maps, files: maps.iter().map(|_| None).collect() };
        write(&mut sink, &mut progress).map(|_| ()).map_err(|e| Error::io(path, e))
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result.with_context(|| format!("writing {}", path.display()))
}

/// The output file, and the input files whose mapped bytes it may copy in the kernel.
struct FileSink<'w, 'm> {
    out: &'w mut BufWriter<File>,
    maps: &'m [&'m MappedFile],
    /// Each map's file, opened on first use.
    files: Vec<Option<File>>,
}

impl FileSink<'_, '_> {
    /// The map holding `payload` and its offset there.
    fn locate(&self, payload: &[u8]) -> Option<(usize, u64)> {
        let start = payload.as_ptr() as usize;
        self.maps.iter().enumerate().find_map(|(i, m)| {
            let offset = start.checked_sub(m.bytes().as_ptr() as usize)?;
            (offset.checked_add(payload.len())? <= m.bytes().len()).then_some((i, offset as u64))
        })
    }
}

impl Sink for FileSink<'_, '_> {
    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)
    }

    fn copy(&mut self, payload: &[u8]) -> std::io::Result<()> {
        let located = if payload.len() >= KERNEL_COPY_MIN { self.locate(payload) } else { None };
        let Some((i, offset)) = located else { return self.out.write_all(payload) };
        let file = match &mut self.files[i] {
            Some(f) => f,
            slot => slot.insert(File::open(self.maps[i].path())?),
        };
        file.seek(SeekFrom::Start(offset))?;
        self.out.flush()?;
        let len = payload.len() as u64;
        let copied = std::io::copy(&mut (&*file).take(len), self.out.get_mut())?;
        if copied != len {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{} shrank while it was being copied", self.maps[i].path().display()),
            ));
        }
        Ok(())
    }
}

/// Writes a planned archive crash-safely, releasing the pages of `maps` as their data is written.
pub fn write_plan(output: &Path, plan: &Plan<'_, '_>, maps: &[&MappedFile]) -> Result<()> {
    write_output(output, plan.total_size(), maps, |w, progress| plan.write(w, progress))
}
