"""Calibrate the K8V4 centers: each layer's mean key and value per KV head on a fixed text."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from worker.kv.paged_kv import PagedKVStore

CALIBRATION_TEXT = (
    "Once upon a time, in a small town by the sea, there lived an old clockmaker named Ada. "
    "Every morning she opened her shop at eight, wound forty clocks, and drank two cups of tea. "
    "One day a boy asked her: \"Why do you keep so many clocks?\" She smiled and said, "
    "\"Because each one tells a different story.\"\n\n"
    "Q: What is 12 + 30? A: 42.\n"
    "def add(a, b):\n    return a + b\n\n"
    "The weather in Paris today is sunny, 21 degrees, with a light wind from the west. "
    "Tomorrow it will rain in the morning and clear up by the evening."
)


class _Recorder(KVCache):
    """A plain KV cache that also keeps what it was given."""

    start_position = 0  # llama4 reads these of its chunked caches

    def maybe_trim_front(self) -> None:
        """Nothing to trim: the calibration text is one forward."""

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        self.seen = (keys, values)
        result: tuple[mx.array, mx.array] = super().update_and_fetch(  # type: ignore[no-untyped-call]
            keys, values)
        return result


def calibrate_centers(model: Any, tokenizer: Any, store: PagedKVStore) -> None:
    """Run the calibration text once and set the store's per-layer key and value means."""
    ids = list(tokenizer.encode(CALIBRATION_TEXT))[:256] or [0]
    caches = [_Recorder() for _ in range(store.fmt.num_layers)]  # type: ignore[no-untyped-call]
    layers: list[Any] = list(caches)
    if store.states is not None:  # a hybrid model: its recurrent layers keep mlx-lm's caches
        made = model.make_cache()
        for i in store.states.layout.layers:
            layers.insert(i, made[i])
    model(mx.array([ids]), cache=layers)
    keys = [c.seen[0][0].astype(mx.float32).mean(axis=1) for c in caches]  # (H, D) per layer
    values = [c.seen[1][0].astype(mx.float32).mean(axis=1) for c in caches]
    store.set_centers(keys, values)
