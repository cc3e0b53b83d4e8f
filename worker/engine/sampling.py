"""Token selection for a batch of rows, each with its own sampling parameters."""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx

from protocol.messages import SamplingParams
from worker.cpu import softmax as cpu_softmax


@dataclass
class RowSampler:
    """Per-request sampling state: parameters, seeded key and token counts for penalties."""

    params: SamplingParams
    key: mx.array | None = None
    counts: dict[int, int] = field(default_factory=dict)
    bias_ids: mx.array | None = None
    bias_values: mx.array | None = None

    def __post_init__(self) -> None:
        if self.params.seed is not None:
            self.key = mx.random.key(seed_key(self.params.seed))
        if self.params.logit_bias:
            self.bias_ids = mx.array(list(self.params.logit_bias), dtype=mx.int32)
            self.bias_values = mx.array(list(self.params.logit_bias.values()), dtype=mx.float32)

    @property
    def greedy(self) -> bool:
        """True when this row always takes the most likely token."""
        return self.params.temperature <= 0.0 or self.params.top_k == 1

    @property
    def penalized(self) -> bool:
        """True when any repetition/presence/frequency penalty applies."""
        p = self.params
        return p.repetition_penalty != 1.0 or p.presence_penalty != 0.0 or p.frequency_penalty != 0.0

    def observe(self, token: int) -> None:
        """Count a generated token for the penalties."""
        if self.penalized:
            self.counts[token] = self.counts.get(token, 0) + 1


def seed_key(seed: int) -> int:
    """Map any int64 (or uint64) seed to the uint64 MLX's key takes; the same seed, the same key."""
    return seed & 0xFFFF_FFFF_FFFF_FFFF


def _apply_bias(logits: mx.array, rows: list[RowSampler]) -> mx.array:
    """Add each row's logit_bias to its logits with one scatter-add over the batch."""
    at, ids, values = [], [], []
    for b, r in enumerate(rows):
        if r.bias_ids is not None and r.bias_values is not None:
            at.append(mx.full(r.bias_ids.shape, b, dtype=mx.int32))
            ids.append(r.bias_ids)
            values.append(r.bias_values)
    return logits.at[mx.concatenate(at), mx.concatenate(ids)].add(mx.concatenate(values))


def _apply_penalties(logits: mx.array, rows: list[RowSampler]) -> mx.array:
    out = []
    for b, row in enumerate(rows):
        x = logits[b]
        if row.penalized and row.counts:
            p = row.params
            ids = mx.array(list(row.counts))
            cnt = mx.array(list(row.counts.values()), dtype=x.dtype)
            sel = x[ids]
            if p.repetition_penalty != 1.0:
                sel = mx.where(sel > 0, sel / p.repetition_penalty, sel * p.repetition_penalty)
            sel = sel - p.presence_penalty - p.frequency_penalty * cnt
            x[ids] = sel
        out.append(x)
    return mx.stack(out)


def _filter(logits: mx.array, rows: list[RowSampler]) -> mx.array:
    """Mask tokens outside each row's top-k / top-p / min-p set (logits already temperature-scaled)."""
    vocab = logits.shape[-1]
    need_sort = any(r.params.top_k > 0 or r.params.top_p < 1.0 for r in rows)
    neg = mx.array(-float("inf"), dtype=logits.dtype)
    if need_sort:
        order = mx.argsort(-logits, axis=-1)
        sorted_logits = mx.take_along_axis(logits, order, axis=-1)
        ks = mx.array([r.params.top_k if 0 < r.params.top_k < vocab else vocab for r in rows])
        kth = mx.take_along_axis(sorted_logits, (ks - 1)[:, None], axis=-1)
        keep_sorted = sorted_logits >= kth
        probs = cpu_softmax.softmax(sorted_logits)
        ps = mx.array([r.params.top_p for r in rows])[:, None]
        cum = mx.cumsum(probs, axis=-1)
        first = mx.arange(vocab) == 0  # the most likely token always stays (top_p=0: greedy)
        keep_sorted = keep_sorted & (((cum - probs) < ps) | first)
        inverse = mx.argsort(order, axis=-1)
        keep = mx.take_along_axis(keep_sorted, inverse, axis=-1)
        logits = mx.where(keep, logits, neg)
    if any(r.params.min_p > 0.0 for r in rows):
        probs = cpu_softmax.softmax(logits)
        top = probs.max(axis=-1, keepdims=True)
        mins = mx.array([r.params.min_p for r in rows])[:, None]
        logits = mx.where(probs >= top * mins, logits, neg)
    return logits


def prepare(logits: mx.array, rows: list[RowSampler]) -> tuple[mx.array, mx.array | None]:
    """Logits (B, V) after each row's bias and penalties, and their log-probs if any row asks."""
    logits = logits.astype(mx.float32)
    if any(r.bias_ids is not None for r in rows):
        logits = _apply_bias(logits, rows)
    if any(r.penalized for r in rows):
        logits = _apply_penalties(logits, rows)
    logprobs = None
    if any(r.params.logprobs for r in rows):
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    return logits, logprobs


def scaled(logits: mx.array, rows: list[RowSampler]) -> mx.array:
    """Prepared logits divided by each row's temperature, outside its top-k/top-p/min-p set -inf."""
    temps = mx.array([max(r.params.temperature, 1e-5) for r in rows])[:, None]
    return _filter(logits / temps, rows)


def draw(prepared: mx.array, rows: list[RowSampler]) -> tuple[mx.array, mx.array | None]:
    """Each row's token from PREPARED logits: argmax for greedy rows, else an unseeded draw from
    its scaled logits, which are returned too (None when every row is greedy)."""
    greedy_tokens = mx.argmax(prepared, axis=-1)
    if all(r.greedy for r in rows):
        return greedy_tokens, None
    scaled_logits = scaled(prepared, rows)
    sampled = mx.random.categorical(scaled_logits, axis=-1)
    greedy_mask = mx.array([r.greedy for r in rows])
    return mx.where(greedy_mask, greedy_tokens, sampled), scaled_logits


def sample(logits: mx.array, rows: list[RowSampler]) -> tuple[mx.array, mx.array | None]:
    """Pick one token per row from logits (B, V); also return log-probs when any row asks."""
    logits, logprobs = prepare(logits, rows)
    tokens, scaled_logits = draw(logits, rows)
    seeded = [b for b, r in enumerate(rows) if r.key is not None and not r.greedy]
    if seeded and scaled_logits is not None:  # a seeded row draws from its own random stream
        parts = []
        for b, row in enumerate(rows):
            if b in seeded and row.key is not None:
                row.key, sub = mx.random.split(row.key)
                parts.append(mx.random.categorical(scaled_logits[b], key=sub)[None])
            else:
                parts.append(tokens[b : b + 1])
        tokens = mx.concatenate(parts)
    return tokens, logprobs
