"""After a failed step: fail the rows it put at risk, keep everyone else, check the books."""

from __future__ import annotations

import logging

import mlx.core as mx

from protocol.messages import RequestOutput
from worker.engine.executor import Executor
from worker.engine.failures import EngineBroken, discard, error_output, verify
from worker.engine.plan import AtRisk
from worker.engine.scheduler import Scheduler

log = logging.getLogger("rapid_mlx.worker")

MAX_FAILED_STEPS = 16  # steps failing in a row with no good one between: the engine is broken


def recover(exc: Exception, failed_steps: int, scheduler: Scheduler, executor: Executor,
            risk: AtRisk, news: list[RequestOutput]) -> list[RequestOutput]:
    """Fail the rows the step touched (and any with unread tokens); keep everyone else.

    NEWS are the outputs the step made before it failed (the failed rows' are dropped).
    Raises EngineBroken when the page books do not balance after, the KV store cannot be
    evaluated, or FAILED_STEPS (in a row, this one included) reached MAX_FAILED_STEPS.
    """
    log.error("engine step failed (%d in a row): %r", failed_steps, exc, exc_info=exc)
    kv = scheduler.kv
    running = {id(r) for r in scheduler.running}  # the waiting hold no pages and no unread tokens
    doomed = {id(r): r for r in risk.rows if id(r) in running} or {
        id(r): r for r in scheduler.running}  # nothing was at risk yet: it may recur, so fail all
    if executor.inflight is not None:  # unread tokens cannot be trusted: their rows go too
        doomed.update((id(r), r) for r in executor.inflight.rows if id(r) in running)
        executor.inflight = None
    scheduler.running = [r for r in scheduler.running if id(r) not in doomed]
    doomed_ids = {r.id for r in doomed.values()}
    outputs = [o for o in news if o.request_id not in doomed_ids]
    for r in doomed.values():
        discard(kv, r)
        scheduler.forget(r)
        outputs.append(error_output(r))
    verify(kv, scheduler.running)
    try:  # page writes the failed step left pending must still evaluate
        mx.eval(kv.store.arrays())
    except Exception as broken:
        raise EngineBroken(f"the KV store cannot be evaluated: {broken}") from exc
    if failed_steps >= MAX_FAILED_STEPS:
        raise EngineBroken(f"{failed_steps} engine steps failed in a row") from exc
    return outputs
