//! `kiln.Tokenizer`: a Hugging Face tokenizer (`tokenizer.json`) to encode prompts and decode
//! generated tokens, the same library `kiln generate --tokenizer` uses.

use std::path::PathBuf;

use pyo3::prelude::*;

use crate::errors::{FileError, InputError, InvalidFileError};

/// A tokenizer loaded from a `tokenizer.json`.
#[pyclass(frozen, module = "kiln._kiln")]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Tokenizer {
    /// The Hugging Face tokenizer.
    pub(crate) fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

#[pymethods]
impl Tokenizer {
    /// Loads `path` (a Hugging Face `tokenizer.json`).
    #[new]
    fn new(path: PathBuf) -> PyResult<Self> {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| FileError::new_err(format!("{}: {e}", path.display())))?;
        let inner = text.parse::<tokenizers::Tokenizer>().map_err(|e| {
            InvalidFileError::new_err(format!("{}: not a tokenizer.json: {e}", path.display()))
        })?;
        Ok(Tokenizer { inner })
    }

    /// The token ids of `text`, without special tokens added.
    fn encode(&self, text: &str) -> PyResult<Vec<i64>> {
        let encoding = self
            .inner
            .encode(text, false)
            .map_err(|e| InputError::new_err(format!("encoding: {e}")))?;
        Ok(encoding.get_ids().iter().map(|&i| i64::from(i)).collect())
    }

    /// The text of `ids`, special tokens skipped.
    fn decode(&self, ids: Vec<i64>) -> PyResult<String> {
        let ids = ids
            .iter()
            .map(|&t| u32::try_from(t).map_err(|_| InputError::new_err(format!("token id {t}"))))
            .collect::<PyResult<Vec<u32>>>()?;
        self.inner.decode(&ids, true).map_err(|e| InputError::new_err(format!("decoding: {e}")))
    }
}
