//! What the page shows, and the data its script reads: the one value the command builds and
//! the page renders.

use serde::Serialize;

use super::program::Op;
use super::timing::Step;

/// What the page shows, and the data its script reads.
#[derive(Serialize)]
pub struct Report {
    pub(super) model: String,
    pub(super) method: String,
    /// A label per input: its file, or how it was generated.
    pub(super) inputs: Vec<String>,
    pub(super) iters: usize,
    pub(super) threads: usize,
    /// Whether the compile stage ran (no `--no-compile`).
    pub(super) compiled: bool,
    /// Milliseconds per execute, all steps together.
    pub(super) total_ms: f64,
    pub(super) ops: Vec<Op>,
    pub(super) steps: Vec<Step>,
}
