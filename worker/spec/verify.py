"""Exact acceptance of draft tokens: greedy match, or rejection sampling against the target."""

from __future__ import annotations

import mlx.core as mx

from worker.engine.sampling import RowSampler, prepare, scaled


def verify(logits: mx.array, samplers: list[RowSampler], drafts: list[int] | mx.array,
           qs: list[mx.array | None] | None = None) -> tuple[mx.array, mx.array, mx.array | None]:
    """Judge every fed position of the speculating rows at once (nothing is evaluated).

    LOGITS (M, V) are the target's logits at each position m, SAMPLERS[m] its row's sampler,
    DRAFTS[m] the draft token proposed to follow position m (-1 at a row's last position; host
    ints or an unevaluated array).
    QS[m] is the draft distribution that token was sampled from (None: one-hot, a
    deterministic drafter). Returns (accept (M,), token (M,), log-probs or None): position m
    keeps its draft when accept[m]; at a row's first rejected (or last) position the row takes
    token[m] instead: the target's argmax for greedy rows; for sampled rows a draw from the
    normalized residual max(p - q, 0) (p itself where nothing was drafted). Accepting with
    probability min(1, p/q) and resampling from the residual makes every kept token
    distributed exactly as the target's p (after the row's bias, temperature and filters).
    """
    prepared, logprobs = prepare(logits, samplers)
    greedy_tok = mx.argmax(prepared, axis=-1)
    proposed = drafts if isinstance(drafts, mx.array) else mx.array(drafts, dtype=mx.int32)
    d = mx.maximum(proposed, 0)
    has = proposed >= 0
    greedy_accept = has & (greedy_tok == d)
    if all(s.greedy for s in samplers):
        return greedy_accept, greedy_tok, logprobs
    vocab = prepared.shape[-1]
    p = mx.softmax(scaled(prepared, samplers), axis=-1)
    q = _draft_probs(d, has, qs, vocab)
    pd = mx.take_along_axis(p, d[:, None], axis=-1)[:, 0]
    qd = mx.take_along_axis(q, d[:, None], axis=-1)[:, 0]
    u = mx.random.uniform(shape=pd.shape)
    sampled_accept = has & (qd > 0) & (u * qd < pd)
    residual = mx.maximum(p - q, 0.0)
    residual = mx.where(residual.sum(axis=-1, keepdims=True) > 0, residual, p)
    sampled_tok = mx.random.categorical(mx.log(residual), axis=-1)
    is_greedy = mx.array([s.greedy for s in samplers])
    return (mx.where(is_greedy, greedy_accept, sampled_accept),
            mx.where(is_greedy, greedy_tok, sampled_tok), logprobs)


def _draft_probs(d: mx.array, has: mx.array, qs: list[mx.array | None] | None,
                 vocab: int) -> mx.array:
    """(M, V) draft distributions: given ones (fit to V columns), else one-hot on the draft."""
    onehot = (mx.arange(vocab)[None, :] == d[:, None]) & has[:, None]
    q = onehot.astype(mx.float32)
    if qs is None or all(x is None for x in qs):
        return q
    rows = []
    for m, x in enumerate(qs):
        if x is None:
            rows.append(q[m])
            continue
        x = x.astype(mx.float32).reshape(-1)
        if x.shape[0] < vocab:
            x = mx.concatenate([x, mx.zeros((vocab - x.shape[0],), dtype=mx.float32)])
        rows.append(x[:vocab])
    return mx.stack(rows)
