"""Read the body of a route that takes images: larger than the text limit only for image data."""

from __future__ import annotations

from typing import TypeVar

from starlette.requests import Request

from gateway.edge.errors import decode_body, read_raw, too_large
from gateway.edge.limits import MAX_BODY_BYTES
from gateway.edge.offload import off_loop
from gateway.images.limits import MAX_IMAGE_BODY_BYTES

T = TypeVar("T")


async def read_image_body(request: Request, type_: type[T]) -> tuple[T, int]:
    """The decoded body (up to MAX_IMAGE_BODY_BYTES) and its size. A body over the text limit
    without any base64 in it is refused (413) before it is decoded; the exact check, that only
    inline image data passes the text limit, is ImageParts.check_body once the parts are known."""
    raw = await read_raw(request, MAX_IMAGE_BODY_BYTES)
    if len(raw) > MAX_BODY_BYTES and raw.find(b"base64") < 0:
        raise too_large(MAX_BODY_BYTES)
    return await off_loop(len(raw), decode_body, raw, type_), len(raw)
