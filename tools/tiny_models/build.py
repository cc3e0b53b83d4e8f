"""Build a tiny random-weight model folder for one architecture, on the demo tokenizer.

    python -m tools.tiny_models.build qwen3_5 /tmp/tiny-qwen3_5 [--bits 4] [--seed 0]

The folder loads with ``mlx_lm.load`` and ``rapid-mlx serve DIR``; its text is garbage, but it
is the same garbage everywhere, which is what token-identical tests need.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

from tools.tiny_models.configs import CONFIGS, config_for
from worker.model.embedded import embedded_model_path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "generation_config.json", "chat_template.jinja")


def _with_vocab(config: dict[str, Any], vocab: int, eos: int) -> dict[str, Any]:
    """CONFIG with the demo tokenizer's vocabulary and end token, in text_config too."""
    config = {**config, "vocab_size": vocab, "eos_token_id": eos}
    if "text_config" in config:
        config["text_config"] = {**config["text_config"], "vocab_size": vocab,
                                 "eos_token_id": eos}
    return config


def build(model_type: str, dest: Path, *, bits: int | None = None, seed: int = 0,
          overrides: dict[str, Any] | None = None) -> Path:
    """Write MODEL_TYPE's tiny model (random weights from SEED; BITS: quantized) to DEST."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten, tree_map
    from mlx_lm.utils import _get_classes, save_config

    src = embedded_model_path()
    demo = json.loads((src / "config.json").read_text())
    config = _with_vocab({**config_for(model_type), **(overrides or {})},
                         demo["vocab_size"], demo["eos_token_id"])
    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    # float32 weights at a scale that keeps activations finite over a few layers
    model.update(tree_map(lambda p: p.astype(mx.float32), model.parameters()))
    flat: Any = tree_flatten(model.parameters())
    sinks = [(k, v) for k, v in flat if k.endswith(".sinks")]
    if sinks:  # attention sinks start at zero: random logits, so that they matter
        model.load_weights([(k, mx.random.normal(v.shape)) for k, v in sinks], strict=False)
    if bits is not None:
        config["quantization"] = {"group_size": 32, "bits": bits}
        nn.quantize(model, group_size=32, bits=bits,  # type: ignore[attr-defined]
                    class_predicate=lambda _, m: hasattr(m, "to_quantized")
                    and m.weight.shape[-1] % 32 == 0)
    dest.mkdir(parents=True, exist_ok=True)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(dest / "model.safetensors"), weights)
    save_config(config, dest / "config.json")
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    return dest


def main() -> None:
    """Command line: build one tiny model."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_type", choices=sorted(CONFIGS))
    parser.add_argument("dest", type=Path)
    parser.add_argument("--bits", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(build(args.model_type, args.dest, bits=args.bits, seed=args.seed))


if __name__ == "__main__":
    main()
