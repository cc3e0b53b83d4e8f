"""Schemathesis against the server's own /openapi.json: no 5xx and no worker restart.

Cases are drawn from the live spec in both generation modes (valid bodies and bodies that break
the schema); model names and alias path parameters are pinned to the served alias (or an unknown
one), and generation lengths are kept short so thousands of cases fit in a CI run.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import requests
from hypothesis import HealthCheck, Phase, given, settings

from tests.e2e.harness import Server

schemathesis = pytest.importorskip("schemathesis")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

ALIAS = "default"
# examples drawn per (operation, generation mode); GET operations without parameters run out of
# distinct cases after a few, the two generation routes carry the bulk
EXAMPLES = {"POST /v1/chat/completions": 350, "POST /v1/completions": 350}
OTHER_EXAMPLES = 60
MIN_CASES = 2000
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[Server]:
    srv = Server("--context-length", "256", "--max-batch", "8").wait_ready()
    yield srv
    srv.stop()


def _pin(case: Any, rng: random.Random) -> None:
    """Point the case at the served alias and keep any generation short."""
    if "alias" in (case.path_parameters or {}):
        case.path_parameters["alias"] = ALIAS if rng.random() < 0.8 else "no-such-model"
    body = case.body
    if isinstance(body, dict):
        if "model" in body or rng.random() < 0.5:
            body["model"] = ALIAS if rng.random() < 0.95 else "no-such-model"
        for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
            value = body.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS:
                body[key] = MAX_TOKENS
        if "max_tokens" not in body and "max_completion_tokens" not in body:
            body["max_tokens"] = MAX_TOKENS
        if "max_output_tokens" not in body and case.path == "/v1/responses":
            body["max_output_tokens"] = MAX_TOKENS
        n = body.get("n")
        if isinstance(n, int) and not isinstance(n, bool) and n > 2:
            body["n"] = 2


def _boot(srv: Server) -> tuple[str, int]:
    w = srv.worker(ALIAS)
    return w["boot_id"], w.get("restarts", 0)


@dataclass
class Tally:
    """What the cases got back."""

    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    request_s: float = 0.0


def _fuzz(op: Any, mode: Any, count: int, base: str, tally: Tally, rng: random.Random,
          session: requests.Session) -> None:
    """Run COUNT generated cases of one operation in one generation mode."""

    @settings(max_examples=count, deadline=None, database=None, derandomize=True,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        _pin(case, rng)
        started = time.monotonic()
        try:
            resp = case.call(base_url=base, session=session, timeout=30)
        except requests.RequestException as exc:  # a dropped connection is a failure too
            tally.failures.append(f"{op.label}: {type(exc).__name__}: {exc}\n"
                                  f"{case.as_curl_command()[:600]}")
            return
        tally.request_s += time.monotonic() - started
        tally.statuses[resp.status_code] += 1
        if resp.status_code >= 500:
            tally.failures.append(f"{op.label} -> {resp.status_code} {resp.text[:300]}\n"
                                  f"{case.as_curl_command()[:600]}")

    run()


def test_schemathesis_finds_no_server_error(fuzz_server: Server) -> None:
    spec = httpx.get(f"{fuzz_server.base}/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(spec)
    boot_before = _boot(fuzz_server)
    rng = random.Random(1234)
    session = requests.Session()
    tally = Tally()
    started = time.monotonic()
    for result in schema.get_all_operations():
        op = result.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            _fuzz(op, mode, EXAMPLES.get(op.label, OTHER_EXAMPLES), fuzz_server.base, tally, rng,
                  session)
    total = sum(tally.statuses.values())
    print(f"schemathesis: {total} cases in {time.monotonic() - started:.0f} s "
          f"({tally.request_s:.0f} s in requests), statuses {dict(sorted(tally.statuses.items()))}")
    assert not tally.failures, (f"{len(tally.failures)} failing cases, first:\n"
                                + "\n".join(tally.failures[:3]))
    assert total >= MIN_CASES, f"only {total} cases ran"
    assert _boot(fuzz_server) == boot_before, "the worker restarted during fuzzing"
    # the server still answers a normal request afterwards
    ok = httpx.post(f"{fuzz_server.url}/chat/completions", timeout=60, json={
        "model": ALIAS, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})
    assert ok.status_code == 200, ok.text
