"""Two compiles that never finish do not lock everyone out of structured output
(worker/grammar/pool.py): once they have run SLOW_S they stop holding the pool's fast places and
a trivial schema compiles beside them; at most MOST compiles run at once."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import GrammarSpec
from worker.grammar.compiler import GrammarCompiler
from worker.grammar.matcher import Constraint
from worker.grammar.pool import MOST, CompilePool
from worker.model.embedded import embedded_model_path

TRIVIAL = GrammarSpec(kind="json_schema", text=json.dumps({"type": "boolean"}))


def _hostile(i: int) -> GrammarSpec:
    return GrammarSpec(kind="json_schema", text=json.dumps({"type": "string", "pattern": f"h{i}"}))


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    tok = load(str(embedded_model_path()))[1]
    return GrammarCompiler(tok, 4096, sorted(tok.eos_token_ids))


def test_two_stuck_compiles_leave_room_for_a_trivial_one(compiler: GrammarCompiler,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: two threads, both held by the stuck compiles; the trivial one waited past its
    deadline and was refused "took too long to compile"."""
    release = threading.Event()
    real = compiler.compile

    def compile(spec: GrammarSpec) -> Constraint | None:
        if '"h' in spec.text:
            release.wait(60)  # a schema whose compile (first mask) takes minutes
        return real(spec)

    monkeypatch.setattr(compiler, "compile", compile)
    stuck = [compiler.submit(_hostile(i)) for i in range(2)]
    try:
        trivial = compiler.submit(TRIVIAL).result(timeout=30)
        assert isinstance(trivial, Constraint)
        assert not any(f.done() for f in stuck)
    finally:
        release.set()
    for f in stuck:
        f.result(timeout=30)


def test_at_most_most_run_at_once_and_a_cancelled_one_never_runs() -> None:
    pool = CompilePool(fast=2, most=MOST, slow_s=0.05)
    release = threading.Event()
    ran: list[int] = []

    def job(i: int) -> int:
        ran.append(i)
        release.wait(30)
        return i

    futures = [pool.submit(job, i) for i in range(MOST + 2)]
    try:
        for f in futures[:MOST]:
            while not f.running():
                threading.Event().wait(0.01)
        assert pool.running == MOST and not futures[MOST].running()
        assert futures[MOST].cancel()
    finally:
        release.set()
    assert [f.result(timeout=30) for f in futures[:MOST]] == list(range(MOST))
    assert futures[MOST + 1].result(timeout=30) == MOST + 1
    assert MOST not in ran
    pool.shutdown()
    with pytest.raises(RuntimeError):
        pool.submit(job, 0)


def test_a_failing_job_fails_only_its_future() -> None:
    pool = CompilePool()

    def boom() -> Any:
        raise ValueError("bad schema")

    with pytest.raises(ValueError):
        pool.submit(boom).result(timeout=10)
    assert pool.submit(lambda: 7).result(timeout=10) == 7
