"""Every message between the gateway and a worker, as msgspec structs.

Jobs flow gateway -> worker (``Job`` union); events flow worker -> gateway (``Event`` union).
Both unions are tagged so one typed decoder reads each direction. Structs are array-like and omit
defaults so frames stay small. No pickle: msgpack only.
"""

from __future__ import annotations

import hmac
from typing import Any

import msgspec

# 2: Generate.cache_salt (an older worker would ignore it and share the cache); 3: Pulse
PROTOCOL_VERSION = 3
SECRET_ENV = "RAPID_MLX_WORKER_SECRET"  # a spawned worker's per-boot secret (not argv: ps shows it)
# the output cap of a request that sets none (`rapid-mlx serve --default-max-tokens`): an agent
# that sends no limit to a small model that never stops gets an answer ending with `length`
DEFAULT_MAX_TOKENS = 4096
ADOPT_QUERY = "adopt"  # a StatusQuery asking a running worker to say Ready again (gateway restart)


class _Msg(msgspec.Struct, tag=True, array_like=True, omit_defaults=True, kw_only=True):
    """Base of every wire message."""


class SamplingParams(msgspec.Struct, array_like=True, omit_defaults=True, kw_only=True):
    """How to pick tokens for one request."""

    max_tokens: int = 0  # 0: up to the context length
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: list[str] = []
    stop_token_ids: list[int] = []
    ignore_eos: bool = False
    logprobs: bool = False
    top_logprobs: int = 0
    logit_bias: dict[int, float] = {}


class GrammarSpec(msgspec.Struct, array_like=True, omit_defaults=True, kw_only=True):
    """A constraint on the generated text: KIND is json_schema (TEXT: the schema as JSON text),
    json_object (any JSON object), lark or regex (TEXT: the grammar), or tool_calls (TEXT:
    JSON ``{"family", "tools": [[name, parameters], ...], "multiple"}``; the worker builds the
    parser family's call grammar for its tokenizer)."""

    kind: str
    text: str = ""
    after_think: bool = False  # a reasoning section (<think> ... </think>) may come first, free


class ImageData(msgspec.Struct, array_like=True, omit_defaults=True, kw_only=True):
    """One checked image of a request: the client's bytes (PNG, JPEG, WebP) and their sha256."""

    data: bytes
    sha256: str


# ---- jobs: gateway -> worker -------------------------------------------------------------


class Generate(_Msg, tag="gen"):
    """Start generating for one request. Exactly one of messages / prompt / prompt_ids is set."""

    request_id: str
    params: SamplingParams
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] = {}
    prompt: str | None = None
    prompt_ids: list[int] | None = None
    echo: bool = False
    assistant_prefix: str = ""  # text the answer is forced to start with (tool_choice)
    grammar: GrammarSpec | None = None  # structured output: the answer must match it
    images: list[ImageData] = []  # one per {"type": "image"} placeholder part, in order
    # the prefix-cache namespace: prefixes are reused only within one ("": shared). The gateway
    # sets a digest of the caller's API key (never the key), so tenants learn nothing from hits
    cache_salt: str = ""


class Abort(_Msg, tag="abort"):
    """Stop these requests and free their resources."""

    request_ids: list[str]


class StatusQuery(_Msg, tag="status?"):
    """Ask the worker for a Status event carrying the same query id (ADOPT_QUERY: a Ready)."""

    query_id: str


class Shutdown(_Msg, tag="shutdown"):
    """Ask the worker to exit cleanly."""

    reason: str = ""


class Embed(_Msg, tag="embed"):
    """Embed every input of one request (an embedding worker). An input is text or token ids."""

    request_id: str
    inputs: list[str | list[int]]
    dimensions: int = 0  # 0: the model's own size; else truncate and renormalize (if trained so)
    truncate: bool = False  # inputs over the model's length are cut instead of refused


class Transcribe(_Msg, tag="transcribe"):
    """Turn one uploaded audio file into text (a speech-to-text worker)."""

    request_id: str
    audio: bytes  # the file as uploaded; the worker decodes it
    filename: str = ""
    task: str = "transcribe"  # or "translate" (into English)
    language: str = ""
    prompt: str = ""
    temperature: float = 0.0
    word_timestamps: bool = False
    stream: bool = False  # send text as each window is decoded


class Speak(_Msg, tag="speak"):
    """Turn text into speech (a text-to-speech worker)."""

    request_id: str
    text: str
    voice: str = ""
    speed: float = 1.0
    instructions: str = ""
    audio_format: str = "wav"  # wav, mp3, flac, opus, aac, pcm
    stream: bool = False  # send encoded audio as it is produced


Work = Generate | Embed | Transcribe | Speak  # the jobs that are requests (have a request_id)
Job = Generate | Embed | Transcribe | Speak | Abort | StatusQuery | Shutdown


# ---- events: worker -> gateway -----------------------------------------------------------


KINDS = ("generate", "embed", "transcribe", "speech")  # what a worker does with its model


class ModelFacts(msgspec.Struct, array_like=True, omit_defaults=True, kw_only=True):
    """What the gateway needs to know about the loaded model."""

    model: str
    kind: str = "generate"  # one of KINDS: which jobs the worker takes
    capabilities: list[str] = []  # e.g. "dimensions", "translation", "word_timestamps"
    embedding_dimensions: int = 0  # an embedding model's output size
    voices: list[str] = []  # a speech model's voices (the first is the default)
    sample_rate: int = 0  # a speech model's output rate (Hz)
    model_type: str = ""
    context_length: int = 0
    vocab_size: int = 0
    num_layers: int = 0
    dtype: str = ""
    is_moe: bool = False
    is_hybrid: bool = False
    think_opened_by_template: bool = False
    chat_template: str | None = None
    special_tokens: list[str] = []
    revision: str = ""  # fingerprint of the weights (worker/model/fingerprint.py): replicas must agree
    speculative: str = ""  # the drafter this worker speculates with ("": it does not)


class Ready(_Msg, tag="ready"):
    """A worker finished loading and accepts jobs."""

    alias: str
    boot_id: str
    pid: int
    protocol_version: int
    facts: ModelFacts
    secret: str = ""  # the per-boot secret its gateway gave it, or the operator's worker token


class TokenLogprob(msgspec.Struct, array_like=True, kw_only=True):
    """Log-probability of one token, with its alternatives."""

    token: str
    token_id: int
    logprob: float
    top: list[tuple[str, int, float]] = []


class Word(msgspec.Struct, array_like=True, kw_only=True):
    """One transcribed word with its time span (seconds)."""

    word: str
    start: float
    end: float


class Segment(msgspec.Struct, array_like=True, omit_defaults=True, kw_only=True):
    """One transcribed segment, as Whisper's verbose_json reports it."""

    id: int
    start: float
    end: float
    text: str
    tokens: list[int] = []
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    words: list[Word] = []
    seek: int = 0  # the window's start (mel frames, 100 per second), as Whisper reports it


class RequestOutput(msgspec.Struct, array_like=True, omit_defaults=True, kw_only=True):
    """New tokens of one request within one engine step (or an embedding/audio worker's news)."""

    request_id: str
    token_ids: list[int] = []
    text: str = ""
    logprobs: list[TokenLogprob] = []
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    think_opened: bool = False
    error: str | None = None
    error_code: str | None = None
    queue_s: float = 0.0  # on a request's first output: seconds it waited in the engine queue
    stop_sequence: str | None = None  # on the last output: the stop string that ended it
    error_param: str | None = None  # the request field an invalid_request_error is about
    embeddings: list[bytes] = []  # Embed: one little-endian float32 vector per input, in order
    audio: bytes = b""  # Speak: the next bytes of the encoded audio
    segments: list[Segment] = []  # Transcribe: segments finished in this output
    language: str = ""  # Transcribe: the (detected) language
    duration: float = 0.0  # Transcribe: seconds of input audio; Speak: seconds of speech so far
    drafted: int = 0  # speculative decoding: draft tokens verified for these tokens
    accepted: int = 0  # ... of which kept
    drafter: str = ""  # ... proposed by this drafter ("ngram", "draft", "mtp")


class StepOutputs(_Msg, tag="step"):
    """One frame per engine step, carrying every request's news."""

    boot_id: str
    step: int
    outputs: list[RequestOutput]


class Heartbeat(_Msg, tag="hb"):
    """Liveness and progress of a worker."""

    boot_id: str
    step: int
    running: int
    waiting: int
    kv_used: int = 0
    kv_total: int = 0
    draining: bool = False  # SIGTERM: finishing its requests, then exiting; route nothing new
    # jobs its intake thread is preparing (template, tokenizer, images: seconds for large
    # images): work in progress, so the gateway does not take an idle engine for a hang
    preparing: int = 0
    preparing_for: float = 0.0  # seconds the job intake is on has been preparing (0: none)
    # a hybrid model's recurrent-state slots (worker/kv/snapshots.py): in use (running requests,
    # their boundary states, the prefix cache's snapshots) and in all; 0/0 for other models
    state_used: int = 0
    state_total: int = 0
    state_snapshots: int = 0  # of the slots in use, those the prefix cache holds


class Pulse(_Msg, tag="pulse"):
    """A worker's progress while a step runs, sent by a thread of its own on a socket of its own
    (routing id ``pulse_id`` of the worker's): the step running and for how long, its planned
    work and the process's CPU time, so the gateway tells a slow step from a stuck process."""

    boot_id: str
    step: int  # the runner's step count (a running step ends as step + 1)
    running_for: float = 0.0  # seconds the step in progress has run (0: between steps)
    work_tokens: int = 0  # that step's planned tokens (prompt chunk tokens, decode rows)
    work_pairs: int = 0  # and its attention work: query tokens x the positions they attend to
    cpu: float = 0.0  # the worker process's CPU seconds (all threads)


class Status(_Msg, tag="status"):
    """Answer to a StatusQuery: a free-form snapshot of the worker."""

    boot_id: str
    query_id: str
    body: dict[str, Any]


class Dead(_Msg, tag="dead"):
    """A worker is about to exit (or failed to start), with a reason."""

    alias: str
    boot_id: str
    reason: str


Event = Ready | StepOutputs | Heartbeat | Pulse | Status | Dead

_encoder = msgspec.msgpack.Encoder()
_job_decoder = msgspec.msgpack.Decoder(Job)
_event_decoder = msgspec.msgpack.Decoder(Event)


def routing_id(alias: str, boot_id: str, secret: str = "") -> bytes:
    """A worker's ZeroMQ routing id: ``alias:boot_id``, plus a tag derived from its secret.

    The tag makes the id unguessable, so nobody can claim it first and keep the real worker out.
    """
    base = f"{alias}:{boot_id}"
    if not secret:
        return base.encode()
    tag = hmac.new(secret.encode(), base.encode(), "sha256").hexdigest()[:16]
    return f"{base}:{tag}".encode()


def pulse_id(worker_id: bytes) -> bytes:
    """The routing id of the pulse socket of the worker whose routing id is WORKER_ID."""
    return worker_id + b":pulse"


def encode(msg: _Msg) -> bytes:
    """Encode one message as msgpack bytes."""
    return _encoder.encode(msg)


def decode_job(data: bytes) -> Job:
    """Decode a gateway -> worker frame."""
    job: Job = _job_decoder.decode(data)
    return job


def decode_event(data: bytes) -> Event:
    """Decode a worker -> gateway frame."""
    event: Event = _event_decoder.decode(data)
    return event


def peek_tag(data: bytes) -> str | None:
    """The tag of an encoded message (its array's first element), read without decoding the
    rest; None when DATA does not start like one of our messages."""
    if not data:
        return None
    head, at = data[0], 1
    if 0x90 <= head <= 0x9F:
        pass
    elif head == 0xDC:
        at = 3
    elif head == 0xDD:
        at = 5
    else:
        return None
    if len(data) <= at:
        return None
    kind = data[at]
    if 0xA0 <= kind <= 0xBF:
        start, size = at + 1, kind - 0xA0
    elif kind == 0xD9 and len(data) > at + 1:
        start, size = at + 2, data[at + 1]
    else:
        return None
    raw = data[start : start + size]
    return raw.decode("utf-8", "replace") if len(raw) == size else None
