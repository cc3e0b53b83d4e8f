"""Strict data: URLs and base64 payloads: MIME type checked, size bounded before decoding."""

from __future__ import annotations

import base64
import binascii

from gateway.edge.errors import APIError, bad_request
from gateway.images.limits import MAX_IMAGE_BYTES, MIME_FORMATS


def image_error(message: str, param: str, code: str = "invalid_image") -> APIError:
    """A 400 about one image."""
    return bad_request(message, param=param, code=code)


def check_mime(mime: str, param: str) -> str:
    """The Pillow format MIME promises, or a 400 for a type that is not an accepted image."""
    fmt = MIME_FORMATS.get(mime.strip().lower())
    if fmt is None:
        raise image_error(f"Image type '{mime[:40]}' is not supported: send image/png, "
                          "image/jpeg, image/webp or image/gif.", param,
                          "unsupported_image_type")
    return fmt


def decoded_size(payload: str) -> int:
    """The bytes PAYLOAD (base64) decodes to, from its length alone."""
    pad = 2 if payload.endswith("==") else 1 if payload.endswith("=") else 0
    return len(payload) // 4 * 3 - pad


def decode_base64(payload: str, param: str, limit: int = MAX_IMAGE_BYTES) -> bytes:
    """PAYLOAD's bytes: standard alphabet, padded, no whitespace; at most LIMIT bytes, checked
    from the length before anything is decoded."""
    size = decoded_size(payload)
    if size > limit:
        raise image_error(f"The image is {size} bytes; at most {limit} bytes are allowed per "
                          "image.", param, "image_too_large")
    if not payload:
        raise image_error("The image is empty (0 bytes).", param, "empty_image")
    try:
        return base64.b64decode(payload.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise image_error("The image data is not valid base64 (standard alphabet, padded, no "
                          "whitespace).", param, "invalid_base64") from None


def parse_data_url(url: str, param: str) -> tuple[str, bytes]:
    """(the Pillow format its MIME type promises, the bytes) of a `data:MIME;base64,DATA` URL."""
    head, comma, payload = url.partition(",")
    fields = head[5:].split(";")
    if not comma or len(fields) < 2 or fields[-1].strip().lower() != "base64":
        raise image_error("A data URL must look like data:image/png;base64,DATA (base64 "
                          "encoded).", param, "invalid_data_url")
    fmt = check_mime(fields[0], param)  # before any decoding
    return fmt, decode_base64(payload, param)
