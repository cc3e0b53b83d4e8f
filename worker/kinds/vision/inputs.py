"""Render a request with images: the chat template with image placeholders, the model's
processor (resize, normalize, expand each placeholder to the image's token count), and the
cache key of the prompt (image spans keyed by the image's content hash)."""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protocol.messages import Generate
from worker.serve.prompt import (
    ALLOWED_TEMPLATE_KWARGS,
    SKIPPED_PARTS,
    TEXT_PARTS,
    PromptError,
    opens_think,
)

KEY_BASE = 1 << 40  # cache-key ids of image positions sit here, far beyond any vocabulary


@dataclass
class VisionInput:
    """What the engine needs of a prompt's images: pixels, where they go, and the cache key."""

    ids: list[int]  # the prompt's real token ids (placeholders expanded)
    pixels: dict[str, Any]  # the processor's arrays (pixel_values, and e.g. image_grid_thw)
    spans: list[tuple[int, int]]  # [start, end) of each image's tokens, in order
    key: list[int] = field(default_factory=list)  # ids with each span replaced by hash ids
    positions: Any = None  # M-RoPE models: the prompt's (3, L) rotary positions
    delta: int = 0  # M-RoPE models: position minus index after the prompt

    def rope(self, start: int, n: int) -> np.ndarray:
        """(3, n) rotary positions of positions start..start+n (M-RoPE)."""
        idx = np.arange(start, start + n)
        out = np.broadcast_to(idx + self.delta, (3, n)).copy()
        if self.positions is not None:
            inside = idx < self.positions.shape[1]
            out[:, inside] = self.positions[:, idx[inside]]
        return out

    @property
    def end(self) -> int:
        """The position after the last image token."""
        return self.spans[-1][1] if self.spans else 0


def _messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Messages as multimodal templates take them (text and image parts), and the image count."""
    out, count = [], 0
    for i, m in enumerate(messages):
        m = dict(m)
        content = m.get("content")
        if content is None:
            m["content"] = ""
        elif isinstance(content, list):
            parts = []
            for j, p in enumerate(content):
                kind = p.get("type") if isinstance(p, dict) else None
                if kind in SKIPPED_PARTS:
                    continue
                if kind == "image":
                    parts.append({"type": "image"})
                    count += 1
                elif kind in TEXT_PARTS and isinstance(p.get("text", ""), str):
                    parts.append({"type": "text", "text": p.get("text", "")})
                else:
                    raise PromptError(f"messages[{i}].content[{j}]: this model takes text and "
                                      "image content parts only.")
            m["content"] = parts
        out.append(m)
    return out, count


def image_key(sha256: str, length: int) -> list[int]:
    """Cache-key ids of an image's LENGTH positions: derived from its content hash, outside the
    vocabulary, so equal images share cached KV and different ones never do."""
    return [KEY_BASE + int(hashlib.sha256(f"{sha256}:{k}".encode()).hexdigest()[:12], 16)
            for k in range(length)]


def spans_of(ids: list[int], token: int) -> list[tuple[int, int]]:
    """[start, end) of each run of TOKEN in IDS."""
    spans: list[tuple[int, int]] = []
    for pos, t in enumerate(ids):
        if t != token:
            continue
        if spans and spans[-1][1] == pos:
            spans[-1] = (spans[-1][0], pos + 1)
        else:
            spans.append((pos, pos + 1))
    return spans


def render_images(tokenizer: Any, processor: Any, image_token: int, job: Generate
                  ) -> tuple[VisionInput, bool]:
    """The prompt of JOB (messages with image placeholders, and its images) and whether the
    template opened a think block; PromptError when it cannot be rendered."""
    from mlx_vlm.utils import prepare_inputs
    from PIL import Image

    if job.messages is None:
        raise PromptError("images can only be sent in chat messages")
    messages, count = _messages(job.messages)
    if count != len(job.images):
        raise PromptError(f"the messages hold {count} image parts but {len(job.images)} images "
                          "came with them")
    kwargs = {k: v for k, v in job.chat_template_kwargs.items() if k in ALLOWED_TEMPLATE_KWARGS}
    add_gen = bool(kwargs.pop("add_generation_prompt", True))
    try:
        text = tokenizer.apply_chat_template(messages, tools=job.tools or None,
                                             add_generation_prompt=add_gen, tokenize=False,
                                             **kwargs)
    except Exception as exc:  # template errors are the request's fault
        raise PromptError(f"chat template could not render these messages: {exc}") from exc
    text += job.assistant_prefix
    try:
        images = [Image.open(io.BytesIO(i.data)).convert("RGB") for i in job.images]
    except Exception as exc:  # the gateway checked them: this is unexpected, but the request's
        raise PromptError(f"an image could not be decoded: {exc}") from exc
    try:
        inputs = prepare_inputs(processor, images=images, prompts=text)  # type: ignore[no-untyped-call]
    except Exception as exc:  # e.g. an image token typed as text: more slots than images
        raise PromptError(f"the model's processor refused this prompt and its images: {exc}"
                          ) from exc
    ids = [int(t) for t in np.array(inputs["input_ids"]).reshape(-1)]
    pixels = {k: np.array(v) for k, v in inputs.items()
              if k not in ("input_ids", "attention_mask") and v is not None}
    spans = spans_of(ids, image_token)
    if len(spans) != len(job.images):
        raise PromptError(f"the prompt holds {len(spans)} image spans for {len(job.images)} "
                          "images (an image placeholder typed as text?)")
    key = list(ids)
    for (start, end), image in zip(spans, job.images, strict=True):
        key[start:end] = image_key(image.sha256, end - start)
    return VisionInput(ids, pixels, spans, key), opens_think(text)
