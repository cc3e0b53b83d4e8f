"""Output caps for agents, end to end on the demo model (2,048-token context): a request that
sends no limit stops at `--default-max-tokens` with `length`; one asking for more than the
context has left after its prompt (Claude Code's 32,000) gets what is left, on every door; the
log holds no misleading lines (transformers' "indexing errors", a doubled tool warning)."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

CAP = 8  # --default-max-tokens
CTX = 2048  # the demo model's context
LONG = "hello " * 1010  # about 2,030 tokens: a few positions left
GREEDY = {"temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    s = Server("--default-max-tokens", str(CAP)).wait_ready()
    yield s
    s.stop()


def _oa(srv: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=300)


def test_no_limit_sent_stops_at_the_server_cap(srv: Server) -> None:
    out = _oa(srv).chat.completions.create(model="default", extra_body=GREEDY,
                                           messages=[{"role": "user", "content": "Hi"}])
    assert out.choices[0].finish_reason == "length"
    assert out.usage is not None and out.usage.completion_tokens == CAP
    resp = _oa(srv).responses.create(model="default", input="Hi", temperature=0)
    assert resp.status == "incomplete" and resp.usage is not None
    assert resp.usage.output_tokens <= CAP


def test_more_than_the_context_left_is_clamped_on_every_door(srv: Server) -> None:
    chat = _oa(srv).chat.completions.create(
        model="default", max_tokens=32_000, extra_body=GREEDY,
        messages=[{"role": "user", "content": LONG}])
    assert chat.usage is not None and chat.choices[0].finish_reason == "length"
    left = CTX - chat.usage.prompt_tokens
    assert 0 < left < 100 and chat.usage.completion_tokens == left
    comp = _oa(srv).completions.create(model="default", prompt=LONG, max_tokens=32_000,
                                       extra_body=GREEDY)
    assert comp.choices[0].finish_reason == "length" and comp.usage is not None
    assert comp.usage.prompt_tokens + comp.usage.completion_tokens == CTX
    resp = _oa(srv).responses.create(model="default", input=LONG, max_output_tokens=32_000,
                                     temperature=0)
    assert resp.status != "failed" and resp.usage is not None
    assert resp.usage.input_tokens + resp.usage.output_tokens <= CTX
    msg = anthropic.Anthropic(base_url=srv.base, api_key="x", max_retries=0).messages.create(
        model="default", max_tokens=32_000, messages=[{"role": "user", "content": LONG}],
        extra_body={"temperature": 0}, timeout=300)
    assert msg.usage.input_tokens + msg.usage.output_tokens <= CTX
    assert msg.stop_reason in ("max_tokens", "end_turn")


def test_no_misleading_log_lines(srv: Server) -> None:
    body = {"model": "default", "input": "Hi", "max_output_tokens": 2,
            "tools": [{"type": "web_search"}, {"type": "function", "name": "f",
                                                "parameters": {"type": "object"}}]}
    r = httpx.post(f"{srv.url}/responses", json=body, timeout=120)
    assert r.status_code == 200, r.text
    log = "".join(srv.lines)
    assert log.count("tool types not served here left out") == 1, log[-2000:]
    assert "Token indices sequence length" not in log  # LONG prompts ran above
