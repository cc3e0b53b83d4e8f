"""Build a tiny random-weight model folder for one architecture, on the demo tokenizer.

    python -m tools.tiny_models.build qwen3_5 /tmp/tiny-qwen3_5 [--bits 4] [--seed 0]
    python -m tools.tiny_models.build --all /tmp/tiny   # every config: DIR/<type>, DIR/<type>-4bit

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

RECIPE = "tiny_model.json"  # what a folder was built from; --all rebuilds when it differs
ALL_BITS = (None, 4)
GAIN = 3.0  # --all builds each config in float32 and 4-bit
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "generation_config.json", "chat_template.jinja")


def _gained(path: str, p: Any) -> Any:
    """Parameter P at PATH in float32, GAIN times larger when it is a weight matrix (not an
    embedding or a norm)."""
    import mlx.core as mx

    p = p.astype(mx.float32)
    if p.ndim >= 2 and "embed" not in path and "norm" not in path:
        p = p * GAIN
    return p


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
    from mlx.utils import tree_flatten, tree_map_with_path
    from mlx_lm.utils import _get_classes, save_config

    src = embedded_model_path()
    demo = json.loads((src / "config.json").read_text())
    config = _with_vocab({**config_for(model_type), **(overrides or {})},
                         demo["vocab_size"], demo["eos_token_id"])
    model_class, args_class = _get_classes(config)
    mx.random.seed(seed)
    model = model_class(args_class.from_dict(config))
    # float32 weights; matrices GAIN times mlx's default init, so that the next token depends
    # on the whole context (at gain 1 most models repeat one token, a weak test of attention)
    model.update(tree_map_with_path(_gained, model.parameters()))
    flat: Any = tree_flatten(model.parameters())
    sinks = [(k, v) for k, v in flat if k.endswith(".sinks")]
    if sinks:  # attention sinks start at zero: random logits, so that they matter
        model.load_weights([(k, mx.random.normal(v.shape)) for k, v in sinks], strict=False)
    # router weights some architectures start at zero (DeepSeek-V3's MoEGate): random, so that
    # tokens reach different experts
    zero_gates = [(k, mx.random.normal(v.shape) * 0.5) for k, v in flat
                  if k.endswith("gate.weight") and v.ndim == 2 and not mx.any(v).item()]
    if zero_gates:
        model.load_weights(zero_gates, strict=False)
    if bits is not None:
        config["quantization"] = {"group_size": 32, "bits": bits}
        nn.quantize(model, group_size=32, bits=bits,  # type: ignore[attr-defined]
                    class_predicate=lambda _, m: hasattr(m, "to_quantized")
                    and m.weight.shape[-1] % 32 == 0)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(dest / "model.safetensors"), weights)
    save_config(config, dest / "config.json")
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    (dest / RECIPE).write_text(_recipe(model_type, bits, seed, overrides))  # last: complete
    return dest


def _recipe(model_type: str, bits: int | None, seed: int,
            overrides: dict[str, Any] | None) -> str:
    """The JSON that identifies a build: model_type, its config, BITS, SEED and OVERRIDES."""
    return json.dumps({"model_type": model_type, "config": config_for(model_type), "gain": GAIN,
                       "bits": bits, "seed": seed, "overrides": overrides or {}},
                      sort_keys=True, indent=1)


def folder_name(model_type: str, bits: int | None = None) -> str:
    """The folder --all builds MODEL_TYPE (quantized to BITS) into: <type> or <type>-<bits>bit."""
    return model_type if bits is None else f"{model_type}-{bits}bit"


def cached_build(model_type: str, root: Path, *, bits: int | None = None,
                 seed: int = 0) -> Path:
    """ROOT/<folder_name>, built unless it already holds the same build (its recipe file)."""
    dest = root / folder_name(model_type, bits)
    recipe = dest / RECIPE
    if recipe.is_file() and recipe.read_text() == _recipe(model_type, bits, seed, None):
        return dest
    return build(model_type, dest, bits=bits, seed=seed)


def build_all(root: Path, seed: int = 0) -> list[Path]:
    """Every config in float32 and 4-bit under ROOT, skipping folders already built the same."""
    return [cached_build(t, root, bits=b, seed=seed) for t in sorted(CONFIGS) for b in ALL_BITS]


def main() -> None:
    """Command line: build one tiny model."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_type", nargs="?", choices=sorted(CONFIGS))
    parser.add_argument("dest", nargs="?", type=Path)
    parser.add_argument("--all", type=Path, metavar="DIR",
                        help="build every config (float32 and 4-bit) into DIR/<type>[-4bit], "
                             "skipping folders already built the same")
    parser.add_argument("--bits", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.all is not None:
        for path in build_all(args.all, seed=args.seed):
            print(path)
        return
    if args.model_type is None or args.dest is None:
        parser.error("MODEL_TYPE and DEST are required without --all")
    print(build(args.model_type, args.dest, bits=args.bits, seed=args.seed))


if __name__ == "__main__":
    main()
