//! A conversation with a [`TextModel`] that keeps its KV cache from turn to turn: each turn
//! feeds only the tokens the cache does not hold yet, instead of the whole history.
//!
//! Every turn renders the whole conversation (the model's chat template, a Jinja template as
//! Hugging Face's `tokenizer_config.json` carries it, or the messages' texts one after another
//! when there is none), encodes it, and compares the tokens with those in the cache: the
//! common prefix stays, the rest is fed. A reply re-encoded from its text may not give back
//! the sampled tokens, so the cache is cut back to where the two agree rather than trusted
//! blindly; the logits are then those of one prefill over the same tokens (up to rounding).
//!
//! ```no_run
//! use kiln_runtime::llm::{Chat, ChatTemplate, GenerateOptions, Sampler, TextCodec, TextModel};
//! # fn codec() -> Box<dyn TextCodec> { unimplemented!() }
//! let program = kiln_runtime::Program::load("llama.pte")?;
//! let template = ChatTemplate::from_tokenizer_config(&std::fs::read_to_string("tokenizer_config.json")?)?;
//! let mut chat = Chat::new(TextModel::new(&program)?, template);
//! let mut options = GenerateOptions { max_new_tokens: Some(64), sampler: Sampler::greedy(), eos: vec![2] };
//! let reply = chat.turn("Hello!", &*codec(), &mut options, |_| Ok::<(), kiln_runtime::Error>(()))?;
//! println!("{}", reply.text);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::generate::{GenerateOptions, Generation};
use super::model::{llm_err, TextModel};
use crate::error::{Error, Result};

/// Turns text into token ids and back (a tokenizer: [`HfTokenizer`] wraps Hugging Face's).
pub trait TextCodec {
    /// The token ids of `text`, no special tokens added (a template writes its own).
    fn encode(&self, text: &str) -> Result<Vec<i64>>;
    /// The text of `tokens`, special tokens skipped.
    fn decode(&self, tokens: &[i64]) -> Result<String>;
    /// The id of the token whose text is `token` (a special token a template names), if the
    /// vocabulary has one; a codec that cannot say answers `None`.
    fn token_id(&self, _token: &str) -> Option<i64> {
        None
    }
}

/// A Hugging Face tokenizer (`tokenizer.json`) as kiln's [`TextCodec`] (feature
/// "hf-tokenizer"): what `kiln chat` and Python's `kiln.Chat` converse through. It encodes
/// without special tokens (a chat template writes its own) and decodes skipping them; the
/// tokenizer itself stays reachable (`.0`) for what a front end asks of it besides (streaming
/// decoders).
#[cfg(feature = "hf-tokenizer")]
#[derive(Clone, Debug)]
pub struct HfTokenizer(pub tokenizers::Tokenizer);

#[cfg(feature = "hf-tokenizer")]
impl TextCodec for HfTokenizer {
    fn encode(&self, text: &str) -> Result<Vec<i64>> {
        let enc =
            self.0.encode(text, false).map_err(|e| tokenizer_err(format!("encoding: {e}")))?;
        Ok(enc.get_ids().iter().map(|&i| i64::from(i)).collect())
    }

    fn decode(&self, tokens: &[i64]) -> Result<String> {
        let ids = tokens
            .iter()
            .map(|&t| u32::try_from(t).map_err(|_| tokenizer_err(format!("token id {t}"))))
            .collect::<Result<Vec<u32>>>()?;
        self.0.decode(&ids, true).map_err(|e| tokenizer_err(format!("decoding: {e}")))
    }

    fn token_id(&self, token: &str) -> Option<i64> {
        self.0.token_to_id(token).map(i64::from)
    }
}

#[cfg(feature = "hf-tokenizer")]
fn tokenizer_err(reason: String) -> Error {
    llm_err(format!("tokenizer: {reason}"))
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// What was said.
    pub content: String,
}

/// A chat template: Jinja source rendered with `messages`, `add_generation_prompt`,
/// `bos_token` and `eos_token`, as Hugging Face's `apply_chat_template` renders it.
#[derive(Clone, Debug)]
pub struct ChatTemplate {
    source: String,
    bos_token: String,
    eos_token: String,
}

/// The text of a special token in a `tokenizer_config.json`: a string, or an object whose
/// `content` is one.
fn token_text(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Object(o)) => {
            o.get("content").and_then(|c| c.as_str()).unwrap_or_default().to_string()
        }
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// A template from its Jinja source, with the special tokens' texts it may use.
    pub fn new(source: impl Into<String>, bos_token: &str, eos_token: &str) -> Result<Self> {
        let template = ChatTemplate {
            source: source.into(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
        };
        // Parsed once here so that a broken template fails before the first turn.
        template.environment()?;
        Ok(template)
    }

    /// The `chat_template` of a Hugging Face `tokenizer_config.json` (a string, or a list of
    /// `{name, template}` of which `default` is taken), with its `bos_token` and `eos_token`;
    /// `None` when it has none.
    pub fn from_tokenizer_config(json: &str) -> Result<Option<Self>> {
        let config: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| llm_err(format!("tokenizer_config.json: {e}")))?;
        let source = match config.get("chat_template") {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(named)) => {
                let default = named
                    .iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"));
                match default.and_then(|t| t.get("template")).and_then(|t| t.as_str()) {
                    Some(s) => s.to_string(),
                    None => {
                        return Err(llm_err(
                            "tokenizer_config.json: chat_template is a list without a \
                             \"default\" template",
                        ))
                    }
                }
            }
            Some(other) => {
                return Err(llm_err(format!(
                    "tokenizer_config.json: chat_template is {other}, not a string"
                )))
            }
        };
        let (bos, eos) = (token_text(config.get("bos_token")), token_text(config.get("eos_token")));
        ChatTemplate::new(source, &bos, &eos).map(Some)
    }

    /// The text of the start token the template names (`bos_token`), if any.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The text of the end token the template names (`eos_token`), if any.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }

    fn environment(&self) -> Result<minijinja::Environment<'_>> {
        let mut env = minijinja::Environment::new();
        // Python's string methods (`.strip()`, `.startswith()`), which templates use.
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> std::result::Result<String, _> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message))
        });
        env.add_template("chat", &self.source)
            .map_err(|e| llm_err(format!("chat template: {e}")))?;
        Ok(env)
    }

    /// The conversation as the model reads it; with `add_generation_prompt`, followed by what
    /// opens the assistant's reply.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let env = self.environment()?;
        let template =
            env.get_template("chat").map_err(|e| llm_err(format!("chat template: {e}")))?;
        let messages: Vec<_> = messages
            .iter()
            .map(|m| minijinja::context! { role => m.role, content => m.content })
            .collect();
        template
            .render(minijinja::context! {
                messages => messages,
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token,
                eos_token => self.eos_token,
            })
            .map_err(|e| llm_err(format!("chat template: {e}")))
    }
}

/// What one [`Chat::turn`] produced.
#[derive(Clone, Debug)]
pub struct Reply {
    /// The reply's text (its end token left out).
    pub text: String,
    /// The generation: new tokens, why it stopped, prefill and decode times.
    pub generation: Generation,
    /// Tokens of this turn fed to the model (those the cache did not hold).
    pub fed: usize,
    /// The logits the reply's first token was sampled from.
    pub prefill_logits: Vec<f32>,
}

/// A conversation with a language model whose KV cache persists from turn to turn.
pub struct Chat {
    model: TextModel,
    template: Option<ChatTemplate>,
    messages: Vec<Message>,
    /// The tokens the cache holds, in order.
    cached: Vec<i64>,
}

impl Chat {
    /// A conversation with `model` (its cache forgotten), rendered with `template` or, without
    /// one, as the messages' texts one after another.
    pub fn new(mut model: TextModel, template: Option<ChatTemplate>) -> Self {
        model.reset();
        Chat { model, template, messages: Vec::new(), cached: Vec::new() }
    }

    /// Starts the conversation over with a system message (before any turn, or after
    /// [`Chat::restart`]).
    pub fn set_system(&mut self, text: &str) {
        self.messages.retain(|m| m.role != "system");
        self.messages.insert(0, Message { role: "system".into(), content: text.into() });
    }

    /// The messages so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Positions of the cache in use.
    pub fn position(&self) -> usize {
        self.model.position()
    }

    /// The model.
    pub fn model(&self) -> &TextModel {
        &self.model
    }

    /// The tokens that end a reply: the program's end-of-sequence ids, and the id of the
    /// template's `eos_token` in `codec`'s vocabulary where it is another (a chat model's
    /// end-of-turn token).
    pub fn end_tokens(&self, codec: &dyn TextCodec) -> Vec<i64> {
        let mut ids = self.model.metadata().eos_ids.clone();
        let template_eos = self.template.as_ref().and_then(|t| codec.token_id(t.eos_token()));
        if let Some(id) = template_eos.filter(|id| !ids.contains(id)) {
            ids.push(id);
        }
        ids
    }

    /// Forgets every message but the system one, and the cache.
    pub fn restart(&mut self) {
        self.messages.retain(|m| m.role == "system");
        self.cached.clear();
        self.model.reset();
    }

    /// The text of the conversation with `messages`, ready for the assistant's reply.
    fn prompt_text(&self, messages: &[Message]) -> Result<String> {
        match &self.template {
            Some(t) => t.render(messages, true),
            None => Ok(messages.iter().map(|m| m.content.as_str()).collect()),
        }
    }

    /// The user says `text`; the model replies. Only the tokens the cache does not hold are
    /// fed. On [`Error::ContextFull`] (the history and the new message do not fit the
    /// context) nothing changes: [`Chat::restart`] and try again, or stop.
    pub fn turn<E: From<Error>>(
        &mut self,
        text: &str,
        codec: &dyn TextCodec,
        options: &mut GenerateOptions,
        on_token: impl FnMut(i64) -> std::result::Result<(), E>,
    ) -> std::result::Result<Reply, E> {
        let mut messages = self.messages.clone();
        messages.push(Message { role: "user".into(), content: text.into() });
        let tokens = codec.encode(&self.prompt_text(&messages)?)?;
        let keep = self.cached.iter().zip(&tokens).take_while(|(a, b)| a == b).count();
        // The last prompt token must be fed: its logits choose the first new token.
        let keep = keep.min(tokens.len().saturating_sub(1));
        if tokens.len() >= self.model.metadata().max_context_len {
            return Err(Error::ContextFull {
                position: keep,
                tokens: tokens.len() - keep,
                max_context_len: self.model.metadata().max_context_len,
            }
            .into());
        }
        self.model.rewind(keep);
        self.cached.truncate(keep);
        let mut prefill_logits = Vec::new();
        let generation =
            self.model.generate_here(&tokens[keep..], options, &mut prefill_logits, on_token)?;
        // The cache holds the prompt and every new token but the last (sampled, not fed).
        self.cached.extend_from_slice(&tokens[keep..]);
        let fed_new = generation.tokens.len().saturating_sub(1);
        self.cached.extend_from_slice(&generation.tokens[..fed_new]);
        let spoken: &[i64] = match generation.tokens.last() {
            Some(t) if options.eos.contains(t) => &generation.tokens[..generation.tokens.len() - 1],
            _ => &generation.tokens,
        };
        let reply_text = codec.decode(spoken)?;
        messages.push(Message { role: "assistant".into(), content: reply_text.clone() });
        self.messages = messages;
        Ok(Reply { text: reply_text, generation, fed: tokens.len() - keep, prefill_logits })
    }
}

impl std::fmt::Debug for Chat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chat")
            .field("messages", &self.messages)
            .field("cached", &self.cached.len())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, feature = "hf-tokenizer"))]
mod tests {
    use super::*;

    fn fixture() -> HfTokenizer {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/llm/tokenizer.json");
        HfTokenizer(tokenizers::Tokenizer::from_file(path).unwrap())
    }

    #[test]
    fn text_round_trips_and_bad_ids_are_errors() {
        let tok = fixture();
        let ids = TextCodec::encode(&tok, "The quick brown fox").unwrap();
        assert!(!ids.is_empty());
        assert_eq!(TextCodec::decode(&tok, &ids).unwrap(), "The quick brown fox");
        let err = TextCodec::decode(&tok, &[-1]).unwrap_err().to_string();
        assert!(err.contains("token id -1"), "{err}");
        let first = ids[0];
        let text = tok.0.id_to_token(u32::try_from(first).unwrap()).unwrap();
        assert_eq!(tok.token_id(&text), Some(first));
        assert_eq!(tok.token_id("no such token in any vocabulary"), None);
    }
}
