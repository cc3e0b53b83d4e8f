"""The output stage: sampled tokens join their rows and become RequestOutputs.

It reads explicit inputs only (the tokenizer, the EOS ids, the context length, the counters)
and hands outputs to the worker loop's sender mid-step when one is set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from protocol.messages import RequestOutput, TokenLogprob
from worker.engine.failures import SendFailed, error_output
from worker.engine.plan import StepPlan, StepResult
from worker.engine.request import EngineStats, Inflight, Request
from worker.grammar.matcher import GrammarRefused

log = logging.getLogger("rapid_mlx.worker")

# a row's first tokens leave an overlapped step before its forward is handed to MLX (time to
# the first visible text: the demo model's is its third token, after "<think>" and "\n")
EARLY_TOKENS = 4


class OutputStage:
    """Turns a step's tokens into outputs; sends them early through ``on_outputs`` when set."""

    def __init__(self, tokenizer: Any, eos_ids: set[int], context_length: int,
                 stats: EngineStats) -> None:
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.context_length = context_length
        self.stats = stats
        # the worker loop's sender: tokens read back before the step's end go out at once
        # (before the next forward is handed to MLX) instead of with the step's return value
        self.on_outputs: Callable[[list[RequestOutput]], None] | None = None
        self.news: list[RequestOutput] = []  # outputs the current step has already made
        self.sent: list[RequestOutput] = []  # outputs the current step sent through on_outputs

    def begin(self) -> None:
        """A step starts: it has made and sent nothing yet."""
        self.news, self.sent = [], []

    def send_early(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        """Hand OUTPUTS to ``on_outputs`` now and return none of them (without one: all)."""
        if self.on_outputs is None or not outputs:
            return outputs
        try:
            self.on_outputs(outputs)
        except Exception as exc:
            raise SendFailed(f"sending outputs mid-step failed: {exc!r}") from exc
        self.sent += outputs
        return []

    def early(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        """Send OUTPUTS early; what is left (all of them without a sender) is the step's news."""
        self.news = self.send_early(outputs)
        return self.news

    def waits_for(self, batch: Inflight) -> bool:
        """True when BATCH holds one of a row's first EARLY_TOKENS tokens and a sender waits."""
        return self.on_outputs is not None and any(
            r.generated < EARLY_TOKENS for r in batch.rows if r.finish_reason is None)

    def collect(self, plan: StepPlan, result: StepResult) -> list[RequestOutput]:
        """The step's outputs: a synchronous one's after its news, an overlapped one's with the
        previous step's tokens read back now (while this step computes)."""
        if not plan.overlapped:
            return self.news + result.outputs
        outputs = result.outputs
        outputs += self.deliver(result.late, plan.decodes) if result.late else []
        return outputs

    def deliver(self, batch: Inflight, running: list[Request]) -> list[RequestOutput]:
        """Read BATCH's tokens back; each still RUNNING, unfinished row takes its token."""
        tokens: list[int] = batch.tokens.tolist()  # type: ignore[assignment]
        now = time.monotonic()
        outputs = []
        for b, (r, tok) in enumerate(zip(batch.rows, tokens, strict=True)):
            if r.finish_reason is not None or r not in running:
                continue  # finished by the token before, or aborted: this one was never wanted
            outputs.append(self.row_update(r, tok, batch.logprobs, b, now))
        return outputs

    def sampled(self, rows: list[Request], tokens: list[int], logprobs: mx.array | None,
                now: float) -> list[RequestOutput]:
        """Each of ROWS takes its token (read back already)."""
        outputs = []
        for b, (r, tok) in enumerate(zip(rows, tokens, strict=True)):
            outputs.append(self.row_update(r, tok, logprobs, b, now))
        return outputs

    def row_update(self, r: Request, tok: int, logprobs: mx.array | None, b: int,
                   now: float) -> RequestOutput:
        """Take row b's token; a failure here (detokenizing, logprobs) fails only this row."""
        try:
            lp = (logprob(self.tokenizer, r, tok, logprobs[b])
                  if logprobs is not None and r.params.logprobs else None)
            return self.update(r, int(tok), lp, now)
        except GrammarRefused as exc:
            r.finish_reason = "error"
            return error_output(r, str(exc), "invalid_grammar")
        except Exception as exc:
            log.error("request %s failed on its token: %r", r.id, exc, exc_info=exc)
            r.finish_reason = "error"  # retired (and its sound pages cached) with the others
            return error_output(r)

    def update(self, r: Request, tok: int, lp: TokenLogprob | None, now: float) -> RequestOutput:
        """Append TOK to r: grammar, EOS, stop strings and limits decide whether r finishes."""
        if r.first_token_at is None:
            r.first_token_at = now
        r.sampler.observe(tok)
        r.tokens.append(tok)
        self.stats.generated_tokens += 1
        p = r.params
        finish = None
        text = ""
        if r.grammar is not None and not r.grammar.advance(tok):
            raise GrammarRefused(f"the response format could not be followed: {r.grammar.error}")
        if (tok in self.eos_ids and (not p.ignore_eos or r.grammar is not None)
                or tok in p.stop_token_ids):
            finish = "stop"
        else:
            r.detok.add_token(tok)
            text = r.stop.feed(r.detok.last_segment)
            if r.stop.stopped or (r.grammar is not None and r.grammar.finished):
                finish = "stop"
        if finish is None and (r.generated >= p.max_tokens or len(r.tokens) >= self.context_length):
            finish = "length"
        if finish is not None and not r.stop.stopped:
            r.detok.finalize()
            text += r.stop.feed(r.detok.last_segment)
            text += "" if r.stop.stopped else r.stop.flush()
        if finish is not None:
            r.finish_reason = finish
            self.stats.finished += 1
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
