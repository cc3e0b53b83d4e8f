"""A vision model (tiny Gemma 3, then tiny Qwen2-VL) behind the real server: /v1/models shows the vision capability;
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

CACHE = Path("/tmp/rapid-mlx-test-models")
RED, GREEN = encoded("PNG", (64, 48), (200, 30, 90)), encoded("PNG", (64, 48), (0, 250, 10))
PREFIX = "Look closely at the following picture and think about its colors. " * 3


@pytest.fixture(scope="module", params=list(BUILDERS))
def srv(request: pytest.FixtureRequest) -> Iterator[Server]:
    os.environ["HF_HUB_OFFLINE"] = "1"
    path = CACHE / f"tiny-{request.param}"
    if not (path / "model.safetensors").exists():
        BUILDERS[request.param](path)
    s = Server(str(path), "--served-model-name", "tiny-vlm", "--log-level",
               "debug").wait_ready()
    s.path = path  # type: ignore[attr-defined]
    try:
        yield s
    finally:
        s.stop()


def ask(image: bytes, text: str = "What is in the image?", first: bool = False
        ) -> list[dict[str, Any]]:
    parts = [{"type": "text", "text": text},
             {"type": "image_url", "image_url": {"url": data_url(image), "detail": "low"}}]
    return [{"role": "user", "content": parts[::-1] if first else parts}]


def mlx_vlm_text(path: Path, image: bytes, text: str = "What is in the image?") -> str:
    """mlx-vlm's greedy answer (8 tokens) to the same chat, decoded by the model's tokenizer."""
    import json

    from transformers import AutoTokenizer

    messages = [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}]
    _, ids = reference(path, messages, [Image.open(io.BytesIO(image)).convert("RGB")], 8)
    tok = AutoTokenizer.from_pretrained(str(path))
    eos_ids = json.loads((path / "config.json").read_text())["eos_token_id"]
    eos = set(eos_ids if isinstance(eos_ids, list) else [eos_ids])
    cut = next((i for i, t in enumerate(ids) if t in eos), len(ids))
    return str(tok.decode(ids[:cut], skip_special_tokens=True))


def test_models_list_vision(srv: Server) -> None:
    card = httpx.get(f"{srv.url}/models/tiny-vlm", timeout=10).json()
    assert "vision" in card["capabilities"]


def test_sdk_image_streamed_and_not_equals_mlx_vlm(srv: Server) -> None:
    client = openai.OpenAI(base_url=srv.url, api_key="x")
    whole = client.chat.completions.create(model="tiny-vlm", messages=ask(RED),  # type: ignore[arg-type]
                                           max_tokens=8, temperature=0)
    chunks = client.chat.completions.create(model="tiny-vlm", messages=ask(RED),  # type: ignore[arg-type]
                                            max_tokens=8, temperature=0, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert whole.choices[0].message.content == streamed == mlx_vlm_text(srv.path, RED)
    assert whole.usage is not None and whole.usage.prompt_tokens > 4  # the image's 4 tokens too
    other = client.chat.completions.create(model="tiny-vlm", messages=ask(GREEN),  # type: ignore[arg-type]
                                           max_tokens=8, temperature=0)
    assert other.choices[0].message.content == mlx_vlm_text(srv.path, GREEN)
    assert other.choices[0].message.content != streamed


def test_repeated_image_and_prefix_is_cached(srv: Server) -> None:
    client = openai.OpenAI(base_url=srv.url, api_key="x")

    def once(image: bytes) -> Any:
        return client.chat.completions.create(model="tiny-vlm", messages=ask(image, PREFIX, True),  # type: ignore[arg-type]
                                              max_tokens=4, temperature=0)

    first, again, other = once(RED), once(RED), once(GREEN)
    cached = [r.usage.prompt_tokens_details.cached_tokens or 0 for r in (first, again, other)]
    total = first.usage.prompt_tokens
    assert again.choices[0].message.content == first.choices[0].message.content
    assert cached[1] >= total - 16  # all but the last page: the image and the text after it
    # a different image: its 4 tokens and the text after them (a token or more per word) are
    # computed again; only the template's tokens before the image may be shared
    assert cached[2] <= total - 4 - len(PREFIX.split())
    assert cached[2] == cached[0]  # as much as the first time that image came: the template


def test_no_image_bytes_in_the_log(srv: Server) -> None:
    time.sleep(0.5)
    log = "".join(srv.lines)
    for image in (RED, GREEN):
        b64 = base64.b64encode(image).decode()
        assert b64[:24] not in log and b64[-40:-2] not in log
