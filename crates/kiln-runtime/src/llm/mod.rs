//! Language models exported by ExecuTorch's llama exporter: their metadata methods, and a
//! `forward` with a KV cache driven the way ExecuTorch's LLM runner drives it
//! (`extension/llm/runner`).
//!
//! The exported `forward(tokens: long[1, T], input_pos: long[1]) -> float[1, vocab]` keeps its
//! KV cache in mutable buffers of the method's planned memory: they start zeroed when the
//! method loads and persist from one execute to the next. A [`TextModel`] owns that method and
//! the position of the next token: [`TextModel::prefill`] runs the prompt (in chunks of the
//! largest `T` the program accepts), [`TextModel::decode`] one token at a time, and neither
//! lets `position + T` pass the context length.
//!
//! ```no_run
//! use kiln_runtime::llm::{Sampler, TextModel};
//! let program = kiln_runtime::Program::load("llama.pte")?;
//! let mut model = TextModel::new(&program)?;
//! let mut sampler = Sampler::greedy();
//! let mut token = sampler.sample(&model.prefill(&[1, 17, 300])?) as i64;
//! for _ in 0..16 {
//!     token = sampler.sample(&model.decode(token)?) as i64;
//! }
//! # Ok::<(), kiln_runtime::Error>(())
//! ```

#[cfg(feature = "chat")]
mod chat;
mod generate;
mod model;
mod sampler;

#[cfg(feature = "hf-tokenizer")]
pub use chat::HfTokenizer;
#[cfg(feature = "chat")]
pub use chat::{Chat, ChatTemplate, Message, Reply, TextCodec};
pub use generate::{GenerateOptions, Generation, Stop};
pub use model::{LlmMetadata, TextModel};
pub use sampler::{argmax, Sampler};
