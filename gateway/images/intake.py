"""Turn a request's image parts into checked images, and refuse them on models without vision."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.edge.errors import APIError, bad_request, too_large
from gateway.edge.limits import MAX_BODY_BYTES
from gateway.images.dataurl import check_mime, decode_base64, image_error, parse_data_url
from gateway.images.decode import CheckedImage, check_image
from gateway.images.fetch import fetch
from gateway.images.limits import (
    FETCH_REQUEST_S,
    FETCH_TOTAL_S,
    MAX_CONCURRENT_DECODES,
    MAX_IMAGE_BODY_BYTES,
    MAX_IMAGES,
    MAX_REQUEST_PIXELS,
)
from gateway.images.refs import ImageRef, shown
from protocol.messages import ImageData, ModelFacts

VISION = "vision"  # the capability (ModelFacts.capabilities) of a model that takes images


class ImageParts:
    """The image parts met while translating one request, in order; each leaves a placeholder
    part ({"type": "image"}) where it was, as multimodal chat templates expect."""

    def __init__(self) -> None:
        self.refs: list[ImageRef] = []

    def add(self, ref: ImageRef) -> dict[str, Any]:
        """Record REF (refusing one image too many) and return the placeholder part."""
        if len(self.refs) >= MAX_IMAGES:
            raise bad_request(f"At most {MAX_IMAGES} images are allowed per request.",
                              param=ref.param, code="too_many_images")
        self.refs.append(ref)
        return {"type": "image"}

    def inline_chars(self) -> int:
        """Characters of the images carried in the body itself (data URLs, base64)."""
        return sum(len(r.data or "") + len(r.url or "") for r in self.refs
                   if r.data is not None or (r.url or "")[:5].lower() == "data:")

    def check_body(self, size: int) -> None:
        """Refuse (413) a body of SIZE bytes whose non-image part is over the text limit."""
        if size > MAX_BODY_BYTES and size - self.inline_chars() > MAX_BODY_BYTES:
            raise too_large(MAX_BODY_BYTES)

    async def for_model(self, alias: str, facts: ModelFacts | None,
                        allow_urls: bool) -> list[ImageData]:
        """The images as the worker takes them, or the first 400. A model without vision gets
        the no-vision 400 once the parts' cheap checks pass (URL scheme, MIME type, base64,
        sizes): before any image is fetched or decoded, which could take seconds."""
        if self.refs and not has_vision(facts):
            total = 0
            for ref in self.refs:
                if ref.data is not None or (ref.url or "")[:5].lower() == "data:":
                    total = _add(total, len((await _bytes(ref, False, 0.0))[1]), ref)
                else:
                    _remote(ref, allow_urls)
            raise no_vision(alias, self.refs[0].param)
        return require_vision(alias, facts, await self.load(allow_urls))

    async def load(self, allow_urls: bool) -> list[CheckedImage]:
        """Every image decoded and checked (URLs fetched when ALLOW_URLS), or the first 400."""
        out: list[CheckedImage] = []
        total = 0
        pixels_left = MAX_REQUEST_PIXELS  # declared, over the request's images
        deadline = asyncio.get_running_loop().time() + FETCH_REQUEST_S  # for URLs
        for ref in self.refs:
            fmt, data = await _bytes(ref, allow_urls, deadline)
            total = _add(total, len(data), ref)
            async with _decoding():
                image = await asyncio.to_thread(check_image, data, ref.param, fmt, ref.detail,
                                                pixels_left)
            pixels_left -= image.width * image.height
            out.append(image)
        return out


_slots: list[tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = []  # of the running loop


def _decoding() -> asyncio.Semaphore:
    """The decode slots of the running event loop (one serves the gateway; tests run several)."""
    loop = asyncio.get_running_loop()
    if not _slots or _slots[0][0] is not loop:
        _slots[:] = [(loop, asyncio.Semaphore(MAX_CONCURRENT_DECODES))]
    return _slots[0][1]


def _add(total: int, size: int, ref: ImageRef) -> int:
    """TOTAL + SIZE bytes of images, refused (400) over MAX_IMAGE_BODY_BYTES."""
    if total + size > MAX_IMAGE_BODY_BYTES:
        raise image_error(f"The request's images are more than {MAX_IMAGE_BODY_BYTES} "
                          "bytes in all.", ref.param, "image_too_large")
    return total + size


def _remote(ref: ImageRef, allow_urls: bool) -> str:
    """REF's http(s) URL, refused (400) when URLs are not fetched or the scheme is another."""
    url = ref.url or ""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme not in ("http", "https"):
        raise image_error(f"The image URL {shown(url)!r} is neither a data: URL nor http(s).",
                          ref.param, "unsupported_image_url")
    if not allow_urls:
        raise image_error("Image URLs are not fetched by this server: send the image as a "
                          "data URL (data:image/png;base64,...), or start the server with "
                          "--allow-image-urls.", ref.param, "image_urls_disabled")
    return url


async def _bytes(ref: ImageRef, allow_urls: bool, deadline: float) -> tuple[str | None, bytes]:
    """The Pillow format REF's MIME type promises (None: a download, sniffed only) and bytes."""
    if ref.data is not None:
        fmt = check_mime(ref.media_type or "", ref.param)
        return fmt, decode_base64(ref.data, ref.param)
    url = ref.url or ""
    if url[:5].lower() == "data:":
        return parse_data_url(url, ref.param)
    url = _remote(ref, allow_urls)
    left = deadline - asyncio.get_running_loop().time()
    if left <= 0:
        raise image_error(f"Fetching the request's image URLs took longer than "
                          f"{FETCH_REQUEST_S:g} s in all.", ref.param, "image_fetch_failed")
    return None, await fetch(url, ref.param, total=min(FETCH_TOTAL_S, left))


def has_vision(facts: ModelFacts | None) -> bool:
    """True when the model takes image inputs."""
    return facts is not None and VISION in facts.capabilities


def require_vision(alias: str, facts: ModelFacts | None,
                   images: list[CheckedImage]) -> list[ImageData]:
    """Refuse IMAGES (400) when the model has no vision; else them as the worker takes them."""
    if images and not has_vision(facts):
        raise no_vision(alias, images[0].param)
    return [ImageData(data=i.data, sha256=i.sha256) for i in images]


def no_vision(alias: str, param: str) -> APIError:
    """The 400 for an image sent to a model that cannot see."""
    return bad_request(f"The model '{alias}' has no vision: it cannot take image inputs. Send "
                       "text only, or pick a model whose capabilities include 'vision' (GET "
                       "/v1/models).", param=param, code="model_has_no_vision")
