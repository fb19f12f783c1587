//! Shared printing: JSON for scripts, aligned tables for people.
//!
//! All standard output goes through `outln!` / `out!` or [`print_json`], so a reader that
//! closes the pipe early (`kiln inspect X | head`) ends kiln quietly instead of panicking the
//! way `println!` does.

use std::io::{self, IsTerminal, Write};

use anyhow::Result;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// Like `println!`, but a closed standard output ends kiln quietly (see [`write_stdout`]).
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Like `print!`, but a closed standard output ends kiln quietly (see [`write_stdout`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

/// Writes to standard output. When the reader has gone (broken pipe) there is nobody left to
/// tell, so kiln exits with status 0 at once; any other write error exits 1 with a message.
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    if let Err(err) = io::stdout().lock().write_fmt(args) {
        if err.kind() == io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("kiln: error: writing to standard output: {err}");
        std::process::exit(1);
    }
}

/// Prints `value` as pretty JSON on stdout. A closed pipe (`kiln dump X | head`) ends the
/// output quietly instead of panicking.
pub fn print_json<T: Serialize + ?Sized>(value: &T) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let written = serde_json::to_writer_pretty(&mut out, value)
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(out));
    match written {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

/// A progress bar on standard error for `len` steps of `what`, drawn only when standard error
/// is a terminal (hidden otherwise, so logs and pipes stay clean).
pub fn progress(len: usize, what: &str) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message(what.to_string());
    bar
}

/// A plain-text table with right-aligned numeric columns.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new<S: Into<String>>(header: impl IntoIterator<Item = S>) -> Self {
        Table { header: header.into_iter().map(Into::into).collect(), rows: Vec::new() }
    }

    /// Adds one row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Renders the table; numeric cells are right-aligned.
    pub fn render(&self) -> String {
        let cols = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            let mut parts = Vec::with_capacity(cols);
            for (i, cell) in cells.iter().enumerate().take(cols) {
                let numeric = !cell.is_empty() && cell.parse::<f64>().is_ok();
                let last = i + 1 == cols;
                parts.push(if numeric {
                    format!("{cell:>w$}", w = widths[i])
                } else if last {
                    cell.clone()
                } else {
                    format!("{cell:<w$}", w = widths[i])
                });
            }
            out.push_str(parts.join("  ").trim_end());
            out.push('\n');
        };
        line(&self.header);
        for row in &self.rows {
            line(row);
        }
        out
    }
}

/// `n` bytes as a short human string (`1.5 MiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(["name", "size"]);
        t.row(["a", "1"]);
        t.row(["long", "1000"]);
        assert_eq!(t.render(), "name  size\na        1\nlong  1000\n");
    }

    #[test]
    fn human_bytes_picks_unit() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
    }
}
