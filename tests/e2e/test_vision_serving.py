"""A vision model (tiny Gemma 3) behind the real server: /v1/models shows the vision capability;
the openai SDK sends a data-URL image, streamed and not, and gets mlx-vlm's greedy answer; the
same image again is served from cached KV, another image answers differently; no image bytes
reach the log."""

from __future__ import annotations

import base64
import io
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from PIL import Image

from tests.e2e.harness import Server
from tests.image_samples import data_url, encoded
from tests.vision_models import BUILDERS, reference

pytestmark = pytest.mark.slow

PATH = Path("/tmp/rapid-mlx-test-models/tiny-gemma3")
RED, GREEN = encoded("PNG", (64, 48), (200, 30, 90)), encoded("PNG", (64, 48), (0, 250, 10))
PREFIX = "Look closely at the following picture and think about its colors. " * 3


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    os.environ["HF_HUB_OFFLINE"] = "1"
    if not (PATH / "model.safetensors").exists():
        BUILDERS["gemma3"](PATH)
    s = Server(str(PATH), "--served-model-name", "tiny-gemma", "--log-level",
               "debug").wait_ready()
    try:
        yield s
    finally:
        s.stop()


def ask(image: bytes, text: str = "What is in the image?", first: bool = False
        ) -> list[dict[str, Any]]:
    parts = [{"type": "text", "text": text},
             {"type": "image_url", "image_url": {"url": data_url(image), "detail": "low"}}]
    return [{"role": "user", "content": parts[::-1] if first else parts}]


def mlx_vlm_text(image: bytes, text: str = "What is in the image?") -> str:
    """mlx-vlm's greedy answer (8 tokens) to the same chat, decoded by the model's tokenizer."""
    from transformers import AutoTokenizer

    messages = [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}]
    _, ids = reference(PATH, messages, [Image.open(io.BytesIO(image)).convert("RGB")], 8)
    tok = AutoTokenizer.from_pretrained(str(PATH))
    eos = {tok.convert_tokens_to_ids("<end_of_turn>"), 2}
    cut = next((i for i, t in enumerate(ids) if t in eos), len(ids))
    return str(tok.decode(ids[:cut], skip_special_tokens=True))


def test_models_list_vision(srv: Server) -> None:
    card = httpx.get(f"{srv.url}/models/tiny-gemma", timeout=10).json()
    assert "vision" in card["capabilities"]


def test_sdk_image_streamed_and_not_equals_mlx_vlm(srv: Server) -> None:
    client = openai.OpenAI(base_url=srv.url, api_key="x")
    whole = client.chat.completions.create(model="tiny-gemma", messages=ask(RED),  # type: ignore[arg-type]
                                           max_tokens=8, temperature=0)
    chunks = client.chat.completions.create(model="tiny-gemma", messages=ask(RED),  # type: ignore[arg-type]
                                            max_tokens=8, temperature=0, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content == streamed == mlx_vlm_text(RED)
    assert whole.usage is not None and whole.usage.prompt_tokens > 4  # the image's 4 tokens too
    other = client.chat.completions.create(model="tiny-gemma", messages=ask(GREEN),  # type: ignore[arg-type]
                                           max_tokens=8, temperature=0)
    assert other.choices[0].message.content == mlx_vlm_text(GREEN)
    assert other.choices[0].message.content != streamed


def test_repeated_image_and_prefix_is_cached(srv: Server) -> None:
    client = openai.OpenAI(base_url=srv.url, api_key="x")

    def once(image: bytes) -> Any:
        return client.chat.completions.create(model="tiny-gemma", messages=ask(image, PREFIX, True),  # type: ignore[arg-type]
                                              max_tokens=4, temperature=0)

    first, again, other = once(RED), once(RED), once(GREEN)
    cached = [r.usage.prompt_tokens_details.cached_tokens or 0 for r in (first, again, other)]
    total = first.usage.prompt_tokens
    assert again.choices[0].message.content == first.choices[0].message.content
    assert cached[0] == 0 and cached[1] >= total - 16  # all but the last page: image and text
    assert cached[2] < 8  # a different image: at most the template's few tokens before it


def test_no_image_bytes_in_the_log(srv: Server) -> None:
    time.sleep(0.5)
    log = "".join(srv.lines)
    for image in (RED, GREEN):
        b64 = base64.b64encode(image).decode()
        assert b64[:24] not in log and b64[-40:-2] not in log
