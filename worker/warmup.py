"""Warm a new engine before it serves: one short request pays the first compiles at boot."""

from __future__ import annotations

import logging
import time
from typing import Any

from protocol.messages import SamplingParams
from worker.request import EngineStats

log = logging.getLogger("rapid_mlx.worker")
TOKENS = 4  # decode steps of the warm-up request


def warm_up(engine: Any) -> float:
    """Run one request shorter than a page through ENGINE, then forget it; seconds taken.

    The first call of a compiled decode function traces and compiles it (26-205 ms measured on
    the demo model at 1 row, bench/compile_cost.py), and the first prefill builds MLX's kernels:
    without this the first request's first and second tokens pay for them. The prompt fills no
    page, so nothing reaches the prefix cache; the counters start again from zero. Skipped with
    a drafter (its controller measures its own steps).
    """
    if engine.spec is not None:
        return 0.0
    t0 = time.perf_counter()
    page = engine.kv.page_size
    prompt = max(1, min(4, (page - 1) // 2))
    params = SamplingParams(max_tokens=max(1, min(TOKENS, page - 1 - prompt)), temperature=0.0,
                            ignore_eos=True)
    engine.add("warm-up", list(range(3, 3 + prompt)), params)
    while engine.running or engine.waiting:
        engine.step()
    engine.stats = EngineStats()
    engine.kv.stats = type(engine.kv.stats)()
    seconds = time.perf_counter() - t0
    log.info("warmed up in %.0f ms (compiled decode functions: %d)", seconds * 1e3,
             len(engine._forward.compiled.fns) if engine._forward.compiled is not None else 0)
    return seconds
