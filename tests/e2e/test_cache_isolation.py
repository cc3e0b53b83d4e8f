"""Tenants' prefix caches: the real server with two API keys on stories260K. A tenant reuses its
own cached prompt prefix, never another's (cached_tokens would tell it what the other sent),
unless the server runs with --shared-prefix-cache."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import shared_model
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

A, B = ({"Authorization": f"Bearer {k}"} for k in ("key-a", "key-b"))
PROMPT = ("Once upon a time there was a little girl named Lily. She loved to play outside in the "
          "park with her friends and her big red ball. One day she saw a cat in a tree. ") * 3


@pytest.fixture(scope="module", params=[False, True], ids=["per-key", "shared"])
def server(request: pytest.FixtureRequest) -> Iterator[tuple[Server, bool]]:
    shared = bool(request.param)
    srv = Server(str(shared_model("stories260K")), "--served-model-name", "m", "--api-key",
                 "key-a", "--api-key", "key-b",
                 *(["--shared-prefix-cache"] if shared else [])).wait_ready()
    try:
        yield srv, shared
    finally:
        srv.stop()


def _cached(c: httpx.Client, headers: dict[str, str], path: str) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of one request on PATH."""
    text = f"{path} {PROMPT}"  # each route's test starts from a cold cache
    chat = {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 2}
    body = {"/completions": {"model": "m", "prompt": text, "max_tokens": 2},
            "/responses": {"model": "m", "input": text, "max_output_tokens": 2, "store": False},
            }.get(path, chat)
    r = c.post(path, headers=headers, json=body)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    if path == "/responses":
        return usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"]
    if path == "/messages":
        cached = usage["cache_read_input_tokens"]
        return usage["input_tokens"] + cached, cached
    return usage["prompt_tokens"], (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0


@pytest.mark.parametrize("path", ["/completions", "/chat/completions", "/responses", "/messages"])
def test_a_tenant_hits_only_its_own_cached_prefix(server: tuple[Server, bool], path: str) -> None:
    srv, shared = server
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        prompt, first = _cached(c, A, path)
        assert prompt > 64 and first == 0  # nobody sent it before
        _, again = _cached(c, A, path)
        assert again > 0  # A's own prefix is cached
        _, other = _cached(c, B, path)
        if shared:
            assert other > 0  # --shared-prefix-cache: one cache for every key
        else:
            assert other == 0  # B learns nothing of what A sent
            _, other_again = _cached(c, B, path)
            assert other_again > 0  # B's own prefix is cached in its own namespace
