"""What the engine feeds a forward besides tokens: image embeddings, M-RoPE positions, chunk groups."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from worker.engine.plan import AtRisk
from worker.engine.request import EngineStats, Request


def embeds(model: Any, stats: EngineStats, risk: AtRisk,
           group: list[tuple[Request, int]]) -> list[mx.array | None] | None:
    """Each row's input embeddings for its chunk when its prompt holds images there.

    The vision tower runs once per request (all its images), at its first chunk that
    reaches an image; a failure there fails that request only (RISK holds it alone).
    """
    if all(r.vision is None for r, _ in group):
        return None
    out: list[mx.array | None] = []
    for r, n in group:
        v = r.vision
        if v is None or (r.embeds is None and r.computed >= v.end) or r.computed >= len(v.ids):
            out.append(None)  # no image ahead (cached past them): its tokens are real
            continue
        if r.embeds is None:
            risk.rows = [r]
            r.embeds = model.prompt_embeddings(v.ids, v.pixels)
            stats.images_encoded += len(v.spans)
        a, b = r.computed, r.computed + n
        part = r.embeds[a : min(b, len(v.ids))]
        if b > len(v.ids):  # recomputing after preemption: generated tokens follow
            extra = model.embed_tokens(mx.array([r.tokens[len(v.ids) : b]]))[0]
            part = mx.concatenate([part, extra.astype(part.dtype)])
        out.append(part)
    return out


def rope(model: Any, rows: list[tuple[Request, int, int]]) -> mx.array | None:
    """(3, B, n) M-RoPE positions of rows fed n tokens from a start (None: not M-RoPE)."""
    if not getattr(model, "mrope", False):
        return None
    n = max(k for _, _, k in rows)
    out = []
    for r, start, _ in rows:
        if r.vision is not None:
            out.append(r.vision.rope(start, n))
        else:
            out.append(np.broadcast_to(np.arange(start, start + n), (3, n)))
    return mx.array(np.stack(out, axis=1))


def given(**kwargs: Any) -> dict[str, Any]:
    """The keyword arguments that are not None (a text model's forward gets none of them)."""
    return {k: v for k, v in kwargs.items() if v is not None}


def group_chunks(chunks: list[tuple[Request, int]]) -> list[list[tuple[Request, int]]]:
    """Batch prompt chunks of similar length into one forward; padding may add at most ~25%."""
    groups: list[list[tuple[Request, int]]] = []
    for r, n in sorted(chunks, key=lambda c: -c[1]):
        group = groups[-1] if groups else None
        if group is not None:
            widest = group[0][1]
            real = sum(k for _, k in group) + n
            if widest * (len(group) + 1) <= 1.25 * real + 16:
                group.append((r, n))
                continue
        groups.append([(r, n)])
    return groups
