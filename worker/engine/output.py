"""The per-token output path: a sampled token joins its row and becomes a RequestOutput."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from protocol.messages import RequestOutput, TokenLogprob
from worker.engine.failures import error_output
from worker.grammar.matcher import GrammarRefused

if TYPE_CHECKING:
    from worker.engine.core import Engine
    from worker.engine.request import Request

log = logging.getLogger("rapid_mlx.worker")


def row_update(engine: Engine, r: Request, tok: int, logprobs: mx.array | None, b: int,
               now: float) -> RequestOutput:
    """Take row b's token; a failure here (detokenizing, logprobs) fails only this row."""
    try:
        lp = (logprob(engine.tokenizer, r, tok, logprobs[b])
              if logprobs is not None and r.params.logprobs else None)
        return update(engine, r, int(tok), lp, now)
    except GrammarRefused as exc:
        r.finish_reason = "error"
        return error_output(r, str(exc), "invalid_grammar")
    except Exception as exc:
        log.error("request %s failed on its token: %r", r.id, exc, exc_info=exc)
        r.finish_reason = "error"  # retired (and its sound pages cached) with the others
        return error_output(r)


def update(engine: Engine, r: Request, tok: int, lp: TokenLogprob | None,
           now: float) -> RequestOutput:
    """Append TOK to r: grammar, EOS, stop strings and limits decide whether r finishes."""
    if r.first_token_at is None:
        r.first_token_at = now
    r.sampler.observe(tok)
    r.tokens.append(tok)
    engine.stats.generated_tokens += 1
    p = r.params
    finish = None
    text = ""
    if r.grammar is not None and not r.grammar.advance(tok):
        raise GrammarRefused(f"the response format could not be followed: {r.grammar.error}")
    if (tok in engine.eos_ids and (not p.ignore_eos or r.grammar is not None)
            or tok in p.stop_token_ids):
        finish = "stop"
    else:
        r.detok.add_token(tok)
        text = r.stop.feed(r.detok.last_segment)
        if r.stop.stopped or (r.grammar is not None and r.grammar.finished):
            finish = "stop"
    if finish is None and (r.generated >= p.max_tokens or len(r.tokens) >= engine.context_length):
        finish = "length"
    if finish is not None and not r.stop.stopped:
        r.detok.finalize()
        text += r.stop.feed(r.detok.last_segment)
        text += "" if r.stop.stopped else r.stop.flush()
    if finish is not None:
        r.finish_reason = finish
        engine.stats.finished += 1
    return RequestOutput(
        request_id=r.id, token_ids=[tok], text=text, logprobs=[lp] if lp is not None else [],
        finish_reason=finish, prompt_tokens=r.prompt_len, completion_tokens=r.generated,
        cached_tokens=r.cached_tokens, think_opened=r.think_opened and r.generated == 1,
        stop_sequence=r.stop.matched if finish == "stop" else None,
        queue_s=(r.scheduled_at or now) - r.arrival if r.generated == 1 else 0.0)


def logprob(tokenizer: Any, r: Request, tok: int, row: mx.array) -> TokenLogprob:
    """TOK's log-probability in ROW (and the row's top ones when r asked for them)."""
    top: list[tuple[str, int, float]] = []
    n = r.params.top_logprobs
    if n > 0:
        ids: list[int] = mx.argsort(-row)[:n].tolist()  # type: ignore[assignment]
        vals: list[float] = row[mx.array(ids)].tolist()  # type: ignore[assignment]
        top = [(piece(tokenizer, i), i, float(v)) for i, v in zip(ids, vals, strict=True)]
    chosen: float = row[tok].item()  # type: ignore[assignment]
    return TokenLogprob(token=piece(tokenizer, tok), token_id=tok, logprob=float(chosen), top=top)


def piece(tokenizer: Any, tok: int) -> str:
    """One token's text on its own."""
    return str(tokenizer.decode([tok]))
