//! Acceptance for ExecuTorch's LLM exports (`tests/fixtures/llm`, made by
//! `tools/fixtures/export_llama.py` with ExecuTorch 1.5.1's llama exporter): for every variant,
//! compiled and not, the metadata methods read as ExecuTorch reads them, the prefill logits
//! match ExecuTorch's (1e-4 float32, 2e-2 for 8da4w), and greedy generation gives exactly
//! ExecuTorch's tokens (all 16 for float32, the first 8 for 8da4w) with every decode step's
//! logits within the same tolerance. The KV cache persists across calls, a prefill at
//! position 0 starts over, and the context length bounds every call.

mod common;

use std::path::PathBuf;

use common::read_npy;
use kiln_kernels::DType;
use kiln_runtime::llm::{argmax, LlmMetadata, TextModel};
use kiln_runtime::{Error, LoadOptions, Program};
use serde_json::Value;

fn llm_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llm")
}

fn expected(variant: &str) -> Value {
    let path = llm_dir().join(format!("{variant}.expected.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn load(variant: &str, compile: bool) -> Program {
    let options = LoadOptions { compile, ..LoadOptions::default() };
    Program::builder().options(options).load(llm_dir().join(format!("{variant}.pte"))).unwrap()
}

fn floats(variant: &str, what: &str) -> (Vec<usize>, Vec<f32>) {
    let a = read_npy(&llm_dir().join(format!("{variant}.{what}.npy")), Some(DType::Float));
    assert_eq!(a.dtype, DType::Float);
    let v = a.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    (a.sizes, v)
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect()
}

/// Every variant ExecuTorch runs, from the fixture directory.
fn variants() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(llm_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".expected.json").map(str::to_string)
        })
        .filter(|n| n != "tokenizer" && expected(n)["runs"] == Value::Bool(true))
        .collect();
    names.sort();
    names
}

fn check_variant(variant: &str, compile: bool) -> Result<String, String> {
    let exp = expected(variant);
    let quantized = variant.contains("8da4w");
    let tol = if quantized { 2e-2 } else { 1e-4 };
    let must_match = if quantized { 8 } else { 16 };
    let program = load(variant, compile);
    let mut model = TextModel::new(&program).map_err(|e| e.to_string())?;

    let meta = model.metadata().clone();
    let m = &exp["metadata"];
    let want = LlmMetadata {
        max_seq_len: m["get_max_seq_len"].as_u64().unwrap() as usize,
        max_context_len: m["get_max_context_len"].as_u64().unwrap() as usize,
        vocab_size: m["get_vocab_size"].as_u64().map(|v| v as usize),
        n_layers: m["get_n_layers"].as_u64().map(|v| v as usize),
        use_kv_cache: m["use_kv_cache"].as_bool().unwrap(),
        use_sdpa_with_kv_cache: m["use_sdpa_with_kv_cache"].as_bool().unwrap(),
        enable_dynamic_shape: m["enable_dynamic_shape"].as_bool().unwrap(),
        bos_id: None,
        eos_ids: Vec::new(),
    };
    if meta != want {
        return Err(format!("metadata {meta:?}, ExecuTorch read {want:?}"));
    }

    let prompt = ints(&exp["prompt"]);
    let want_tokens = ints(&exp["tokens"]);
    let (_, prefill_want) = floats(variant, "prefill_logits");
    let (decode_sizes, decode_want) = floats(variant, "decode_logits");
    let vocab = decode_sizes[1];

    let logits = model.prefill(&prompt).map_err(|e| e.to_string())?.to_vec();
    let d = max_diff(&logits, &prefill_want);
    if d > tol {
        return Err(format!("prefill logits differ by {d} (tolerance {tol})"));
    }
    let mut worst = d;
    let mut tokens = vec![argmax(&logits) as i64];
    let mut step = 0;
    while tokens.len() < want_tokens.len() {
        let last = *tokens.last().unwrap();
        let logits = model.decode(last).map_err(|e| e.to_string())?.to_vec();
        // Logits compare while the token fed is ExecuTorch's.
        if last == want_tokens[tokens.len() - 1] {
            let d = max_diff(&logits, &decode_want[step * vocab..(step + 1) * vocab]);
            if d > tol {
                return Err(format!("decode step {step} logits differ by {d} (tolerance {tol})"));
            }
            worst = worst.max(d);
        }
        step += 1;
        tokens.push(argmax(&logits) as i64);
    }
    if tokens[..must_match] != want_tokens[..must_match] {
        return Err(format!("tokens {tokens:?}, ExecuTorch generated {want_tokens:?}"));
    }
    if model.position() != prompt.len() + want_tokens.len() - 1 {
        return Err(format!("position {} after generating", model.position()));
    }

    // Starting over at position 0 overwrites the cache and gives the same logits again.
    model.reset();
    let again = model.prefill(&prompt).map_err(|e| e.to_string())?.to_vec();
    if again != logits_of_first_prefill(&program, &prompt) {
        return Err("a second prefill at position 0 gives other logits".into());
    }
    let same = tokens == want_tokens;
    Ok(format!("max diff {worst:.2e}, {} of 16 tokens equal", if same { 16 } else { must_match }))
}

/// The prefill logits of a freshly loaded model.
fn logits_of_first_prefill(program: &Program, prompt: &[i64]) -> Vec<f32> {
    TextModel::new(program).unwrap().prefill(prompt).unwrap().to_vec()
}

#[test]
fn every_llm_variant_generates_executorchs_tokens() {
    let names = variants();
    assert!(names.len() >= 7, "fixtures missing: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        for compile in [true, false] {
            match check_variant(name, compile) {
                Ok(summary) => println!("{name} (compile {compile}): {summary}"),
                Err(e) => failures.push(format!("{name} (compile {compile}): {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_context_length_bounds_every_call() {
    let program = load("sdpa", true);
    let mut model = TextModel::new(&program).unwrap();
    let max = model.metadata().max_context_len;
    let per_call = model.max_tokens_per_call();
    assert_eq!(per_call, model.metadata().max_seq_len - 1);
    // A prompt longer than one call takes goes in chunks and fills the cache exactly.
    let prompt: Vec<i64> = (0..max as i64).map(|i| i % 300).collect();
    model.prefill(&prompt).unwrap();
    assert_eq!(model.position(), max);
    match model.decode(1) {
        Err(Error::ContextFull { position, tokens: 1, max_context_len }) => {
            assert_eq!((position, max_context_len), (max, max));
        }
        other => panic!("decode past the context: {other:?}"),
    }
    model.reset();
    let too_long: Vec<i64> = vec![1; max + 1];
    assert!(matches!(model.prefill(&too_long), Err(Error::ContextFull { .. })));
    assert!(matches!(model.prefill(&[]), Err(Error::Llm { .. })));
    // A token outside the vocabulary is refused before it reaches the embedding.
    let vocab = model.metadata().vocab_size.unwrap() as i64;
    let err = model.prefill(&[1, vocab]).unwrap_err().to_string();
    assert!(err.contains(&format!("token {vocab} is outside the vocabulary")), "{err}");
}

#[test]
fn the_int8_weights_without_scales_of_a_portable_8da4w_export_are_refused() {
    // ExecuTorch 1.5.1 fails on this program too (its linear has int8 weights and no scales).
    assert_eq!(expected("portable_8da4w")["runs"], Value::Bool(false));
    for compile in [true, false] {
        let program = load("portable_8da4w", compile);
        let mut model = TextModel::new(&program).unwrap();
        let err = model.prefill(&ints(&expected("portable_8da4w")["prompt"])).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, Error::Kernel { .. })
                && msg.contains("aten::linear.out")
                && msg.contains("-X"),
            "{msg}"
        );
    }
}

#[test]
fn a_program_without_llm_metadata_is_not_a_text_model() {
    let path = common::pte_dir().join("tiny_cnn.pte");
    let program = Program::load(&path).unwrap();
    let err = TextModel::new(&program).unwrap_err();
    assert!(matches!(&err, Error::Llm { reason } if reason.contains("get_max_seq_len")), "{err}");
}
