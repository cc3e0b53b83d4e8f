"""Build the benchmark's float32 Qwen3.5-architecture (hybrid) model with random weights, deterministically.

    .venv/bin/python -m bench.build_qwen3_5_model [--out bench/.models/qwen3_5-4l-512] [--seed 0] [--force]

Qwen3.5's structure at the Qwen3 bench model's size: 4 layers, three Gated DeltaNet layers then
one gated full-attention layer (``full_attention_interval`` 4), hidden 512, intermediate 1536,
vocab 32000, tied embeddings, float32. Linear attention: 2 key heads and 4 value heads of dim 128
(the real checkpoints' head dim; a 4 x 128 x 128 state per layer and sequence), conv kernel 4.
Full attention: 4 query heads (with Qwen3.5's output gate), 2 KV heads, head_dim 128, partial
RoPE (0.25). About 30M parameters (120 MB), like the Qwen3 bench model's 116 MB.

The tokenizer and chat template are the Qwen3 bench model's (``bench.build_qwen3_model``). Weight
matrices are drawn from a numpy generator seeded with ``--seed`` (normal, std 0.02); norms are
ones; ``A_log`` is log(uniform(1, 16)) and ``dt_bias`` ones, as mlx-lm initializes them. Written in
mlx-lm's layout (loadable with ``mlx_lm.load``); reused when its build record matches.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.build_qwen3_model import CONFIG as QWEN3
from bench.build_qwen3_model import dump, is_current, write_text_files

DEFAULT_OUT = Path(__file__).resolve().parent / ".models" / "qwen3_5-4l-512"
BUILD_VERSION = 1

TEXT_CONFIG: dict[str, Any] = {
    "model_type": "qwen3_5_text",
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "rms_norm_eps": 1e-6,
    "linear_num_value_heads": 4,
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "vocab_size": QWEN3["vocab_size"],
    "max_position_embeddings": QWEN3["max_position_embeddings"],
    "eos_token_id": QWEN3["eos_token_id"],
    "rope_parameters": {"rope_type": "default", "mrope_section": [11, 11, 10],
                        "rope_theta": 100000, "partial_rotary_factor": 0.25},
}

CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": TEXT_CONFIG,
    "tie_word_embeddings": True,
    "vocab_size": QWEN3["vocab_size"],
    "eos_token_id": QWEN3["eos_token_id"],
    "pad_token_id": QWEN3["pad_token_id"],
    "torch_dtype": "float32",
}


def build_weights(seed: int, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """Random float32 weights by name: normal(0, 0.02) matrices (conv kernels too), ones for
    norms and ``dt_bias``, log(uniform(1, 16)) for ``A_log``."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in sorted(shapes.items()):
        if name.endswith("A_log"):
            out[name] = np.log(rng.uniform(1.0, 16.0, shape)).astype(np.float32)
        elif len(shape) == 1:
            out[name] = np.ones(shape, dtype=np.float32)
        else:
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
    return out


def _record(seed: int) -> dict[str, Any]:
    return {"build_version": BUILD_VERSION, "seed": seed, "config": CONFIG}


def build(out: Path = DEFAULT_OUT, seed: int = 0, force: bool = False, quiet: bool = False) -> Path:
    """Build (or reuse) the model folder and return it."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    out = Path(out)
    if not force and is_current(out, _record(seed)):
        return out
    t0 = time.monotonic()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_text_files(tmp, CONFIG, seed)
    model_class, args_class = _get_classes(CONFIG)
    model = model_class(args_class.from_dict(copy.deepcopy(CONFIG)))  # mlx-lm edits rope_parameters
    flat: Any = tree_flatten(model.parameters())
    shapes = {k: tuple(v.shape) for k, v in flat}
    weights = {k: mx.array(v) for k, v in build_weights(seed, shapes).items()}
    mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
    digest = hashlib.sha256((tmp / "model.safetensors").read_bytes()).hexdigest()
    (tmp / "bench_build.json").write_text(dump({"params": _record(seed), "model_sha256": digest}))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    if not quiet:
        print(f"built {out} in {time.monotonic() - t0:.1f}s (weights sha256 {digest[:12]})",
              file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: build (or reuse) the folder; --check generates a few tokens with mlx-lm."""
    p = argparse.ArgumentParser(prog="python -m bench.build_qwen3_5_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="rebuild even when the folder is current")
    p.add_argument("--check", action="store_true", help="load the result with mlx_lm.load and generate")
    args = p.parse_args(argv)
    out = build(args.out, args.seed, args.force)
    print(out)
    if args.check:
        from mlx_lm import generate, load

        loaded: Any = load(str(out))
        model, tokenizer = loaded[0], loaded[1]
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hello there"}],
                                               add_generation_prompt=True)
        print(repr(generate(model, tokenizer, prompt, max_tokens=16)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
