//! `kiln chat MODEL.pte --tokenizer tokenizer.json`: a conversation with a language model
//! exported by ExecuTorch's LLM exporter whose KV cache persists from turn to turn: each
//! reply costs the new message's tokens, not the whole history's.
//!
//! Interactive (a prompt, the reply streamed, then a line of figures), or `--json`: one user
//! message per line of standard input, one JSON object per reply on standard output.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use kiln_runtime::llm::{Chat, ChatTemplate, GenerateOptions, HfTokenizer, TextModel};
use kiln_runtime::Program;
use serde::Serialize;

use super::run::{load_options, EngineArgs};

/// Arguments of `kiln chat`.
#[derive(clap::Args)]
pub struct Args {
    /// The program (.pte), exported by ExecuTorch's LLM exporter with a KV cache (-kv).
    pub model: PathBuf,
    /// A Hugging Face tokenizer (tokenizer.json). The chat template is the `chat_template` of
    /// the tokenizer_config.json beside it, if there is one.
    #[arg(long, value_name = "tokenizer.json")]
    pub tokenizer: PathBuf,
    /// A Jinja chat template (as Hugging Face's `apply_chat_template` renders it) instead of
    /// the tokenizer config's; without either, the messages' texts are joined as they are.
    #[arg(long, value_name = "FILE")]
    pub chat_template: Option<PathBuf>,
    /// A system message opening the conversation.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Most new tokens a reply may have [default: until an end token or the context is full].
    #[arg(long, value_name = "N")]
    pub max_new_tokens: Option<usize>,
    #[command(flatten)]
    pub sampling: super::generate::SamplingArgs,
    /// Token ids that end a reply [default: the program's get_eos_ids and the template's
    /// eos_token].
    #[arg(long = "eos", value_name = "ID", value_delimiter = ',')]
    pub eos: Vec<i64>,
    /// When the context is full: ask (interactive default), `stop`, or `restart` the
    /// conversation (keeping the system message) and go on (`--json` default: stop).
    #[arg(long, value_name = "WHAT")]
    pub on_full: Option<OnFull>,
    /// External constants (.ptd) for the program.
    #[arg(long, value_name = "FILE.ptd")]
    pub data: Option<PathBuf>,
    /// Read one message per line of standard input, print one JSON object per reply:
    /// {"reply", "tokens", "stop", "fed_tokens", "position", "prefill_ms",
    /// "decode_tokens_per_s"}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// What to do when a message does not fit the context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnFull {
    /// Ask (interactive only).
    Ask,
    /// End the chat.
    Stop,
    /// Forget the conversation (but the system message) and answer the message afresh.
    Restart,
}

#[derive(Serialize)]
struct TurnReport<'a> {
    reply: &'a str,
    tokens: &'a [i64],
    /// `max_new_tokens`, `eos` or `max_context_len`.
    stop: &'static str,
    /// Tokens of this turn fed to the model (the rest of the history was in the cache).
    fed_tokens: usize,
    /// Positions of the context in use after the turn.
    position: usize,
    max_context_len: usize,
    prefill_ms: f64,
    decode_tokens_per_s: f64,
    /// Whether the conversation was started over to make room for this message.
    restarted: bool,
}

/// The chat template: `--chat-template`, else the tokenizer config beside the tokenizer.
fn template(args: &Args) -> Result<Option<ChatTemplate>> {
    let config_path = args.tokenizer.with_file_name("tokenizer_config.json");
    let config = match std::fs::read_to_string(&config_path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| config_path.display().to_string()),
    };
    let from_config = match &config {
        Some(text) => ChatTemplate::from_tokenizer_config(text)
            .with_context(|| config_path.display().to_string())?,
        None => None,
    };
    let Some(path) = &args.chat_template else { return Ok(from_config) };
    let source = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let (bos, eos) = match &config {
        Some(text) => special_tokens(text),
        None => (String::new(), String::new()),
    };
    Ok(Some(ChatTemplate::new(source, &bos, &eos).with_context(|| path.display().to_string())?))
}

/// The `bos_token` and `eos_token` texts of a tokenizer config (empty where absent).
fn special_tokens(config: &str) -> (String, String) {
    let v: serde_json::Value = serde_json::from_str(config).unwrap_or_default();
    let text = |key: &str| match v.get(key) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(o) => o.get("content").and_then(|c| c.as_str()).unwrap_or_default().to_string(),
        None => String::new(),
    };
    (text("bos_token"), text("eos_token"))
}

fn load_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer> {
    tokenizers::Tokenizer::from_file(path)
        .map_err(|e| anyhow!("{}: not a tokenizer.json: {e}", path.display()))
}

/// Runs `kiln chat`.
pub fn run(args: Args) -> Result<ExitCode> {
    let codec = HfTokenizer(load_tokenizer(&args.tokenizer)?);
    let template = template(&args)?;
    let started = Instant::now();
    let mut builder = Program::builder().options(load_options(&args.engine)?);
    if let Some(data) = &args.data {
        builder = builder.ptd(data)?;
    }
    let program = builder.load(crate::input::resolve(&args.model))?;
    let model = TextModel::new(&program)?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let max_context_len = model.metadata().max_context_len;
    let mut chat = Chat::new(model, template);
    let eos = if args.eos.is_empty() { chat.end_tokens(&codec) } else { args.eos.clone() };
    let (sampler, _) = args.sampling.sampler();
    let mut options = GenerateOptions { max_new_tokens: args.max_new_tokens, sampler, eos };
    if let Some(system) = &args.system {
        chat.set_system(system);
    }
    let on_full = args.on_full.unwrap_or(if args.json { OnFull::Stop } else { OnFull::Ask });
    if args.json && on_full == OnFull::Ask {
        eprintln!(
            "kiln: error: --on-full ask needs a terminal; with --json choose stop or restart"
        );
        return Ok(ExitCode::from(2));
    }
    if !args.json {
        eprintln!(
            "kiln chat: {} loaded in {load_ms:.0} ms, context {max_context_len} tokens. An empty \
             line or end of input ends the chat; /restart starts over.",
            args.model.display()
        );
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut out = std::io::stdout().lock();
    loop {
        if !args.json {
            write!(out, "> ")?;
            out.flush()?;
        }
        let Some(line) = lines.next().transpose()? else { break };
        let message = line.trim_end_matches(['\r', '\n']);
        if message.is_empty() && !args.json {
            break;
        }
        if message == "/restart" && !args.json {
            chat.restart();
            eprintln!("(conversation started over)");
            continue;
        }
        let mut restarted = false;
        let reply = loop {
            let mut stream = (!args.json).then(|| codec.0.decode_stream(true));
            let turn = chat.turn(message, &codec, &mut options, |token| -> Result<()> {
                if let Some(s) = &mut stream {
                    let id = u32::try_from(token).context("token id")?;
                    let text = s.step(id).map_err(|e| anyhow!("decoding: {e}"))?;
                    write!(out, "{}", text.unwrap_or_default())?;
                    out.flush()?;
                }
                Ok(())
            });
            match turn {
                Ok(reply) => break Some(reply),
                Err(e) if is_context_full(&e) && !restarted => {
                    let restart = match on_full {
                        OnFull::Restart => true,
                        OnFull::Stop => false,
                        OnFull::Ask => ask_restart(&mut lines, &chat, max_context_len)?,
                    };
                    if !restart {
                        eprintln!(
                            "kiln: the context is full ({} of {max_context_len} tokens in use); \
                             the chat ends",
                            chat.position()
                        );
                        break None;
                    }
                    chat.restart();
                    restarted = true;
                }
                Err(e) => return Err(e),
            }
        };
        let Some(reply) = reply else { return Ok(ExitCode::from(1)) };
        let g = &reply.generation;
        let prefill_ms = g.prefill.as_secs_f64() * 1e3;
        if args.json {
            let report = TurnReport {
                reply: &reply.text,
                tokens: &g.tokens,
                stop: g.stop.name(),
                fed_tokens: reply.fed,
                position: chat.position(),
                max_context_len,
                prefill_ms,
                decode_tokens_per_s: g.decode_tokens_per_s(),
                restarted,
            };
            serde_json::to_writer(&mut out, &report)?;
            writeln!(out)?;
            out.flush()?;
        } else {
            writeln!(out)?;
            eprintln!(
                "[{} tokens, {:.1} tokens/s; {} new prompt tokens in {prefill_ms:.0} ms; context \
                 {}/{max_context_len}]",
                g.tokens.len(),
                g.decode_tokens_per_s(),
                reply.fed,
                chat.position(),
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn is_context_full(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<kiln_runtime::Error>(), Some(kiln_runtime::Error::ContextFull { .. }))
}

/// Asks whether to start over; `false` on "stop" or end of input.
fn ask_restart(
    lines: &mut impl Iterator<Item = std::io::Result<String>>,
    chat: &Chat,
    max_context_len: usize,
) -> Result<bool> {
    loop {
        eprint!(
            "The context is full ({} of {max_context_len} tokens in use). [r]estart the \
             conversation or [s]top? ",
            chat.position()
        );
        match lines.next().transpose()?.as_deref().map(str::trim) {
            Some("r" | "restart") => return Ok(true),
            Some("s" | "stop") | None => return Ok(false),
            Some(_) => continue,
        }
    }
}
