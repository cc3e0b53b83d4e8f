"""The body budget's arithmetic: what a head is charged, the pace a charged body must keep, the
bound --max-body-memory may take, and its /metrics gauges (the real server's behaviour is
tests/e2e/test_body_budget.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from starlette.requests import Request

from gateway.audio.upload import UPLOAD_TIMEOUT_S
from gateway.config import GatewayConfig
from gateway.doors.streaming import SSE_HEADERS, slim_stream
from gateway.edge.bodybudget import (
    DEFAULT_BUDGET,
    LARGEST_BODY,
    MIN_BUDGET,
    RELEASE_KEY,
    UPLOAD_PACE_S,
    BodyBudget,
    BudgetGauge,
    pace,
    upfront,
)
from gateway.edge.limits import BODY_READ_TIMEOUT_S, MAX_BODY_BYTES
from gateway.edge.slowbody import MIN_RATE
from gateway.images.limits import MAX_IMAGE_BODY_BYTES
from gateway.openai.schemas import ChatCompletionRequest
from gateway.server import connection_bounds


@pytest.mark.parametrize(("headers", "want"), [
    ([], (0, False)),  # no body
    ([(b"content-length", b"0")], (0, False)),
    ([(b"content-length", b"1000")], (1000, False)),
    ([(b"content-length", str(LARGEST_BODY).encode())], (LARGEST_BODY, False)),
    ([(b"content-length", str(LARGEST_BODY + 1).encode())], (0, True)),  # 413 unread
    ([(b"content-length", b"9" * 40)], (0, True)),  # no int() of a huge number
    ([(b"transfer-encoding", b"chunked")], (MAX_BODY_BYTES, True)),
    ([(b"content-length", b"5"), (b"transfer-encoding", b"chunked")], (MAX_BODY_BYTES, True)),
])
def test_a_head_is_charged_its_declared_length(headers: list[tuple[bytes, bytes]],
                                               want: tuple[int, bool]) -> None:
    assert upfront(headers) == want


def test_the_pace_completes_a_body_within_its_read_timeout() -> None:
    assert pace(8_000_000, "/v1/chat/completions") == 8_000_000 / BODY_READ_TIMEOUT_S
    assert pace(20_000_000, "/v1/audio/transcriptions") == 20_000_000 / UPLOAD_PACE_S
    assert pace(100, "/v1/messages") == MIN_RATE
    assert UPLOAD_PACE_S == UPLOAD_TIMEOUT_S  # a copy: edge/ does not import the audio route


def test_the_bounds_derive_from_the_largest_body() -> None:
    assert LARGEST_BODY == max(MAX_BODY_BYTES, MAX_IMAGE_BODY_BYTES) == MIN_BUDGET
    assert DEFAULT_BUDGET == 256 << 20 == GatewayConfig(served=[]).max_body_memory


def test_take_and_give_back() -> None:
    b = BodyBudget(100)
    assert b.take(60) and not b.take(41) and b.in_use == 60
    assert b.take(0) and b.take(40) and not b.take(1)
    b.give_back(100)
    assert b.in_use == 0


def test_a_budget_below_the_largest_body_refuses_to_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        connection_bounds(GatewayConfig(served=[], max_body_memory=MIN_BUDGET - 1), 4096)
    assert info.value.code == 2 and "--max-body-memory" in capsys.readouterr().err
    bounds = connection_bounds(GatewayConfig(served=[], max_body_memory=MIN_BUDGET), 4096)
    budget = bounds["budget"]
    assert isinstance(budget, BodyBudget) and budget.total == MIN_BUDGET


def test_the_gauges() -> None:
    b = BodyBudget(1000)
    b.take(300)
    b.refusal("/v1/chat/completions", 800)
    registry = CollectorRegistry()
    registry.register(BudgetGauge(b))
    text = generate_latest(registry).decode()
    assert "rapid_mlx_request_body_bytes 300.0" in text
    assert "rapid_mlx_request_body_bytes_max 1000.0" in text
    assert "rapid_mlx_request_body_refusals_total 1.0" in text



async def test_slim_stream_gives_the_body_charge_back_and_streams_a_slim_copy() -> None:
    """slim_stream (streamed chat, completions and Messages answers): the release hook runs once,
    before any event is made; the events get a copy of the request without the dropped fields
    (the request itself is untouched); the answer is an SSE stream."""
    log: list[object] = []
    scope = {"type": "http", "extensions": {RELEASE_KEY: lambda: log.append("released")}}
    req = msgspec.json.decode(b'{"model": "m", "messages": [{"role": "user", "content": "Hi"}],'
                              b' "logit_bias": {"1": 2}, "temperature": 0.5}',
                              type=ChatCompletionRequest)

    async def events(slim: ChatCompletionRequest) -> AsyncIterator[bytes]:
        log.append(slim)
        yield b"data: {}\n\n"

    answer = slim_stream(Request(scope), req, events, messages=[], logit_bias=None)
    assert log == ["released"]  # the events' generator is made, not started
    assert answer.media_type == "text/event-stream"
    assert all(answer.headers[k] == v for k, v in SSE_HEADERS.items())
    assert [chunk async for chunk in answer.body_iterator] == [b"data: {}\n\n"]
    (slim,) = log[1:]
    assert isinstance(slim, ChatCompletionRequest)
    assert slim.messages == [] and slim.logit_bias is None and slim.temperature == 0.5
    assert req.messages and req.logit_bias
