"""The executor: a plan's forwards and sampling (grammar masks, overlapped decode, draft verify)."""

from __future__ import annotations

import time
from typing import Any

import mlx.core as mx

from protocol.messages import RequestOutput
from worker.engine import inputs
from worker.engine.forward import Forward
from worker.engine.inputs import given, group_chunks
from worker.engine.output import OutputStage
from worker.engine.plan import AtRisk, StepPlan, StepResult
from worker.engine.request import EngineStats, Inflight, Request
from worker.engine.sampling import sample
from worker.grammar import masks
from worker.kv.manager import KVManager
from worker.spec import step as spec_step
from worker.spec.controller import Speculator


class Executor:
    """Runs a StepPlan on the model: forwards, grammar masks, sampling, speculative verify.

    While every running request decodes, steps overlap like mlx-lm's generate loop: step t+1
    is built on step t's unevaluated tokens (``inflight``) and handed to MLX before step t's
    tokens are read back. The output stage (OUT) takes tokens as soon as they are read back.
    """

    def __init__(self, forward: Forward, model: Any, kv: KVManager, out: OutputStage,
                 stats: EngineStats, risk: AtRisk, spec: Speculator | None) -> None:
        self.forward = forward
        self.model = model
        self.kv = kv
        self.out = out
        self.stats = stats
        self.risk = risk
        self.spec = spec
        self.inflight: Inflight | None = None  # the last overlapped step's unread tokens

    def execute(self, plan: StepPlan) -> StepResult:
        """Run PLAN: an overlapped decode, or a synchronous step (nothing when it is empty)."""
        if plan.overlapped:
            return self.overlapped(plan)
        if plan.empty:
            return StepResult([])
        return self.synchronous(plan)

    # ---- overlapped decode --------------------------------------------------------------

    def overlapped(self, plan: StepPlan) -> StepResult:
        """One decode step built on the previous one's unread tokens; those come back late."""
        t0 = time.perf_counter()
        rows, out = plan.decodes, self.out
        previous = self.inflight
        self.risk.rows.extend(rows)
        tokens_in = next_inputs(rows, previous)
        logits = self.forward.decode_lazy(
            tokens_in, [r.kv for r in rows], [r.computed for r in rows],
            **given(positions=inputs.rope(self.model, [(r, r.computed, 1) for r in rows])))
        outputs: list[RequestOutput] = []
        if any(r.grammar is not None for r in rows):
            # the masks need the previous tokens: read them back while this forward runs
            mx.async_eval(logits, *self.kv.store.arrays())  # type: ignore[no-untyped-call]
            outputs = out.early(out.deliver(previous, rows) if previous else [])
            self.inflight = previous = None
            logits = self.masked(rows, logits)
        tokens, logprobs = sample(logits, [r.sampler for r in rows])
        if previous is not None and out.waits_for(previous):
            # a row's first tokens are read back (a compiled step has waited for their page
            # writes already) and go out before this step is handed to MLX: mx.async_eval
            # returns only when few of its tasks are left, a whole step later
            outputs += out.deliver(previous, rows)
            self.inflight = previous = None
            outputs = out.early(outputs)
        mx.async_eval(tokens, *([logprobs] if logprobs is not None else []),  # type: ignore[no-untyped-call]
                      *self.kv.store.arrays())
        for r in rows:
            r.computed += 1  # this step's input is at r.computed (the pending token, if any)
        self.inflight = Inflight(rows, tokens, logprobs)
        # later tokens are delivered while this step computes (the host's work overlaps it)
        return StepResult(outputs, previous, t0)

    # ---- synchronous step ---------------------------------------------------------------

    def synchronous(self, plan: StepPlan) -> StepResult:
        """The decode batch (or its verify forward), the prefill chunks, sampling, verify."""
        decodes, prefills, drafts = plan.decodes, plan.prefills, plan.drafts
        verified: list[mx.array] = []
        rows: list[Request] = []
        logits: list[mx.array] = []
        t0 = time.perf_counter()
        # Until sampling, a failure leaves every row as it was before this step (KV rewritten
        # at the same positions on retry), so only the rows of the failing call are at risk.
        if decodes and drafts:
            self.risk.rows = decodes
            fed = [spec_step.fed(r, drafts) for r in decodes]
            every = self.forward.verify(fed, [r.kv for r in decodes],
                                        [r.computed for r in decodes], **given(
                                            positions=inputs.rope(self.model, [
                                                (r, r.computed, len(f))
                                                for r, f in zip(decodes, fed, strict=True)])))
            for b, (r, f) in enumerate(zip(decodes, fed, strict=True)):
                if id(r) in drafts:
                    verified.append(every[b, : len(f)])
                else:
                    logits.append(every[b : b + 1, 0])
                    rows.append(r)
        elif decodes:
            self.risk.rows = decodes
            out = self.forward([[r.tokens[-1]] for r in decodes], [r.kv for r in decodes],
                               [r.computed for r in decodes], True, **given(
                                   positions=inputs.rope(self.model,
                                                         [(r, r.computed, 1) for r in decodes])))
            assert out is not None
            logits.append(out)
            rows.extend(decodes)
        t1 = time.perf_counter()
        for group in group_chunks(prefills):
            self._prefill(group, rows, logits)
        t2 = time.perf_counter()
        self.risk.rows = [*decodes, *(r for r, _ in prefills)]  # from here rows change state
        outputs = self.sample_and_update(rows, logits) if rows else []
        spec_rows = [r for r in decodes if id(r) in drafts] if verified else []
        if verified:
            assert self.spec is not None
            outputs += spec_step.verify_rows(spec_rows, verified, drafts, self.out.row_update,
                                             self.kv, self.stats, self.spec)
        return StepResult(outputs, None, t0, t1, t2, len(spec_rows))

    def _prefill(self, group: list[tuple[Request, int]], rows: list[Request],
                 logits: list[mx.array]) -> None:
        """One forward over GROUP's chunks; the rows whose prompt ends here join ROWS, LOGITS."""
        samplers = [r.computed + n == r.need and not r.generated for r, n in group]
        embeds = inputs.embeds(self.model, self.stats, self.risk, group)
        self.risk.rows = [r for r, _ in group]
        out = self.forward([r.tokens[r.computed : r.computed + n] for r, n in group],
                           [r.kv for r, _ in group], [r.computed for r, _ in group],
                           any(samplers), **given(
                               embeds=embeds,
                               positions=inputs.rope(self.model,
                                                     [(r, r.computed, n) for r, n in group])))
        if out is not None:
            keep = [i for i, wants in enumerate(samplers) if wants]
            logits.append(out[mx.array(keep)] if len(keep) < len(group) else out)
            rows.extend(group[i][0] for i in keep)

    # ---- sampling -----------------------------------------------------------------------

    def masked(self, rows: list[Request], logits: mx.array) -> mx.array:
        """LOGITS with each constrained row limited to its grammar's next tokens.

        The caller has handed the forward to MLX (async_eval): the masks fill meanwhile.
        """
        t0 = time.perf_counter()
        bits = masks.fill([r.grammar for r in rows], logits.shape[-1])
        self.stats.mask_seconds += time.perf_counter() - t0
        return masks.apply(logits, bits)  # lazy: the sample joins the queue behind the forward

    def sample_and_update(self, rows: list[Request], logits: list[mx.array]) -> list[RequestOutput]:
        """Sample each row's token, read them back, and have the output stage take them."""
        batch = mx.concatenate(logits, axis=0)
        if any(r.grammar is not None for r in rows):
            mx.async_eval(batch, *self.kv.store.arrays())  # type: ignore[no-untyped-call]
            batch = self.masked(rows, batch)
        tokens, logprobs = sample(batch, [r.sampler for r in rows])
        mx.eval(tokens, logprobs) if logprobs is not None else mx.eval(tokens)
        token_list: list[int] = tokens.tolist()  # type: ignore[assignment]
        return self.out.sampled(rows, token_list, logprobs, time.monotonic())


def next_inputs(rows: list[Request], previous: Inflight | None) -> mx.array:
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
