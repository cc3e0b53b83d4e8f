"""A coding agent's second turn reuses the first turn's KV, on every door an agent uses: turn 2
resends turn 1's long prompt with the answer and a new question, and at least 90% of turn 1's
prompt tokens come from the prefix cache (the demo model, a context past its trained 2,048)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

ASK, MORE = "Which check runs for 5.py?", "And for 6.py?"


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    s = Server("--context-length", "8192").wait_ready()
    yield s
    s.stop()


def _system(door: str) -> str:
    """About 2,600 tokens of agent instructions, different per door (no hit across doors)."""
    rules = [f"Rule {i}: when {i % 97}.py changes, run check {i * 7 % 13} and report line {i}."
             for i in range(60)]
    return f"You are a coding agent ({door}).\n" + "\n".join(rules)


def _post(srv: Server, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{srv.base}{path}", json=body, timeout=600)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_chat_turn_two_reuses_turn_one(srv: Server) -> None:
    first = [{"role": "system", "content": _system("chat")}, {"role": "user", "content": ASK}]
    body = {"model": "default", "max_tokens": 8, "temperature": 0, "messages": first}
    one = _post(srv, "/v1/chat/completions", body)
    answer = one["choices"][0]["message"]["content"] or ""
    body["messages"] = [*first, {"role": "assistant", "content": answer},
                        {"role": "user", "content": MORE}]
    two = _post(srv, "/v1/chat/completions", body)
    cached = two["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert one["usage"]["prompt_tokens"] > 2000
    assert cached >= 0.9 * one["usage"]["prompt_tokens"], (cached, one["usage"])


def test_responses_turn_two_reuses_turn_one(srv: Server) -> None:
    """Codex's way: no stored state, the whole conversation (with turn 1's output) resent."""
    first = [{"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": ASK}]}]
    body = {"model": "default", "store": False, "max_output_tokens": 8, "temperature": 0,
            "instructions": _system("responses"), "input": first}
    one = _post(srv, "/v1/responses", body)
    body["input"] = [*first, *one["output"], {"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": MORE}]}]
    two = _post(srv, "/v1/responses", body)
    cached = two["usage"]["input_tokens_details"]["cached_tokens"]
    assert cached >= 0.9 * one["usage"]["input_tokens"], (cached, one["usage"])


def test_messages_turn_two_reuses_turn_one(srv: Server) -> None:
    """Claude Code's way: Anthropic Messages, the system prompt apart."""
    first = [{"role": "user", "content": ASK}]
    body = {"model": "default", "max_tokens": 8, "temperature": 0,
            "system": _system("messages"), "messages": first}
    one = _post(srv, "/v1/messages", body)
    text = "".join(b.get("text", "") for b in one["content"]) or "ok"
    body["messages"] = [*first, {"role": "assistant", "content": text},
                        {"role": "user", "content": MORE}]
    two = _post(srv, "/v1/messages", body)
    prompt_one = one["usage"]["input_tokens"] + one["usage"]["cache_read_input_tokens"]
    cached = two["usage"]["cache_read_input_tokens"]
    assert cached >= 0.9 * prompt_one, (cached, one["usage"])
