"""Text generation as a ``Runner``: intake prepares prompts off the loop, the engine steps."""

from __future__ import annotations

import logging
import time
from typing import Any

from protocol import messages as m
from worker.engine.core import Engine, KVTooSmall, QueueFull
from worker.grammar.compiler import GrammarCompiler
from worker.model.load import LoadedModel
from worker.serve.intake import CHARS_PER_TOKEN, Intake, Prepared
from worker.serve.pulse import plan_work
from worker.serve.runner import Outlet
from worker.serve.text_status import text_status

log = logging.getLogger("rapid_mlx.worker")

# before a step, the runner waits up to this long for prompts intake is still preparing, so a
# burst of requests starts in one prefill step instead of one that holds only the first
INTAKE_WAIT = 0.02


class TextRunner:
    """One Engine behind the worker loop, with the Intake that validates and tokenizes its jobs."""

    def __init__(self, engine: Engine, loaded: LoadedModel,
                 chars_per_token: int = CHARS_PER_TOKEN, default_max_tokens: int = 0) -> None:
        self.engine = engine
        self.loaded = loaded
        self.facts = loaded.facts
        self.intake = Intake(loaded.tokenizer, vocab_size(loaded), engine.context_length,
                             chars_per_token, grammar_compiler(loaded, engine),
                             vision_of(loaded), default_max_tokens)
        self.fd: int | None = self.intake.fd
        self.outlet: Outlet | None = None

    def attach(self, outlet: Outlet) -> None:
        """Keep OUTLET: tokens go out as soon as the engine reads them back, mid-step."""
        self.outlet = outlet
        self.engine.on_outputs = outlet.send_outputs
        self.engine.on_plan = lambda plan: outlet.planned(*plan_work(plan.decodes, plan.prefills))

    def add(self, job: m.Work) -> None:
        """Hand the job to intake: checks, template and tokenizer run off the loop."""
        if not isinstance(job, m.Generate):
            raise ValueError(f"a text-generation worker cannot take {type(job).__name__} jobs")
        self.intake.submit(job)

    def abort(self, request_ids: list[str]) -> None:
        """Forget these requests in intake and in the engine."""
        self.intake.cancel(request_ids)
        self.engine.abort(request_ids)

    def collect(self, woke: bool) -> None:
        """Admit prepared prompts, first waiting (INTAKE_WAIT) for those intake is on now."""
        # jobs arriving during the wait join intake too, so a burst starts in one step
        intake = self.intake
        if woke or intake.has_news or intake.preparing:
            assert self.outlet is not None
            deadline = time.monotonic() + INTAKE_WAIT
            while intake.preparing and intake.alive:
                left = deadline - time.monotonic()
                if left <= 0 or not self.outlet.wait(max(int(left * 1000), 1)):
                    break
                for prepared in intake.ready():
                    self._admit(prepared)
            for prepared in intake.ready():
                self._admit(prepared)
        # jobs waiting in intake would wait forever: let the supervisor restart us
        if intake.pending and not intake.alive:
            raise RuntimeError("the intake thread died")

    def _admit(self, p: Prepared) -> None:
        """Queue a prepared job in the engine, or answer its error."""
        assert self.outlet is not None
        rid, fail = p.job.request_id, self.outlet.fail
        if p.error is not None:
            fail(rid, str(p.error), p.error.code)
            return
        try:
            self.engine.add(rid, p.ids, p.job.params, p.think_opened, p.grammar, p.vision,
                            p.job.cache_salt)
        except QueueFull as exc:
            fail(rid, str(exc), "queue_full")
        except KVTooSmall as exc:
            fail(rid, str(exc), "context_length_exceeded")
        except Exception as exc:  # admitting one request must not end the others
            log.exception("request %s could not be admitted", rid)
            fail(rid, f"the worker could not start this request: {exc}", "internal_error")

    def step(self) -> list[m.RequestOutput]:
        """One engine step (outputs it read back mid-step went out through the outlet)."""
        return self.engine.step()

    @property
    def has_work(self) -> bool:
        """True while the engine has requests queued or running."""
        return self.engine.has_work

    @property
    def busy(self) -> bool:
        """True while the engine or intake holds a request."""
        return bool(self.engine.has_work or self.intake.pending)

    @property
    def steps(self) -> int:
        """The engine's steps so far (warm-up included)."""
        return self.engine.stats.steps

    @property
    def running(self) -> int:
        """Requests in the engine's batch."""
        return len(self.engine.running)

    @property
    def waiting(self) -> int:
        """Requests queued in the engine."""
        return len(self.engine.waiting)

    def heartbeat(self) -> dict[str, Any]:
        """KV pages and recurrent-state slots in use and in all, and the jobs intake is preparing
        (and for how long)."""
        pool, snaps = self.engine.kv.pool, self.engine.kv.snapshots
        beat = {"kv_used": pool.num_used, "kv_total": pool.total,
                "preparing": self.intake.preparing, "preparing_for": self.intake.preparing_for}
        if snaps is not None:
            total = snaps.pool.num_slots - 1
            beat.update(state_used=total - snaps.pool.num_free, state_total=total,
                        state_snapshots=len(snaps.held))
        return beat

    def status(self) -> dict[str, Any]:
        """The model, the engine's requests and counters, the KV cache and its formats."""
        return text_status(self.engine, self.loaded, self.intake.pending)

    def close(self) -> None:
        """Stop intake's threads."""
        self.intake.close()


def grammar_compiler(loaded: LoadedModel, engine: Engine) -> GrammarCompiler | None:
    """The compiler for structured output, or None (logged) when this tokenizer cannot have one."""
    try:
        return GrammarCompiler(loaded.tokenizer, vocab_size(loaded), sorted(engine.eos_ids))
    except Exception as exc:
        log.warning("structured output is off for this model: %r", exc)
        return None


def vision_of(loaded: LoadedModel) -> tuple[Any, int] | None:
    """(processor, image token id) of a vision model, else None."""
    if loaded.processor is None:
        return None
    return loaded.processor, int(loaded.model.image_token_id)


def vocab_size(loaded: LoadedModel) -> int:
    """Rows of the model's embedding table: token ids at or beyond it would crash the forward."""
    inner = getattr(loaded.model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    weight = getattr(embed, "weight", None)
    rows = int(weight.shape[0]) if weight is not None and getattr(weight, "ndim", 0) == 2 else 0
    facts = loaded.facts.vocab_size
    return min(x for x in (rows, facts) if x > 0) if rows or facts else len(loaded.tokenizer)
