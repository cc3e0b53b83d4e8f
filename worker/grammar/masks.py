"""Next-token masks for the constrained rows of a batch, applied to the logits in one op."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import llguidance
import mlx.core as mx
import numpy as np
from llguidance.numpy import fill_next_token_bitmask, fill_next_token_bitmask_par

from worker.grammar.budget import SUSPECT_S
from worker.grammar.matcher import Constraint

_executor: llguidance.LLExecutor | None = None


def executor() -> llguidance.LLExecutor:
    """The library's thread pool for filling many masks at once (it drops the GIL)."""
    global _executor
    if _executor is None:
        _executor = llguidance.LLExecutor(num_threads=max(1, min(4, (os.cpu_count() or 2) - 1)))
    return _executor


def fill(rows: Sequence[Constraint | None], vocab: int) -> np.ndarray:
    """An int32 bitmask [rows, ceil(vocab/32)]: a set bit is an allowed token; free or finished
    rows allow everything; a JSON number at its cap may only end."""
    bits = np.full((len(rows), (vocab + 31) // 32), -1, dtype=np.int32)
    todo = [(c, b) for b, c in enumerate(rows)
            if c is not None and not c.free and not c.finished and c.error is None]
    if todo:
        _fill_charged(todo, bits)
    words = bits.view(np.uint32)
    for con, row in todo:
        if con.guard is not None and con.guard.capped:
            con.guard.trim(words[row])
    for b, c in enumerate(rows):
        if c is not None and c.think is not None and c.state == "may_think":
            words[b, c.think[0] // 32] |= np.uint32(1 << (c.think[0] % 32))  # may open thinking
    return bits


def _fill_charged(todo: list[tuple[Constraint, int]], bits: np.ndarray) -> None:
    """Fill the rows of TODO, charging each constraint its mask time (budget.py): the rows not
    yet shown cheap one by one (timed exactly), the others together in the library's pool
    (their time shared out; a slow fill has them timed one by one from the next step)."""
    together = [(c, b) for c, b in todo if not c.suspect]
    alone = [(c, b) for c, b in todo if c.suspect]
    if together:
        t0 = time.perf_counter()
        fill_next_token_bitmask_par(executor(), [(c.matcher, b) for c, b in together], bits)
        spent = time.perf_counter() - t0
        for c, _ in together:
            c.charge(spent / len(together))
            c.suspect = spent > SUSPECT_S
    for c, b in alone:
        t0 = time.perf_counter()
        fill_next_token_bitmask(c.matcher, bits, b)
        spent = time.perf_counter() - t0
        c.charge(spent)
        c.suspect = spent > SUSPECT_S


_SHIFTS = mx.arange(32, dtype=mx.int32)


def apply(logits: mx.array, bits: np.ndarray) -> mx.array:
    """LOGITS [B, V] with every token outside its row's bitmask at -inf (one batched where)."""
    words = mx.array(bits)
    allowed = ((words[:, :, None] >> _SHIFTS) & 1).reshape(words.shape[0], -1)
    vocab = logits.shape[-1]
    allowed = allowed[:, :vocab].astype(mx.bool_)
    return mx.where(allowed, logits, mx.array(-float("inf"), dtype=logits.dtype))
