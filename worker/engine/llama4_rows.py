"""Llama 4's forward over paged rows at different positions (mlx_lm.models.llama4).

mlx-lm's llama4 builds its chunked-attention mask from one scalar offset (``mx.arange(start,
offset + L)``) and its NoPE layers' query temperature from the same scalar; a batch of paged
rows has one offset per row (an array). With ``PagedView`` caches, the model call here takes the
chunked mask from the batch (``PagedView.make_mask(chunk_size=...)``: each query attends the
keys of its own chunk, up to itself), and the NoPE attention scales each row's queries by its
own positions; everything else runs mlx-lm's code. Other caches run mlx-lm's calls unchanged.
"""

from __future__ import annotations

import sys
from typing import Any

import mlx.core as mx

from worker.kv.paged_batch import PagedView

_originals: dict[str, Any] = {}


def install() -> None:
    """Route the loaded llama4 module's model and attention calls through the paged forms."""
    module = sys.modules.get("mlx_lm.models.llama4")
    if module is None or "model" in _originals:
        return
    _originals["model"] = module.LlamaModel.__call__
    _originals["attention"] = module.Attention.__call__
    _originals["create_attention_mask"] = module.create_attention_mask
    module.LlamaModel.__call__ = _model_call
    module.Attention.__call__ = _attention_call


def _model_call(self: Any, inputs: mx.array, cache: Any = None) -> mx.array:
    """LlamaModel.__call__; over paged caches, the chunked mask of each row's positions."""
    if cache is None or not isinstance(cache[0], PagedView):
        return _originals["model"](self, inputs, cache)  # type: ignore[no-any-return]
    h = self.embed_tokens(inputs)
    n = h.shape[1]
    chunk_mask = cache[0].make_mask(n, chunk_size=self.attention_chunk_size)
    global_mask = _originals["create_attention_mask"](h, cache[3])
    for idx, (layer, c) in enumerate(zip(self.layers, cache, strict=True)):
        h = layer(h, chunk_mask if (idx + 1) % 4 != 0 else global_mask, cache=c)
    return self.norm(h)  # type: ignore[no-any-return]


def _attention_call(self: Any, x: mx.array, mask: Any = None, cache: Any = None) -> mx.array:
    """Attention.__call__; rows at different offsets get their own NoPE temperatures."""
    if not isinstance(cache, PagedView) or isinstance(cache.offset, int):
        return _originals["attention"](self, x, mask, cache)  # type: ignore[no-any-return]
    from mlx_lm.models.base import scaled_dot_product_attention  # the routed one, installed

    module = sys.modules["mlx_lm.models.llama4"]
    sdpa = getattr(module, "scaled_dot_product_attention", scaled_dot_product_attention)
    b, n, _ = x.shape
    queries, keys, values = self.q_proj(x), self.k_proj(x), self.v_proj(x)
    queries = queries.reshape(b, n, self.n_heads, -1).transpose(0, 2, 1, 3)
    keys = keys.reshape(b, n, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
    values = values.reshape(b, n, self.n_kv_heads, -1).transpose(0, 2, 1, 3)
    offset = cache.offset  # (B,)
    if self.use_rope:
        queries = self.rope(queries, offset=offset)
        keys = self.rope(keys, offset=offset)
    if self.use_qk_norm:
        queries = mx.fast.rms_norm(queries, weight=None, eps=1e-6)
        keys = mx.fast.rms_norm(keys, weight=None, eps=1e-6)
    if self.attn_temperature_tuning and not self.use_rope:
        pos = offset[:, None] + mx.arange(1, n + 1)  # (B, n): each row's positions + 1
        scales = mx.log(mx.floor(pos / self.floor_scale) + 1.0) * self.attn_scale + 1.0
        queries = (queries * scales[:, None, :, None]).astype(queries.dtype)
    keys, values = cache.update_and_fetch(keys, values)
    out = sdpa(queries, keys, values, cache=cache, scale=self.scale, mask=mask)
    return self.o_proj(out.transpose(0, 2, 1, 3).reshape(b, n, -1))  # type: ignore[no-any-return]
