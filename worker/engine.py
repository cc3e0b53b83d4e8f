"""The continuous-batching engine: one ``step()`` schedules, runs the model, samples, updates."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from protocol.messages import RequestOutput, SamplingParams, TokenLogprob
from worker.kv import BatchView, RequestKV
from worker.sampling import RowSampler, sample
from worker.stops import StopMatcher


@dataclass
class Request:
    """One generation in the engine."""

    id: str
    prompt_ids: list[int]
    params: SamplingParams
    sampler: RowSampler
    detok: Any
    stop: StopMatcher
    kv: RequestKV
    output_ids: list[int] = field(default_factory=list)
    computed: int = 0
    cached_tokens: int = 0
    arrival: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    finish_reason: str | None = None
    think_opened: bool = False

    @property
    def prefilling(self) -> bool:
        """True while prompt tokens remain to be computed."""
        return self.computed < len(self.prompt_ids)

    @property
    def phase(self) -> str:
        """Prefill or decode, for status reports."""
        return "prefill" if self.prefilling else "decode"


@dataclass
class EngineStats:
    """Counters the worker reports in heartbeats and status."""

    steps: int = 0
    prompt_tokens_computed: int = 0
    generated_tokens: int = 0
    decode_rows: int = 0
    finished: int = 0
    last_step_at: float = 0.0


class QueueFull(Exception):
    """The wait queue is at its bound."""


class Engine:
    """Owns the model, the running batch and the wait queue."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        context_length: int,
        max_batch: int = 32,
        prefill_budget: int = 512,
        max_waiting: int = 256,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.num_layers = len(model.layers)
        self.context_length = context_length
        self.max_batch = max_batch
        self.prefill_budget = prefill_budget
        self.max_waiting = max_waiting
        self.eos_ids = set(getattr(tokenizer, "eos_token_ids", None) or [])
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.stats = EngineStats()

    # ---- intake -------------------------------------------------------------------------

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
            think_opened: bool = False) -> None:
        """Queue a request; it joins the running batch at a later step."""
        if len(self.waiting) >= self.max_waiting:
            raise QueueFull(f"wait queue is full ({self.max_waiting} requests)")
        self.waiting.append(
            Request(
                id=request_id,
                prompt_ids=prompt_ids,
                params=params,
                sampler=RowSampler(params),
                detok=self.tokenizer.detokenizer,
                stop=StopMatcher(params.stop),
                kv=RequestKV(self.num_layers),
                think_opened=think_opened,
            )
        )

    def abort(self, request_ids: list[str]) -> None:
        """Drop these requests and their caches now."""
        ids = set(request_ids)
        self.waiting = deque(r for r in self.waiting if r.id not in ids)
        self.running = [r for r in self.running if r.id not in ids]

    @property
    def has_work(self) -> bool:
        """True when any request is queued or running."""
        return bool(self.waiting or self.running)

    # ---- the step -----------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Schedule, execute the model once per row group, sample and update; return news."""
        while self.waiting and len(self.running) < self.max_batch:
            self.running.append(self.waiting.popleft())
        decodes = [r for r in self.running if not r.prefilling]
        prefills = self._plan_prefill()
        if not decodes and not prefills:
            return []
        rows: list[Request] = []
        logits: list[mx.array] = []
        if decodes:
            tokens = mx.array([[r.output_ids[-1]] for r in decodes])
            logits.append(self._forward(decodes, tokens)[:, -1, :])
            rows.extend(decodes)
            for r in decodes:
                r.computed += 1
        for r, n in prefills:
            chunk = mx.array([r.prompt_ids[r.computed : r.computed + n]])
            out = self._forward([r], chunk)
            r.computed += n
            self.stats.prompt_tokens_computed += n
            if not r.prefilling:
                logits.append(out[:, -1, :])
                rows.append(r)
            else:
                mx.eval(out)  # materialize the chunk's KV before the next one
        outputs: list[RequestOutput] = []
        if rows:
            outputs = self._sample_and_update(rows, mx.concatenate(logits, axis=0))
        self.stats.steps += 1
        self.stats.decode_rows += len(decodes)
        self.stats.last_step_at = time.time()
        return outputs

    def _plan_prefill(self) -> list[tuple[Request, int]]:
        budget = self.prefill_budget
        plan = []
        for r in self.running:
            if budget <= 0:
                break
            if r.prefilling:
                n = min(budget, len(r.prompt_ids) - r.computed)
                plan.append((r, n))
                budget -= n
        return plan

    def _forward(self, rows: list[Request], tokens: mx.array) -> mx.array:
        cache = [
            BatchView(layer, [r.kv for r in rows], [r.computed for r in rows])
            for layer in range(self.num_layers)
        ]
        logits: mx.array = self.model(tokens, cache=cache)
        return logits

    def _sample_and_update(self, rows: list[Request], logits: mx.array) -> list[RequestOutput]:
        tokens, logprobs = sample(logits, [r.sampler for r in rows])
        mx.eval(tokens, logprobs) if logprobs is not None else mx.eval(tokens)
        token_list: list[int] = tokens.tolist()  # type: ignore[assignment]
        outputs = []
        now = time.monotonic()
        for b, (r, tok) in enumerate(zip(rows, token_list, strict=True)):
            lp = self._logprob(r, tok, logprobs[b]) if logprobs is not None and r.params.logprobs else None
            outputs.append(self._update(r, int(tok), lp, now))
        self.running = [r for r in self.running if r.finish_reason is None]
        return outputs

    def _update(self, r: Request, tok: int, lp: TokenLogprob | None, now: float) -> RequestOutput:
        if r.first_token_at is None:
            r.first_token_at = now
        r.sampler.observe(tok)
        r.output_ids.append(tok)
        self.stats.generated_tokens += 1
        p = r.params
        finish = None
        text = ""
        if (tok in self.eos_ids and not p.ignore_eos) or tok in p.stop_token_ids:
            finish = "stop"
        else:
            r.detok.add_token(tok)
            text = r.stop.feed(r.detok.last_segment)
            if r.stop.stopped:
                finish = "stop"
        if finish is None and (
            len(r.output_ids) >= p.max_tokens or r.computed + 1 >= self.context_length
        ):
            finish = "length"
        if finish is not None and not r.stop.stopped:
            r.detok.finalize()
            text += r.stop.feed(r.detok.last_segment)
            text += "" if r.stop.stopped else r.stop.flush()
        if finish is not None:
            r.finish_reason = finish
            self.stats.finished += 1
        return RequestOutput(
            request_id=r.id,
            token_ids=[tok],
            text=text,
            logprobs=[lp] if lp is not None else [],
            finish_reason=finish,
            prompt_tokens=len(r.prompt_ids),
            completion_tokens=len(r.output_ids),
            cached_tokens=r.cached_tokens,
            think_opened=r.think_opened and len(r.output_ids) == 1,
        )

    def _logprob(self, r: Request, tok: int, row: mx.array) -> TokenLogprob:
        top: list[tuple[str, int, float]] = []
        n = r.params.top_logprobs
        if n > 0:
            ids: list[int] = mx.argsort(-row)[:n].tolist()  # type: ignore[assignment]
            vals: list[float] = row[mx.array(ids)].tolist()  # type: ignore[assignment]
            top = [(self._piece(i), i, float(v)) for i, v in zip(ids, vals, strict=True)]
        chosen: float = row[tok].item()  # type: ignore[assignment]
        return TokenLogprob(token=self._piece(tok), token_id=tok, logprob=float(chosen), top=top)

    def _piece(self, tok: int) -> str:
        return str(self.tokenizer.decode([tok]))
