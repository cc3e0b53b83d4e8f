"""The continuous-batching engine: one ``step()`` schedules, runs the model, samples, updates."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from protocol.messages import RequestOutput, SamplingParams
from worker.engine import inputs as engine_inputs
from worker.engine import output as emit
from worker.engine.compile_mode import AUTO_MAX_ROWS, MAX_WEIGHT_BYTES, mode_in_force, rows_for
from worker.engine.failures import EngineBroken, SendFailed, discard, error_output, verify
from worker.engine.forward import Forward
from worker.engine.inputs import given as _given
from worker.engine.inputs import group_chunks as _group_chunks
from worker.engine.request import EngineStats, Inflight, KVTooSmall, QueueFull, Request
from worker.engine.sampling import RowSampler, sample
from worker.engine.stops import StopMatcher
from worker.grammar import masks
from worker.kv.calibrate import calibrate_centers
from worker.kv.manager import KVManager
from worker.kv.paged_kv import PagedKVStore
from worker.spec import step as spec_step
from worker.spec.controller import Speculator

__all__ = ["Engine", "EngineBroken", "EngineStats", "KVTooSmall", "QueueFull", "Request",
           "model_dtype"]

log = logging.getLogger("rapid_mlx.worker")

MAX_FAILED_STEPS = 16  # steps failing in a row with no good one between: the engine is broken
# a row's first tokens leave an overlapped step before its forward is handed to MLX (time to
# the first visible text: the demo model's is its third token, after "<think>" and "\n")
EARLY_TOKENS = 4


class Engine:
    """Owns the model, the running batch, the wait queue and the KV pages."""

    def __init__(self, model: Any, tokenizer: Any, store: PagedKVStore, *, context_length: int,
                 max_batch: int = 32, prefill_budget: int = 512, max_waiting: int = 256,
                 prefix_cache: bool = True, overlap: bool = True,
                 spec: Speculator | None = None, compile_decode: str = "auto") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.kv = KVManager(store, prefix_cache=prefix_cache)
        self.dtype = model_dtype(model)
        self.compile_decode = mode_in_force(compile_decode)  # --compile-decode (worker/engine/compile_mode.py)
        rows = rows_for(self.compile_decode, max_batch, model)
        self._forward = Forward(model, store, self.dtype, compile_rows=rows)
        self.compiled = self._forward.compiled  # None when no decode step runs compiled
        if self.compile_decode == "auto" and 0 < rows < max_batch:
            log.info("--compile-decode auto: decode steps of up to %d rows run compiled (%d for "
                     "weights of at most %d MiB)", rows, AUTO_MAX_ROWS, MAX_WEIGHT_BYTES >> 20)
        if store.quantized:
            calibrate_centers(model, tokenizer, store)
        self.kv_note = ""
        self.context_length = context_length
        self.max_batch = max_batch
        self.prefill_budget = prefill_budget
        self.max_waiting = max_waiting
        self.eos_ids = set(getattr(tokenizer, "eos_token_ids", None) or [])
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.stats = EngineStats()
        self.overlap = overlap
        self.spec = spec  # speculative decoding (None: off)
        if spec is not None and hasattr(spec.drafter, "attach"):
            spec.drafter.attach(self._forward)  # an MTP drafter reads the target's hidden states
        self.verified_rows = 0  # rows whose drafts the current step verified
        self._inflight: Inflight | None = None
        self._touched: list[Request] = []  # rows the current step has put at risk
        self._news: list[RequestOutput] = []  # outputs the current step has already made
        # the worker loop's sender: tokens read back before the step's end go out at once
        # (before the next forward is handed to MLX) instead of with the step's return value
        self.on_outputs: Callable[[list[RequestOutput]], None] | None = None
        self._sent: list[RequestOutput] = []  # outputs the current step sent through on_outputs
        self.failed_steps = 0  # in a row
        self._prefill_s = 0.0  # the current step's prefill seconds

    # ---- intake -------------------------------------------------------------------------

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
            think_opened: bool = False, grammar: Any = None, vision: Any = None,
            cache_salt: str = "") -> None:
        """Queue a request; it joins the running batch at a later step.

        CACHE_SALT is its prefix-cache namespace: prefixes are shared only within one.

        VISION (a worker.kinds.vision VisionInput) holds the prompt's images: its cache key (image
        positions keyed by content hash) becomes the request's tokens.
        """
        if len(self.waiting) >= self.max_waiting:
            raise QueueFull(f"wait queue is full ({self.max_waiting} requests)")
        pages = self.kv.pages_for(len(prompt_ids) + params.max_tokens)
        if grammar is not None:
            grammar.begin(think_opened)
        if pages > self.kv.pool.total:
            raise KVTooSmall(
                f"this request needs {pages} KV pages but the KV cache holds "
                f"{self.kv.pool.total}; shorten it or raise --kv-cache-memory")
        if vision is not None and getattr(self.model, "mrope", False):
            vision.positions, vision.delta = self.model.rope_positions(vision.ids, vision.pixels)
        self.waiting.append(Request(
            id=request_id, prompt_len=len(prompt_ids),
            tokens=list(vision.key if vision is not None else prompt_ids), params=params,
            sampler=RowSampler(params), detok=self.tokenizer.detokenizer,
            stop=StopMatcher(params.stop), think_opened=think_opened, grammar=grammar,
            vision=vision, cache_salt=cache_salt))

    def abort(self, request_ids: list[str]) -> None:
        """Drop these requests; their pages go back (full ones stay cached)."""
        ids = set(request_ids)
        for r in [r for r in self.running if r.id in ids]:
            self.kv.release(r)
            self._forget(r)
        self.waiting = deque(r for r in self.waiting if r.id not in ids)
        self.running = [r for r in self.running if r.id not in ids]

    def forwards(self) -> dict[str, Forward]:
        """The model calls this engine makes: the target's ("") and a draft model's ("draft ")."""
        draft = getattr(self.spec.drafter, "forward", None) if self.spec is not None else None
        return {"": self._forward} | ({"draft ": draft} if draft is not None else {})

    @property
    def has_work(self) -> bool:
        """True when any request is queued or running (pending tokens belong to running ones)."""
        return bool(self.waiting or self.running)

    # ---- the step -----------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Schedule, run the decode batch and the prefill chunks, sample, update; return news.

        While every running request is decoding (nothing waits, nothing prefills), steps overlap
        like mlx-lm's generate loop: step t+1 is built on step t's unevaluated tokens and handed
        to MLX before step t's tokens are read back and delivered (one step later).

        An exception fails the rows the step had put at risk (a forward batch fails together)
        and returns their pages; raises EngineBroken only when the books do not balance after,
        and SendFailed when ``on_outputs`` (the loop's socket) fails mid-step.
        """
        self._touched, self._news, self._sent, self._prefill_s = [], [], [], 0.0
        t0, self.verified_rows = time.perf_counter(), 0
        flushed, overlapped = 0, False
        try:
            if self.spec is not None:
                self.spec.tick(self.running)
            if not self._speculating() and self._reserve_overlapped():
                outputs, overlapped = self._overlapped_step(), True
            else:
                self._news = self._send_early(self._flush())  # before a prefill delays them
                flushed, t0 = len(self._news), time.perf_counter()  # the last step's tokens
                outputs = self._news + self._synchronous_step()
                self.stats.sync_seconds += time.perf_counter() - t0
        except SendFailed:
            raise  # as a send error after the step would: the loop leaves, the rows are not at fault
        except Exception as exc:
            return self._recover(exc)
        self.failed_steps = 0
        if not self.running:  # idle: free what only running rows need (dense decode caches)
            for forward in self.forwards().values():
                forward.idle()
        if self.spec is not None and (overlapped or self.verified_rows):
            made = self._sent + outputs if overlapped else outputs[flushed:]
            self._time_step(made, time.perf_counter() - t0 - self._prefill_s)
        return outputs

    def _send_early(self, outputs: list[RequestOutput]) -> list[RequestOutput]:
        """Hand OUTPUTS to ``on_outputs`` now and return none of them (without one: all)."""
        if self.on_outputs is None or not outputs:
            return outputs
        try:
            self.on_outputs(outputs)
        except Exception as exc:
            raise SendFailed(f"sending outputs mid-step failed: {exc!r}") from exc
        self._sent += outputs
        return []

    def _time_step(self, outputs: list[RequestOutput], seconds: float) -> None:
        """Tell the speculator what this decode step made (it pauses drafts that cost)."""
        assert self.spec is not None
        rows = len({o.request_id for o in outputs})
        self.spec.record(bool(self.verified_rows), rows, sum(len(o.token_ids) for o in outputs),
                         seconds)

    def _recover(self, exc: Exception) -> list[RequestOutput]:
        """Fail the rows this step touched (and any with unread tokens); keep everyone else."""
        self.failed_steps += 1
        log.error("engine step failed (%d in a row): %r", self.failed_steps, exc, exc_info=exc)
        running = {id(r) for r in self.running}  # the waiting hold no pages and no unread tokens
        doomed = {id(r): r for r in self._touched if id(r) in running} or {
            id(r): r for r in self.running}  # nothing was at risk yet: it may recur, so fail all
        if self._inflight is not None:  # unread tokens cannot be trusted: their rows go too
            doomed.update((id(r), r) for r in self._inflight.rows if id(r) in running)
            self._inflight = None
        self.running = [r for r in self.running if id(r) not in doomed]
        doomed_ids = {r.id for r in doomed.values()}
        outputs = [o for o in self._news if o.request_id not in doomed_ids]
        for r in doomed.values():
            discard(self.kv, r)
            self._forget(r)
            outputs.append(error_output(r))
        verify(self.kv, self.running)
        try:  # page writes the failed step left pending must still evaluate
            mx.eval(self.kv.store.arrays())
        except Exception as broken:
            raise EngineBroken(f"the KV store cannot be evaluated: {broken}") from exc
        if self.failed_steps >= MAX_FAILED_STEPS:
            raise EngineBroken(f"{self.failed_steps} engine steps failed in a row") from exc
        return outputs

    def _synchronous_step(self) -> list[RequestOutput]:
        self._admit()
        decodes = self._reserve([(r, 1) for r in self.running if not r.prefilling])
        prefills = self._plan_prefill()
        decodes = [r for r in decodes if r in self.running]  # prefill reservations may preempt
        if not decodes and not prefills:
            return []
        drafts = spec_step.plan(self, decodes)
        verified: list[mx.array] = []
        rows: list[Request] = []
        logits: list[mx.array] = []
        t0 = time.perf_counter()
        # Until sampling, a failure leaves every row as it was before this step (KV rewritten
        # at the same positions on retry), so only the rows of the failing call are at risk.
        if decodes and drafts:
            self._touched = decodes
            fed = [spec_step.fed(r, drafts) for r in decodes]
            every = self._forward.verify(fed, [r.kv for r in decodes],
                                         [r.computed for r in decodes], **_given(
                                             positions=self._rope([(r, r.computed, len(f))
                                                                   for r, f in zip(decodes, fed, strict=True)])))
            for b, (r, f) in enumerate(zip(decodes, fed, strict=True)):
                if id(r) in drafts:
                    verified.append(every[b, : len(f)])
                else:
                    logits.append(every[b : b + 1, 0])
                    rows.append(r)
        elif decodes:
            self._touched = decodes
            out = self._forward([[r.tokens[-1]] for r in decodes], [r.kv for r in decodes],
                                [r.computed for r in decodes], True,
                                **_given(positions=self._rope([(r, r.computed, 1) for r in decodes])))
            assert out is not None
            logits.append(out)
            rows.extend(decodes)
        t1 = time.perf_counter()
        for group in _group_chunks(prefills):
            samplers = [r.computed + n == r.need and not r.generated for r, n in group]
            embeds = self._embeds(group)
            self._touched = [r for r, _ in group]
            out = self._forward([r.tokens[r.computed : r.computed + n] for r, n in group],
                                [r.kv for r, _ in group], [r.computed for r, _ in group],
                                any(samplers), **_given(
                                    embeds=embeds,
                                    positions=self._rope([(r, r.computed, n) for r, n in group])))
            if out is not None:
                keep = [i for i, wants in enumerate(samplers) if wants]
                logits.append(out[mx.array(keep)] if len(keep) < len(group) else out)
                rows.extend(group[i][0] for i in keep)
        t2 = time.perf_counter()
        self._touched = [*decodes, *(r for r, _ in prefills)]  # from here rows change state
        outputs = self._sample_and_update(rows, logits) if rows else []
        if verified:
            outputs += spec_step.verify_rows(self, [r for r in decodes if id(r) in drafts],
                                             verified, drafts)
        for r in decodes:
            r.computed += 0 if id(r) in drafts else 1
        for r, n in prefills:
            r.computed += n
            self.stats.prompt_tokens_computed += n
            self.kv.publish(r)
            if r.embeds is not None and r.computed >= r.prompt_len:
                r.embeds = None  # the prompt is in the KV now
        self.stats.prefill_seconds += t2 - t1
        self._prefill_s = t2 - t1  # not a decode cost (the speculator compares decode steps)
        self.stats.decode_seconds += time.perf_counter() - t2 + t1 - t0
        self._retire()
        self.stats.steps += 1
        self.stats.decode_rows += len(decodes)
        self.stats.last_step_at = time.time()
        return outputs

    def _embeds(self, group: list[tuple[Request, int]]) -> list[mx.array | None] | None:
        """Each row's input embeddings for its chunk when its prompt holds images there."""
        return engine_inputs.embeds(self, group)

    def _rope(self, rows: list[tuple[Request, int, int]]) -> mx.array | None:
        """(3, B, n) M-RoPE positions of rows fed n tokens from a start (None: not M-RoPE)."""
        return engine_inputs.rope(self.model, rows)

    def _speculating(self) -> bool:
        """True when this step should draft (speculative steps run synchronously)."""
        return self.spec is not None and self.spec.active(self.running)

    def _forget(self, r: Request) -> None:
        """Drop r's drafter state (it finished, was aborted, preempted or failed)."""
        if self.spec is not None:
            self.spec.release(r)

    def _reserve_overlapped(self) -> bool:
        """True (with pages reserved) when the next step can be built on unread tokens.

        That needs every running request decoding without penalties and short of its limits,
        and a page for each next position without preempting anyone.
        """
        if not self.overlap or self.waiting or not self.running:
            return False
        pending = set(map(id, self._inflight.rows)) if self._inflight else set()
        for r in self.running:
            ahead = 1 + (id(r) in pending)  # tokens sampled before this step's is read back
            if (r.prefilling or r.sampler.penalized or r.generated + ahead >= r.params.max_tokens
                    or len(r.tokens) + ahead >= self.context_length):
                return False
        return all(self.kv.ensure(r, r.computed + 1) for r in self.running)

    def _overlapped_step(self) -> list[RequestOutput]:
        t0 = time.perf_counter()
        rows = list(self.running)
        previous = self._inflight
        self._touched.extend(rows)
        inputs = self._next_inputs(rows, previous)
        logits = self._forward.decode_lazy(
            inputs, [r.kv for r in rows], [r.computed for r in rows],
            **_given(positions=self._rope([(r, r.computed, 1) for r in rows])))
        outputs: list[RequestOutput] = []
        if any(r.grammar is not None for r in rows):
            # the masks need the previous tokens: read them back while this forward runs
            mx.async_eval(logits, *self.kv.store.arrays())  # type: ignore[no-untyped-call]
            outputs = self._news = self._send_early(self._deliver(previous) if previous else [])
            self._inflight = previous = None
            logits = self._masked(rows, logits)
        tokens, logprobs = sample(logits, [r.sampler for r in rows])
        if previous is not None and self._first_tokens(previous):
            # a row's first tokens are read back (a compiled step has waited for their page
            # writes already) and go out before this step is handed to MLX: mx.async_eval
            # returns only when few of its tasks are left, a whole step later
            outputs += self._deliver(previous)
            self._inflight = previous = None
            outputs = self._news = self._send_early(outputs)
        mx.async_eval(tokens, *([logprobs] if logprobs is not None else []),  # type: ignore[no-untyped-call]
                      *self.kv.store.arrays())
        for r in rows:
            r.computed += 1  # this step's input is at r.computed (the pending token, if any)
        self._inflight = Inflight(rows, tokens, logprobs)
        # later tokens are delivered while this step computes (the host's work overlaps it)
        outputs += self._deliver(previous) if previous else []
        self._retire()
        self.stats.steps += 1
        self.stats.overlapped_steps += 1
        self.stats.decode_rows += len(rows)
        self.stats.decode_seconds += time.perf_counter() - t0
        self.stats.last_step_at = time.time()
        return outputs

    def _first_tokens(self, batch: Inflight) -> bool:
        """True when BATCH holds one of a row's first EARLY_TOKENS tokens and a sender waits."""
        return self.on_outputs is not None and any(
            r.generated < EARLY_TOKENS for r in batch.rows if r.finish_reason is None)

    @staticmethod
    def _next_inputs(rows: list[Request], previous: Inflight | None) -> mx.array:
        """Each row's next input: its unread token from the previous step, else its last one.

        Requests join only through synchronous steps, so after an overlapped step every running
        request is one of its rows.
        """
        if previous is None:
            return mx.array([r.tokens[-1] for r in rows])
        if rows == previous.rows:  # requests compare by identity
            return previous.tokens
        index = {id(r): b for b, r in enumerate(previous.rows)}
        return previous.tokens[mx.array([index[id(r)] for r in rows])]

    def _flush(self) -> list[RequestOutput]:
        """Deliver the tokens of the last overlapped step (before a synchronous step)."""
        if self._inflight is None:
            return []
        self._touched = list(self._inflight.rows)
        outputs = self._deliver(self._inflight)
        self._inflight = None
        self._retire()
        self._touched = []  # delivered: these rows are whole again
        return outputs

    def _deliver(self, batch: Inflight) -> list[RequestOutput]:
        tokens: list[int] = batch.tokens.tolist()  # type: ignore[assignment]
        now = time.monotonic()
        outputs = []
        for b, (r, tok) in enumerate(zip(batch.rows, tokens, strict=True)):
            if r.finish_reason is not None or r not in self.running:
                continue  # finished by the token before, or aborted: this one was never wanted
            outputs.append(self._row_update(r, tok, batch.logprobs, b, now))
        return outputs

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_batch:
            r = self.waiting[0]
            if self.kv.available() < self.kv.pages_for(min(r.need, self.prefill_budget)) + 1:
                break
            self.running.append(self.waiting.popleft())
            if r.scheduled_at is None:
                r.scheduled_at = time.monotonic()

    def _reserve(self, rows: list[tuple[Request, int]]) -> list[Request]:
        """Give each row pages for its next N tokens, preempting the newest requests if short."""
        for r, n in sorted(rows, key=lambda x: x[0].arrival):
            while r in self.running and not self.kv.ensure(r, r.computed + n):
                self._preempt(max(self.running, key=lambda x: x.arrival))
        return [r for r, _ in rows if r in self.running]

    def _preempt(self, r: Request) -> None:
        """Free r's pages (full ones stay cached) and requeue it for recomputation."""
        self.kv.release(r)
        self._forget(r)
        r.computed = 0
        r.preemptions += 1
        self.stats.preemptions += 1
        self.running.remove(r)
        self.waiting.appendleft(r)

    def _plan_prefill(self) -> list[tuple[Request, int]]:
        budget = self.prefill_budget
        plan: list[tuple[Request, int]] = []
        prefilling = [r for r in self.running if r.prefilling]
        for r in prefilling:
            if budget <= 0:
                break
            if r not in self.running:  # preempted by an earlier row's reservation this step
                continue
            self._touched = [r]
            if r.computed == 0 and not r.kv.pages:
                limit = r.need - 1 if not r.generated else r.need
                started = [q for q in self.running if q is not r and q.prefilling and q.kv.pages]
                if self.kv.shares_inflight_prefix(r, started, limit):
                    continue  # wait for those pages instead of computing them again
                r.computed = self.kv.match(r, limit)
                if not r.generated:
                    r.cached_tokens = r.computed
            n = min(budget, r.need - r.computed)
            if n > 0 and self._reserve([(r, n)]):
                plan.append((r, n))
                budget -= n
        self._touched = []
        return [(r, n) for r, n in plan if r in self.running]

    def _retire(self) -> None:
        for r in self.running:
            if r.finish_reason is not None:
                self.kv.release(r)
                self._forget(r)
        self.running = [r for r in self.running if r.finish_reason is None]

    # ---- sampling and outputs -----------------------------------------------------------

    def _masked(self, rows: list[Request], logits: mx.array) -> mx.array:
        """LOGITS with each constrained row limited to its grammar's next tokens.

        The caller has handed the forward to MLX (async_eval): the masks fill meanwhile.
        """
        t0 = time.perf_counter()
        bits = masks.fill([r.grammar for r in rows], logits.shape[-1])
        self.stats.mask_seconds += time.perf_counter() - t0
        return masks.apply(logits, bits)  # lazy: the sample joins the queue behind the forward

    def _sample_and_update(self, rows: list[Request], logits: list[mx.array]) -> list[RequestOutput]:
        batch = mx.concatenate(logits, axis=0)
        if any(r.grammar is not None for r in rows):
            mx.async_eval(batch, *self.kv.store.arrays())  # type: ignore[no-untyped-call]
            batch = self._masked(rows, batch)
        tokens, logprobs = sample(batch, [r.sampler for r in rows])
        mx.eval(tokens, logprobs) if logprobs is not None else mx.eval(tokens)
        token_list: list[int] = tokens.tolist()  # type: ignore[assignment]
        now = time.monotonic()
        outputs = []
        for b, (r, tok) in enumerate(zip(rows, token_list, strict=True)):
            outputs.append(self._row_update(r, tok, logprobs, b, now))
        return outputs

    def _row_update(self, r: Request, tok: int, logprobs: mx.array | None, b: int,
                    now: float) -> RequestOutput:
        """Take row b's token into r and make its output (worker.engine.output; fails only this row)."""
        return emit.row_update(self, r, tok, logprobs, b, now)


def model_dtype(model: Any) -> mx.Dtype:
    """The floating dtype of the model's weights (float32 when it has none)."""
    from mlx.utils import tree_flatten

    params: list[tuple[str, mx.array]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    for _, p in params:
        if p.dtype in (mx.float32, mx.float16, mx.bfloat16):
            return p.dtype
    return mx.float32
