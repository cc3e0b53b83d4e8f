"""Warm a new engine before it serves: one short request pays the first compiles at boot."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from protocol.messages import SamplingParams
from worker.engine.request import EngineStats

log = logging.getLogger("rapid_mlx.worker")
TOKENS = 4  # decode steps of the warm-up request
DRAFT_TOKENS = 16  # tokens of a drafting warm-up request: 12+ drafting steps (each k and lag)
# key buckets (pages, paged_batch.key_bucket) warmed with a drafter: a short chat's prompt and
# answer fill 3-6 pages of 16 tokens
DRAFT_BUCKETS = (1, 2, 4, 8)
# ... with two rows at once only up to this bucket: a cold kernel cache's compiles come with the
# first one- and two-row requests (a row and a page dimension of 1 or more), larger buckets
# trace functions of the same kernels (measured: a cold and a warm boot of a drafting worker)
DRAFT_PAIRS_UPTO = 2


def warm_up(engine: Any) -> float:
    """Run short requests (one, then two at once; one page, then two) through ENGINE; forget them.

    The first call of a compiled decode function traces and compiles it; when MLX's kernel
    cache ($TMPDIR/mlx) is cold its fused kernels go through the system C++ compiler first
    (29 s for the first one-row step and 37 s for the first eight-row step of the demo model,
    measured under load; 8-15 ms once cached). One row and several rows
    need different kernels, and so do keys of one page and of several. Without this the first
    requests' second tokens pay for it. With a drafter the requests run again, longer and to
    more pages (two rows at once only in the smaller ones), drafting every step with k going
    round from the limit down to 1 whatever was accepted, a draft model's rows 0-2 tokens
    behind (the verify forwards of k + 1 positions, the draft's fused k or k - 1 steps and its
    catch-ups); then the speculator forgets what it measured. The warm-up's pages leave the prefix cache and the counters start again from zero.
    """
    t0 = time.perf_counter()
    spec = engine.spec
    if spec is None:
        _requests(engine, TOKENS)
    else:
        limit, pause = spec.num_draft, spec.pause
        try:
            spec.num_draft = 0  # plain steps first, as a row too young to draft runs them
            _requests(engine, TOKENS)
            spec.pause = False  # every step of a row old enough drafts
            spec.num_draft = limit
            ks = range(limit, 0, -1)
            lag = getattr(spec.drafter, "lag", None)

            def each(step: int) -> None:
                # each step's k whatever was accepted, and the tokens a draft model catches up
                # on first (1 after a rejection, 2-3 after fully accepted proposals): every pair
                # in len(ks) * 3 steps
                spec.hold(ks[step % len(ks)])
                if lag is not None:
                    lag(step % 3)

            _requests(engine, DRAFT_TOKENS, DRAFT_BUCKETS, each, DRAFT_PAIRS_UPTO)
        finally:
            spec.num_draft, spec.pause = limit, pause
            spec.reset()
    if engine.kv.radix is not None:  # the warm-up prompts' pages leave the prefix cache
        engine.kv.reset_cache()
    engine.stats = EngineStats()
    engine.kv.stats = type(engine.kv.stats)()
    seconds = time.perf_counter() - t0
    log.info("warmed up in %.0f ms (compiled functions: %s)", seconds * 1e3,
             ", ".join(f"{name} {n}" for name, n in compiled_functions(engine).items()))
    return seconds


def _requests(engine: Any, tokens: int, buckets: tuple[int, ...] = (1, 2),
              each: Callable[[int], None] | None = None, pairs_upto: int | None = None) -> None:
    """One request, then two at once, per key bucket of pages (EACH(step) before every step;
    two at once only in buckets up to PAIRS_UPTO, when given)."""
    page = engine.kv.page_size
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    # keys of one page and of several (a dimension of 1 takes other kernels), one row and two;
    # a prompt of half a bucket's pages and 2 tokens has keys in that bucket (key_bucket)
    for b in buckets:
        prompt = min(4, page) if b == 1 else b // 2 * page + 2
        if prompt + tokens >= engine.context_length:
            break
        for rows in (1, 2) if pairs_upto is None or b <= pairs_upto else (1,):
            for i in range(rows):
                engine.add(f"warm-up-{prompt}-{rows}-{i}", [3 + i] * prompt, params)
            step = 0
            while engine.running or engine.waiting:
                if each is not None:
                    each(step)
                engine.step()
                step += 1


def compiled_functions(engine: Any) -> dict[str, int]:
    """Compiled functions ENGINE holds, per kind (decode, verify; the draft model's too)."""
    return {name: len(o.fns) for name, o in compiled_owners(engine).items()}


def compiled_owners(engine: Any) -> dict[str, Any]:
    """ENGINE's holders of compiled functions (``fns``: key -> function), by kind."""
    owners: dict[str, Any] = {}
    for prefix, forward in engine.forwards().items():  # the target's, a draft model's
        owners |= {prefix + name: o for name, o in forward.compiled_owners().items()}
    fused = getattr(engine.spec.drafter, "fused", None) if engine.spec is not None else None
    return owners | ({"draft fused": fused} if fused is not None else {})
