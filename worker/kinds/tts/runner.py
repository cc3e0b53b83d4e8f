"""The text-to-speech Runner: Kokoro (mlx-audio) speaks one bounded piece of one request a step."""

from __future__ import annotations

import argparse
import logging
import time
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as StillSpeaking
from pathlib import Path
from typing import Any

import numpy as np

from protocol import messages as m
from worker.kinds.tts.encode import Encoder
from worker.kinds.tts.g2p import MAX_PHONEMES, Phonemizer, language_for
from worker.kinds.tts.requests import Speech, check
from worker.model.fetch import CannotLoad
from worker.serve.runner import BadInput, BasicRunner, QueueFull

log = logging.getLogger("rapid_mlx.worker")
DEFAULT_VOICE = "af_heart"  # Kokoro's own default, first when the model has it
# One piece is about this much speech: its synthesis is a few seconds here (3-5x that on a busy
# 2-core CPU, the measured real-time factor), far inside the hang watchdog's 30 s. It does not
# depend on the machine's speed, so a request is always cut (and sounds) the same.
PIECE_AUDIO_S = 4.0
PHONEMES_PER_S = 14.0  # Kokoro speaks about this many phonemes a second at speed 1
# A piece is spoken on the runner's own thread and step() waits for it at most STEP_WAIT_S, so
# every step is short however busy the CPU (a piece cannot be split: it takes what it takes).
# A piece still unfinished after PIECE_DEADLINE_S means the worker is stuck: step() raises,
# the worker exits and its supervisor starts a new one.
STEP_WAIT_S = 1.0
PIECE_DEADLINE_S = 300.0


def list_voices(path: Path) -> list[str]:
    """The voice packs in PATH/voices: NAME.safetensors (mlx-audio's) or NAME.bin (kokoro-js's raw
    float32), the default first."""
    names = sorted({p.stem for ext in ("safetensors", "bin") for p in (path / "voices").glob(f"*.{ext}")})
    return sorted(names, key=lambda n: n != DEFAULT_VOICE)


class SpeechRunner(BasicRunner):
    """Requests queue; each step synthesizes the next piece of one running request, in turn."""

    def __init__(self, model_name: str, tts: Any, path: Path, args: argparse.Namespace) -> None:
        self.tts, self.path = tts, path
        self.rate = int(getattr(tts, "sample_rate", 24000))
        self.voices = list_voices(path)
        self.phonemizer = Phonemizer(tts.vocab)
        self.max_running = max(1, int(getattr(args, "max_batch", 8) or 8))
        self.max_waiting = max(0, int(getattr(args, "max_waiting", 64) or 0))
        self.facts = m.ModelFacts(model=model_name, kind="speech", voices=self.voices,
                                  sample_rate=self.rate, model_type="kokoro",
                                  context_length=tts.context_length, dtype="float32",
                                  capabilities=["speed", "stream", "sse"])
        self._waiting: deque[Speech] = deque()
        self._running: list[Speech] = []
        self._turn = 0
        self._packs: dict[str, Any] = {}
        self._stats = {"pieces": 0, "audio_s": 0.0, "synth_s": 0.0, "requests": 0}
        self.rtf = 3.0  # seconds of synthesis per second of audio (moving average, measured)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts")
        self._inflight: tuple[Speech, Future[m.RequestOutput], float] | None = None

    def add(self, job: m.Work) -> None:
        """Queue a Speak job (ValueError for bad input, QueueFull at the bound)."""
        if not isinstance(job, m.Speak):
            raise ValueError(f"a text-to-speech worker cannot take {type(job).__name__} jobs")
        voice = check(job, self.voices)
        if len(self._waiting) + len(self._running) >= self.max_waiting + self.max_running:
            raise QueueFull(f"the speech queue is full ({self.max_waiting} waiting)")
        pieces = self.phonemizer.pieces(job.text, language_for(voice), self.piece_limit(job.speed))
        if not pieces:
            raise BadInput("input has no text that can be spoken", param="input")
        self._waiting.append(Speech(job, voice, pieces, Encoder(job.audio_format, self.rate)))

    def piece_limit(self, speed: float) -> int:
        """Phonemes per piece: about PIECE_AUDIO_S of speech at SPEED (slow speech: fewer)."""
        return max(8, min(MAX_PHONEMES, int(PIECE_AUDIO_S * PHONEMES_PER_S * speed)))

    def abort(self, request_ids: list[str]) -> None:
        """Forget these requests, queued or running."""
        ids = set(request_ids)
        self._waiting = deque(s for s in self._waiting if s.job.request_id not in ids)
        self._running = [s for s in self._running if s.job.request_id not in ids]

    def step(self) -> list[m.RequestOutput]:
        """Start the next piece of the next running request (in turn) on the speaking thread,
        or wait up to STEP_WAIT_S for the one being spoken; its news, or nothing yet."""
        self.steps += 1
        while self._waiting and len(self._running) < self.max_running:
            self._running.append(self._waiting.popleft())
        if self._inflight is None:
            if not self._running:
                return []
            self._turn %= len(self._running)
            speech = self._running[self._turn]
            self._turn += 1
            self._inflight = (speech, self._pool.submit(self._speak_next, speech),
                              time.monotonic())
        speech, future, since = self._inflight
        try:
            out = future.result(timeout=STEP_WAIT_S)
        except StillSpeaking:
            if time.monotonic() - since > PIECE_DEADLINE_S:
                raise RuntimeError(f"one piece of speech took over {PIECE_DEADLINE_S:.0f} s: "
                                   "the speech worker is stuck") from None
            return []
        except Exception as exc:  # one request's failure ends that request only
            log.error("speech request %s failed: %r", speech.job.request_id, exc)
            out = m.RequestOutput(request_id=speech.job.request_id, finish_reason="error",
                                  error=f"speech synthesis failed: {exc}",
                                  error_code="internal_error")
        self._inflight = None
        if speech not in self._running:  # aborted while it was being spoken
            return []
        if out.finish_reason is not None:
            index = self._running.index(speech)
            del self._running[index]
            if index < self._turn:  # the next one moved down into its place
                self._turn -= 1
            self._stats["requests"] += 1
        return [out]

    def _speak_next(self, speech: Speech) -> m.RequestOutput:
        piece = speech.pieces[speech.next_piece]
        started = time.monotonic()
        pack = self._pack(speech.voice)
        import mlx.core as mx

        # Kokoro's vocoder draws noise: seed it from the piece, so a request always sounds (and
        # encodes) the same, streamed or not
        mx.random.seed(zlib.crc32(f"{speech.voice}|{speech.job.speed}|{piece}".encode()))
        audio = self.tts(piece, pack[len(piece) - 1], speech.job.speed)
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        speech.next_piece += 1
        data = speech.encoder.feed(samples)
        self._stats["pieces"] += 1
        self._stats["audio_s"] += samples.size / self.rate
        took = time.monotonic() - started
        self._stats["synth_s"] += took
        if samples.size:
            self.rtf = 0.7 * self.rtf + 0.3 * took / (samples.size / self.rate)
        out = m.RequestOutput(request_id=speech.job.request_id, audio=data,
                              duration=round(speech.encoder.seconds, 3))
        if speech.outputs == 0:
            out.queue_s = round(started - speech.queued_at, 4)
            out.prompt_tokens = speech.phonemes
        speech.outputs += 1
        if speech.done:
            out.audio += speech.encoder.finish()
            out.finish_reason = "stop"
            out.prompt_tokens = speech.phonemes
            out.completion_tokens = int(speech.encoder.seconds * 40)  # Kokoro's 40 frames/s
        return out

    def _pack(self, voice: str) -> Any:
        if voice not in self._packs:
            import mlx.core as mx

            file = self.path / "voices" / f"{voice}.safetensors"
            if file.exists():
                loaded: Any = mx.load(str(file))
                self._packs[voice] = loaded["voice"]
            else:
                from worker.kinds.tts.voices import read_pack_file

                self._packs[voice] = mx.array(read_pack_file(file.with_suffix(".bin")))
        return self._packs[voice]

    @property
    def has_work(self) -> bool:
        """True while requests are queued or running."""
        return bool(self._waiting or self._running or self._inflight)

    @property
    def running(self) -> int:
        """Requests being spoken (interleaved a piece at a time)."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Requests queued behind them."""
        return len(self._waiting)

    def numbers(self) -> dict[str, Any]:
        """Pieces, seconds of audio and of synthesis so far (their ratio is the real-time factor)."""
        s = dict(self._stats)
        s["audio_s"], s["synth_s"] = round(s["audio_s"], 3), round(s["synth_s"], 3)
        return {"speech": s, "voices": len(self.voices), "real_time_factor": round(self.rtf, 3)}


def load_runner(model: str, path: Path, config: dict[str, Any],
                args: argparse.Namespace) -> SpeechRunner:
    """Load the Kokoro model folder PATH (config.json, *.safetensors, voices/) for serving."""
    if str(config.get("model_type", "")).lower() != "kokoro":
        raise CannotLoad(model, f"model_type {config.get('model_type')!r} is not served as "
                         "speech yet (Kokoro is)", "convert a Kokoro-82M checkpoint with "
                         "`python -m worker.kinds.tts.convert`")
    from mlx_audio.tts.utils import load_model

    from worker.kinds.tts.fastconv import install

    install()  # before the model is built: its blocks keep the conv functions they see
    tts = load_model(path, strict=True)
    runner = SpeechRunner(model, tts, path, args)
    if not runner.voices:
        raise CannotLoad(model, f"{path / 'voices'} has no voice packs (*.safetensors, *.bin)",
                         "convert the model with its voices: `python -m worker.kinds.tts.convert`")
    return runner
