//! `kiln generate` on ExecuTorch 1.5.1's LLM exports (`tests/fixtures/llm/`): greedy tokens equal
//! ExecuTorch's, `--tokenizer` encodes and decodes as Hugging Face `tokenizers` does (the
//! fixture's `tokenizer.expected.json`), sampling is reproducible with `--seed`, and bad input
//! gets a clear error with the right exit code.

mod common;

use std::path::PathBuf;

use common::kiln;
use serde_json::Value;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llm").join(name);
    p.to_str().unwrap().to_string()
}

fn expected(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(name)).unwrap()).unwrap()
}

fn csv(v: &Value) -> String {
    let ids: Vec<String> = v.as_array().unwrap().iter().map(|t| t.to_string()).collect();
    ids.join(",")
}

#[test]
fn greedy_json_output_has_executorchs_tokens() {
    for variant in ["fp32", "sdpa_xnnpack_8da4w"] {
        let exp = expected(&format!("{variant}.expected.json"));
        let pte = fixture(&format!("{variant}.pte"));
        let prompt = csv(&exp["prompt"]);
        let (code, stdout, stderr) = kiln(&[
            "generate",
            &pte,
            "--prompt-tokens",
            &prompt,
            "--max-new-tokens",
            "16",
            "--json",
        ]);
        assert_eq!(code, 0, "{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["tokens"], exp["tokens"], "{variant}");
        assert_eq!(v["prompt_tokens"], exp["prompt"]);
        assert_eq!(v["stop"], "max_new_tokens");
        assert!(v["prefill_ms"].as_f64().unwrap() > 0.0);
        assert!(v["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn a_text_prompt_is_encoded_and_the_new_tokens_decoded_as_tokenizers_does() {
    let exp = expected("tokenizer.expected.json");
    let (pte, tok) = (fixture("fp32.pte"), fixture("tokenizer.json"));
    let prompt = exp["prompt"].as_str().unwrap();
    let args =
        ["generate", &pte, "--tokenizer", &tok, "--prompt", prompt, "--max-new-tokens", "16"];
    let (code, stdout, stderr) = kiln(&[&args[..], &["--json"]].concat());
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["prompt_tokens"], exp["prompt_ids"]);
    assert_eq!(v["tokens"], exp["tokens"]);
    assert_eq!(v["text"], exp["text"]);
    // Streamed: the same text on stdout, the timing on stderr.
    let (code, stdout, stderr) = kiln(&args);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim_end_matches('\n'), exp["text"].as_str().unwrap());
    assert!(stderr.contains("tokens/s decoding"), "{stderr}");
}

#[test]
fn sampling_is_reproducible_with_a_seed() {
    let pte = fixture("xnnpack_8da4w.pte");
    let run = |seed: &str| {
        let args = ["generate", &pte, "--prompt-tokens", "5,6,7", "--max-new-tokens", "24"];
        let (code, stdout, stderr) =
            kiln(&[&args[..], &["--temperature", "1.0", "--seed", seed, "--json"]].concat());
        assert_eq!(code, 0, "{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(v["seed"].as_u64().unwrap().to_string(), seed);
        v["tokens"].clone()
    };
    assert_eq!(run("11"), run("11"));
    assert_ne!(run("11"), run("12"), "two seeds drew the same 24 tokens");
}

#[test]
fn generation_stops_at_the_context_length_with_a_message() {
    let exp = expected("fp32.expected.json");
    let max = exp["max_seq_len"].as_u64().unwrap() as usize;
    let pte = fixture("fp32.pte");
    let prompt = csv(&exp["prompt"]);
    let (code, stdout, stderr) = kiln(&["generate", &pte, "--prompt-tokens", &prompt, "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["stop"], "max_context_len");
    // As ExecuTorch's runner: max_context_len - prompt tokens are generated.
    let n = exp["prompt"].as_array().unwrap().len();
    assert_eq!(v["tokens"].as_array().unwrap().len(), max - n);
    let (code, _, stderr) = kiln(&["generate", &pte, "--prompt-tokens", &prompt]);
    assert_eq!(code, 0);
    assert!(stderr.contains(&format!("maximum context length of {max}")), "{stderr}");
}

#[test]
fn bad_input_gets_a_clear_error() {
    let pte = fixture("fp32.pte");
    // A prompt filling the context.
    let long: Vec<String> = (0..64).map(|i| (i % 100).to_string()).collect();
    let (code, _, stderr) = kiln(&["generate", &pte, "--prompt-tokens", &long.join(",")]);
    assert_eq!(code, 1);
    assert!(stderr.contains("fill the model's maximum context length of 64"), "{stderr}");
    // A token outside the vocabulary.
    let (code, _, stderr) = kiln(&["generate", &pte, "--prompt-tokens", "1,100000"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("token 100000 is outside the vocabulary of 320"), "{stderr}");
    // Not an LLM export.
    let cnn =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pte/tiny_cnn.pte");
    let (code, _, stderr) = kiln(&["generate", cnn.to_str().unwrap(), "--prompt-tokens", "1"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no get_max_seq_len method"), "{stderr}");
    // The 8da4w export without XNNPACK that ExecuTorch cannot run either.
    let (code, _, stderr) =
        kiln(&["generate", &fixture("portable_8da4w.pte"), "--prompt-tokens", "1,2"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no scales to dequantize with"), "{stderr}");
    // Usage errors: a text prompt without a tokenizer, no prompt at all.
    let (code, _, _) = kiln(&["generate", &pte, "--prompt", "hello"]);
    assert_eq!(code, 2);
    let (code, _, _) = kiln(&["generate", &pte]);
    assert_eq!(code, 2);
}

#[test]
fn inspect_shows_the_metadata_methods_values() {
    for variant in ["fp32", "sdpa_xnnpack_8da4w"] {
        let exp = expected(&format!("{variant}.expected.json"));
        let (code, stdout, stderr) =
            kiln(&["inspect", "--json", &fixture(&format!("{variant}.pte"))]);
        assert_eq!(code, 0, "{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        // ExecuTorch's values of the constant methods, as its runtime returned them.
        for (name, want) in exp["metadata"].as_object().unwrap() {
            let m = v["methods"].as_array().unwrap().iter().find(|m| m["name"] == *name);
            let m = m.unwrap_or_else(|| panic!("{variant}: no method {name}"));
            assert_eq!(m["outputs"][0]["value"], *want, "{variant}: {name}");
        }
        let (_, text, _) = kiln(&["inspect", &fixture(&format!("{variant}.pte"))]);
        let max = exp["metadata"]["get_max_seq_len"].as_i64().unwrap();
        assert!(text.contains(&format!("output  0  int    = {max}")), "{text}");
    }
}
