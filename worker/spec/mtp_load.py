"""Load a checkpoint's multi-token-prediction (next-n) layer, which mlx-lm's sanitize drops.

GLM-4.5 (``glm4_moe``) and DeepSeek-V3 store ``num_nextn_predict_layers`` extra layers as
``model.layers.{num_hidden_layers + i}``: ``enorm``, ``hnorm``, ``eh_proj``, ``shared_head``
(``norm``, optionally ``head``), optionally ``embed_tokens``, plus one full decoder layer. The
layer predicts the token after next: at position i it reads the target's hidden state h_i and
the embedding of token i+1 (see worker/spec/mtp.py).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn
from mlx_lm.models.base import create_attention_mask

from worker.kv.pages import completer
from worker.kv.rows import writer
from worker.model.fetch import CannotLoad

nn: Any = mlx.nn  # mlx.nn ships no type information mypy can follow

OWN = ("enorm.", "hnorm.", "eh_proj.", "shared_head.", "embed_tokens.")  # not the decoder layer's
EXPERT = re.compile(r"^mlp\.experts\.(\d+)\.(\w+)\.(weight|scales|biases)$")
NEXTN_TYPES = ("glm4_moe",)  # architectures with next-n layers whose attention we serve


class NextN(nn.Module):  # type: ignore[misc]
    """One next-n layer: [enorm(embed), hnorm(hidden)] -> eh_proj -> decoder layer."""

    def __init__(self, args: Any, block: Any, own_head: bool, own_embed: bool) -> None:
        super().__init__()
        dim, eps = args.hidden_size, args.rms_norm_eps
        self.enorm = nn.RMSNorm(dim, eps=eps)
        self.hnorm = nn.RMSNorm(dim, eps=eps)
        self.eh_proj = nn.Linear(2 * dim, dim, bias=False)
        self.block = block
        self.shared_head = nn.Module()
        self.shared_head.norm = nn.RMSNorm(dim, eps=eps)
        if own_head:
            self.shared_head.head = nn.Linear(dim, args.vocab_size, bias=False)
        if own_embed:
            self.embed_tokens = nn.Embedding(args.vocab_size, dim)

    def __call__(self, embeds: mx.array, hidden: mx.array, cache: Any) -> mx.array:
        """The layer's output hidden states (B, n, D) for embeddings and target hidden states."""
        x = self.eh_proj(mx.concatenate([self.enorm(embeds), self.hnorm(hidden)], axis=-1))
        return self.block(x, create_attention_mask(x, cache), cache)  # type: ignore[no-any-return]


class MTPHead:
    """A loaded next-n layer with the target's embedding and head where it has none of its own."""

    def __init__(self, layer: NextN, target: Any) -> None:
        self.layer = layer
        self.embed = getattr(layer, "embed_tokens", None) or target.model.embed_tokens
        head = getattr(layer.shared_head, "head", None)
        self.head = head if head is not None else _target_head(target)

    def hidden(self, tokens: mx.array, hidden: mx.array, positions: mx.array, cache: Any) -> mx.array:
        """Output hidden states for TOKENS (B, n) after HIDDEN (B, n, D) at absolute POSITIONS.

        The embedding at absolute position 0 is zeroed, as vLLM's MTP layers do.
        """
        embeds = self.embed(tokens) * (positions != 0)[..., None].astype(hidden.dtype)
        return self.layer(embeds, hidden, cache)

    def logits(self, hidden: mx.array) -> mx.array:
        """Next-next-token logits from the layer's output hidden states."""
        return self.head(self.layer.shared_head.norm(hidden))  # type: ignore[no-any-return]


def _target_head(target: Any) -> Any:
    if getattr(target.args, "tie_word_embeddings", False):
        return target.model.embed_tokens.as_linear
    return target.lm_head


def nextn_weights(path: Path, config: dict[str, Any], index: int = 0) -> dict[str, mx.array]:
    """The next-n layer INDEX's weights in the checkpoint at PATH, named inside the layer."""
    prefix = f"model.layers.{int(config['num_hidden_layers']) + index}."
    files = sorted(path.glob("*.safetensors"))
    index_file = path / "model.safetensors.index.json"
    if index_file.exists():  # read only the shards that hold the layer
        weight_map = json.loads(index_file.read_text()).get("weight_map", {})
        names = {f for k, f in weight_map.items() if k.startswith(prefix)}
        files = [path / f for f in sorted(names)]
    out: dict[str, mx.array] = {}
    for f in files:
        loaded = mx.load(str(f))
        assert isinstance(loaded, dict)
        out.update((k[len(prefix):], v) for k, v in loaded.items() if k.startswith(prefix))
    return out


def _rename(weights: dict[str, mx.array]) -> dict[str, mx.array]:
    """Checkpoint names -> NextN's: decoder weights under ``block.``, experts stacked."""
    out: dict[str, mx.array] = {}
    experts: dict[tuple[str, str], dict[int, mx.array]] = {}
    for k, v in weights.items():
        m = EXPERT.match(k)
        if m:
            experts.setdefault((m.group(2), m.group(3)), {})[int(m.group(1))] = v
        else:
            out[k if k.startswith(OWN) else "block." + k] = v
    for (proj, kind), per in experts.items():
        out[f"block.mlp.switch_mlp.{proj}.{kind}"] = mx.stack([per[e] for e in sorted(per)])
    return out


def load_mtp(target: Any, path: Path, config: dict[str, Any]) -> MTPHead:
    """The target's first next-n layer from the checkpoint at PATH, or CannotLoad saying why."""
    model = str(path)
    text = config.get("text_config", config)
    kind = str(text.get("model_type", config.get("model_type", "")))
    layers = int(text.get("num_nextn_predict_layers") or 0)
    how = "serve with --speculative ngram or --speculative draft"
    if kind not in NEXTN_TYPES:
        raise CannotLoad(model, f"--speculative mtp supports next-n layers of {', '.join(NEXTN_TYPES)} "
                         f"models, not {kind or 'this model'}", how)
    weights = nextn_weights(path, text) if layers > 0 else {}
    if not weights:
        raise CannotLoad(model, "--speculative mtp needs multi-token-prediction layers, and "
                         "this checkpoint has none (quantized conversions drop them)", how)
    weights = _rename(weights)
    from worker.engine.dtype import model_dtype

    dtype = model_dtype(target)
    module = sys.modules[type(target).__module__]
    block = module.DecoderLayer(target.args, int(text["num_hidden_layers"]))
    layer = NextN(target.args, block, "shared_head.head.weight" in weights,
                  "embed_tokens.weight" in weights)
    quant = config.get("quantization")
    if quant and any(k.endswith(".scales") for k in weights):
        nn.quantize(layer, group_size=quant["group_size"], bits=quant["bits"],
                    class_predicate=lambda p, _m: f"{p}.scales" in weights)
    weights = {k: v.astype(dtype) if mx.issubdtype(v.dtype, mx.floating)
               and "e_score_correction_bias" not in k else v for k, v in weights.items()}
    try:
        layer.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise CannotLoad(model, f"its next-n layer does not match the architecture ({exc})",
                         how) from exc
    mx.eval(layer.parameters())
    return MTPHead(layer, target)


def mtp_drafter(loaded: Any, *, max_batch: int, context_length: int, page_size: int = 16,
                memory: str = "256MiB") -> Any:
    """An MTPDrafter over the loaded target's next-n layer, its KV in its own full-precision pages."""
    from worker.engine.dtype import model_dtype
    from worker.kv.paged_kv import KVFormat, PagedKVStore
    from worker.kv.setup import parse_memory
    from worker.spec.mtp import MTPDrafter

    model: Any = getattr(loaded, "model", None)
    path = Path(str(getattr(loaded, "path", "")))
    config = getattr(loaded, "config", None)
    if config is None and (path / "config.json").is_file():
        config = json.loads((path / "config.json").read_text())
    head = load_mtp(model, path, config or {})
    dtype = model_dtype(model)
    args = model.args
    dim = getattr(args, "head_dim", None) or args.hidden_size // args.num_attention_heads
    fmt = KVFormat(1, args.num_key_value_heads, dim, page_size, dtype, "none")
    per_row = -(-context_length // page_size) + 1
    budget = parse_memory(memory) // fmt.bytes_per_page()
    store = PagedKVStore(fmt, max(min(max_batch * per_row + 1, budget), per_row + 1),
                         put_rows=writer(), complete=completer())
    return MTPDrafter(head, store, dtype)
