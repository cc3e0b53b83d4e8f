"""A random-weight model on the demo model's tokenizer: its free output is garbage, so a grammar
does all the work when its answers come out valid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from worker.model.embedded import embedded_model_path

FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
         "generation_config.json")


def random_model(dest: Path, seed: int = 3) -> Path:
    """Write the demo architecture with random weights (seeded) and the demo tokenizer to DEST."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import qwen3

    src = embedded_model_path()
    dest.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        if (src / name).exists():
            shutil.copy(src / name, dest / name)
    config = json.loads((src / "config.json").read_text())
    mx.random.seed(seed)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(dest / "model.safetensors"), weights)  # type: ignore[arg-type]
    return dest
