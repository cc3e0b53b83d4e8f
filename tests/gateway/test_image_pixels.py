"""A request's images are bounded in pixels together (gateway/images/limits.py
MAX_REQUEST_PIXELS), each checked from its header before it is decoded: 16 images of 7000x7000
(each under the per-image bound) cost 81 s of server time for one request."""

from __future__ import annotations

import asyncio
import base64
import io

import pytest
from PIL import Image

from gateway.edge.errors import APIError
from gateway.images import decode, intake
from gateway.images.intake import ImageParts
from gateway.images.refs import ImageRef


def _png(side: int) -> str:
    out = io.BytesIO()
    Image.new("RGB", (side, side), (10, 20, 30)).save(out, "PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def test_the_images_of_a_request_are_bounded_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: every image under the per-image bound was decoded, however many."""
    monkeypatch.setattr(intake, "MAX_REQUEST_PIXELS", 10_000)  # three of 60x60 pass it
    loads: list[int] = []
    real = Image.Image.load

    def load(self: Image.Image) -> object:
        loads.append(1)
        return real(self)

    monkeypatch.setattr(Image.Image, "load", load)
    parts = ImageParts()
    for i in range(4):
        parts.add(ImageRef(f"messages[0].content[{i}].image_url", url=_png(60)))
    with pytest.raises(APIError) as info:
        asyncio.run(parts.load(False))
    assert info.value.status == 400 and info.value.code == "image_too_large"
    assert info.value.param == "messages[0].content[2].image_url"
    assert "in all" in info.value.message
    first_two = len(loads)
    assert first_two
    data = base64.b64decode(_png(60).split(",")[1])
    loads.clear()
    with pytest.raises(APIError):
        decode.check_image(data, "x", pixels_left=100)
    assert not loads  # refused from its header, before any pixel was decoded


def test_images_within_the_bound_are_all_decoded() -> None:
    parts = ImageParts()
    for i in range(3):
        parts.add(ImageRef(f"messages[0].content[{i}].image_url", url=_png(64)))
    assert [im.width for im in asyncio.run(parts.load(False))] == [64, 64, 64]
