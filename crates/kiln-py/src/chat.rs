//! `kiln._kiln.Chat`: a conversation with a program's language model whose KV cache persists
//! from turn to turn (`kiln_runtime::llm::Chat`), the state `kiln.Chat` keeps.

use std::sync::Mutex;

use kiln_runtime::llm::{ChatTemplate, GenerateOptions, HfTokenizer, Sampler, TextModel};
use pyo3::prelude::*;

use crate::errors::{self, InputError};
use crate::program::Program;
use crate::tokenizer::Tokenizer;

/// A conversation (the Python class `kiln.Chat` wraps it).
#[pyclass(frozen, module = "kiln._kiln")]
pub struct Chat {
    chat: Mutex<kiln_runtime::llm::Chat>,
    codec: HfTokenizer,
}

/// What ends a turn early: kiln's error, or the exception of the `on_token` callback.
enum TurnError {
    Kiln(kiln_runtime::Error),
    Python(PyErr),
}

impl From<kiln_runtime::Error> for TurnError {
    fn from(e: kiln_runtime::Error) -> Self {
        TurnError::Kiln(e)
    }
}

/// A reply: `(text, tokens, stop, fed_tokens, position, prefill_ms, decode_tokens_per_s)`.
type ReplyTuple = (String, Vec<i64>, &'static str, usize, usize, f64, f64);

#[pymethods]
impl Chat {
    /// A conversation with `program`'s language model, rendered with the Jinja
    /// `chat_template` (with its `bos_token` and `eos_token` texts), or with the template of
    /// `tokenizer_config` (the text of a `tokenizer_config.json`), or, without either, as the
    /// messages' texts one after another.
    #[new]
    #[pyo3(signature = (program, tokenizer, chat_template=None, tokenizer_config=None, system=None))]
    fn new(
        program: &Program,
        tokenizer: &Tokenizer,
        chat_template: Option<String>,
        tokenizer_config: Option<String>,
        system: Option<String>,
    ) -> PyResult<Self> {
        let from_config = match &tokenizer_config {
            Some(text) => ChatTemplate::from_tokenizer_config(text).map_err(errors::runtime)?,
            None => None,
        };
        let template = match chat_template {
            Some(source) => {
                let (bos, eos) = from_config
                    .as_ref()
                    .map(|t| (t.bos_token().to_string(), t.eos_token().to_string()))
                    .unwrap_or_default();
                Some(ChatTemplate::new(source, &bos, &eos).map_err(errors::runtime)?)
            }
            None => from_config,
        };
        let codec = HfTokenizer(tokenizer.inner().clone());
        let model = TextModel::new(program.inner()).map_err(errors::runtime)?;
        let mut chat = kiln_runtime::llm::Chat::new(model, template);
        if let Some(text) = &system {
            chat.set_system(text);
        }
        Ok(Chat { chat: Mutex::new(chat), codec })
    }

    /// The user says `text`; returns the model's reply (see `kiln.Chat.say`).
    #[pyo3(signature = (text, max_new_tokens=None, temperature=None, top_p=0.9, top_k=None, seed=0, eos=None, on_token=None))]
    #[allow(clippy::too_many_arguments)]
    fn say(
        &self,
        py: Python<'_>,
        text: String,
        max_new_tokens: Option<usize>,
        temperature: Option<f32>,
        top_p: f32,
        top_k: Option<usize>,
        seed: u64,
        eos: Option<Vec<i64>>,
        on_token: Option<Py<PyAny>>,
    ) -> PyResult<ReplyTuple> {
        if let Some(t) = temperature.filter(|t| !(t.is_finite() && *t >= 0.0)) {
            return Err(InputError::new_err(format!("temperature {t} must be 0 or more")));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(InputError::new_err(format!("top_p {top_p} must be in (0, 1]")));
        }
        let turn = py.detach(|| -> Result<_, TurnError> {
            let mut chat = self.chat.lock().unwrap_or_else(|e| e.into_inner());
            let sampler = match temperature {
                Some(t) if t > 0.0 => Sampler::new(t, top_p, seed).with_top_k(top_k),
                _ => Sampler::greedy(),
            };
            let eos = eos.unwrap_or_else(|| chat.end_tokens(&self.codec));
            let mut options = GenerateOptions { max_new_tokens, sampler, eos };
            let reply = chat.turn(&text, &self.codec, &mut options, |token| match &on_token {
                Some(callback) => Python::attach(|py| callback.call1(py, (token,)).map(|_| ()))
                    .map_err(TurnError::Python),
                None => Ok(()),
            })?;
            Ok((reply, chat.position()))
        });
        match turn {
            Ok((reply, position)) => {
                let g = &reply.generation;
                Ok((
                    reply.text.clone(),
                    g.tokens.clone(),
                    g.stop.name(),
                    reply.fed,
                    position,
                    g.prefill.as_secs_f64() * 1e3,
                    g.decode_tokens_per_s(),
                ))
            }
            Err(TurnError::Kiln(e)) => Err(errors::runtime(e)),
            Err(TurnError::Python(e)) => Err(e),
        }
    }

    /// Forgets every message but the system one, and the cache.
    fn restart(&self) {
        self.chat.lock().unwrap_or_else(|e| e.into_inner()).restart();
    }

    /// The messages so far, as `(role, content)` pairs.
    fn messages(&self) -> Vec<(String, String)> {
        let chat = self.chat.lock().unwrap_or_else(|e| e.into_inner());
        chat.messages().iter().map(|m| (m.role.clone(), m.content.clone())).collect()
    }

    /// Positions of the context in use.
    #[getter]
    fn position(&self) -> usize {
        self.chat.lock().unwrap_or_else(|e| e.into_inner()).position()
    }

    /// Positions the context holds.
    #[getter]
    fn max_context_len(&self) -> usize {
        let chat = self.chat.lock().unwrap_or_else(|e| e.into_inner());
        chat.model().metadata().max_context_len
    }
}
