//! `kiln chat` on ExecuTorch 1.5.1's LLM exports (`tests/fixtures/llm/`), scripted through
//! standard input: the first reply is ExecuTorch's greedy continuation of the same text (the
//! fixture's `tokenizer.expected.json`), the second turn feeds only its new tokens, a full
//! context ends the chat or starts it over as asked, and usage errors exit 2.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

fn fixture(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llm").join(name);
    p.to_str().unwrap().to_string()
}

/// Runs `kiln ARGS` with `input` on standard input: exit code, stdout, stderr.
fn chat(args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn lines(stdout: &str) -> Vec<Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn json_turns_keep_the_cache() {
    let exp: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tokenizer.expected.json")).unwrap())
            .unwrap();
    let prompt = exp["prompt"].as_str().unwrap();
    let (pte, tok) = (fixture("fp32.pte"), fixture("tokenizer.json"));
    let args = ["chat", &pte, "--tokenizer", &tok, "--json", "--max-new-tokens", "6"];
    let (code, stdout, stderr) = chat(&args, &format!("{prompt}\n the lazy dog\n"));
    assert_eq!(code, 0, "{stderr}");
    let turns = lines(&stdout);
    assert_eq!(turns.len(), 2, "{stdout}");
    // No template beside the fixture's tokenizer: the first turn is the prompt as it is.
    let want: Vec<Value> = exp["tokens"].as_array().unwrap()[..6].to_vec();
    assert_eq!(turns[0]["tokens"].as_array().unwrap(), &want);
    assert_eq!(turns[0]["fed_tokens"], exp["prompt_ids"].as_array().unwrap().len());
    // The second turn feeds less than the whole history.
    let (fed, position) =
        (turns[1]["fed_tokens"].as_u64().unwrap(), turns[1]["position"].as_u64().unwrap());
    assert!(fed < position - 5, "{stdout}");
    assert!(turns[1]["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(turns[1]["restarted"], false);
}

#[test]
fn a_full_context_stops_or_restarts_as_asked() {
    let (pte, tok) = (fixture("fp32.pte"), fixture("tokenizer.json"));
    let long = "Pack my box with five dozen liquor jugs. ".repeat(3);
    let input = format!("The quick brown fox\n{long}\n{long}\n");
    let base = ["chat", &pte, "--tokenizer", &tok, "--json", "--max-new-tokens", "4"];
    let (code, stdout, stderr) = chat(&[&base[..], &["--on-full", "stop"]].concat(), &input);
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.contains("the context is full"), "{stderr}");
    let (code, stdout, stderr) = chat(&[&base[..], &["--on-full", "restart"]].concat(), &input);
    assert_eq!(code, 0, "{stderr}");
    assert!(lines(&stdout).iter().any(|t| t["restarted"] == true), "{stdout}");
    let (code, _, stderr) = chat(&[&base[..], &["--on-full", "ask"]].concat(), &input);
    assert_eq!(code, 2, "{stderr}");
}

#[test]
fn interactive_turns_print_the_reply_and_the_figures() {
    let (pte, tok) = (fixture("fp32.pte"), fixture("tokenizer.json"));
    let args = ["chat", &pte, "--tokenizer", &tok, "--max-new-tokens", "4", "--system", "kiln. "];
    let (code, stdout, stderr) = chat(&args, "The quick brown fox\n/restart\nthe lazy dog\n\n");
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("> "), "{stdout}");
    assert_eq!(stderr.matches("tokens/s").count(), 2, "{stderr}");
    assert!(stderr.contains("conversation started over"), "{stderr}");
}
