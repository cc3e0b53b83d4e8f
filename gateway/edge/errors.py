"""OpenAI-style errors: one exception type and one JSON envelope."""

from __future__ import annotations

import asyncio
import re
from typing import Any, TypeVar

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from gateway.edge.jsonguard import JSONLimitError, check_json
from gateway.edge.limits import BODY_READ_TIMEOUT_S, MAX_BODY_BYTES
from gateway.edge.offload import off_loop


class APIError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The error envelope as a dict."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> Response:
        """The error as an HTTP response."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    """A 400 invalid_request_error."""
    return APIError(400, message, param=param, code=code)


def unavailable(message: str, retry_after: int = 1, code: str = "model_not_ready") -> APIError:
    """A 503 with Retry-After."""
    return APIError(503, message, type="server_error", code=code,
                    headers={"Retry-After": str(retry_after)})


_PATH = re.compile(r"at `\$\.?([^`]*)`")
_KEY_PATH = re.compile(r"at `key` in `\$\.?([^`]*)`")  # a dict key failed: name the dict


def from_validation(exc: msgspec.ValidationError | msgspec.DecodeError) -> APIError:
    """Turn a msgspec decode/validation failure into a 400 naming the offending field."""
    text = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        match = _PATH.search(text) or _KEY_PATH.search(text)
        param = match.group(1).replace("[...]", "") if match else None  # [...]: a dict value
        message = _KEY_PATH.sub("", _PATH.sub("", text)).rstrip(" -")
        where = f" (at '{param}')" if param else ""
        return bad_request(f"Invalid request: {message}{where}", param=param or None,
                           code="invalid_value")
    return bad_request(f"We could not parse the JSON body of your request: {text}",
                       code="invalid_json")


T = TypeVar("T")


def too_large(limit: int) -> APIError:
    """A 413 for a body over LIMIT bytes."""
    # close the connection: else the server reads (and drops) the rest of a 50 MB upload
    return APIError(413, f"The request body is larger than the limit of {limit} bytes.",
                    code="request_too_large", headers={"Connection": "close"})


async def read_raw(request: Request, limit: int = MAX_BODY_BYTES,
                   timeout: float = BODY_READ_TIMEOUT_S) -> bytes:
    """The request body, at most LIMIT bytes (413) and received within TIMEOUT seconds (408)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):
            raise bad_request("The Content-Length header is not a number.")
        if len(declared) > 18 or int(declared) > limit:  # no int() of a 5,000-digit header
            raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():  # counted as it arrives: chunked bodies too
                size += len(chunk)
                if size > limit:
                    raise too_large(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise APIError(408, f"The request body was not received within {timeout:g} seconds.",
                       code="request_timeout", headers={"Connection": "close"}) from None
    except ClientDisconnect:
        raise APIError(499, "client closed the request", code="client_closed_request") from None
    return b"".join(chunks)


async def read_body(request: Request, type_: type[T]) -> T:
    """Read, bound-check, decode and validate a JSON request body, or raise the matching 4xx
    (a large body is decoded off the event loop)."""
    raw = await read_raw(request)
    return await off_loop(len(raw), decode_body, raw, type_)


def decode_body(raw: bytes, type_: type[T]) -> T:
    """Bound-check, decode and validate a JSON body, or raise the matching 400."""
    try:
        check_json(raw)  # depth and 64-bit integers, before the decoder recurses or overflows
        return msgspec.json.decode(raw, type=type_)
    except JSONLimitError as exc:
        raise bad_request(str(exc), code=exc.code) from None
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise from_validation(exc) from exc
    except RecursionError:  # last line of defence: check_json should have refused it
        raise bad_request("The JSON body nests too deeply.", code="json_too_deep") from None
