"""`Program.chat` on ExecuTorch 1.5.1's LLM exports (tests/fixtures/llm): the first reply is
ExecuTorch's greedy continuation of the same text (tokenizer.expected.json), later turns feed
only what the cache does not hold, a template file is used, and a full context raises without
changing the conversation."""

import pytest

import kiln
from conftest import FIXTURES, expected

LLM = FIXTURES / "llm"


def test_turns_keep_the_cache():
    record = expected(LLM / "tokenizer.expected.json")
    chat = kiln.load(LLM / "fp32.pte").chat(LLM / "tokenizer.json")
    seen = []
    first = chat.say(record["prompt"], max_new_tokens=6, on_token=seen.append)
    assert first.tokens == record["tokens"][:6] == seen
    assert first.fed_tokens == len(record["prompt_ids"])
    second = chat.say(" the lazy dog", max_new_tokens=3)
    assert second.fed_tokens < second.position - 5
    assert [role for role, _ in chat.messages] == ["user", "assistant", "user", "assistant"]
    assert chat.max_context_len == 64
    chat.restart()
    assert chat.messages == [] and chat.position == 0


def test_a_template_file_and_a_full_context(tmp_path):
    template = tmp_path / "chat.jinja"
    template.write_text("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    chat = kiln.load(LLM / "sdpa.pte").chat(
        kiln.Tokenizer(str(LLM / "tokenizer.json")), chat_template=template, system="kiln."
    )
    reply = chat.say("The quick brown fox", max_new_tokens=2)
    assert reply.stop == "max_new_tokens" and len(reply.tokens) == 2
    before = (chat.messages, chat.position)
    with pytest.raises(kiln.InputError, match="context length"):
        chat.say("Pack my box with five dozen liquor jugs. " * 8)
    assert (chat.messages, chat.position) == before
    assert chat.messages[0] == ("system", "kiln.")
