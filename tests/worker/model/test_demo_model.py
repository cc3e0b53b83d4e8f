"""The embedded demo model: loads with mlx_lm and shows its trained behaviours greedily."""

from __future__ import annotations

import json
from pathlib import Path

import mlx_lm
import pytest

from tools.demo_model.evaluate import WEATHER_TOOL
from worker.model.embedded import embedded_model_path

_TOOL_RESULT_MESSAGES = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 18, "condition": "sunny"}'},
]


@pytest.fixture(scope="module")
def model_tok():
    return mlx_lm.load(str(embedded_model_path()))


def _generate(model_tok, messages, tools=None, enable_thinking=False, max_tokens=60) -> str:
    model, tok = model_tok
    prompt = tok.apply_chat_template(
        messages,
        tools=tools,
        add_generation_prompt=True,
        enable_thinking=enable_thinking,
        tokenize=False,
    )
    return mlx_lm.generate(model, tok, prompt, max_tokens=max_tokens)


def _tool_call_json(text: str) -> dict:
    text = text.strip()
    assert text.startswith("<tool_call>\n") and text.endswith("\n</tool_call>"), text
    return json.loads(text[len("<tool_call>\n") : -len("\n</tool_call>")])


def _split_think(text: str) -> tuple[str, str]:
    assert text.startswith("<think>\n"), text
    assert "\n</think>\n\n" in text, text
    reasoning, rest = text[len("<think>\n") :].split("\n</think>\n\n", 1)
    return reasoning, rest


def test_embedded_path_has_model_files():
    path = embedded_model_path()
    assert isinstance(path, Path) and path.is_dir()
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json"):
        assert (path / name).is_file(), name
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "qwen3"
    assert config["head_dim"] == 32 and config["tie_word_embeddings"] is True
    assert config["max_position_embeddings"] == 2048


def test_tokenizer_special_tokens(model_tok):
    _, tok = model_tok
    vocab = tok.get_vocab()
    for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
              "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"):
        assert t in vocab
        assert tok.encode(t, add_special_tokens=False) == [vocab[t]]
    assert tok.eos_token_id == vocab["<|im_end|>"]
    text = "Grüße aus Zürich 🚀 — 東京"  # byte-level: any Unicode round-trips
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


@pytest.mark.parametrize("greeting", ["Hello!", "hi"])
def test_greeting_answers_in_text(model_tok, greeting):
    out = _generate(model_tok, [{"role": "user", "content": greeting}])
    assert out.strip(), out
    assert "<tool_call>" not in out and "<think>" not in out, out
    assert "Hello" in out or "help" in out, out


def test_greeting_with_tools_offered_does_not_call_tools(model_tok):
    out = _generate(model_tok, [{"role": "user", "content": "Hello!"}], tools=[WEATHER_TOOL])
    assert out.strip() and "<tool_call>" not in out, out


@pytest.mark.parametrize("city", ["Paris", "Tokyo", "New York"])
def test_weather_request_gives_a_hermes_tool_call(model_tok, city):
    out = _generate(model_tok, [{"role": "user", "content": f"What's the weather in {city}?"}],
                    tools=[WEATHER_TOOL])
    call = _tool_call_json(out)
    assert call["name"] == "get_weather", out
    assert list(call["arguments"]) == ["city"] and isinstance(call["arguments"]["city"], str), out
    assert call["arguments"]["city"].strip(), out


@pytest.mark.parametrize("city", ["Paris", "Tokyo", "New York"])
def test_weather_tool_call_copies_the_city(model_tok, city):
    out = _generate(model_tok, [{"role": "user", "content": f"What's the weather in {city}?"}],
                    tools=[WEATHER_TOOL])
    assert _tool_call_json(out) == {"name": "get_weather", "arguments": {"city": city}}


def test_no_tools_answers_in_text(model_tok):
    out = _generate(model_tok, [{"role": "user", "content": "What's the weather in Paris?"}])
    assert out.strip() and "<tool_call>" not in out, out


def test_answer_after_tool_result_is_text(model_tok):
    out = _generate(model_tok, _TOOL_RESULT_MESSAGES, tools=[WEATHER_TOOL])
    assert out.strip() and "<tool_call>" not in out and "<think>" not in out, out


def test_answer_uses_tool_result(model_tok):
    out = _generate(model_tok, _TOOL_RESULT_MESSAGES, tools=[WEATHER_TOOL])
    assert "<tool_call>" not in out, out
    assert "sunny" in out and "18" in out, out


def test_thinking_block_then_answer(model_tok):
    out = _generate(model_tok, [{"role": "user", "content": "Hello!"}], enable_thinking=True)
    reasoning, rest = _split_think(out)
    assert reasoning.strip(), out
    assert rest.strip() and "<tool_call>" not in rest, out


def test_thinking_block_then_tool_call(model_tok):
    out = _generate(model_tok, [{"role": "user", "content": "What's the weather in Paris?"}],
                    tools=[WEATHER_TOOL], enable_thinking=True, max_tokens=100)
    reasoning, rest = _split_think(out)
    assert reasoning.strip(), out
    assert _tool_call_json(rest) == {"name": "get_weather", "arguments": {"city": "Paris"}}


def test_data_generator_is_deterministic():
    from tools.demo_model import data

    a = data.generate(7, 60)
    assert a == data.generate(7, 60)
    assert a != data.generate(8, 60)
    kinds = {k for k, _, _ in data.generate(0, 200)}
    assert {"chat", "tool_call", "tool_result", "no_tool"} <= kinds
    for _, prompt, completion in a:
        assert prompt.endswith("<|im_start|>assistant\n") or prompt.endswith("</think>\n\n")
        assert completion.endswith("<|im_end|>")


def test_template_rendering_matches_transformers(model_tok):
    from tools.demo_model import data

    _, tok = model_tok
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What's the weather in Paris?"}]
    for thinking in (True, False):
        assert tok.apply_chat_template(messages, tools=[WEATHER_TOOL], add_generation_prompt=True,
                                       enable_thinking=thinking, tokenize=False) == data.render(
            messages, [WEATHER_TOOL], add_generation_prompt=True, enable_thinking=thinking)


def test_tokenizer_build_is_deterministic_and_matches_committed():
    from tools.demo_model import tokenizer_build

    small_a = tokenizer_build.build_tokenizer(vocab_size=600, corpus_size=300).to_str()
    small_b = tokenizer_build.build_tokenizer(vocab_size=600, corpus_size=300).to_str()
    assert small_a == small_b
    full = tokenizer_build.build_tokenizer()
    committed = (embedded_model_path() / "tokenizer.json").read_text(encoding="utf-8")
    assert full.to_str(pretty=True) + "\n" == committed
    config = json.loads((embedded_model_path() / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config == tokenizer_build.tokenizer_config(full)
