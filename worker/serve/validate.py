"""Re-check a Generate job in the worker for anything that would crash or wedge the engine."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import msgspec

from protocol.messages import Generate, Job, SamplingParams, decode_job

MAX_STOPS = 16  # stop strings per request
MAX_STOP_CHARS = 512  # characters per stop string (matching costs grow with its square)
MAX_STOP_TOKEN_IDS = 1024
MAX_TOP_LOGPROBS = 20
MAX_BIAS = 100.0
MAX_NODES = 1_000_000  # values in the free-form parts of a job (messages, tools, kwargs)


class JobError(ValueError):
    """A job the worker refuses; CODE is the RequestOutput error code to answer with."""

    def __init__(self, message: str, code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.code = code


def _token_id(value: object, vocab: int) -> bool:
    return type(value) is int and 0 <= value < vocab


def _finite(name: str, value: float, low: float, high: float) -> None:
    if not (isinstance(value, float | int) and math.isfinite(value) and low <= value <= high):
        raise JobError(f"{name} must be a finite number in [{low}, {high}], got {value!r}")


def check_params(p: SamplingParams, vocab: int) -> None:
    """Raise JobError unless every sampling parameter is one the engine can use safely."""
    if type(p.max_tokens) is not int or type(p.top_k) is not int:
        raise JobError("max_tokens and top_k must be integers")
    _finite("temperature", p.temperature, 0.0, 1e6)
    _finite("top_p", p.top_p, 0.0, 1.0)
    _finite("min_p", p.min_p, 0.0, 1.0)
    _finite("repetition_penalty", p.repetition_penalty, 1e-6, 1e6)
    _finite("presence_penalty", p.presence_penalty, -1e6, 1e6)
    _finite("frequency_penalty", p.frequency_penalty, -1e6, 1e6)
    if p.seed is not None and not (type(p.seed) is int and -(2**63) <= p.seed < 2**64):
        raise JobError("seed must be a 64-bit integer")
    if not 0 <= p.top_logprobs <= MAX_TOP_LOGPROBS:
        raise JobError(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}")
    if len(p.stop) > MAX_STOPS or any(len(s) > MAX_STOP_CHARS for s in p.stop):
        raise JobError(f"at most {MAX_STOPS} stop strings of at most {MAX_STOP_CHARS} characters")
    if len(p.stop_token_ids) > MAX_STOP_TOKEN_IDS:
        raise JobError(f"at most {MAX_STOP_TOKEN_IDS} stop token ids")
    if not all(_token_id(t, vocab) for t in p.stop_token_ids):
        raise JobError(f"stop token ids must be integers in [0, {vocab})")
    for tok, bias in p.logit_bias.items():
        if not _token_id(tok, vocab):
            raise JobError(f"logit_bias keys must be token ids in [0, {vocab}), got {tok!r}")
        _finite("a logit_bias value", bias, -MAX_BIAS, MAX_BIAS)


def check_prompt_ids(ids: list[int], vocab: int, context_length: int) -> None:
    """Raise JobError unless IDS are token ids of this vocabulary that fit the context."""
    if not ids:
        raise JobError("the prompt is empty")
    if len(ids) >= context_length:
        raise JobError(f"This model's maximum context length is {context_length} tokens. However, "
                       f"the prompt has {len(ids)} tokens. Please reduce the length of the prompt.",
                       "context_length_exceeded")
    bad = next((t for t in ids if not _token_id(t, vocab)), None)
    if bad is not None:
        raise JobError(f"prompt token ids must be integers in [0, {vocab}), got {bad!r}")


def prompt_chars(job: Generate) -> int:
    """Characters in every string of the job's prompt parts (messages, tools, prompt, prefix)."""
    total = len(job.prompt or "") + len(job.assistant_prefix)
    stack: list[Any] = [job.messages, job.tools, job.chat_template_kwargs]
    nodes = 0
    while stack:
        value = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise JobError(f"the request has more than {MAX_NODES} values in its messages and tools")
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
    return total


def check_size(job: Generate, context_length: int, chars_per_token: int) -> None:
    """Refuse, before tokenizing, a prompt with more characters than the context could hold."""
    chars = prompt_chars(job)
    if chars > context_length * chars_per_token:
        raise JobError(f"This model's maximum context length is {context_length} tokens. However, "
                       f"the request has {chars} characters, more than that many tokens could hold. "
                       "Please reduce the length of the messages.", "context_length_exceeded")


def recover_request_id(frame: bytes) -> str | None:
    """The request id of an undecodable Generate frame, when its head can be read at all."""
    rid = _head_id(frame)
    if rid is not None:
        return rid
    try:
        raw = msgspec.msgpack.decode(frame)
    except Exception:  # not msgpack, too deep, ...: nothing to answer
        return None
    if isinstance(raw, dict) and raw.get("type") == "gen" and isinstance(raw.get("request_id"), str):
        return str(raw["request_id"])
    return None


def _head_id(frame: bytes) -> str | None:
    """Read just `["gen", request_id, ...` off the front of a msgpack array frame."""
    pos = {0xDC: 3, 0xDD: 5}.get(frame[0], 1) if frame and (
        0x92 <= frame[0] <= 0x9F or frame[0] in (0xDC, 0xDD)) else 0
    if not pos:
        return None
    tag, pos = _str_at(frame, pos)
    if tag != "gen":
        return None
    rid, _ = _str_at(frame, pos)
    return rid


def _str_at(frame: bytes, pos: int) -> tuple[str | None, int]:
    if pos >= len(frame):
        return None, pos
    head = frame[pos]
    if 0xA0 <= head <= 0xBF:
        size, start = head & 0x1F, pos + 1
    elif head in (0xD9, 0xDA, 0xDB):
        width = {0xD9: 1, 0xDA: 2, 0xDB: 4}[head]
        size, start = int.from_bytes(frame[pos + 1 : pos + 1 + width], "big"), pos + 1 + width
    else:
        return None, pos
    if start + size > len(frame):
        return None, pos
    try:
        return frame[start : start + size].decode(), start + size
    except UnicodeDecodeError:
        return None, pos


def read_job(frame: bytes, fail: Callable[[str, str, str], None]) -> Job | None:
    """Decode one job frame. A malformed one never kills the worker: it is logged and, when its
    head names a request, that request fails through FAIL(request_id, message, code); None then."""
    try:
        return decode_job(frame)
    except Exception as exc:
        rid = recover_request_id(frame)
        logging.getLogger("rapid_mlx.worker").error("undecodable job frame (request %s): %s",
                                                    rid or "unknown", exc)
        if rid is not None:
            fail(rid, f"the request could not be read by the worker: {exc}",
                 "invalid_request_error")
        return None
