"""The stored-responses byte bound is fair between API keys: the real server with two keys and a
small --responses-max-bytes, the demo model, the openai SDK. One key storing many responses loses
its own oldest; the other key's earlier response stays retrievable."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

BOUND = 12000  # bytes stored (JSON and rows): a handful of the responses below
TEXT = "Tell me a story about a cat. " * 50  # ~1.5 KB of input item a response


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server("--api-key", "key-a", "--api-key", "key-b",
                 "--responses-max-bytes", str(BOUND)).wait_ready()
    try:
        yield srv
    finally:
        srv.stop()


def _ask(client: openai.OpenAI, text: str) -> Any:
    return client.responses.create(model="default", input=text, max_output_tokens=8,
                                   temperature=0, reasoning={"effort": "none"})


def test_a_heavy_key_evicts_its_own_oldest_not_another_keys(server: Server) -> None:
    a, b = (openai.OpenAI(base_url=server.url, api_key=k, max_retries=0)
            for k in ("key-a", "key-b"))
    early = _ask(b, TEXT)  # the oldest response in the store
    assert early.store is True
    mine = [_ask(a, f"{i} {TEXT}") for i in range(12)]  # ~20 KB: well over the bound
    assert all(r.store for r in mine)
    assert b.responses.retrieve(early.id).model_dump() == early.model_dump()  # still there
    assert len(b.responses.input_items.list(early.id).data) == 1
    kept = []
    for r in mine:
        try:
            kept.append(a.responses.retrieve(r.id).id == r.id)
        except openai.NotFoundError:
            kept.append(False)
    assert not kept[0] and kept[-1], kept  # key-a's oldest went, its newest is there
    assert kept == sorted(kept), kept  # oldest first: the kept ones are its newest
    with pytest.raises(openai.NotFoundError):  # and key-b's is still key-b's alone
        a.responses.retrieve(early.id)
