//! `kiln._kiln`, the extension module under the Python package `kiln` (`python/kiln`): kiln's
//! runtime and tools for Python, built by maturin as one abi3 wheel.
//!
//! The module takes and returns tensors as `(dtype, shape, uint8 array)` triples; the Python
//! layer turns them into typed NumPy arrays with views, so no tensor is copied on the way in
//! (the runtime copies inputs into the method's planned memory, as it does for `kiln bench`)
//! and each output once, out of the method's memory.
//!
//! It stands on the library crates, as the `kiln` command does: programs load with
//! `kiln_npu::load_options`, `inspect` and `verify` give a file's summary and verdict
//! (`kiln_runtime::artifact`, over each format's own in `kiln-format`), and error messages are
//! `kiln_runtime::error::message_chain`. The command itself (the `run` of `kiln-cli`) is used
//! only to run the `kiln` console script.

mod chat;
mod errors;
mod params;
mod program;
mod tokenizer;

use std::path::PathBuf;

use pyo3::prelude::*;

/// Runs the `kiln` command with `argv` (program name first) and returns its exit status.
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| kiln_cli::run(argv))
}

/// The JSON document `kiln inspect --json PATH` prints: the file's summary
/// ([`kiln_runtime::Artifact::summary`]).
#[pyfunction]
fn inspect(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let summary = py.detach(|| kiln_runtime::artifact::open(&path).map(|file| file.summary()));
    let summary = summary.map_err(errors::runtime)?.map_err(|e| errors::file(&e))?;
    serde_json::to_string(&summary).map_err(|e| errors::KilnError::new_err(e.to_string()))
}

/// Verifies `path` as `kiln verify [--strict]` does ([`kiln_runtime::artifact::verify`]):
/// `(kind, error)`, `error` being `None` for a valid file and `kind` `None` for a file that
/// could not be read or recognised.
#[pyfunction]
#[pyo3(signature = (path, strict=false))]
fn verify(py: Python<'_>, path: PathBuf, strict: bool) -> (Option<String>, Option<String>) {
    let verdict = py.detach(|| kiln_runtime::artifact::verify(&path, strict));
    (verdict.kind.map(|kind| kind.name().to_string()), verdict.error)
}

/// The most bytes a method may take by default (`kiln run --max-memory`'s default).
#[pyfunction]
fn default_memory_limit() -> u64 {
    kiln_runtime::default_memory_limit()
}

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<chat::Chat>()?;
    m.add_class::<program::Program>()?;
    m.add_class::<tokenizer::Tokenizer>()?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(default_memory_limit, m)?)?;
    m.add_function(wrap_pyfunction!(params::params_load, m)?)?;
    m.add_function(wrap_pyfunction!(params::params_save, m)?)?;
    Ok(())
}
