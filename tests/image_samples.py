"""Small image files for tests: valid ones in each accepted format, and broken or hostile ones."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image


def encoded(fmt: str, size: tuple[int, int] = (8, 6), color: tuple[int, int, int] = (200, 30, 90),
            frames: int = 1) -> bytes:
    """An image of SIZE in FMT (PNG, JPEG, WEBP, GIF; GIF with FRAMES frames)."""
    buf = io.BytesIO()
    ims = [Image.new("RGB", size, (color[0], (color[1] + 60 * k) % 256, color[2]))
           for k in range(frames)]
    if fmt == "GIF" and frames > 1:
        ims[0].save(buf, format="GIF", save_all=True, append_images=ims[1:], duration=50)
    else:
        ims[0].save(buf, format=fmt)
    return buf.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    """DATA as a base64 data URL of type MIME."""
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares WIDTH x HEIGHT (8-bit RGB) with almost no pixel data: tiny on
    disk, huge once decoded (a decompression bomb's header)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 64)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat)
            + _chunk(b"IEND", b""))


def truncated_png() -> bytes:
    """A real PNG cut off in the middle of its pixel data."""
    data = encoded("PNG", (64, 64), (1, 2, 3))
    noisy = Image.frombytes("RGB", (64, 64), bytes(range(256)) * 48)
    buf = io.BytesIO()
    noisy.save(buf, format="PNG")
    data = buf.getvalue()
    return data[: len(data) // 2]
