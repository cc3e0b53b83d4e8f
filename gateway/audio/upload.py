"""Read an audio upload (multipart/form-data) with the size bound enforced while it arrives."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import get_args

from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.types import Message

from gateway.audio.transcription_schemas import Granularity, ResponseFormat
from gateway.edge.errors import APIError, bad_request

MAX_FILE_BYTES = 25 * 1024 * 1024  # OpenAI's limit for one audio file
FORM_OVERHEAD = 256 * 1024  # the other fields and multipart boundaries on top of the file
UPLOAD_TIMEOUT_S = 300.0  # the whole body must arrive within this
FORMATS: tuple[str, ...] = get_args(ResponseFormat)
GRANULARITIES: tuple[str, ...] = get_args(Granularity)


@dataclass
class AudioForm:
    """The fields of a transcription or translation request."""

    file: bytes
    filename: str
    model: str
    language: str = ""
    prompt: str = ""
    temperature: float = 0.0
    response_format: str = "json"
    granularities: list[str] = field(default_factory=lambda: ["segment"])
    stream: bool = False


def file_too_large(size: int | None = None) -> APIError:
    """The 413 for an upload over MAX_FILE_BYTES."""
    got = f" (got {size} bytes)" if size is not None else ""
    return APIError(413, f"The audio file is larger than the limit of {MAX_FILE_BYTES} bytes "
                    f"(25 MB){got}.", param="file", code="request_too_large",
                    headers={"Connection": "close"})


def _bounded(request: Request, limit: int) -> Request:
    """REQUEST whose body stream raises the 413 as soon as more than LIMIT bytes arrived."""
    received = 0

    async def receive() -> Message:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise file_too_large()
        return message

    return Request(request.scope, receive)


async def read_form(request: Request) -> FormData:
    """The multipart form, its body bounded by size (413) and time (408)."""
    limit = MAX_FILE_BYTES + FORM_OVERHEAD
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and \
            (len(declared) > 18 or int(declared) > limit):
        raise file_too_large(int(declared) if len(declared) <= 18 else None)
    ctype = request.headers.get("content-type", "")
    if not ctype.startswith("multipart/form-data"):
        raise bad_request("This endpoint takes multipart/form-data with the audio in the 'file' "
                          f"field (got content-type '{ctype or 'none'}').", param="file")
    try:
        async with asyncio.timeout(UPLOAD_TIMEOUT_S):
            return await _bounded(request, limit).form(max_files=1, max_fields=64,
                                                       max_part_size=64 * 1024)
    except TimeoutError:
        raise APIError(408, f"The upload was not received within {UPLOAD_TIMEOUT_S:g} seconds.",
                       code="request_timeout", headers={"Connection": "close"}) from None
    except ClientDisconnect:
        raise APIError(499, "client closed the request", code="client_closed_request") from None
    except HTTPException as exc:  # Starlette's multipart errors (too many files or fields, ...)
        raise bad_request(f"The multipart body could not be read: {exc.detail}") from None


def _text(form: FormData, name: str, default: str = "") -> str:
    value = form.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise bad_request(f"'{name}' must be a text field, not a file.", param=name)
    return value.strip()


async def parse_form(form: FormData, task: str) -> AudioForm:
    """Check every field of FORM (400s name the field) and read the file (413 over 25 MB)."""
    upload = form.get("file")
    if upload is None:
        raise bad_request("The request has no 'file' field: attach the audio file as "
                          "multipart/form-data field 'file'.", param="file")
    if not isinstance(upload, UploadFile):
        raise bad_request("'file' must be a file upload, not a text field.", param="file")
    data = await upload.read(MAX_FILE_BYTES + 1)
    await upload.close()
    if len(data) > MAX_FILE_BYTES:
        raise file_too_large()
    if not data:
        raise bad_request("The uploaded file is empty.", param="file")
    model = _text(form, "model")
    if not model:
        raise bad_request("'model' is required.", param="model")
    fmt = _text(form, "response_format", "json")
    if fmt not in FORMATS:
        raise bad_request(f"response_format must be one of {', '.join(FORMATS)} "
                          f"(got '{fmt}').", param="response_format")
    grans = [g.strip() for g in (form.getlist("timestamp_granularities[]")
                                 + form.getlist("timestamp_granularities")) if isinstance(g, str)]
    for g in grans:
        if g not in GRANULARITIES:
            raise bad_request(f"timestamp_granularities[] items must be 'segment' or 'word' "
                              f"(got '{g}').", param="timestamp_granularities")
    if grans and fmt != "verbose_json":
        raise bad_request("timestamp_granularities[] needs response_format 'verbose_json'.",
                          param="timestamp_granularities")
    return AudioForm(file=data, filename=upload.filename or "", model=model,
                     language="" if task == "translate" else _text(form, "language").lower(),
                     prompt=_text(form, "prompt"), temperature=_temperature(form),
                     response_format=fmt, granularities=grans or ["segment"],
                     stream=_flag(form, "stream"))


def _temperature(form: FormData) -> float:
    raw = _text(form, "temperature", "0")
    try:
        value = float(raw)
    except ValueError:
        raise bad_request(f"temperature must be a number (got '{raw}').",
                          param="temperature") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise bad_request("temperature must be between 0 and 1.", param="temperature")
    return value


def _flag(form: FormData, name: str) -> bool:
    raw = _text(form, name, "false").lower()
    if raw not in ("true", "false", "1", "0", ""):
        raise bad_request(f"'{name}' must be true or false (got '{raw}').", param=name)
    return raw in ("true", "1")
