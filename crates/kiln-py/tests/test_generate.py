"""`Program.generate` on ExecuTorch 1.5.1's LLM exports (tests/fixtures/llm): greedy tokens
equal ExecuTorch's runner's, a text prompt is encoded and the new tokens decoded as Hugging
Face `tokenizers` does (tokenizer.expected.json), and each call starts from an empty cache."""

import pytest

import kiln
from conftest import FIXTURES, expected

LLM = FIXTURES / "llm"


@pytest.mark.parametrize("variant", ["fp32", "sdpa_xnnpack_8da4w"])
def test_greedy_tokens_are_executorchs(variant):
    record = expected(LLM / f"{variant}.expected.json")
    program = kiln.load(LLM / f"{variant}.pte")
    seen = []
    for _ in range(2):  # the second call must not see the first call's cache
        seen.clear()
        result = program.generate(
            record["prompt"], max_new_tokens=len(record["tokens"]), on_token=seen.append
        )
        assert result.tokens == record["tokens"]
        assert seen == record["tokens"]
        assert result.prompt_tokens == record["prompt"]
        assert result.stop == "max_new_tokens" and result.text is None
        assert result.prefill_ms > 0 and result.decode_tokens_per_s > 0


def test_a_text_prompt_goes_through_the_tokenizer():
    record = expected(LLM / "tokenizer.expected.json")
    program = kiln.load(LLM / "fp32.pte")
    tokenizer = kiln.Tokenizer(str(LLM / "tokenizer.json"))
    assert tokenizer.encode(record["prompt"]) == record["prompt_ids"]
    for given in (tokenizer, LLM / "tokenizer.json"):
        result = program.generate(record["prompt"], tokenizer=given, max_new_tokens=len(record["tokens"]))
        assert result.prompt_tokens == record["prompt_ids"]
        assert result.tokens == record["tokens"]
        assert result.text == record["text"]


def test_generation_stops_at_the_context_length():
    record = expected(LLM / "fp32.expected.json")
    program = kiln.load(LLM / "fp32.pte")
    result = program.generate(record["prompt"], eos=[])
    assert result.stop == "max_context_len"
    assert len(result.prompt_tokens) + len(result.tokens) == record["max_seq_len"]


def test_sampling_is_reproducible_with_a_seed():
    record = expected(LLM / "fp32.expected.json")
    program = kiln.load(LLM / "fp32.pte")
    runs = [program.generate(record["prompt"], max_new_tokens=12, temperature=1.0, seed=7) for _ in range(2)]
    assert runs[0].tokens == runs[1].tokens


def test_errors():
    record = expected(LLM / "fp32.expected.json")
    program = kiln.load(LLM / "fp32.pte")
    with pytest.raises(kiln.InputError, match="fill the model's maximum context length of 64"):
        program.generate([1] * 64)
    with pytest.raises(kiln.InputError, match="outside the vocabulary of 320"):
        program.generate([1, 5000])
    with pytest.raises(kiln.InputError, match="needs a tokenizer"):
        program.generate("text")
    with pytest.raises(kiln.InputError, match="top_p"):
        program.generate(record["prompt"], temperature=1.0, top_p=0.0)

    def stop_early(token):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        program.generate(record["prompt"], on_token=stop_early)
    # Not a language model: the error says what it expected.
    with pytest.raises(kiln.InputError, match="language model"):
        kiln.load(FIXTURES / "pte" / "tiny_cnn.pte").generate([1, 2])
