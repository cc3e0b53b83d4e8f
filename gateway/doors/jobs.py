"""Build worker jobs from validated API requests."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.doors.checks import UNKNOWN_VOCAB, logit_bias
from gateway.edge.errors import bad_request
from gateway.edge.limits import MAX_STOP_CHARS, MAX_STOPS
from gateway.openai.schemas import ChatCompletionRequest, CompletionRequest
from protocol.messages import Generate, SamplingParams, decode_job, encode


def _pick(value: Any, defaults: dict[str, Any] | None, name: str, fallback: Any) -> Any:
    """The request's value, else the model's recommended default, else OpenAI's."""
    if value is not None:
        return value
    if defaults and defaults.get(name) is not None:
        return defaults[name]
    return fallback


def sampling_params(req: ChatCompletionRequest | CompletionRequest, max_tokens: int | None,
                    logprobs: bool, top_logprobs: int,
                    defaults: dict[str, Any] | None = None,
                    bias: dict[int, float] | None = None) -> SamplingParams:
    """Translate OpenAI sampling fields to the wire's SamplingParams (model, then OpenAI defaults)."""
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stop) > MAX_STOPS:
        raise bad_request(f"At most {MAX_STOPS} stop sequences are allowed.", param="stop")
    if any(not s or len(s) > MAX_STOP_CHARS for s in stop):
        raise bad_request(f"Stop sequences must be non-empty strings of at most {MAX_STOP_CHARS} "
                          "characters.", param="stop")
    return SamplingParams(
        max_tokens=max_tokens or 0,
        temperature=_pick(req.temperature, defaults, "temperature", 1.0),
        top_p=_pick(req.top_p, defaults, "top_p", 1.0),
        top_k=max(_pick(req.top_k, defaults, "top_k", 0), 0),
        min_p=_pick(req.min_p, defaults, "min_p", 0.0),
        seed=req.seed,
        repetition_penalty=_pick(req.repetition_penalty, defaults, "repetition_penalty", 1.0),
        presence_penalty=_pick(req.presence_penalty, defaults, "presence_penalty", 0.0),
        frequency_penalty=req.frequency_penalty or 0.0,
        stop=stop,
        ignore_eos=req.ignore_eos,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        logit_bias=bias or {},
    )


def chat_params(req: ChatCompletionRequest, defaults: dict[str, Any] | None = None,
                vocab: int = UNKNOWN_VOCAB) -> SamplingParams:
    """Sampling parameters of a chat request (logit_bias checked against VOCAB)."""
    if req.top_logprobs and not req.logprobs:
        raise bad_request("top_logprobs requires logprobs to be true.", param="top_logprobs")
    return sampling_params(req, req.max_completion_tokens or req.max_tokens, req.logprobs,
                           req.top_logprobs or 0, defaults, logit_bias(req.logit_bias, vocab))


def completion_params(req: CompletionRequest, defaults: dict[str, Any] | None = None,
                      vocab: int = UNKNOWN_VOCAB) -> SamplingParams:
    """Sampling parameters of a text-completion request (logit_bias checked against VOCAB)."""
    lp = req.logprobs
    return sampling_params(req, req.max_tokens, lp is not None, lp or 0, defaults,
                           logit_bias(req.logit_bias, vocab))


def encodable(job: Generate) -> None:
    """Last line of defence: a job the worker could not decode is a 400, never a 500 or a hang.

    The body checks (read_body, the schemas, gateway/doors/checks.py) should make this unreachable.
    """
    try:
        decode_job(encode(job))
    except (OverflowError, TypeError, ValueError, msgspec.EncodeError,
            msgspec.DecodeError) as exc:
        raise bad_request(f"The request cannot be sent to the model: {exc}") from exc
