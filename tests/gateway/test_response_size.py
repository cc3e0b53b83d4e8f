"""The bound on a non-streamed answer's logprobs, and its rendering from bytes
(gateway/doors/response_size.py, gateway/openai/logprobs_json.py)."""

from __future__ import annotations

import asyncio
import json
import threading

import msgspec
import pytest

from gateway.doors.response_size import MAX_LOGPROB_ENTRIES, Tally, build, check_upfront
from gateway.edge.errors import APIError
from gateway.openai.logprobs import chat_logprobs, completion_logprobs
from gateway.openai.logprobs_json import chat_logprobs_raw, completion_logprobs_raw
from protocol.messages import TokenLogprob

ENTRIES = [TokenLogprob(token=t, token_id=i, logprob=-0.25 - i,
                        top=[(f'a"{j}\u00e9', j, -1.5 * j) for j in range(3)])
           for i, t in enumerate(["a", "\u00e9\n", '"x', "", "a", "\\"])]


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def test_the_issue_request_is_refused_upfront_naming_its_fields() -> None:
    with pytest.raises(APIError) as err:
        check_upfront(16, 2000, 20, "top_logprobs")
    assert err.value.status == 400 and err.value.code == "response_too_large"
    assert err.value.param == "top_logprobs" and "n=16" in err.value.message
    check_upfront(16, 0, 20, "top_logprobs")  # no max_tokens: counted as it arrives
    check_upfront(1, 4096, 20, "top_logprobs")


def test_a_tally_fails_when_it_crosses_the_bound() -> None:
    tally = Tally(1, 20, "top_logprobs", True)
    tally.add(MAX_LOGPROB_ENTRIES // 21)
    with pytest.raises(APIError):
        tally.add(1)
    off = Tally(1, 20, "top_logprobs", False)
    off.add(10 * MAX_LOGPROB_ENTRIES)  # no logprobs asked for: nothing is bounded
    assert off.weight == 10 * MAX_LOGPROB_ENTRIES * 8


def test_logprobs_render_as_json_dumps_of_the_dicts() -> None:
    raw = chat_logprobs_raw(ENTRIES)
    assert raw is not None and bytes(raw) == _dumps(chat_logprobs(ENTRIES))
    raw = completion_logprobs_raw(ENTRIES, 7)
    assert raw is not None and bytes(raw) == _dumps(completion_logprobs(ENTRIES, 7))
    assert chat_logprobs_raw([]) is None and completion_logprobs_raw([]) is None
    inf = [TokenLogprob(token="a", token_id=0, logprob=float("-inf"))]
    assert json.loads(msgspec.json.encode(chat_logprobs_raw(inf)))["content"][0]["logprob"] is None


@pytest.mark.parametrize("tokens", [20_000, 10])
def test_a_large_body_is_built_off_the_loop(tokens: int) -> None:
    async def main() -> tuple[threading.Thread, threading.Thread]:
        tally = Tally(1, 20, "top_logprobs", True)
        tally.add(tokens)
        seen: list[threading.Thread] = []

        def body() -> dict[str, object]:
            seen.append(threading.current_thread())
            return {"x": 1}
        response = await build(tally, body)
        assert response.body == b'{"x":1}'
        return seen[0], threading.current_thread()
    built, loop = asyncio.run(main())
    assert (built is not loop) == (tokens == 20_000)
