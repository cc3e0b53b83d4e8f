"""Check an image's bytes with Pillow: the real format, the declared size, a full decode."""

from __future__ import annotations

import hashlib
import io
import logging
import warnings
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from gateway.images.dataurl import image_error
from gateway.images.limits import FORMATS, MAX_PIXELS, MAX_REQUEST_PIXELS

# Pillow's own bomb check, behind ours: an error at twice MAX_PIXELS; its warning above
# MAX_PIXELS is silenced, as check_image refuses those images itself (set at import)
Image.MAX_IMAGE_PIXELS = MAX_PIXELS
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
logging.getLogger("PIL").setLevel(logging.INFO)  # its debug lines trace each client file's chunks
# Pillow fails on damaged files with many exception types (OSError, SyntaxError, ValueError,
# struct.error, ...): whatever a decoder raises on client bytes is that image's 400, never a 500
_ERRORS = (Exception,)


@dataclass(frozen=True)
class CheckedImage:
    """An image that decoded in full: bytes to send to a worker and their content hash."""

    param: str
    data: bytes  # the client's bytes (PNG, JPEG, WebP), or a GIF's first frame as PNG
    format: str  # PNG, JPEG or WEBP
    width: int
    height: int
    sha256: str  # of DATA
    detail: str = "auto"


def _open(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data), formats=FORMATS)  # reads the header only


def check_image(data: bytes, param: str, expected: str | None = None,
                detail: str = "auto", pixels_left: int = MAX_REQUEST_PIXELS) -> CheckedImage:
    """DATA checked: an accepted format (EXPECTED, when a MIME type promised one), at most
    MAX_PIXELS declared (and PIXELS_LEFT of its request's MAX_REQUEST_PIXELS) before any pixel
    is decoded, and a complete decode. Raises a 400."""
    if not data:
        raise image_error("The image is empty (0 bytes).", param, "empty_image")
    try:
        im = _open(data)
    except Image.DecompressionBombError:  # Pillow's own check, at twice its limit
        raise image_error(f"The image declares more than {2 * MAX_PIXELS} pixels; at most "
                          f"{MAX_PIXELS} are allowed per image.", param,
                          "image_too_large") from None
    except UnidentifiedImageError:
        raise image_error("The image is not a PNG, JPEG, WebP or GIF file (or is damaged).",
                          param, "invalid_image") from None
    except _ERRORS as exc:
        raise image_error(f"The image could not be read: {_why(exc)}", param) from None
    fmt = str(im.format)
    if expected is not None and fmt != expected:
        raise image_error(f"The image's bytes are {fmt} but its type says {expected}.", param,
                          "image_type_mismatch")
    width, height = im.size
    if width <= 0 or height <= 0:
        raise image_error(f"The image has no pixels ({width}x{height}).", param, "empty_image")
    if width * height > MAX_PIXELS:
        raise image_error(f"The image is {width}x{height} pixels; at most {MAX_PIXELS} pixels "
                          "are allowed per image.", param, "image_too_large")
    if width * height > pixels_left:
        raise image_error(f"The request's images are more than {MAX_REQUEST_PIXELS} pixels in "
                          f"all (this one is {width}x{height}); send fewer or smaller images.",
                          param, "image_too_large")
    try:
        im.verify()  # structure and checksums (PNG CRCs); the image cannot be used after it
        im = _open(data)
        im.seek(0)  # a GIF: its first frame only
        im.load()  # every pixel: a truncated file fails here
        out = _first_frame_png(im) if fmt == "GIF" else data
    except _ERRORS as exc:
        raise image_error(f"The image could not be decoded: {_why(exc)}", param) from None
    return CheckedImage(param, out, "PNG" if fmt == "GIF" else fmt, width, height,
                        hashlib.sha256(out).hexdigest(), detail)


def _first_frame_png(im: Image.Image) -> bytes:
    """A GIF's (loaded) first frame as a PNG."""
    frame = im.convert("RGBA" if "transparency" in im.info else "RGB")
    buf = io.BytesIO()
    frame.save(buf, format="PNG")
    return buf.getvalue()


def _why(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:200]
