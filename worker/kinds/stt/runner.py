"""The speech-to-text Runner: queued uploads, one 30 s window of one request per step, round robin."""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_audio.stt.models.whisper.tokenizer import LANGUAGES

from protocol import messages as m
from worker.kinds.stt.audio_io import AudioDecoder, AudioError
from worker.kinds.stt.load import family, load_parakeet, load_whisper
from worker.kinds.stt.parakeet_job import ParakeetJob
from worker.kinds.stt.whisper_job import WhisperJob
from worker.serve.runner import BasicRunner, QueueFull

log = logging.getLogger("rapid_mlx.worker")

DEFAULT_MAX_AUDIO_S = 7200.0  # two hours
TASKS = ("transcribe", "translate")
ENGLISH = ("", "en", "english")


@dataclass
class _Entry:
    job: m.Transcribe
    added: float
    work: WhisperJob | ParakeetJob | None = None
    started: bool = False


def max_audio_seconds(args: argparse.Namespace) -> float:
    """The duration limit: --max-audio-seconds, else $RAPID_MLX_MAX_AUDIO_SECONDS, else 2 h."""
    value = getattr(args, "max_audio_seconds", None) or os.environ.get("RAPID_MLX_MAX_AUDIO_SECONDS")
    return float(value) if value else DEFAULT_MAX_AUDIO_S


class SttRunner(BasicRunner):
    """Transcribes uploads window by window; concurrent requests interleave a window at a time."""

    def __init__(self, model: Any, facts: m.ModelFacts, kind: str, max_running: int,
                 max_waiting: int, limit_s: float) -> None:
        self.model, self.facts, self.kind = model, facts, kind
        self.multilingual = bool(getattr(model, "is_multilingual", True))
        self.max_running, self.max_waiting, self.limit_s = max(1, max_running), max_waiting, limit_s
        self.queue: deque[_Entry] = deque()
        self.active: list[_Entry] = []
        self.early: list[m.RequestOutput] = []
        self.turn = 0
        self.stats = {"windows": 0, "requests": 0, "audio_seconds": 0.0, "busy_seconds": 0.0}

    def add(self, job: m.Work) -> None:
        """Queue one Transcribe job (QueueFull at the bound; 400s for bad options)."""
        if not isinstance(job, m.Transcribe):
            raise ValueError(f"this worker transcribes speech; it cannot take a {type(job).__name__} job")
        if len(self.queue) >= self.max_waiting:
            raise QueueFull(f"{len(self.queue)} transcriptions are waiting (limit {self.max_waiting})")
        problem = self._check(job)
        if problem is not None:
            self.early.append(_error(job.request_id, problem[0], problem[1]))
            return
        self.queue.append(_Entry(job, time.monotonic()))

    def _check(self, job: m.Transcribe) -> tuple[str, str] | None:
        if job.task not in TASKS:
            return f"task must be one of {', '.join(TASKS)}", "task"
        if not self.multilingual and job.language.lower() not in ENGLISH:
            return (f"The model '{self.facts.model}' is English-only; it cannot transcribe "
                    f"language '{job.language}' (use a multilingual Whisper model).", "language")
        if not job.audio:
            return "The uploaded file is empty.", "file"
        return None

    def abort(self, request_ids: list[str]) -> None:
        """Drop these requests wherever they are."""
        ids = set(request_ids)
        for e in [e for e in self.active if e.job.request_id in ids]:
            self._close(e)
            self.active.remove(e)
        self.queue = deque(e for e in self.queue if e.job.request_id not in ids)

    def step(self) -> list[m.RequestOutput]:
        """Admit waiting requests, then advance one request by one window (or one retry)."""
        self.steps += 1
        outputs, self.early = self.early, []
        while self.queue and len(self.active) < self.max_running:
            self.active.append(self.queue.popleft())
        if not self.active:
            return outputs
        self.turn = (self.turn + 1) % len(self.active)
        entry = self.active[self.turn]
        start = time.monotonic()
        out = self._advance(entry)
        self.stats["busy_seconds"] += time.monotonic() - start
        if out is not None:
            outputs.append(out)
            if out.finish_reason is not None:
                self.active.remove(entry)
                self._close(entry)
        return outputs

    def _advance(self, e: _Entry) -> m.RequestOutput | None:
        rid = e.job.request_id
        try:
            if e.work is None:
                decoder = AudioDecoder(e.job.audio, self.limit_s)
                cls = ParakeetJob if self.kind == "parakeet" else WhisperJob
                e.work = cls(self.model, e.job, decoder)
            segs = e.work.advance()
        except AudioError as exc:
            return _error(rid, str(exc), exc.param, exc.code)
        except Exception as exc:  # a model failure fails this request only
            log.exception("transcription %s failed", rid)
            return m.RequestOutput(request_id=rid, finish_reason="error",
                                   error=f"transcription failed: {exc}", error_code="internal_error")
        self.stats["windows"] += 1
        done, first = e.work.finished, not e.started
        if not segs and not done and not first:
            return None  # a retry or a silent window: nothing to say yet
        out = m.RequestOutput(request_id=rid, segments=segs, text="".join(s.text for s in segs),
                              language=LANGUAGES.get(e.work.language, e.work.language))
        if first:  # the upload decoded: the gateway can start its response
            e.started = True
            out.queue_s = time.monotonic() - e.added
        if done:
            out.finish_reason = "stop"
            out.duration = round(e.work.duration, 3)
            self.stats["requests"] += 1
            self.stats["audio_seconds"] += e.work.duration
        return out

    def _close(self, e: _Entry) -> None:
        if e.work is not None:
            e.work.decoder.close()

    @property
    def has_work(self) -> bool:
        """True while requests are queued, running, or have news to send."""
        return bool(self.queue or self.active or self.early)

    @property
    def running(self) -> int:
        """Requests being transcribed now."""
        return len(self.active)

    @property
    def waiting(self) -> int:
        """Requests queued behind them."""
        return len(self.queue)

    def numbers(self) -> dict[str, Any]:
        """Windows decoded, requests finished, seconds of audio and of work."""
        return {**self.stats, "max_audio_seconds": self.limit_s}


def _error(rid: str, message: str, param: str, code: str = "invalid_request_error") -> m.RequestOutput:
    return m.RequestOutput(request_id=rid, finish_reason="error", error=message,
                           error_code=code, error_param=param)


def load_runner(model: str, path: Path, config: dict[str, Any], args: argparse.Namespace) -> SttRunner:
    """Load the speech-to-text model in PATH and wrap it in a runner (the kinds registry calls this)."""
    kind = family(config)
    if kind == "parakeet":
        loaded = load_parakeet(path)
        caps = ["word_timestamps", "streaming"]
        facts = m.ModelFacts(model=model, kind="transcribe", capabilities=caps, model_type="parakeet")
    else:
        loaded = load_whisper(path, config)
        caps = (["translation"] if loaded.is_multilingual else []) + ["word_timestamps", "streaming"]
        facts = m.ModelFacts(model=model, kind="transcribe", capabilities=caps, model_type="whisper",
                             context_length=loaded.dims.n_text_ctx, vocab_size=loaded.dims.n_vocab,
                             num_layers=loaded.dims.n_audio_layer + loaded.dims.n_text_layer,
                             dtype=str(loaded.dtype).replace("mlx.core.", ""))
    return SttRunner(loaded, facts, kind, getattr(args, "max_batch", 8),
                     getattr(args, "max_waiting", 64), max_audio_seconds(args))
