//! A language model's `forward` with its KV cache ([`TextModel`]) and what the exporter's
//! constant methods say of it ([`LlmMetadata`]).

use kiln_kernels::DType;

use crate::error::{Error, Result};
use crate::io::{Input, Output, TensorInput, ValueMeta};
use crate::method::Method;
use crate::program::Program;

/// What the exporter's constant methods say (`get_max_seq_len`, ...); absent ones are `None`
/// or take the runner's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LlmMetadata {
    /// `get_max_seq_len` (required).
    pub max_seq_len: usize,
    /// `get_max_context_len`, else `max_seq_len`: positions the KV cache holds.
    pub max_context_len: usize,
    /// `get_vocab_size`.
    pub vocab_size: Option<usize>,
    /// `get_n_layers`.
    pub n_layers: Option<usize>,
    /// `use_kv_cache` (default true).
    pub use_kv_cache: bool,
    /// `use_sdpa_with_kv_cache` (default false).
    pub use_sdpa_with_kv_cache: bool,
    /// `enable_dynamic_shape` (default false): whether a prompt goes in one call.
    pub enable_dynamic_shape: bool,
    /// `get_bos_id`, when the export recorded one.
    pub bos_id: Option<i64>,
    /// `get_eos_ids`, when the export recorded them.
    pub eos_ids: Vec<i64>,
}

/// kiln's error for what an LLM export or its loop refuses.
pub(super) fn llm_err(reason: impl Into<String>) -> Error {
    Error::Llm { reason: reason.into() }
}

/// The outputs of constant method `name`, or `None` when the program has no such method.
fn constant(program: &Program, name: &str) -> Result<Option<Vec<Output>>> {
    if !program.method_names().contains(&name) {
        return Ok(None);
    }
    Ok(Some(program.method(name)?.execute(&[])?))
}

fn as_int(name: &str, out: &Output) -> Result<i64> {
    match out {
        Output::Int(v) => Ok(*v),
        Output::Bool(b) => Ok(*b as i64),
        Output::Tensor(t) if t.dtype == DType::Long && t.data.len() == 8 => {
            Ok(i64::from_le_bytes(t.data[..8].try_into().unwrap_or_default()))
        }
        other => Err(llm_err(format!("method {name} returns {other:?}, not an Int"))),
    }
}

fn int_method(program: &Program, name: &str) -> Result<Option<i64>> {
    match constant(program, name)? {
        None => Ok(None),
        Some(outs) => match outs.first() {
            Some(o) => as_int(name, o).map(Some),
            None => Err(llm_err(format!("method {name} returns nothing"))),
        },
    }
}

fn positive(name: &str, v: i64) -> Result<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| llm_err(format!("method {name} returns {v}, not a positive count")))
}

impl LlmMetadata {
    /// Reads the metadata methods of `program`. Fails when it has no `get_max_seq_len`: then
    /// it is not an LLM export.
    pub fn read(program: &Program) -> Result<LlmMetadata> {
        let max_seq_len = match int_method(program, "get_max_seq_len")? {
            Some(v) => positive("get_max_seq_len", v)?,
            None => {
                return Err(llm_err(format!(
                    "no get_max_seq_len method: not a language model exported by ExecuTorch's \
                     LLM exporter (methods: {})",
                    program.method_names().join(", ")
                )))
            }
        };
        let opt_count = |name: &str| -> Result<Option<usize>> {
            int_method(program, name)?.map(|v| positive(name, v)).transpose()
        };
        let flag = |name: &str, default: bool| -> Result<bool> {
            Ok(int_method(program, name)?.map_or(default, |v| v != 0))
        };
        let eos_ids = match constant(program, "get_eos_ids")? {
            Some(outs) => outs.iter().map(|o| as_int("get_eos_ids", o)).collect::<Result<_>>()?,
            None => Vec::new(),
        };
        Ok(LlmMetadata {
            max_seq_len,
            max_context_len: opt_count("get_max_context_len")?.unwrap_or(max_seq_len),
            vocab_size: opt_count("get_vocab_size")?,
            n_layers: opt_count("get_n_layers")?,
            use_kv_cache: flag("use_kv_cache", true)?,
            use_sdpa_with_kv_cache: flag("use_sdpa_with_kv_cache", false)?,
            enable_dynamic_shape: flag("enable_dynamic_shape", false)?,
            bos_id: int_method(program, "get_bos_id")?,
            eos_ids,
        })
    }
}

/// A loaded LLM `forward` method, its KV cache and the position of the next token.
pub struct TextModel {
    forward: Method,
    meta: LlmMetadata,
    /// Most tokens one call takes (the token input's declared, upper-bound length).
    max_tokens_per_call: usize,
    /// Position of the next token: how many the cache holds.
    position: usize,
    /// The logits of the last call (its last row).
    logits: Vec<f32>,
}

impl std::fmt::Debug for TextModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextModel")
            .field("meta", &self.meta)
            .field("max_tokens_per_call", &self.max_tokens_per_call)
            .field("position", &self.position)
            .finish_non_exhaustive()
    }
}

impl TextModel {
    /// Reads `program`'s metadata and loads its `forward`, checking that it has the
    /// exporter's interface: `(long[1, T], long[1]) -> float[1, vocab]` (or `[1, T, vocab]`
    /// with full logits).
    pub fn new(program: &Program) -> Result<TextModel> {
        let meta = LlmMetadata::read(program)?;
        if !meta.use_kv_cache {
            return Err(llm_err(
                "exported without a KV cache (use_kv_cache is false): each call would need the \
                 whole sequence; re-export with -kv",
            ));
        }
        let inputs = program.method_inputs("forward")?;
        let max_tokens_per_call = match inputs.as_slice() {
            [ValueMeta::Tensor(t), ValueMeta::Tensor(p)]
                if t.dtype == DType::Long
                    && t.sizes.len() == 2
                    && t.sizes[0] == 1
                    && t.sizes[1] > 0
                    && p.dtype == DType::Long
                    && p.sizes == [1] =>
            {
                // A static token input takes exactly its length: one token per call.
                if t.dynamic {
                    t.sizes[1]
                } else if t.sizes[1] == 1 {
                    1
                } else {
                    return Err(llm_err(format!(
                        "forward takes a static token input [1, {}]; only [1, 1] or a dynamic \
                         length can be fed token by token",
                        t.sizes[1]
                    )));
                }
            }
            other => {
                return Err(llm_err(format!(
                    "forward takes {other:?}, not (tokens long[1, T], input_pos long[1])"
                )))
            }
        };
        match program.method_outputs("forward")?.first() {
            Some(ValueMeta::Tensor(t)) if t.dtype == DType::Float && !t.sizes.is_empty() => {}
            other => return Err(llm_err(format!("forward returns {other:?}, not float logits"))),
        }
        let forward = program.method("forward")?;
        Ok(TextModel { forward, meta, max_tokens_per_call, position: 0, logits: Vec::new() })
    }

    /// The program's metadata.
    pub fn metadata(&self) -> &LlmMetadata {
        &self.meta
    }

    /// Position of the next token (how many tokens the cache holds).
    pub fn position(&self) -> usize {
        self.position
    }

    /// Most tokens one `forward` call takes.
    pub fn max_tokens_per_call(&self) -> usize {
        self.max_tokens_per_call
    }

    /// Forgets the cached tokens: the next prefill starts at position 0 (the cache is then
    /// overwritten; slots past the position are masked, as in ExecuTorch).
    pub fn reset(&mut self) {
        self.position = 0;
    }

    /// Keeps the first `position` cached tokens (at most those held): the next call writes
    /// from there, and the slots past it are masked as if empty.
    pub fn rewind(&mut self, position: usize) {
        self.position = self.position.min(position);
    }

    /// The executed `forward` method (for profiling and inspection).
    pub fn method(&self) -> &Method {
        &self.forward
    }

    /// Runs `tokens` from the current position (in as few calls as the program allows) and
    /// returns the logits of the last one.
    pub fn prefill(&mut self, tokens: &[i64]) -> Result<&[f32]> {
        if tokens.is_empty() {
            return Err(llm_err("the prompt has no tokens"));
        }
        self.check_room(tokens.len())?;
        for chunk in tokens.chunks(self.max_tokens_per_call) {
            self.call(chunk)?;
        }
        Ok(&self.logits)
    }

    /// Runs one token at the current position and returns its logits.
    pub fn decode(&mut self, token: i64) -> Result<&[f32]> {
        self.check_room(1)?;
        self.call(&[token])?;
        Ok(&self.logits)
    }

    fn check_room(&self, tokens: usize) -> Result<()> {
        if self.position + tokens > self.meta.max_context_len {
            return Err(Error::ContextFull {
                position: self.position,
                tokens,
                max_context_len: self.meta.max_context_len,
            });
        }
        Ok(())
    }

    fn call(&mut self, tokens: &[i64]) -> Result<()> {
        if let Some(vocab) = self.meta.vocab_size {
            if let Some(&t) = tokens.iter().find(|&&t| t < 0 || t as u64 >= vocab as u64) {
                return Err(llm_err(format!("token {t} is outside the vocabulary of {vocab}")));
            }
        }
        let data: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        let pos = (self.position as i64).to_le_bytes();
        let sizes = [1, tokens.len()];
        let inputs = [
            Input::Tensor(TensorInput { dtype: DType::Long, sizes: &sizes, data: &data }),
            Input::Tensor(TensorInput { dtype: DType::Long, sizes: &[1], data: &pos }),
        ];
        self.forward.run(&inputs)?;
        let Output::Tensor(out) = self.forward.output(0)? else {
            return Err(llm_err("forward returned no logits tensor"));
        };
        // The last row of [1, vocab] or [1, T, vocab].
        let vocab = out.sizes.last().copied().unwrap_or(0);
        let bytes = out.data.len();
        if out.dtype != DType::Float || vocab == 0 || bytes < vocab * 4 {
            return Err(llm_err(format!(
                "forward returned {}{:?}, not float logits",
                out.dtype.name(),
                out.sizes
            )));
        }
        self.logits.clear();
        self.logits.extend(
            out.data[bytes - vocab * 4..]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        );
        self.position += tokens.len();
        Ok(())
    }
}
