"""Helpers for operations tests: two-alias servers, streamed requests, load threads, scrapes."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.harness import ROOT, Server

DEMO = str(ROOT / "worker" / "model" / "demo" / "weights")


def pair(*extra: str) -> Server:
    """A server with aliases `a` and `b`, both on the demo model."""
    return Server(DEMO, DEMO, "--served-model-name", "a", "--served-model-name", "b", *extra)


def wait_for(pred: Callable[[], Any], timeout: float = 60.0, every: float = 0.1) -> Any:
    """Poll PRED until it returns something truthy; fail after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = pred()
        except httpx.TransportError:
            got = None
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"condition not met within {timeout}s")


@dataclass
class Outcome:
    """How one streamed chat request ended."""

    status: int = 0
    chunks: int = 0
    error: dict[str, Any] | None = None
    done: bool = False
    ended_at: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the stream reached [DONE] without an error event."""
        return self.status == 200 and self.done and self.error is None


def stream_chat(url: str, alias: str, max_tokens: int, *,
                first: threading.Event | None = None, timeout: float = 90.0) -> Outcome:
    """Stream one chat completion; set FIRST when the first content chunk arrives."""
    out = Outcome()
    body = {"model": alias, "messages": [{"role": "user", "content": "Tell me a story"}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    try:
        with httpx.stream("POST", f"{url}/chat/completions", json=body, timeout=timeout) as r:
            out.status = r.status_code
            if r.status_code != 200:
                r.read()
                out.error = r.json().get("error")
                return out
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    out.done = True
                    break
                event = json.loads(line[6:])
                if "error" in event:
                    out.error = event["error"]
                    break
                out.chunks += 1
                if first is not None and out.chunks >= 2:
                    first.set()
    except httpx.HTTPError as exc:
        out.error = {"message": f"transport: {exc}", "code": "transport"}
    finally:
        out.ended_at = time.monotonic()
    return out


@dataclass
class Load:
    """N threads streaming requests on one alias in a loop until stopped."""

    url: str
    alias: str
    n: int
    max_tokens: int = 48
    outcomes: list[Outcome] = field(default_factory=list)
    stop_flag: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        """Start the threads."""
        for _ in range(self.n):
            t = threading.Thread(target=self._loop, daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def _loop(self) -> None:
        while not self.stop_flag.is_set():
            self.outcomes.append(stream_chat(self.url, self.alias, self.max_tokens))

    def stop(self) -> list[Outcome]:
        """Stop after the current requests and return every outcome."""
        self.stop_flag.set()
        for t in self.threads:
            t.join(120)
        return self.outcomes

    @property
    def errors(self) -> list[Outcome]:
        """Outcomes that did not succeed."""
        return [o for o in self.outcomes if not o.ok]


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics and parse it with prometheus_client; {(sample, labels): value}."""
    text = httpx.get(f"{base}/metrics", timeout=10).text
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def monotonic_samples(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]
                      ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples that must never go down: counters and histogram buckets, counts and sums."""
    return {k: v for k, v in samples.items()
            if k[0].endswith(("_total", "_bucket", "_count", "_sum"))}
