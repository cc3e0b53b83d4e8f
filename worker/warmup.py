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
    """Run short requests (one, then two at once; one page, then two) through ENGINE; forget them.

    The first call of a compiled decode function traces and compiles it; when MLX's kernel
    cache ($TMPDIR/mlx) is cold its fused kernels go through the system C++ compiler first
    (29 s for the first one-row step and 37 s for the first eight-row step of the demo model,
    measured under load; 8-15 ms once cached, bench/compile_cost.py). One row and several rows
    need different kernels, and so do keys of one page and of several. Without this the first
    requests' second tokens pay for it. The warm-up's pages leave the prefix cache and the
    counters start again from zero. Skipped with a drafter (its controller times its own steps).
    """
    if engine.spec is not None:
        return 0.0
    t0 = time.perf_counter()
    page = engine.kv.page_size
    params = SamplingParams(max_tokens=TOKENS, temperature=0.0, ignore_eos=True)
    # keys of one page and of several (a dimension of 1 takes other kernels), one row and two
    for prompt in (min(4, page), page + 2):
        if prompt + TOKENS >= engine.context_length:
            break
        for rows in (1, 2):
            for i in range(rows):
                engine.add(f"warm-up-{prompt}-{rows}-{i}", [3 + i] * prompt, params)
            while engine.running or engine.waiting:
                engine.step()
    if engine.kv.radix is not None:  # the warm-up prompts' pages leave the prefix cache
        engine.kv.pool.free(engine.kv.radix.reset())
    engine.stats = EngineStats()
    engine.kv.stats = type(engine.kv.stats)()
    seconds = time.perf_counter() - t0
    log.info("warmed up in %.0f ms (compiled decode functions: %d)", seconds * 1e3,
             len(engine.compiled.fns) if engine.compiled is not None else 0)
    return seconds
