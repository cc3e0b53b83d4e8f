"""Images behind the real server with a vision model: preparing large ones takes the worker's
intake seconds, which is work, not a hang (the worker is not killed and the request and others
are answered); images only the decoder finds wrong, and URLs to private addresses, get their
400 (a text-only model answers the no-vision 400 before looking: test_images.py)."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests.e2e.harness import Server
from tests.image_samples import data_url, encoded, png_header_only, truncated_png
from tests.vision_models import BUILDERS

pytestmark = pytest.mark.slow

CACHE = Path("/tmp/rapid-mlx-test-models")


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    os.environ["HF_HUB_OFFLINE"] = "1"
    path = CACHE / "tiny-qwen2_vl"
    if not (path / "model.safetensors").exists():
        BUILDERS["qwen2_vl"](path)
    # a short hang timeout: the images below take the intake longer than that to prepare
    s = Server(str(path), "--served-model-name", "vl", "--hang-timeout", "1",
               "--allow-image-urls").wait_ready()
    try:
        yield s
    finally:
        s.stop()


def _chat(parts: list[dict[str, Any]], max_tokens: int = 3) -> dict[str, Any]:
    return {"model": "vl", "max_tokens": max_tokens, "temperature": 0,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "What?"}, *parts]}]}


def test_slow_image_preparation_is_not_a_hang(srv: Server) -> None:
    before = srv.worker("vl")
    buf = io.BytesIO()
    Image.new("L", (7000, 7000)).save(buf, format="PNG")  # 49 MP, under the 50 MP limit
    big = {"type": "image_url", "image_url": {"url": data_url(buf.getvalue())}}
    other: dict[str, Any] = {}
    order: list[str] = []

    def small() -> None:  # a text request sent while the intake works on the images
        other["r"] = httpx.post(f"{srv.url}/chat/completions", timeout=120,
                                json={**_chat([]), "max_tokens": 8})
        order.append("text")

    timer = threading.Timer(1.0, small)
    timer.start()
    # two: 98 MP, under a request's 100 MP bound (gateway/images), slow to prepare all the same
    r = httpx.post(f"{srv.url}/chat/completions", json=_chat([big] * 2), timeout=300)
    order.append("images")
    timer.join()
    assert r.status_code == 200, r.text
    assert other["r"].status_code == 200, other["r"].text
    assert order == ["text", "images"]  # the images prepare on their own lane: not in its way
    after = srv.worker("vl")
    assert (after["boot_id"], after["restarts"]) == (before["boot_id"], before["restarts"])


DECODER = [
    ("truncated-png", data_url(truncated_png()), "invalid_image", None),
    ("20k-x-20k", data_url(png_header_only(20000, 20000)), "image_too_large", None),
    ("wrong-mime", data_url(encoded("JPEG"), "image/png"), "image_type_mismatch", None),
    ("metadata-address", "http://169.254.169.254/latest/", "image_url_refused", "private"),
    ("loopback", "http://localhost:9/a.png", "image_url_refused", "private"),
]


@pytest.mark.parametrize(("name", "url", "code", "said"), DECODER, ids=[d[0] for d in DECODER])
def test_images_the_decoder_or_fetcher_refuses(srv: Server, name: str, url: str, code: str,
                                               said: str | None) -> None:
    r = httpx.post(f"{srv.url}/chat/completions", timeout=60,
                   json=_chat([{"type": "image_url", "image_url": {"url": url}}]))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["param"] == "messages[0].content[1].image_url", err
    assert said is None or said in err["message"]
