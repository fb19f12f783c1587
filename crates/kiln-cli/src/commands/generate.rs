//! `kiln generate MODEL.pte --prompt-tokens 1,17,300`: generate tokens with a language model
//! exported by ExecuTorch's LLM exporter, the way ExecuTorch's runner does: one prefill call
//! over the prompt, the first new token sampled from its logits, then one `forward` per token.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use kiln_runtime::llm::{GenerateOptions, Sampler, Stop, TextModel};
use kiln_runtime::Program;
use serde::Serialize;

use super::run::{load_options, EngineArgs, MemoryReport, Process};

/// Arguments of `kiln generate`.
#[derive(clap::Args)]
pub struct Args {
    /// The program (.pte), exported by ExecuTorch's LLM exporter with a KV cache (-kv).
    pub model: PathBuf,
    /// The prompt as token ids, comma-separated.
    #[arg(long, value_name = "IDS", value_delimiter = ',', num_args = 1..,
          required_unless_present = "prompt", conflicts_with = "prompt")]
    pub prompt_tokens: Vec<i64>,
    /// The prompt as text, encoded with --tokenizer (no special tokens added).
    #[arg(long, requires = "tokenizer")]
    pub prompt: Option<String>,
    /// A Hugging Face tokenizer (tokenizer.json): encodes --prompt and decodes the new tokens,
    /// printed as they are generated.
    #[arg(long, value_name = "tokenizer.json")]
    pub tokenizer: Option<PathBuf>,
    /// Most new tokens to generate [default: until the context is full or an end token].
    #[arg(long, value_name = "N")]
    pub max_new_tokens: Option<usize>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Token ids that end generation (printed, then stop) [default: the program's
    /// get_eos_ids, when it has one].
    #[arg(long = "eos", value_name = "ID", value_delimiter = ',')]
    pub eos: Vec<i64>,
    /// External constants (.ptd) for the program.
    #[arg(long, value_name = "FILE.ptd")]
    pub data: Option<PathBuf>,
    /// Print one JSON object at the end instead of streaming tokens: {"tokens": [...],
    /// "prefill_ms": ..., "decode_tokens_per_s": ..., "memory": {...}, ...}.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// How tokens are picked from the logits (`kiln generate`, `kiln chat`).
#[derive(clap::Args)]
pub struct SamplingArgs {
    /// Sampling temperature; without it (or at 0) generation is greedy.
    #[arg(long, value_name = "T", value_parser = parse_temperature)]
    pub temperature: Option<f32>,
    /// Nucleus sampling: sample among the most likely tokens holding this much probability
    /// (as ExecuTorch's runner; 1 samples from all). Only with --temperature.
    #[arg(long, value_name = "P", default_value_t = 0.9, requires = "temperature",
          value_parser = parse_top_p)]
    pub top_p: f32,
    /// Sample among the K most likely tokens only (before --top-p). Only with --temperature.
    #[arg(long, value_name = "K", requires = "temperature")]
    pub top_k: Option<usize>,
    /// Seed of the sampler's generator [default: from the clock]. Only with --temperature.
    #[arg(long, value_name = "S", requires = "temperature")]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampler these arguments ask for, and its seed (`None` when greedy).
    pub fn sampler(&self) -> (Sampler, Option<u64>) {
        let seed =
            self.temperature.filter(|&t| t > 0.0).map(|_| self.seed.unwrap_or_else(clock_seed));
        let sampler = match (self.temperature, seed) {
            (Some(t), Some(s)) => Sampler::new(t, self.top_p, s).with_top_k(self.top_k),
            _ => Sampler::greedy(),
        };
        (sampler, seed)
    }
}

#[derive(Serialize)]
struct Report {
    model: String,
    prompt_tokens: Vec<i64>,
    /// The new tokens only.
    tokens: Vec<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// `max_new_tokens`, `eos` or `max_context_len`.
    stop: &'static str,
    /// The prefill call plus sampling the first token.
    prefill_ms: f64,
    /// New tokens after the first, per second of the decode loop (as ExecuTorch's runner
    /// counts them).
    decode_tokens_per_s: f64,
    load_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    max_context_len: usize,
    /// The forward method's predicted peak and the process's measured one (as `kiln run
    /// --json` gives them).
    memory: MemoryReport,
}

/// Token ids as the tokenizer takes them.
fn token_ids(tokens: &[i64]) -> Result<Vec<u32>> {
    tokens.iter().map(|&t| u32::try_from(t).context("token id")).collect()
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0x6b69_6c6e, |d| d.as_secs())
}

/// `--temperature`: a finite number, 0 or more.
fn parse_temperature(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        Ok(t) => Err(format!("{t} must be 0 or more")),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

/// `--top-p`: a probability in (0, 1].
fn parse_top_p(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
        Ok(p) => Err(format!("{p} must be in (0, 1]")),
        Err(e) => Err(format!("{s:?}: {e}")),
    }
}

/// Runs `kiln generate`.
pub fn run(args: Args) -> Result<ExitCode> {
    let tokenizer = match &args.tokenizer {
        Some(path) => Some(
            tokenizers::Tokenizer::from_file(path)
                .map_err(|e| anyhow!("{}: not a tokenizer.json: {e}", path.display()))?,
        ),
        None => None,
    };
    let prompt: Vec<i64> = match (&args.prompt, &tokenizer) {
        (Some(text), Some(tok)) => {
            let enc = tok.encode(text.as_str(), false).map_err(|e| anyhow!("encoding: {e}"))?;
            enc.get_ids().iter().map(|&i| i64::from(i)).collect()
        }
        _ => args.prompt_tokens.clone(),
    };
    if prompt.is_empty() {
        bail!("the prompt has no tokens");
    }

    let process = Process::before_load();
    let started = Instant::now();
    let mut builder = Program::builder().options(load_options(&args.engine)?);
    if let Some(data) = &args.data {
        builder = builder.ptd(data)?;
    }
    let program = builder.load(crate::input::resolve(&args.model))?;
    let mut model = TextModel::new(&program)?;
    let load_ms = started.elapsed().as_secs_f64() * 1e3;
    let process = process.loaded(&model.method().footprint());
    let max_context_len = model.metadata().max_context_len;
    let eos = if args.eos.is_empty() { model.metadata().eos_ids.clone() } else { args.eos.clone() };
    let (sampler, seed) = args.sampling.sampler();
    let mut options = GenerateOptions { max_new_tokens: args.max_new_tokens, sampler, eos };
    // Printed: the new tokens' text as it completes (a character split over tokens waits for
    // its last token). `--json` decodes them once, at the end.
    let mut stream = tokenizer.as_ref().filter(|_| !args.json).map(|t| t.decode_stream(true));
    let mut out = std::io::stdout().lock();
    let generation = model.generate(&prompt, &mut options, |token| -> Result<()> {
        if args.json {
            return Ok(());
        }
        match &mut stream {
            Some(s) => {
                let id = u32::try_from(token).context("token id")?;
                let text = s.step(id).map_err(|e| anyhow!("decoding: {e}"))?;
                write!(out, "{}", text.unwrap_or_default())?;
            }
            None => write!(out, "{token} ")?,
        }
        Ok(out.flush()?)
    })?;
    let prefill_ms = generation.prefill.as_secs_f64() * 1e3;
    let decode_tokens_per_s = generation.decode_tokens_per_s();

    if args.json {
        let text = match &tokenizer {
            Some(t) => Some(
                t.decode(&token_ids(&generation.tokens)?, true)
                    .map_err(|e| anyhow!("decoding: {e}"))?,
            ),
            None => None,
        };
        let report = Report {
            model: args.model.display().to_string(),
            prompt_tokens: prompt.clone(),
            tokens: generation.tokens,
            text,
            stop: generation.stop.name(),
            prefill_ms,
            decode_tokens_per_s,
            load_ms,
            seed,
            max_context_len,
            memory: MemoryReport::predict(process, model.method().footprint(), 1)
                .measured(model.method().scratch_bytes()),
        };
        crate::output::print_json(&report)?;
    } else {
        writeln!(out)?;
        if generation.stop == Stop::MaxContextLen {
            eprintln!(
                "kiln: stopped at the model's maximum context length of {max_context_len} tokens"
            );
        }
        eprintln!(
            "{} prompt tokens in {prefill_ms:.1} ms ({:.0} tokens/s); {} new tokens, \
             {decode_tokens_per_s:.0} tokens/s decoding; loaded in {load_ms:.0} ms",
            prompt.len(),
            prompt.len() as f64 / (prefill_ms / 1e3).max(1e-9),
            generation.tokens.len(),
        );
    }
    Ok(ExitCode::SUCCESS)
}
