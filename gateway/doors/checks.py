"""Request checks the schemas cannot express: the model's vocabulary and context, fan-out, and
options that are refused rather than silently ignored."""

from __future__ import annotations

from typing import Any

from gateway.edge.errors import bad_request
from gateway.edge.limits import ALLOWED_TEMPLATE_KWARGS, CHARS_PER_TOKEN, MAX_CHOICES
from protocol.messages import ModelFacts

UNKNOWN_VOCAB = 2**31  # without a known vocabulary, ids must still fit the worker's int32 arrays


def vocab_size(facts: ModelFacts | None) -> int:
    """The exclusive upper bound of token ids for a model."""
    return facts.vocab_size if facts is not None and facts.vocab_size > 0 else UNKNOWN_VOCAB


def context_length(facts: ModelFacts | None, configured: int | None) -> int:
    """The model's context length in tokens (0 when unknown)."""
    if facts is not None and facts.context_length > 0:
        return facts.context_length
    return configured or 0


def check_fanout(prompts: int, n: int) -> None:
    """Refuse a request that would become more than MAX_CHOICES jobs."""
    if prompts * n > MAX_CHOICES:
        what = f"{prompts} prompts x n={n}" if prompts > 1 else f"n={n}"
        raise bad_request(f"This request asks for {prompts * n} completions ({what}); at most "
                          f"{MAX_CHOICES} are allowed per request.",
                          param="prompt" if prompts > 1 else "n", code="too_many_choices")


def check_template_kwargs(kwargs: dict[str, Any] | None) -> None:
    """Refuse chat_template_kwargs keys the worker would not pass to the template."""
    for key in kwargs or {}:
        if key not in ALLOWED_TEMPLATE_KWARGS:
            allowed = ", ".join(sorted(ALLOWED_TEMPLATE_KWARGS))
            raise bad_request(f"chat_template_kwargs key '{key}' is not supported (allowed: "
                              f"{allowed}).", param="chat_template_kwargs",
                              code="unsupported_parameter")


def logit_bias(bias: dict[str, float] | None, vocab: int) -> dict[int, float]:
    """logit_bias with token-id keys checked against the vocabulary, as {id: bias}."""
    out: dict[int, float] = {}
    for key, value in (bias or {}).items():
        token = int(key)  # the schema allows only 1-10 digits
        if token >= vocab:
            raise bad_request(f"logit_bias names token id {token}, outside the model's vocabulary "
                              f"of {vocab} tokens.", param="logit_bias", code="invalid_value")
        out[token] = float(value)
    return out


def text_chars(obj: Any) -> int:
    """Characters of every string (keys too) inside OBJ, walked without recursion."""
    total, stack = 0, [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def check_chars(chars: int, ctx: int, param: str) -> None:
    """Refuse a prompt with too many characters to fit CTX tokens, before anything tokenizes it."""
    if ctx > 0 and chars > ctx * CHARS_PER_TOKEN:
        raise bad_request(f"This model's maximum context length is {ctx} tokens, and your prompt "
                          f"has {chars} characters: far more than fit. Shorten it.",
                          param=param, code="context_length_exceeded")


def check_prompt_chars(messages: Any, tools: Any, ctx: int, param: str) -> None:
    """check_chars of the characters of MESSAGES and TOOLS (a walk of every string in them)."""
    check_chars(text_chars(messages) + text_chars(tools), ctx, param)


def one_kind(value: str | list[Any], param: str) -> list[Any]:
    """VALUE (an OpenAI prompt/input) as a list of items: strings or token-id lists, one kind."""
    if isinstance(value, str):
        return [value]
    if all(isinstance(v, int) for v in value):
        return [value]
    if all(isinstance(v, str) for v in value) or all(isinstance(v, list) for v in value):
        return value
    raise bad_request(f"{param} must be a string, a list of strings, a list of token ids, or a "
                      "list of lists of token ids, not a mix.", param=param, code="invalid_value")


def split_prompt(prompt: str | list[Any], vocab: int, ctx: int) -> list[dict[str, Any]]:
    """A completion prompt as one job kwargs per prompt: strings, or token ids within VOCAB."""
    prompts = one_kind(prompt, "prompt")
    out: list[dict[str, Any]] = []
    for p in prompts:
        if isinstance(p, str):
            check_chars(len(p), ctx, "prompt")
            out.append({"prompt": p})
            continue
        bad = next((t for t in p if t >= vocab), None) if max(p, default=0) >= vocab \
            else None  # the schema already refused t < 0; max() walks at C speed
        if bad is not None:
            raise bad_request(f"prompt holds token id {bad}, outside the model's vocabulary of "
                              f"{vocab} tokens (ids are 0 to {vocab - 1}).", param="prompt",
                              code="invalid_value")
        if 0 < ctx < len(p):
            raise bad_request(f"This model's maximum context length is {ctx} tokens, and your "
                              f"prompt has {len(p)} tokens.", param="prompt",
                              code="context_length_exceeded")
        out.append({"prompt_ids": list(p)})
    return out


def prompt_count(prompt: str | list[Any]) -> int:
    """How many prompts (jobs per choice) a completion prompt holds."""
    if isinstance(prompt, str) or all(isinstance(p, int) for p in prompt):
        return 1
    return len(prompt)
