"""An mlx-vlm model seen by the engine as a text model that can also take input embeddings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx
import numpy as np

# mlx-vlm language models whose __call__ is `head(model(inputs, inputs_embeds=..[, position_ids]))`:
# the head runs on last positions only
PLAIN = {"gemma3", "qwen2_vl", "qwen2_5_vl"}
MROPE = {"qwen2_vl", "qwen2_5_vl"}  # 3-axis rotary positions (time, height, width) for image tokens


class VisionLM:
    """The language model of an mlx-vlm model, with its vision side (tower, projector, merge).

    Called like an mlx-lm model: ``lm(tokens, cache=...)`` returns logits (B, L, V);
    ``inputs_embeds`` (B, L, D) replaces the token embeddings where a prompt holds images.
    """

    def __init__(self, vlm: Any) -> None:
        self.vlm = vlm
        self.lm = vlm.language_model
        self.model = self.lm.model  # embed_tokens and layers, where the worker looks for them
        self.model_type = str(getattr(vlm.config, "model_type", ""))
        self.mrope = self.model_type in MROPE  # every call then gets explicit positions
        config = vlm.config
        token = getattr(config, "image_token_index", None)
        self.image_token_id = int(token if token is not None else config.image_token_id)

    @property
    def layers(self) -> list[Any]:
        """The language model's decoder layers."""
        return list(self.lm.layers)

    def make_cache(self) -> list[Any]:
        """mlx-vlm's own cache objects (to check the layers use plain attention KV), if it says."""
        maker = getattr(self.lm, "make_cache", None)
        return list(maker()) if maker is not None else []

    def parameters(self) -> Any:
        """Every parameter of the model (the dtype is read from them)."""
        return self.vlm.parameters()

    def modules(self) -> list[Any]:
        """Every module of the model (worker/cpu's kernels wrap some of them)."""
        return list(self.vlm.modules())

    def named_modules(self) -> list[tuple[str, Any]]:
        """Every module of the model with its path."""
        return list(self.vlm.named_modules())

    def __call__(self, tokens: mx.array, cache: Any = None,
                 inputs_embeds: mx.array | None = None) -> mx.array:
        """Logits (B, L, V) for TOKENS (or INPUTS_EMBEDS) through the cache objects."""
        out = self.lm(tokens, inputs_embeds=inputs_embeds, cache=cache)
        logits: mx.array = out.logits if hasattr(out, "logits") else out
        return logits

    def split(self) -> tuple[Callable[..., mx.array], Callable[[mx.array], mx.array]] | None:
        """(hidden states of tokens/embeddings, head) when the head can run on chosen rows."""
        if self.model_type not in PLAIN:
            return None
        inner = self.lm.model
        head = getattr(self.lm, "lm_head", None) or inner.embed_tokens.as_linear

        def hidden(tokens: mx.array, cache: Any, inputs_embeds: mx.array | None = None,
                   positions: mx.array | None = None) -> mx.array:
            if positions is not None:
                return inner(tokens, inputs_embeds=inputs_embeds, cache=cache,  # type: ignore[no-any-return]
                             position_ids=positions)
            return inner(tokens, inputs_embeds=inputs_embeds, cache=cache)  # type: ignore[no-any-return]

        return hidden, head

    def rope_positions(self, ids: list[int], pixels: dict[str, Any]) -> tuple[np.ndarray, int]:
        """M-RoPE: the prompt's (3, L) positions (image tokens on a time/height/width grid) and
        the offset of every later position from its index (mlx-vlm's get_rope_index)."""
        grid = pixels.get("image_grid_thw")
        input_ids = mx.array([ids])
        positions, delta = self.lm.get_rope_index(
            input_ids, mx.array(grid) if grid is not None else None, None,
            mx.ones_like(input_ids))
        return np.array(positions).reshape(3, -1), int(np.array(delta).reshape(-1)[0])

    def embed_tokens(self, ids: mx.array) -> mx.array:
        """Token embeddings as the model's get_input_embeddings makes them for text."""
        return self.vlm.get_input_embeddings(ids, None).inputs_embeds  # type: ignore[no-any-return]

    def prompt_embeddings(self, ids: list[int], pixels: dict[str, Any]) -> mx.array:
        """The prompt's input embeddings (L, D): text embedded, each image's placeholder tokens
        replaced by its vision-tower features (mlx-vlm's own merge); the tower runs once per image."""
        input_ids = mx.array([ids])
        arrays = {k: mx.array(v) for k, v in pixels.items()}
        pixel_values = arrays.pop("pixel_values")
        out = self.vlm.get_input_embeddings(input_ids, pixel_values,
                                            mask=mx.ones_like(input_ids), **arrays)
        embeds: mx.array = out.inputs_embeds[0]
        mx.eval(embeds)
        return embeds
