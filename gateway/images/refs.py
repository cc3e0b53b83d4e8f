"""One image part of a request, in any API's shape, as an ImageRef: where it is and its source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.edge.errors import APIError, bad_request
from gateway.images.limits import DETAILS, SHOWN_CHARS


@dataclass(frozen=True)
class ImageRef:
    """An image as the client gave it: a data:/http(s) URL, or base64 data with its MIME type."""

    param: str  # where it is in the request, e.g. messages[0].content[1].image_url
    url: str | None = None
    data: str | None = None  # base64 (Anthropic's base64 source)
    media_type: str | None = None  # of DATA
    detail: str = "auto"


def shown(url: str) -> str:
    """URL as an error message may show it: data URLs by their header only, others truncated."""
    if url[:5].lower() == "data:":
        head = url.split(",", 1)[0][:SHOWN_CHARS]
        return f"{head},... ({len(url)} characters)"
    return url if len(url) <= SHOWN_CHARS else url[:SHOWN_CHARS] + "..."


def _detail(value: Any, param: str) -> str:
    if value is None:
        return "auto"
    if value not in DETAILS:
        raise bad_request(f"detail must be one of {', '.join(DETAILS)}.", param=f"{param}.detail",
                          code="invalid_value")
    return str(value)


def _url(value: Any, param: str) -> str:
    if not isinstance(value, str) or not value:
        raise bad_request("An image URL must be a non-empty string (a data: URL, or an http(s) "
                          "URL where the server allows them).", param=param, code="invalid_value")
    return value


def from_chat_part(part: dict[str, Any], param: str) -> ImageRef:
    """A chat `image_url` part: {"image_url": {"url", "detail"}} or {"image_url": "URL"}."""
    where = f"{param}.image_url"
    value = part.get("image_url")
    if isinstance(value, dict):
        return ImageRef(where, url=_url(value.get("url"), f"{where}.url"),
                        detail=_detail(value.get("detail"), where))
    return ImageRef(where, url=_url(value, where), detail=_detail(part.get("detail"), param))


def from_input_image(part: Any, param: str) -> ImageRef:
    """A Responses `input_image` part: image_url (a string) and detail; file_id is refused."""
    if getattr(part, "file_id", None) is not None:
        raise bad_request("input_image with file_id is not supported: this server has no Files "
                          "API; send the image as image_url (a data: URL).",
                          param=f"{param}.file_id", code="unsupported_parameter")
    where = f"{param}.image_url"
    return ImageRef(where, url=_url(getattr(part, "image_url", None), where),
                    detail=_detail(getattr(part, "detail", None), param))


def from_anthropic_source(source: dict[str, Any], param: str) -> ImageRef:
    """An Anthropic image block's source: {type: base64, media_type, data} or {type: url, url}."""
    where = f"{param}.source"
    kind = source.get("type")
    if kind == "base64":
        data, mime = source.get("data"), source.get("media_type")
        if not isinstance(data, str) or not isinstance(mime, str):
            raise _invalid("A base64 image source needs media_type and data (strings).", where)
        return ImageRef(where, data=data, media_type=mime)
    if kind == "url":
        return ImageRef(where, url=_url(source.get("url"), f"{where}.url"))
    raise _invalid(f"Image source type '{shown(str(kind))}' is not supported (use base64 or "
                   "url).",
                   f"{where}.type")


def _invalid(message: str, param: str) -> APIError:
    return bad_request(message, param=param, code="invalid_image")
