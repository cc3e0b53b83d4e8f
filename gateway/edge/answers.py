"""The edge's own answers to broken or refused requests, as raw HTTP/1.1 bytes in the error shape
of the request's path, and the helpers the HTTP protocol's timers share."""

from __future__ import annotations

import asyncio
import json

from gateway.edge.errors import APIError
from gateway.edge.shapes import ErrorShapes


def error_answer(shapes: ErrorShapes, status: int, reason: str, message: str, code: str,
                 kind: str = "invalid_request_error", extra: str = "", path: str = "") -> bytes:
    """A whole HTTP/1.1 error answer (closing the connection) in PATH's error shape."""
    err = APIError(status, message, type=kind, code=code)
    body = json.dumps(shapes.body(err, path)).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{extra}connection: close\r\n\r\n")
    return head.encode() + body


def request_path(head: bytes) -> str:
    """The path of the request line at the start of HEAD (the error shape follows it: Anthropic's
    on /v1/messages), or '' before a whole line."""
    line = head.split(b"\n", 1)[0].split(b" ")
    target = line[1] if len(line) > 2 else b""
    return target.split(b"?", 1)[0].decode("latin-1")


def cancel(timer: asyncio.TimerHandle | None) -> None:
    """Cancel TIMER, if there is one."""
    if timer is not None:
        timer.cancel()
