"""The engine's facade: intake, and ``step()``: schedule -> execute -> output.

The three stages are worker/engine/scheduler.py (who runs: a StepPlan), executor.py (the
forwards and sampling: a StepResult) and output.py (tokens become RequestOutputs).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from protocol.messages import RequestOutput, SamplingParams
from worker.engine.compile_mode import AUTO_MAX_ROWS, MAX_WEIGHT_BYTES, mode_in_force, rows_for
from worker.engine.dtype import model_dtype
from worker.engine.executor import Executor
from worker.engine.failures import EngineBroken, SendFailed
from worker.engine.forward import Forward
from worker.engine.output import OutputStage
from worker.engine.plan import AtRisk, StepPlan
from worker.engine.recovery import recover
from worker.engine.request import EngineStats, KVTooSmall, QueueFull, Request
from worker.engine.sampling import RowSampler
from worker.engine.scheduler import Scheduler
from worker.engine.stops import StopMatcher
from worker.kv.calibrate import calibrate_centers
from worker.kv.manager import KVManager
from worker.kv.paged_kv import PagedKVStore
from worker.spec.controller import Speculator

__all__ = ["Engine", "EngineBroken", "EngineStats", "KVTooSmall", "QueueFull", "Request",
           "model_dtype"]

log = logging.getLogger("rapid_mlx.worker")


class Engine:
    """Owns the model, the running batch, the wait queue and the KV pages (through its stages)."""

    def __init__(self, model: Any, tokenizer: Any, store: PagedKVStore, *, context_length: int,
                 max_batch: int = 32, prefill_budget: int = 512, max_waiting: int = 256,
                 prefix_cache: bool = True, overlap: bool = True,
                 spec: Speculator | None = None, compile_decode: str = "auto") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.kv = KVManager(store, prefix_cache=prefix_cache, max_batch=max_batch)
        self.dtype = model_dtype(model)
        self.compile_decode = mode_in_force(compile_decode)  # --compile-decode (worker/engine/compile_mode.py)
        # a hybrid model's recurrent states are written outside the compiled step's inputs
        rows = rows_for(self.compile_decode, max_batch, model) if store.states is None else 0
        forward = Forward(model, store, self.dtype, compile_rows=rows)
        self.compiled = forward.compiled  # None when no decode step runs compiled
        if self.compile_decode == "auto" and 0 < rows < max_batch:
            log.info("--compile-decode auto: decode steps of up to %d rows run compiled (%d for "
                     "weights of at most %d MiB)", rows, AUTO_MAX_ROWS, MAX_WEIGHT_BYTES >> 20)
        if store.quantized:
            calibrate_centers(model, tokenizer, store)
        self.kv_note = ""
        stats = EngineStats()
        self.risk = AtRisk()  # the rows the current step has put at risk (for recovery)
        self.scheduler = Scheduler(self.kv, stats, self.risk, context_length=context_length,
                                   max_batch=max_batch, prefill_budget=prefill_budget,
                                   max_waiting=max_waiting, overlap=overlap, spec=spec)
        self.output = OutputStage(tokenizer, set(getattr(tokenizer, "eos_token_ids", None) or []),
                                  context_length, stats)
        self._spec = spec  # speculative decoding (None: off)
        if spec is not None and hasattr(spec.drafter, "attach"):
            spec.drafter.attach(forward)  # an MTP drafter reads the target's hidden states
        self.executor = Executor(forward, model, self.kv, self.output, stats, self.risk, spec)
        self.failed_steps = 0  # in a row
        # told each step's plan before it runs (the worker loop's pulse reports its work)
        self.on_plan: Callable[[StepPlan], None] | None = None

    # ---- intake -------------------------------------------------------------------------

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
            think_opened: bool = False, grammar: Any = None, vision: Any = None,
            cache_salt: str = "") -> None:
        """Queue a request; it joins the running batch at a later step.

        CACHE_SALT is its prefix-cache namespace: prefixes are shared only within one.

        VISION (a worker.kinds.vision VisionInput) holds the prompt's images: its cache key (image
        positions keyed by content hash) becomes the request's tokens.
        """
        if len(self.scheduler.waiting) >= self.scheduler.max_waiting:
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
        self.scheduler.waiting.append(Request(
            id=request_id, prompt_len=len(prompt_ids),
            tokens=list(vision.key if vision is not None else prompt_ids), params=params,
            sampler=RowSampler(params), detok=self.tokenizer.detokenizer,
            stop=StopMatcher(params.stop), think_opened=think_opened, grammar=grammar,
            vision=vision, cache_salt=cache_salt))

    def abort(self, request_ids: list[str]) -> None:
        """Drop these requests; their pages go back (full ones stay cached)."""
        self.scheduler.abort(set(request_ids))

    def forwards(self) -> dict[str, Forward]:
        """The model calls this engine makes: the target's ("") and a draft model's ("draft ")."""
        draft = getattr(self.spec.drafter, "forward", None) if self.spec is not None else None
        return {"": self.executor.forward} | ({"draft ": draft} if draft is not None else {})

    @property
    def has_work(self) -> bool:
        """True when any request is queued or running (pending tokens belong to running ones)."""
        return bool(self.scheduler.waiting or self.scheduler.running)

    # ---- the step -----------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Schedule -> execute -> output; return the outputs not sent through ``on_outputs``.

        While every running request is decoding (nothing waits, nothing prefills), steps overlap
        like mlx-lm's generate loop: step t+1 is built on step t's unevaluated tokens and handed
        to MLX before step t's tokens are read back and delivered (one step later).

        An exception fails the rows the step had put at risk (a forward batch fails together)
        and returns their pages; raises EngineBroken only when the books do not balance after,
        and SendFailed when ``on_outputs`` (the loop's socket) fails mid-step.
        """
        out, flushed, t0 = self.output, 0, time.perf_counter()
        self.risk.rows = []
        out.begin()
        try:
            plan = self.scheduler.schedule_overlapped(self.executor.inflight)
            if plan is None:  # synchronous: the last step's tokens go before a prefill delays them
                flushed, t0 = len(out.early(self.flush())), time.perf_counter()
                plan = self.scheduler.schedule()
            if self.on_plan is not None:
                self.on_plan(plan)
            result = self.executor.execute(plan)
            outputs = out.collect(plan, result)
            self.scheduler.update(plan, result)
            if not plan.overlapped:
                self.stats.sync_seconds += time.perf_counter() - t0
        except SendFailed:
            raise  # as a send error after the step would: the loop leaves, the rows are not at fault
        except Exception as exc:
            self.failed_steps += 1
            return recover(exc, self.failed_steps, self.scheduler, self.executor, self.risk, out.news)
        self.failed_steps = 0
        if not self.running:  # idle: free what only running rows need (dense decode caches)
            for forward in self.forwards().values():
                forward.idle()
        if self.spec is not None and (plan.overlapped or result.verified):
            made = out.sent + outputs if plan.overlapped else outputs[flushed:]
            self._time_step(made, bool(result.verified),
                            time.perf_counter() - t0 - result.prefill_seconds)
        return outputs

    def flush(self) -> list[RequestOutput]:
        """Read back the last overlapped step's tokens now (before a synchronous step)."""
        batch = self.executor.inflight
        if batch is None:
            return []
        self.risk.rows = list(batch.rows)
        outputs = self.output.deliver(batch, self.scheduler.running)
        self.executor.inflight = None
        self.scheduler.retire()
        self.risk.rows = []  # delivered: these rows are whole again
        return outputs

    def _time_step(self, outputs: list[RequestOutput], speculative: bool, seconds: float) -> None:
        """Tell the speculator what this decode step made (it pauses drafts that cost)."""
        assert self.spec is not None
        rows = len({o.request_id for o in outputs})
        self.spec.record(speculative, rows, sum(len(o.token_ids) for o in outputs), seconds)

    # ---- the stages' state, as the rest of the worker reads it ----------------------------

    @property
    def running(self) -> list[Request]:
        """The requests in the batch (the scheduler's)."""
        return self.scheduler.running

    @property
    def waiting(self) -> deque[Request]:
        """The requests queued for the batch (the scheduler's)."""
        return self.scheduler.waiting

    @property
    def stats(self) -> EngineStats:
        """The counters every stage adds to."""
        return self.scheduler.stats

    @stats.setter
    def stats(self, stats: EngineStats) -> None:
        self.scheduler.stats = self.executor.stats = self.output.stats = stats

    @property
    def on_outputs(self) -> Callable[[list[RequestOutput]], None] | None:
        """The worker loop's sender: outputs read back mid-step go out through it at once."""
        return self.output.on_outputs

    @on_outputs.setter
    def on_outputs(self, send: Callable[[list[RequestOutput]], None] | None) -> None:
        self.output.on_outputs = send

    @property
    def spec(self) -> Speculator | None:
        """Speculative decoding (None: off)."""
        return self._spec

    @property
    def eos_ids(self) -> set[int]:
        """The tokenizer's end-of-sequence token ids."""
        return self.output.eos_ids

    @property
    def context_length(self) -> int:
        """The most positions a request may have (prompt and generated tokens)."""
        return self.scheduler.context_length

    @property
    def max_batch(self) -> int:
        """The most requests in the running batch."""
        return self.scheduler.max_batch

    @property
    def max_waiting(self) -> int:
        """The most requests in the wait queue."""
        return self.scheduler.max_waiting

    @property
    def prefill_budget(self) -> int:
        """The most prompt tokens one step computes."""
        return self.scheduler.prefill_budget

    @property
    def overlap(self) -> bool:
        """True when decode steps may be built on the previous step's unread tokens."""
        return self.scheduler.overlap
