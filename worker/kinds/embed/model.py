"""One sentence encoder loaded by mlx-embeddings, with the pooling its folder asks for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from protocol import messages as m
from worker.kinds.embed.fast_ops import on_cpu, swap_gelu
from worker.kinds.embed.inputs import InputError
from worker.kinds.embed.pooling import normalize, pool
from worker.kinds.embed.st_config import BadFolder, EmbedConfig, read_embed_config
from worker.model.fetch import CannotLoad


class EmbedModel:
    """Token ids and masks in, one float32 vector per row out."""

    def __init__(self, model: Any, tokenizer: Any, cfg: EmbedConfig, config: dict[str, Any],
                 dimensions: int, vocab_size: int, dtype: str) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.config = config
        self.dimensions = dimensions
        self.vocab_size = vocab_size
        self.dtype = dtype

    def check_dimensions(self, dims: int) -> None:
        """InputError unless DIMS is 0 (the full size) or a size the model was trained for."""
        if not dims:
            return
        if not self.cfg.dims:
            raise InputError("This model does not support dimensions: it was not trained for "
                             f"truncated embeddings (it gives {self.dimensions} values).",
                             "dimensions")
        if dims not in self.cfg.dims:
            sizes = self.cfg.dims if len(self.cfg.dims) <= 8 else \
                f"{min(self.cfg.dims)} to {max(self.cfg.dims)}"
            raise InputError(f"dimensions must be one of this model's sizes: {sizes}.",
                             "dimensions")

    def embed(self, ids: mx.array, mask: mx.array, dims: list[int]) -> list[np.ndarray]:
        """One float32 vector per row of IDS (MASK marks real tokens); row i cut to dims[i]."""
        out = self.model(ids, attention_mask=mask)
        if self.cfg.dense:  # the model class pools, applies its Dense layers and normalizes
            vecs = out.text_embeds
        else:
            vecs = pool(out.last_hidden_state, mask, self.cfg.pooling).astype(mx.float32)
            if self.cfg.normalize:
                vecs = normalize(vecs)
        vecs = vecs.astype(mx.float32)
        mx.eval(vecs)
        full = np.array(vecs, copy=False)
        return [truncate(full[i], d) if d and d < full.shape[1] else full[i]
                for i, d in enumerate(dims)]

    def facts(self, model: str) -> m.ModelFacts:
        """What Ready tells the gateway about this embedding model."""
        return m.ModelFacts(
            model=model, kind="embed", embedding_dimensions=self.dimensions,
            capabilities=["dimensions"] if self.cfg.dims else [],
            model_type=str(self.config.get("model_type", "")), context_length=self.cfg.max_length,
            vocab_size=self.vocab_size, dtype=self.dtype,
            num_layers=int(self.config.get("num_hidden_layers") or 0))


def load_embed_model(model: str, path: Path, config: dict[str, Any]) -> EmbedModel:
    """Load the folder PATH with mlx-embeddings and its tokenizer; CannotLoad says what is wrong."""
    from mlx_embeddings.utils import load_model
    from transformers import AutoTokenizer

    try:
        cfg = read_embed_config(path, config)
    except BadFolder as exc:
        raise CannotLoad(model, str(exc), "use a sentence-transformers model with mean, cls, "
                         "max or last-token pooling") from exc
    try:
        net = load_model(path)
    except ValueError as exc:  # mlx-embeddings has no class for this model_type
        raise CannotLoad(model, f"mlx-embeddings cannot load it: {exc}",
                         "serve a model whose architecture mlx-embeddings supports") from exc
    except FileNotFoundError as exc:
        raise CannotLoad(model, f"{path} has no model*.safetensors", "convert it first: "
                         "rapid-mlx convert-embeddings SRC DST") from exc
    if on_cpu():
        swap_gelu(net)  # MLX's CPU erf is the slowest part of a BERT forward
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    text: dict[str, Any] = config.get("text_config") or {}
    vocab = int(config.get("vocab_size") or text.get("vocab_size") or len(tokenizer))
    probe = mx.array([[tokenizer.cls_token_id or tokenizer.bos_token_id or 1]], dtype=mx.int32)
    em = EmbedModel(net, tokenizer, cfg, config, 0, vocab, _dtype(net))
    em.dimensions = int(em.embed(probe, mx.ones(probe.shape, dtype=mx.int32), [0])[0].shape[0])
    return em


def truncate(vec: np.ndarray, dims: int) -> np.ndarray:
    """The first DIMS values of VEC, renormalized (a Matryoshka model's smaller vector)."""
    cut = vec[:dims].astype(np.float32)
    return cut / max(float(np.linalg.norm(cut)), 1e-12)


def _dtype(net: Any) -> str:
    from mlx.utils import tree_flatten

    for item in tree_flatten(net.parameters()):
        v = item[1]
        if isinstance(v, mx.array) and mx.issubdtype(v.dtype, mx.floating):
            return str(v.dtype).replace("mlx.core.", "")
    return ""
