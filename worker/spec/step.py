"""The engine's speculative part of a step: plan drafts, verify them, keep what passes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from protocol.messages import RequestOutput
from worker.engine.plan import Drafts
from worker.engine.request import EngineStats, Request
from worker.kv.manager import KVManager
from worker.kv.state_capture import roll_back
from worker.spec.controller import Speculator
from worker.spec.verify import verify

__all__ = ["Drafts", "RowUpdate", "cap", "fed", "merge", "plan", "verify_rows"]

# the output stage's per-token path: (row, token, log-probs or None, index in them, now) -> output
RowUpdate = Callable[[Request, int, "mx.array | None", int, float], RequestOutput]


def plan(spec: Speculator | None, kv: KVManager, context_length: int, running: list[Request],
         decodes: list[Request]) -> Drafts:
    """Draft tokens for the decode rows that speculate this step, with pages reserved for them.

    Drafts never preempt anyone: a row whose extra pages are not free drafts nothing.
    """
    if spec is None or not spec.active(running):
        return {}
    caps = [cap(kv, context_length, r) for r in decodes]
    out: Drafts = {}
    for r, (toks, q) in zip(decodes, spec.propose(decodes, caps), strict=True):
        if len(toks) and kv.ensure(r, r.computed + 1 + len(toks)):
            out[id(r)] = (toks, q)
    return out


def fed(r: Request, drafts: Drafts) -> list[int] | mx.array:
    """What the verify forward feeds row r: its last token, then its drafts (if any)."""
    toks = drafts.get(id(r), ([], None))[0]
    if isinstance(toks, list):
        return [r.tokens[-1], *toks]
    return mx.concatenate([mx.array([r.tokens[-1]], dtype=toks.dtype), toks])


def cap(kv: KVManager, context_length: int, r: Request) -> int:
    """Most draft tokens r can use: its token and context limits, and with K8V4 pages the
    full-precision tail page (a rollback must not land in a page before the one written last).
    """
    room = min(r.params.max_tokens - r.generated, context_length - len(r.tokens)) - 1
    if kv.store.quantized:
        p = kv.page_size
        room = min(room, p - 1 - (r.computed + 1) % p)
    return max(0, room)


def verify_rows(rows: list[Request], logits: list[mx.array], drafts: Drafts, update: RowUpdate,
                kv: KVManager, stats: EngineStats, spec: Speculator) -> list[RequestOutput]:
    """Accept each row's drafts exactly; append kept tokens through UPDATE (the output stage's).

    LOGITS[i] (n_i + 1, V) are row i's target logits at its fed positions. A row's KV keeps
    the verified positions only: computed moves past them and the pages beyond are freed.
    """
    samplers: list[Any] = []
    nexts: list[mx.array] = []
    qs: list[mx.array | None] = []
    for r in rows:
        toks, q = drafts[id(r)]
        samplers += [r.sampler] * (len(toks) + 1)
        nexts += [mx.array(toks, dtype=mx.int32) if isinstance(toks, list) else toks.astype(mx.int32),
                  mx.array([-1], dtype=mx.int32)]
        qs += [*(q[i] for i in range(len(toks))), None] if q is not None else [None] * (len(toks) + 1)
    proposed = mx.concatenate(nexts)  # -1 after each row's drafts
    accept, token, logprobs = verify(mx.concatenate(logits, axis=0), samplers, proposed, qs)
    mx.eval(accept, token, proposed, *([logprobs] if logprobs is not None else []))  # the step's wait
    ok: list[bool] = accept.tolist()  # type: ignore[assignment]
    picks: list[int] = token.tolist()  # type: ignore[assignment]
    every: list[int] = proposed.tolist()  # type: ignore[assignment]
    now = time.monotonic()
    outputs: list[RequestOutput] = []
    fed_kept: dict[int, int] = {}  # a hybrid's rows: fed positions whose recurrent states stay
    at = 0
    for r in rows:
        toks = every[at : at + len(drafts[id(r)][0])]
        j = next(i for i in range(len(toks) + 1) if not ok[at + i])  # the last never accepts
        kept = [*toks[:j], picks[at + j]]
        start = r.computed
        news = []
        for i, tok in enumerate(kept):
            news.append(update(r, tok, logprobs, at + i, now))
            if r.finish_reason is not None:
                break
        r.computed = start + 1 + min(len(news), j)  # the last kept token has no KV yet
        fed_kept[id(r.kv)] = r.computed - start
        kv.truncate(r, r.computed + 1)
        stats.drafted_tokens += len(toks)
        stats.accepted_tokens += j
        stats.decode_rows += min(len(news), j + 1) - 1  # the engine counted one
        spec.observe(r, len(toks), j)
        merged = merge(news)
        merged[0].drafted, merged[0].accepted, merged[0].drafter = len(toks), j, spec.name
        outputs += merged
        at += len(toks) + 1
    if kv.store.states is not None:
        roll_back(kv.store.states, fed_kept)
    return outputs


def merge(news: list[RequestOutput]) -> list[RequestOutput]:
    """One output for a row's tokens of this step (an error output stays on its own)."""
    good = [o for o in news if o.error is None]
    if len(good) <= 1:
        return news
    last = good[-1]
    fields: dict[str, Any] = {
        "token_ids": [t for o in good for t in o.token_ids], "text": "".join(o.text for o in good),
        "logprobs": [lp for o in good for lp in o.logprobs],
        "think_opened": any(o.think_opened for o in good), "queue_s": good[0].queue_s}
    merged = RequestOutput(
        request_id=last.request_id, finish_reason=last.finish_reason,
        prompt_tokens=last.prompt_tokens, completion_tokens=last.completion_tokens,
        cached_tokens=last.cached_tokens, stop_sequence=last.stop_sequence, **fields)
    return [merged, *(o for o in news if o.error is not None)]
