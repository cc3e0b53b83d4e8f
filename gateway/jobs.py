"""Build worker jobs from validated API requests."""

from __future__ import annotations

from typing import Any

from gateway.errors import bad_request
from gateway.schemas import ChatCompletionRequest, CompletionRequest
from protocol.messages import SamplingParams


def sampling_params(req: ChatCompletionRequest | CompletionRequest, max_tokens: int | None,
                    logprobs: bool, top_logprobs: int) -> SamplingParams:
    """Translate OpenAI sampling fields to the wire's SamplingParams (OpenAI defaults)."""
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if len(stop) > 16:
        raise bad_request("At most 16 stop sequences are allowed.", param="stop")
    if any(not s for s in stop):
        raise bad_request("Stop sequences must be non-empty strings.", param="stop")
    return SamplingParams(
        max_tokens=max_tokens or 0,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=max(req.top_k or 0, 0),
        min_p=req.min_p or 0.0,
        seed=req.seed,
        repetition_penalty=req.repetition_penalty or 1.0,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        stop=stop,
        ignore_eos=req.ignore_eos,
        logprobs=logprobs,
        top_logprobs=top_logprobs,
    )


def chat_params(req: ChatCompletionRequest) -> SamplingParams:
    """Sampling parameters of a chat request."""
    if req.top_logprobs and not req.logprobs:
        raise bad_request("top_logprobs requires logprobs to be true.", param="top_logprobs")
    return sampling_params(req, req.max_completion_tokens or req.max_tokens, req.logprobs,
                           req.top_logprobs or 0)


def completion_params(req: CompletionRequest) -> SamplingParams:
    """Sampling parameters of a text-completion request."""
    lp = req.logprobs
    return sampling_params(req, req.max_tokens, lp is not None, lp or 0)


def completion_prompts(req: CompletionRequest) -> list[dict[str, Any]]:
    """Split a completion prompt (string, list of strings, or token ids) into per-prompt kwargs."""
    p = req.prompt
    if isinstance(p, str):
        return [{"prompt": p}]
    if all(isinstance(x, str) for x in p):
        return [{"prompt": x} for x in p]
    if all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in p):
        return [{"prompt_ids": list(p)}]
    if all(isinstance(x, list) and x and all(isinstance(t, int) for t in x) for x in p):
        return [{"prompt_ids": list(x)} for x in p]
    raise bad_request("prompt must be a string, a list of strings, or a list of token ids.",
                      param="prompt")
