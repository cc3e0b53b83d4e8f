"""The scheduler: who runs this step (admit, reserve, preempt, prefill chunks, drafts) and retiring."""

from __future__ import annotations

import time
from collections import deque

from worker.engine.plan import AtRisk, StepPlan, StepResult
from worker.engine.request import EngineStats, Inflight, Request
from worker.kv.manager import KVManager
from worker.spec import step as spec_step
from worker.spec.controller import Speculator


class Scheduler:
    """Owns the wait queue and the running batch, and their pages through the KV manager."""

    def __init__(self, kv: KVManager, stats: EngineStats, risk: AtRisk, *, context_length: int,
                 max_batch: int, prefill_budget: int, max_waiting: int, overlap: bool,
                 spec: Speculator | None) -> None:
        self.kv = kv
        self.stats = stats
        self.risk = risk
        self.context_length = context_length
        self.max_batch = max_batch
        self.prefill_budget = prefill_budget
        self.max_waiting = max_waiting
        self.overlap = overlap
        self.spec = spec
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # ---- planning -----------------------------------------------------------------------

    def schedule_overlapped(self, inflight: Inflight | None) -> StepPlan | None:
        """A step begins (the speculator's tick): an overlapped decode plan of every running row,
        its pages reserved, when it can be built on INFLIGHT's unread tokens; else None."""
        if self.spec is not None:
            self.spec.tick(self.running)
            if self.spec.active(self.running):
                return None  # speculative steps run synchronously
        if not self._reserve_overlapped(inflight):
            return None
        return StepPlan(list(self.running), overlapped=True)

    def schedule(self) -> StepPlan:
        """A synchronous step's plan: admit, reserve decodes (preempting), chunk prefills, draft."""
        self.admit()
        decodes = self.reserve([(r, 1) for r in self.running if not r.prefilling])
        prefills = self.plan_prefill()
        decodes = [r for r in decodes if r in self.running]  # prefill reservations may preempt
        if not decodes and not prefills:
            return StepPlan([])
        drafts = spec_step.plan(self.spec, self.kv, self.context_length, self.running, decodes)
        return StepPlan(decodes, prefills, drafts)

    def _reserve_overlapped(self, inflight: Inflight | None) -> bool:
        """True (with pages reserved) when the next step can be built on unread tokens.

        That needs every running request decoding without penalties and short of its limits,
        and a page for each next position without preempting anyone.
        """
        if not self.overlap or self.waiting or not self.running:
            return False
        pending = set(map(id, inflight.rows)) if inflight else set()
        for r in self.running:
            ahead = 1 + (id(r) in pending)  # tokens sampled before this step's is read back
            if (r.prefilling or r.sampler.penalized or r.generated + ahead >= r.params.max_tokens
                    or len(r.tokens) + ahead >= self.context_length):
                return False
        return all(self.kv.ensure(r, r.computed + 1) for r in self.running)

    def admit(self) -> None:
        """Move waiting requests into the batch while rows and pages for a first chunk are free."""
        while self.waiting and len(self.running) < self.max_batch:
            r = self.waiting[0]
            if self.kv.available() < self.kv.pages_for(min(r.need, self.prefill_budget)) + 1:
                break
            self.running.append(self.waiting.popleft())
            if r.scheduled_at is None:
                r.scheduled_at = time.monotonic()

    def reserve(self, rows: list[tuple[Request, int]]) -> list[Request]:
        """Give each row pages for its next N tokens, preempting the newest requests if short."""
        for r, n in sorted(rows, key=lambda x: x[0].arrival):
            while r in self.running and not self.kv.ensure(r, r.computed + n):
                self.preempt(max(self.running, key=lambda x: x.arrival))
        return [r for r, _ in rows if r in self.running]

    def preempt(self, r: Request) -> None:
        """Free r's pages (full ones stay cached) and requeue it for recomputation."""
        self.kv.release(r)
        self.forget(r)
        r.computed = 0
        r.preemptions += 1
        self.stats.preemptions += 1
        self.running.remove(r)
        self.waiting.appendleft(r)

    def plan_prefill(self) -> list[tuple[Request, int]]:
        """This step's prompt chunks (row, tokens) within the prefill budget, pages reserved."""
        budget = self.prefill_budget
        plan: list[tuple[Request, int]] = []
        prefilling = [r for r in self.running if r.prefilling]
        for r in prefilling:
            if budget <= 0:
                break
            if r not in self.running:  # preempted by an earlier row's reservation this step
                continue
            self.risk.rows = [r]
            if r.computed == 0 and not r.kv.pages:
                limit = r.need - 1 if not r.generated else r.need
                started = [q for q in self.running if q is not r and q.prefilling and q.kv.pages]
                if self.kv.shares_inflight_prefix(r, started, limit):
                    continue  # wait for those pages instead of computing them again
                r.computed = self.kv.match(r, limit)
                if not r.generated:
                    r.cached_tokens = r.computed
            n = self.kv.chunk(r, min(budget, r.need - r.computed))
            if n > 0 and self.reserve([(r, n)]):
                plan.append((r, n))
                budget -= n
        self.risk.rows = []
        return [(r, n) for r, n in plan if r in self.running]

    # ---- after the step -----------------------------------------------------------------

    def update(self, plan: StepPlan, result: StepResult) -> None:
        """After the step's outputs: positions computed advance, finished rows retire, the step
        is counted (an empty plan ran nothing and counts nothing)."""
        if plan.overlapped:  # its rows' positions advanced when it was handed to MLX
            self.retire()
            self.stats.overlapped_steps += 1
            self.stats.decode_seconds += time.perf_counter() - result.t0
        elif plan.empty:
            return
        else:
            self._advance(plan, result)
        for r in self.running:  # windowed layers' pages that left every window go back
            self.kv.slide(r)
        self.stats.steps += 1
        self.stats.decode_rows += len(plan.decodes)
        self.stats.last_step_at = time.time()

    def _advance(self, plan: StepPlan, result: StepResult) -> None:
        """A synchronous step's rows have their fed positions in the KV; full pages publish."""
        drafts = plan.drafts
        for r in plan.decodes:
            r.computed += 0 if id(r) in drafts else 1
        for r, n in plan.prefills:
            r.computed += n
            self.stats.prompt_tokens_computed += n
            self.kv.publish(r)
            if r.embeds is not None and r.computed >= r.prompt_len:
                r.embeds = None  # the prompt is in the KV now
        self.stats.prefill_seconds += result.prefill_seconds
        self.stats.decode_seconds += time.perf_counter() - result.t2 + result.t1 - result.t0
        self.retire()

    def retire(self) -> None:
        """Finished rows leave the batch; their pages go back (full ones stay cached)."""
        for r in self.running:
            if r.finish_reason is not None:
                self.kv.release(r)
                self.forget(r)
        self.running = [r for r in self.running if r.finish_reason is None]

    def abort(self, ids: set[str]) -> None:
        """Drop the requests with these ids; their pages go back (full ones stay cached)."""
        for r in [r for r in self.running if r.id in ids]:
            self.kv.release(r)
            self.forget(r)
        self.waiting = deque(r for r in self.waiting if r.id not in ids)
        self.running = [r for r in self.running if r.id not in ids]

    def forget(self, r: Request) -> None:
        """Drop r's drafter state (it finished, was aborted, preempted or failed)."""
        if self.spec is not None:
            self.spec.release(r)
