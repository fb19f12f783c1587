//! The generation loop of ExecuTorch's LLM runner (`extension/llm/runner/text_llm_runner.cpp`):
//! one prefill over the prompt, the first new token sampled from its logits, then one decode
//! call per token until a budget, an end token or the context length stops it.

use std::time::{Duration, Instant};

use super::model::{llm_err, TextModel};
use super::sampler::Sampler;
use crate::error::Error;

/// How [`TextModel::generate`] samples and when it stops.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most new tokens; `None` generates until the context is full or an end token.
    pub max_new_tokens: Option<usize>,
    /// Picks each token from the logits.
    pub sampler: Sampler,
    /// Tokens that end generation (kept in the output). The first new token is not checked,
    /// as in ExecuTorch's runner.
    pub eos: Vec<i64>,
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// `max_new_tokens` were generated.
    MaxNewTokens,
    /// An end token was generated.
    Eos,
    /// The KV cache is full: the prompt and the new tokens reach the maximum context length.
    MaxContextLen,
}

impl Stop {
    /// The name scripts see (`max_new_tokens`, `eos`, `max_context_len`).
    pub fn name(self) -> &'static str {
        match self {
            Stop::MaxNewTokens => "max_new_tokens",
            Stop::Eos => "eos",
            Stop::MaxContextLen => "max_context_len",
        }
    }
}

/// What one [`TextModel::generate`] call produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The new tokens only.
    pub tokens: Vec<i64>,
    /// Why it stopped.
    pub stop: Stop,
    /// The prefill call plus sampling the first token.
    pub prefill: Duration,
    /// The decode loop: every token after the first.
    pub decode: Duration,
}

impl Generation {
    /// New tokens after the first per second of the decode loop (as ExecuTorch's runner
    /// counts them); 0 when there were none.
    pub fn decode_tokens_per_s(&self) -> f64 {
        let decoded = self.tokens.len().saturating_sub(1);
        let seconds = self.decode.as_secs_f64();
        if decoded > 0 && seconds > 0.0 {
            decoded as f64 / seconds
        } else {
            0.0
        }
    }
}

impl TextModel {
    /// Generates tokens after `prompt`, from position 0 (the cache of an earlier call is
    /// forgotten). As ExecuTorch's runner: the prompt must leave room in the context, and at
    /// most `max_context_len - prompt.len()` tokens are generated. `on_token` sees each new
    /// token as soon as it is sampled; an error it returns ends generation with that error.
    pub fn generate<E: From<Error>>(
        &mut self,
        prompt: &[i64],
        options: &mut GenerateOptions,
        on_token: impl FnMut(i64) -> Result<(), E>,
    ) -> Result<Generation, E> {
        self.reset();
        self.generate_here(prompt, options, &mut Vec::new(), on_token)
    }

    /// [`TextModel::generate`] from the current position: `prompt` follows the tokens the
    /// cache holds (a conversation's next turn). `prefill_logits` receives the logits the
    /// first new token is sampled from.
    pub fn generate_here<E: From<Error>>(
        &mut self,
        prompt: &[i64],
        options: &mut GenerateOptions,
        prefill_logits: &mut Vec<f32>,
        mut on_token: impl FnMut(i64) -> Result<(), E>,
    ) -> Result<Generation, E> {
        if prompt.is_empty() {
            return Err(llm_err("the prompt has no tokens").into());
        }
        let max_context_len = self.metadata().max_context_len;
        let start = self.position();
        let room = max_context_len.saturating_sub(start + prompt.len());
        if room == 0 {
            return Err(llm_err(format!(
                "the prompt's {} tokens after {start} cached ones fill the model's maximum \
                 context length of {max_context_len}",
                prompt.len()
            ))
            .into());
        }
        let budget = options.max_new_tokens.map_or(room, |n| n.min(room));
        let mut tokens = Vec::with_capacity(budget);
        let prefill_start = Instant::now();
        let logits = self.prefill(prompt)?;
        prefill_logits.clear();
        prefill_logits.extend_from_slice(logits);
        let mut next = match budget {
            0 => None,
            _ => Some(options.sampler.sample(prefill_logits) as i64),
        };
        let prefill = prefill_start.elapsed();
        let decode_start = Instant::now();
        let mut stop = Stop::MaxNewTokens;
        while let Some(token) = next.take() {
            tokens.push(token);
            on_token(token)?;
            if tokens.len() > 1 && options.eos.contains(&token) {
                stop = Stop::Eos;
                break;
            }
            if tokens.len() >= budget {
                if budget == room && options.max_new_tokens.is_none_or(|n| n > room) {
                    stop = Stop::MaxContextLen;
                }
                break;
            }
            next = Some(options.sampler.sample(self.decode(token)?) as i64);
        }
        Ok(Generation { tokens, stop, prefill, decode: decode_start.elapsed() })
    }
}
