"""Turn a Generate job into prompt token ids through the model's own tokenizer and chat template."""

from __future__ import annotations

from typing import Any

from protocol.messages import Generate

ALLOWED_TEMPLATE_KWARGS = frozenset({"enable_thinking", "thinking", "reasoning_effort", "add_generation_prompt"})


class PromptError(ValueError):
    """The request cannot be rendered into a prompt."""


TEXT_PARTS = ("text", "input_text", "output_text")
SKIPPED_PARTS = ("refusal",)  # an assistant's refusal part carries no prompt text


def _text_of(content: list[Any], i: int) -> str:
    """The text of a content-part list; any other part (an image, audio, a file) is refused,
    never dropped: this worker cannot see it, and answering without it would be wrong."""
    texts = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in SKIPPED_PARTS:
            continue
        if kind not in TEXT_PARTS:
            what = "image" if kind in ("image", "image_url", "input_image") else \
                f"'{str(kind)[:40]}'"
            raise PromptError(f"messages[{i}].content[{j}]: this model cannot take {what} "
                              "content parts (text only).")
        text = p.get("text", "")
        if not isinstance(text, str):
            raise PromptError(f"messages[{i}].content[{j}].text must be a string.")
        texts.append(text)
    return "".join(texts)


def _normalize(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flatten OpenAI content parts to text and keep tool-call arguments as the template expects."""
    out = []
    for i, m in enumerate(messages):
        m = dict(m)
        content = m.get("content")
        if isinstance(content, list):
            m["content"] = _text_of(content, i)
        elif content is None:
            m["content"] = ""
        out.append(m)
    return out


def opens_think(text: str) -> bool:
    """True when a rendered prompt ends inside an opened reasoning block."""
    tail = text.rstrip()
    return tail.endswith("<think>")


def render(tokenizer: Any, job: Generate) -> tuple[list[int], bool]:
    """Return the prompt token ids for JOB and whether the template opened a think block."""
    if job.prompt_ids is not None:
        return list(job.prompt_ids), False
    if job.prompt is not None:
        return list(tokenizer.encode(job.prompt)), False
    if job.messages is None:
        raise PromptError("request has no prompt")
    kwargs = {k: v for k, v in job.chat_template_kwargs.items() if k in ALLOWED_TEMPLATE_KWARGS}
    add_gen = bool(kwargs.pop("add_generation_prompt", True))
    messages = _normalize(job.messages)
    if getattr(tokenizer, "chat_template", None) is None:
        text = "".join(str(m.get("content", "")) for m in messages)
        return list(tokenizer.encode(text)), False
    try:
        text = tokenizer.apply_chat_template(
            messages, tools=job.tools or None, add_generation_prompt=add_gen, tokenize=False, **kwargs
        )
    except Exception as exc:  # template errors are the request's fault (bad roles, ...)
        raise PromptError(f"chat template could not render these messages: {exc}") from exc
    text += job.assistant_prefix
    return list(tokenizer.encode(text, add_special_tokens=False)), opens_think(text)
