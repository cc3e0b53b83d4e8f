"""submit_spaced: the choices of one request let the event loop run between large jobs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.doors import relay
from protocol import messages as m


class _Hub:
    """Records submits (a unit-test fake; e2e tests use the real hub)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def admit(self, alias: str, tenant: str, n: int) -> None:
        pass

    def submit(self, alias: str, job: m.Work, tenant: str = "") -> Any:
        self.events.append(f"submit {job.request_id}")
        return job.request_id


def _jobs(n: int) -> list[m.Work]:
    return [m.Generate(request_id=str(i), params=m.SamplingParams(), prompt="p") for i in range(n)]


def test_other_work_runs_between_slow_submits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code submitted the N jobs of a request in one go: a /livez waited for all of them."""
    monkeypatch.setattr(relay, "YIELD_AFTER_S", -1.0)  # every submit counts as slow
    hub = _Hub()

    async def main() -> list[Any]:
        async def other() -> None:
            hub.events.append("other")

        task = asyncio.ensure_future(other())
        streams = await relay.submit_spaced(hub, "a", _jobs(3))  # type: ignore[arg-type]
        await task
        return streams

    assert asyncio.run(main()) == ["0", "1", "2"]
    assert hub.events == ["submit 0", "other", "submit 1", "submit 2"]


def test_fast_submits_do_not_yield(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay, "YIELD_AFTER_S", 3600.0)  # every submit counts as fast
    hub = _Hub()

    async def main() -> None:
        async def other() -> None:
            hub.events.append("other")

        task = asyncio.ensure_future(other())
        await relay.submit_spaced(hub, "a", _jobs(3))  # type: ignore[arg-type]
        await task

    asyncio.run(main())
    assert hub.events == ["submit 0", "submit 1", "submit 2", "other"]
