"""The tiny random-weight multimodal models (tests/vision_models.py) load offline in mlx-vlm and
its generate answers with an image: the groundwork for the vision engine's equality tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.vision_models import BUILDERS, generate_with_image

pytestmark = pytest.mark.slow

CACHE = Path("/tmp/rapid-mlx-test-models")
# family -> (its image token's text, image tokens of a 64x48 image at the configured sizes)
IMAGE_TOKENS = {"qwen2_vl": ("<|image_pad|>", 4), "gemma3": ("<image_soft_token>", 4)}


@pytest.fixture(scope="session")
def tiny_vision_models() -> dict[str, Path]:
    """Both models, built once per session (rebuilt when missing)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may come from the hub
    out = {}
    for name, build in BUILDERS.items():
        path = CACHE / f"tiny-{name}"
        if not (path / "model.safetensors").exists():
            build(path)
        out[name] = path
    return out


def solid(color: tuple[int, int, int]) -> Image.Image:
    return Image.new("RGB", (64, 48), color)


@pytest.mark.parametrize("family", list(BUILDERS))
def test_prompt_holds_the_image_tokens(tiny_vision_models: dict[str, Path], family: str) -> None:
    from mlx_vlm import load
    from mlx_vlm.prompt_utils import apply_chat_template
    from mlx_vlm.utils import prepare_inputs

    model, processor = load(str(tiny_vision_models[family]))
    text = apply_chat_template(processor, model.config, "What is this?", num_images=1)
    inputs = prepare_inputs(processor, images=[solid((1, 2, 3))], prompts=text)
    token, count = IMAGE_TOKENS[family]
    token_id = processor.tokenizer.convert_tokens_to_ids(token)
    assert inputs["input_ids"].tolist()[0].count(token_id) == count
    assert inputs["pixel_values"].size > 0


@pytest.mark.parametrize("family", list(BUILDERS))
def test_generate_with_an_image(tiny_vision_models: dict[str, Path], family: str) -> None:
    """Greedy answers are deterministic and depend on the image (the vision tower matters)."""
    path = tiny_vision_models[family]
    runs: list[Any] = [generate_with_image(path, solid(c), max_tokens=10)
                       for c in ((200, 30, 90), (200, 30, 90), (0, 250, 10))]
    assert all(r.generation_tokens == 10 for r in runs)
    assert runs[0].text == runs[1].text
    assert runs[0].text != runs[2].text
