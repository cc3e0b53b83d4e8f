"""A large /v1/completions or /v1/embeddings body is checked off the event loop: its token ids
are walked in Python (millions in 8 MiB: 0.5-0.8 s of the loop in the old code), so the checks
run in the large-body pool; a small body's stay on the loop (they cost nothing)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.openai import completions, embeddings
from gateway.openai.completions import CompletionsEndpoint
from gateway.openai.embeddings import EmbeddingsEndpoint
from gateway.plane.state import AliasState
from protocol.messages import ModelFacts

IDS = 200_000  # ~0.6 MB of "1,": a large body (edge/offload.py)


class Sent(Exception):
    """The fake hub was asked to send a job: the request got past its checks."""


class FakeHub:
    """Serves one alias of KIND; records the event loop's thread; refuses to send."""

    def __init__(self, kind: str) -> None:
        self.st = AliasState(alias="default", model="m")
        self.st.facts = ModelFacts(model="m", kind=kind, vocab_size=32_000, context_length=IDS * 2)
        self.loop_thread: threading.Thread | None = None

    async def wait_ready(self, alias: str, timeout: float | None = None) -> AliasState:
        self.loop_thread = threading.current_thread()
        return self.st

    def admit(self, alias: str, tenant: str, n: int) -> None:
        pass

    def submit(self, alias: str, job: Any, tenant: str = "") -> Any:
        raise Sent


def _where(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[threading.Thread]:
    """Record the thread each call of MODULE.NAME runs in."""
    seen: list[threading.Thread] = []
    inner = getattr(module, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread())
        return inner(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


def _post(hub: FakeHub, path: str, endpoint: Any, body: dict[str, Any]) -> None:
    app = Starlette(routes=[Route(path, endpoint.handle, methods=["POST"])])
    with TestClient(app) as client, pytest.raises(Sent):
        client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


@pytest.mark.parametrize("ids", [IDS, 10])
def test_completion_prompt_checked_off_the_loop_when_large(monkeypatch: pytest.MonkeyPatch,
                                                           ids: int) -> None:
    seen = _where(monkeypatch, completions, "split_prompt")
    hub = FakeHub("generate")
    _post(hub, "/v1/completions", CompletionsEndpoint(hub),  # type: ignore[arg-type]
          {"model": "default", "prompt": [1] * ids, "max_tokens": 1})
    assert len(seen) == 1 and hub.loop_thread is not None
    assert (seen[0] is not hub.loop_thread) == (ids == IDS)


@pytest.mark.parametrize("ids", [IDS, 10])
def test_embedding_inputs_checked_off_the_loop_when_large(monkeypatch: pytest.MonkeyPatch,
                                                          ids: int) -> None:
    seen = _where(monkeypatch, embeddings, "split_inputs")
    hub = FakeHub("embed")
    _post(hub, "/v1/embeddings", EmbeddingsEndpoint(hub),  # type: ignore[arg-type]
          {"model": "default", "input": [[1] * ids], "truncate": True})
    assert len(seen) == 1 and hub.loop_thread is not None
    assert (seen[0] is not hub.loop_thread) == (ids == IDS)
