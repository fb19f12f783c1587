//! `llm::Chat` on ExecuTorch's LLM exports (`tests/fixtures/llm`): a scripted conversation
//! whose second turn feeds only the new tokens, and whose first logits of that turn equal,
//! within 1e-3, those of one prefill over the whole history (the cached decode steps and one
//! prefill's rows may round differently); the templates of Hugging Face tokenizer configs;
//! a full context refused without changing the conversation.

use std::path::PathBuf;

use kiln_runtime::llm::{
    argmax, Chat, ChatTemplate, GenerateOptions, HfTokenizer, Message, Sampler, TextCodec,
    TextModel,
};
use kiln_runtime::{Error, Program};

fn llm_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llm")
}

/// The fixtures' tokenizer (byte-level BPE, trained by `tools/fixtures/export_llama.py`).
fn codec() -> HfTokenizer {
    HfTokenizer(tokenizers::Tokenizer::from_file(llm_dir().join("tokenizer.json")).unwrap())
}

const TEMPLATE: &str =
    "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}\n\
                        {% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";

fn greedy(max_new_tokens: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: Some(max_new_tokens),
        sampler: Sampler::greedy(),
        eos: vec![],
    }
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The second turn's first logits equal one prefill over the history, for a float and an
/// 8da4w export, with a template and without one.
#[test]
fn second_turn_continues_the_cache() {
    let codec = codec();
    for variant in ["sdpa", "sdpa_xnnpack_8da4w", "fp32"] {
        for template in [Some(TEMPLATE), None] {
            let program = Program::load(llm_dir().join(format!("{variant}.pte"))).unwrap();
            let template = template.map(|t| ChatTemplate::new(t, "", "").unwrap());
            let mut chat = Chat::new(TextModel::new(&program).unwrap(), template.clone());
            let none = |_| Ok::<(), Error>(());
            let first = chat.turn("The quick brown fox", &codec, &mut greedy(5), none).unwrap();
            assert_eq!(first.generation.tokens.len(), 5, "{variant}");
            let held = chat.position();
            let second = chat.turn(" the lazy dog", &codec, &mut greedy(3), none).unwrap();
            // Only what the cache did not hold was fed.
            let history = match &template {
                Some(t) => t.render(chat.messages().split_last().unwrap().1, true).unwrap(),
                None => chat.messages()[..3].iter().map(|m| m.content.as_str()).collect(),
            };
            let all = codec.encode(&history).unwrap();
            assert!(second.fed < all.len() && second.fed + held >= all.len(), "{variant}");
            // One prefill over the whole history.
            let mut fresh = TextModel::new(&program).unwrap();
            let want = fresh.prefill(&all).unwrap().to_vec();
            let diff = max_diff(&second.prefill_logits, &want);
            assert!(diff < 1e-3, "{variant} template {}: {diff}", template.is_some());
            assert_eq!(second.generation.tokens[0] as usize, argmax(&want), "{variant}");
        }
    }
}

/// A message past the context is refused and changes nothing; a restart makes room.
#[test]
fn full_context_is_refused_then_restart_makes_room() {
    let codec = codec();
    let program = Program::load(llm_dir().join("sdpa.pte")).unwrap();
    let mut chat = Chat::new(TextModel::new(&program).unwrap(), None);
    chat.set_system("kiln reads, verifies and runs programs. ");
    let none = |_| Ok::<(), Error>(());
    chat.turn("The quick brown fox", &codec, &mut greedy(4), none).unwrap();
    let before = (chat.messages().to_vec(), chat.position());
    let long = "Pack my box with five dozen liquor jugs. ".repeat(8);
    match chat.turn(&long, &codec, &mut greedy(4), none) {
        Err(Error::ContextFull { max_context_len, .. }) => assert_eq!(max_context_len, 64),
        other => panic!("expected a full context, got {other:?}"),
    }
    assert_eq!((chat.messages().to_vec(), chat.position()), before);
    chat.restart();
    assert_eq!(chat.messages().len(), 1);
    assert_eq!(chat.position(), 0);
    chat.turn("The lazy dog", &codec, &mut greedy(2), none).unwrap();
    assert_eq!(chat.messages().len(), 3);
}

/// Templates from tokenizer configs: a string, a named list, special tokens as objects; a
/// template's own `raise_exception` and Python string methods.
#[test]
fn templates_from_tokenizer_configs() {
    let config = r#"{"bos_token": {"content": "<s>"}, "eos_token": "</s>",
        "chat_template": "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content.strip() }} [/INST]{% else %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"}"#;
    let t = ChatTemplate::from_tokenizer_config(config).unwrap().unwrap();
    let m = |role: &str, content: &str| Message { role: role.into(), content: content.into() };
    let text = t.render(&[m("user", "  hi "), m("assistant", "hello")], false).unwrap();
    assert_eq!(text, "<s>[INST] hi [/INST]hello</s>");
    assert_eq!(t.eos_token(), "</s>");
    let named = r#"{"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "{{ messages | length }}"}]}"#;
    let t = ChatTemplate::from_tokenizer_config(named).unwrap().unwrap();
    assert_eq!(t.render(&[m("user", "a")], true).unwrap(), "1");
    assert!(ChatTemplate::from_tokenizer_config(r#"{"eos_token": "x"}"#).unwrap().is_none());
    let raising =
        "{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}";
    let t = ChatTemplate::new(raising, "", "").unwrap();
    let err = t.render(&[m("user", "a")], true).unwrap_err().to_string();
    assert!(err.contains("system first"), "{err}");
    assert!(ChatTemplate::new("{% for %}", "", "").is_err());
}

#[test]
fn a_reply_ends_at_the_programs_end_tokens_and_the_templates_own() {
    let program = Program::load(llm_dir().join("sdpa.pte")).unwrap();
    let codec = codec();
    let program_eos = TextModel::new(&program).unwrap().metadata().eos_ids.clone();
    let plain = Chat::new(TextModel::new(&program).unwrap(), None);
    assert_eq!(plain.end_tokens(&codec), program_eos);
    // A template whose end-of-turn token is a word of the fixture's vocabulary.
    let word = codec.encode("fox").unwrap()[0];
    let text = codec.0.id_to_token(u32::try_from(word).unwrap()).unwrap();
    let template = ChatTemplate::new(TEMPLATE, "", &text).unwrap();
    let chat = Chat::new(TextModel::new(&program).unwrap(), Some(template));
    let mut expected = program_eos.clone();
    if !expected.contains(&word) {
        expected.push(word);
    }
    assert_eq!(chat.end_tokens(&codec), expected);
    // One the vocabulary does not have adds nothing.
    let unknown = ChatTemplate::new(TEMPLATE, "", "<|no such token|>").unwrap();
    let chat = Chat::new(TextModel::new(&program).unwrap(), Some(unknown));
    assert_eq!(chat.end_tokens(&codec), program_eos);
}
