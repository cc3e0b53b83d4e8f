"""A non-streamed answer's logprobs are bounded and built off the event loop
(gateway/doors/response_size.py): the issue's `n: 16`, `top_logprobs: 20`, 2,000-token request
gets a 400 response_too_large before anything is generated; a large answer within the bound
(n: 16 x 300 tokens x 21 entries, ~6 MB) comes back whole, in OpenAI's shape, rendered from
bytes (a real server, stories260K)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import shared_model
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    model = str(shared_model("stories260K"))
    srv = Server(model, "--served-model-name", "m").wait_ready()
    yield srv
    srv.stop()


def _ask(srv: Server, path: str, **kw: object) -> httpx.Response:
    body = {"model": "m", "n": 16, "ignore_eos": True, **kw}
    return httpx.post(f"{srv.url}{path}", json=body, timeout=300)


def test_an_answer_past_the_bound_is_refused_before_generation(server: Server) -> None:
    """Old code: generated all 16 choices and built the body on the event loop."""
    r = _ask(server, "/chat/completions", messages=[{"role": "user", "content": "Hi"}],
             logprobs=True, top_logprobs=20, max_tokens=2000)
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["code"] == "response_too_large" and err["param"] == "top_logprobs"
    assert "stream" in err["message"]
    r = _ask(server, "/completions", prompt="Once", logprobs=5, max_tokens=7000)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["code"] == "response_too_large"


def test_a_large_answer_within_the_bound_comes_back_whole(server: Server) -> None:
    r = _ask(server, "/chat/completions", messages=[{"role": "user", "content": "Hi"}],
             logprobs=True, top_logprobs=20, max_tokens=300)
    assert r.status_code == 200, r.text[:300]
    choices = r.json()["choices"]
    assert len(choices) == 16
    for c in choices:
        content = c["logprobs"]["content"]
        assert len(content) == 300
        first = content[0]
        assert set(first) == {"token", "logprob", "bytes", "top_logprobs"}
        assert first["bytes"] == list(first["token"].encode())
        assert len(first["top_logprobs"]) == 20
        assert set(first["top_logprobs"][0]) == {"token", "logprob", "bytes"}
    r = _ask(server, "/completions", prompt="Once", logprobs=5, max_tokens=50)
    assert r.status_code == 200, r.text[:300]
    lp = r.json()["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == 50
    assert all(len(t) <= 5 for t in lp["top_logprobs"])
