"""Multipart checks of gateway/audio/upload.py on a bare Starlette app (no worker needed)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from gateway.audio import upload
from gateway.edge.errors import APIError
from gateway.edge.shapes import ErrorShapes


async def _echo(request: Request) -> JSONResponse:
    form = await upload.parse_form(await upload.read_form(request), request.query_params.get("task", "transcribe"))
    return JSONResponse({"size": len(form.file), "model": form.model, "fmt": form.response_format,
                         "grans": form.granularities, "stream": form.stream,
                         "temperature": form.temperature, "language": form.language})


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = Starlette(routes=[Route("/up", _echo, methods=["POST"])],
                    exception_handlers=ErrorShapes().exception_handlers())
    return TestClient(app)


def _err(r: Any) -> dict[str, Any]:
    body: dict[str, Any] = r.json()["error"]
    return body


def test_fields_parsed(client: TestClient) -> None:
    r = client.post("/up", files={"file": ("a.wav", b"RIFF1234")},
                    data={"model": "w", "response_format": "verbose_json", "stream": "true",
                          "timestamp_granularities[]": ["word", "segment"], "temperature": "0.3",
                          "language": "EN"})
    assert r.status_code == 200, r.text
    assert r.json() == {"size": 8, "model": "w", "fmt": "verbose_json", "grans": ["word", "segment"],
                        "stream": True, "temperature": 0.3, "language": "en"}


def test_translation_ignores_language(client: TestClient) -> None:
    r = client.post("/up?task=translate", files={"file": ("a.wav", b"x")},
                    data={"model": "w", "language": "de"})
    assert r.json()["language"] == ""


@pytest.mark.parametrize(("data", "files", "param"), [
    ({"model": "w"}, {"other": ("a.wav", b"x")}, "file"),
    ({"model": "w", "file": "not a file"}, None, "file"),
    ({"model": "w"}, {"file": ("a.wav", b"")}, "file"),
    ({}, {"file": ("a.wav", b"x")}, "model"),
    ({"model": "w", "response_format": "xml"}, {"file": ("a.wav", b"x")}, "response_format"),
    ({"model": "w", "temperature": "hot"}, {"file": ("a.wav", b"x")}, "temperature"),
    ({"model": "w", "temperature": "nan"}, {"file": ("a.wav", b"x")}, "temperature"),
    ({"model": "w", "timestamp_granularities[]": "char", "response_format": "verbose_json"},
     {"file": ("a.wav", b"x")}, "timestamp_granularities"),
    ({"model": "w", "timestamp_granularities[]": "word"}, {"file": ("a.wav", b"x")},
     "timestamp_granularities"),
    ({"model": "w", "stream": "maybe"}, {"file": ("a.wav", b"x")}, "stream"),
])
def test_bad_fields_are_400_naming_the_field(client: TestClient, data: dict[str, Any],
                                              files: dict[str, Any] | None, param: str) -> None:
    r = client.post("/up", data=data, files=files) if files else \
        client.post("/up", data=data, files={"x": ("", b"")}) if "file" in data else \
        client.post("/up", data=data)
    assert r.status_code == 400, r.text
    assert _err(r)["param"] == param


def test_json_body_is_400_file(client: TestClient) -> None:
    r = client.post("/up", json={"model": "w"})
    assert r.status_code == 400 and _err(r)["param"] == "file"


def test_two_files_are_400(client: TestClient) -> None:
    r = client.post("/up", data={"model": "w"},
                    files=[("file", ("a.wav", b"x")), ("file", ("b.wav", b"y"))])
    assert r.status_code == 400


def test_over_limit_is_413_by_content_length(client: TestClient) -> None:
    big = b"\0" * (upload.MAX_FILE_BYTES + upload.FORM_OVERHEAD + 1)
    r = client.post("/up", data={"model": "w"}, files={"file": ("a.wav", big)})
    assert r.status_code == 413 and _err(r)["code"] == "request_too_large"


def test_file_just_over_25_mb_is_413(client: TestClient) -> None:
    r = client.post("/up", data={"model": "w"},
                    files={"file": ("a.wav", b"\0" * (upload.MAX_FILE_BYTES + 1))})
    assert r.status_code == 413 and _err(r)["param"] == "file"


def test_chunked_body_is_cut_off_while_arriving() -> None:
    """No Content-Length: the bound is counted on the ASGI messages as they arrive."""
    import asyncio

    pulled = 0
    head = b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"

    async def receive() -> dict[str, Any]:
        nonlocal pulled
        pulled += 1
        body = head if pulled == 1 else b"\0" * (1024 * 1024)
        return {"type": "http.request", "body": body, "more_body": pulled < 100}

    scope = {"type": "http", "method": "POST", "path": "/up", "query_string": b"",
             "headers": [(b"content-type", b"multipart/form-data; boundary=b")]}
    with pytest.raises(APIError) as err:
        asyncio.run(upload.read_form(Request(scope, receive)))
    assert err.value.status == 413
    assert pulled < 30  # it stopped soon after 25 MB, not at the end of 100 MB
