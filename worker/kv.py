"""Per-request KV storage and the batched cache view that mlx-lm attention layers write through."""

from __future__ import annotations

from typing import Any

import mlx.core as mx

_GROW = 256


class RequestKV:
    """The keys and values of one sequence, for every layer, grown in fixed steps."""

    def __init__(self, num_layers: int) -> None:
        self.keys: list[mx.array | None] = [None] * num_layers
        self.values: list[mx.array | None] = [None] * num_layers
        self.length = 0

    def write(self, layer: int, start: int, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array]:
        """Store k/v (1, H, N, D) at positions start.. and return the valid prefix of the layer."""
        n = k.shape[2]
        end = start + n
        buf_k, buf_v = self.keys[layer], self.values[layer]
        if buf_k is None or buf_v is None or buf_k.shape[2] < end:
            cap = ((end + _GROW - 1) // _GROW) * _GROW
            new_k = mx.zeros((1, k.shape[1], cap, k.shape[3]), dtype=k.dtype)
            new_v = mx.zeros((1, v.shape[1], cap, v.shape[3]), dtype=v.dtype)
            if buf_k is not None and buf_v is not None and start:
                new_k[..., :start, :] = buf_k[..., :start, :]
                new_v[..., :start, :] = buf_v[..., :start, :]
            buf_k, buf_v = new_k, new_v
        buf_k[..., start:end, :] = k
        buf_v[..., start:end, :] = v
        self.keys[layer], self.values[layer] = buf_k, buf_v
        return buf_k[..., :end, :], buf_v[..., :end, :]

    def nbytes(self) -> int:
        """Bytes held by this sequence's buffers."""
        return sum(a.nbytes for a in (*self.keys, *self.values) if a is not None)


class BatchView:
    """One layer's cache as mlx-lm attention sees it, for a batch of rows fed N new tokens each.

    Rows are left-padded to a common length so that the new tokens line up; the mask hides the
    padding. ``offset`` gives each row's position so RoPE is applied per row.
    """

    def __init__(self, layer: int, rows: list[RequestKV], starts: list[int]) -> None:
        self.layer = layer
        self.rows = rows
        self.starts = starts
        self.offset: Any = starts[0] if len(rows) == 1 else mx.array(starts)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Write the new keys/values of every row and return the padded batch of all of them."""
        if len(self.rows) == 1:
            return self.rows[0].write(self.layer, self.starts[0], keys, values)
        n = keys.shape[2]
        total = max(self.starts) + n
        ks, vs = [], []
        for b, (row, start) in enumerate(zip(self.rows, self.starts, strict=True)):
            k, v = row.write(self.layer, start, keys[b : b + 1], values[b : b + 1])
            pad = total - (start + n)
            if pad:
                zeros = mx.zeros((1, k.shape[1], pad, k.shape[3]), dtype=k.dtype)
                k = mx.concatenate([zeros, k], axis=2)
                v = mx.concatenate([zeros, v], axis=2)
            ks.append(k)
            vs.append(v)
        return mx.concatenate(ks, axis=0), mx.concatenate(vs, axis=0)

    def make_mask(
        self, n: int, return_array: bool = False, window_size: int | None = None
    ) -> Any:
        """Causal mask over each row's own keys (padding hidden), optionally windowed."""
        if len(self.rows) == 1 and window_size is None and not return_array:
            return None if n == 1 else "causal"
        total = max(self.starts) + n
        starts = mx.array(self.starts)[:, None, None, None]
        pads = (total - n) - starts
        q_pos = mx.arange(n)[None, None, :, None] + starts  # absolute position of each query
        k_idx = mx.arange(total)[None, None, None, :]
        k_pos = k_idx - pads
        mask = (k_pos >= 0) & (k_pos <= q_pos)
        if window_size is not None:
            mask = mask & (k_pos > q_pos - window_size)
        return mask

    @property
    def state(self) -> Any:
        """Unused by inference; present for mlx-lm code that inspects caches."""
        return ()

    def is_trimmable(self) -> bool:
        """Our caches are never trimmed by mlx-lm."""
        return False
