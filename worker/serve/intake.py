"""Validate and tokenize Generate jobs off the step loop: text jobs on one thread in arrival
order, jobs with images (seconds of decoding and preprocessing each) on a second one of their
own, so a text job submitted after a slow image job is not held behind it."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from protocol.messages import Generate
from worker.grammar.compiler import Compiling, GrammarCompiler
from worker.kinds.vision.inputs import VisionInput, render_images
from worker.serve.prompt import PromptError, render
from worker.serve.validate import JobError, check_params, check_prompt_ids, check_size

log = logging.getLogger("rapid_mlx.worker")

CHARS_PER_TOKEN = 16  # a prompt with more characters than context * this is refused untokenized


@dataclass
class Prepared:
    """A job after intake: its prompt ids, or the error to answer it with."""

    job: Generate
    seq: int
    ids: list[int] = field(default_factory=list)
    think_opened: bool = False
    error: JobError | None = None
    compiling: Compiling | None = None  # the job's grammar, until it is compiled
    grammar: Any = None  # its Constraint, once compiled
    vision: VisionInput | None = None  # the prompt's images, when it has any


def prepare(tokenizer: Any, job: Generate, vocab: int, context_length: int,
            chars_per_token: int = CHARS_PER_TOKEN, default_max: int = 0) -> tuple[list[int], bool]:
    """Check JOB, render and tokenize it (text only); set max_tokens; JobError if it cannot run."""
    ids, think_opened, _ = prepare_job(tokenizer, job, vocab, context_length, chars_per_token,
                                       default_max=default_max)
    return ids, think_opened


def prepare_job(tokenizer: Any, job: Generate, vocab: int, context_length: int,
                chars_per_token: int = CHARS_PER_TOKEN, vision: Any = None,
                default_max: int = 0) -> tuple[list[int], bool, VisionInput | None]:
    """Check JOB, render and tokenize it; set max_tokens (``output_cap``); raise JobError when
    it cannot run.

    VISION is (processor, image token id) of a vision model; a job with images needs it.
    DEFAULT_MAX is the server's output cap for a job that sets none (0: the context's rest).
    """
    check_params(job.params, vocab)
    if job.prompt_ids is not None:
        check_prompt_ids(job.prompt_ids, vocab, context_length)
    else:
        check_size(job, context_length, chars_per_token)
    if job.images and vision is None:
        raise JobError("this model has no vision: it cannot take image inputs")
    images = None
    try:
        if job.images:
            images, think_opened = render_images(tokenizer, vision[0], vision[1], job)
            ids = images.ids
        else:
            ids, think_opened = render(tokenizer, job)
    except PromptError as exc:
        raise JobError(str(exc)) from exc
    if job.prompt_ids is None:
        check_prompt_ids(ids, vocab, context_length)
    params = job.params
    params.max_tokens = output_cap(params.max_tokens, context_length - len(ids), default_max)
    return ids, think_opened, images


def output_cap(asked: int, left: int, default_max: int = 0) -> int:
    """The tokens a request may generate: ASKED (0: DEFAULT_MAX, the server's cap; 0 too: no cap),
    never more than the LEFT positions the context has after the prompt (an agent asking for
    32000 in a 32k context gets what is left, and its answer ends with ``length`` there)."""
    if asked <= 0:
        asked = default_max if default_max > 0 else left
    return min(asked, left)


TEXT, IMAGES = 0, 1  # the lanes: jobs without images, jobs with images (vision models only)


class Intake:
    """Daemon threads preparing jobs (a text lane, and an image lane on a vision model); the loop
    polls ``fd`` and collects ``ready()`` ones.

    The image lane shares the tokenizer only to render the chat template as text (no encoding
    there: the processor, a separate object, tokenizes), so the lanes never encode on one
    tokenizer at once."""

    def __init__(self, tokenizer: Any, vocab: int, context_length: int,
                 chars_per_token: int = CHARS_PER_TOKEN,
                 grammars: GrammarCompiler | None = None, vision: Any = None,
                 default_max: int = 0) -> None:
        self.tokenizer = tokenizer
        self.default_max = default_max  # the output cap of a job that sets none (0: none)
        self.vision = vision  # (processor, image token id) of a vision model
        self.grammars = grammars
        self._compiling: list[Prepared] = []  # loop side: prepared, grammar not yet compiled
        self.vocab = vocab
        self.context_length = context_length
        self.chars_per_token = chars_per_token
        lanes = 2 if vision is not None else 1
        self._jobs: list[queue.SimpleQueue[tuple[int, Generate] | None]] = [
            queue.SimpleQueue() for _ in range(lanes)]
        self._done: deque[Prepared] = deque()  # appended by the lanes' threads
        self._live: dict[str, int] = {}  # request id -> seq of its job in intake (loop side only)
        self._seq = 0
        self._prepared = [0] * lanes  # jobs each lane has finished (its thread alone writes)
        self._started = [0.0] * lanes  # monotonic start of the job each lane is on (0: none)
        try:  # any one-time tokenizer setup (truncation/padding reset) happens on this thread
            tokenizer.encode("warm up")
        except Exception as exc:
            log.warning("tokenizer warm-up failed: %r", exc)
        self.fd, self._wake = os.pipe()
        os.set_blocking(self.fd, False)
        os.set_blocking(self._wake, False)
        self._threads = [threading.Thread(target=self._run, args=(lane,), daemon=True,
                                          name="intake" if lane == TEXT else "intake-images")
                         for lane in range(lanes)]
        for thread in self._threads:
            thread.start()

    @property
    def pending(self) -> int:
        """Jobs submitted and neither collected nor cancelled."""
        return len(self._live)

    @property
    def preparing(self) -> int:
        """Jobs handed to the lanes that they have not finished preparing yet."""
        return self._seq - sum(self._prepared)

    @property
    def preparing_for(self) -> float:
        """Seconds the longest-running job a lane is on has been preparing (0.0: on none)."""
        now = time.monotonic()
        return max((now - started for started in self._started if started), default=0.0)

    @property
    def has_news(self) -> bool:
        """True when ``ready()`` may return something (prepared jobs, or grammars compiling)."""
        return bool(self._done or self._compiling)

    @property
    def alive(self) -> bool:
        """True while every intake thread runs."""
        return all(thread.is_alive() for thread in self._threads)

    def submit(self, job: Generate) -> None:
        """Queue JOB for preparation (on the image lane when it has images and there is one)."""
        self._seq += 1
        self._live[job.request_id] = self._seq
        self._jobs[IMAGES if job.images and len(self._jobs) > 1 else TEXT].put((self._seq, job))

    def cancel(self, request_ids: list[str]) -> None:
        """Forget these requests: their prepared jobs are dropped when they come out."""
        for rid in request_ids:
            self._live.pop(rid, None)

    def ready(self) -> list[Prepared]:
        """Prepared jobs that are still wanted, in submission order among themselves (a job
        still preparing on the other lane does not hold back those submitted after it)."""
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass
        arrived = []
        while self._done:
            arrived.append(self._done.popleft())
        arrived.sort(key=lambda p: p.seq)  # two lanes may finish out of order
        held, now = [], time.monotonic()
        out = []
        for p in [*self._compiling, *arrived]:
            if self._live.get(p.job.request_id) != p.seq:
                continue
            if p.compiling is not None:
                settled, p.grammar, error = p.compiling.settle(now)
                if not settled:
                    held.append(p)
                    continue
                p.compiling = None
                if error is not None:
                    p.error = JobError(error, "invalid_grammar")
            del self._live[p.job.request_id]
            out.append(p)
        self._compiling = held
        return out

    def _wake_loop(self, *_: Any) -> None:
        try:
            os.write(self._wake, b"\0")
        except (BlockingIOError, OSError):  # full of wake-ups already, or closed
            pass

    def close(self) -> None:
        """Stop the threads (after the jobs they are on) and close the pipe."""
        for jobs in self._jobs:
            jobs.put(None)
        if self.grammars is not None:
            self.grammars.close()
        for thread in self._threads:
            thread.join(timeout=5.0)
        if not any(t.is_alive() for t in self._threads):  # else one may still write: pipe open
            os.close(self.fd)
            os.close(self._wake)

    def _run(self, lane: int) -> None:
        while (item := self._jobs[lane].get()) is not None:
            seq, job = item
            self._started[lane] = time.monotonic()
            p = Prepared(job=job, seq=seq)
            try:
                p.ids, p.think_opened, p.vision = prepare_job(
                    self.tokenizer, job, self.vocab, self.context_length, self.chars_per_token,
                    self.vision, self.default_max)
            except JobError as exc:
                p.error = exc
            except Exception as exc:  # rendering a hostile request must not end intake
                log.warning("request %s could not be prepared: %r", job.request_id, exc)
                p.error = JobError(f"the prompt could not be rendered or tokenized: {exc}")
            if p.error is None and job.grammar is not None:
                try:
                    p.compiling = self._compile(job)
                except Exception as exc:  # no compiler, or it is shut down
                    p.error = JobError(f"structured output is not available: {exc}",
                                       "invalid_grammar")
            self._started[lane] = 0.0
            self._done.append(p)
            self._prepared[lane] += 1
            self._wake_loop()

    def _compile(self, job: Generate) -> Compiling:
        """Start compiling JOB's grammar; the loop is woken when it is done."""
        if self.grammars is None or job.grammar is None:
            raise RuntimeError("this worker has no grammar compiler")
        future = self.grammars.submit(job.grammar)
        future.add_done_callback(self._wake_loop)
        return Compiling(job.grammar, future, time.monotonic() + self.grammars.timeout)
