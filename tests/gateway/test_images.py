"""gateway/images: image parts found in each API's shape, checked strictly, refused unseen."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.anthropic.schemas import MessagesRequest
from gateway.anthropic.translate import chat_messages
from gateway.edge.errors import APIError
from gateway.edge.limits import MAX_BODY_BYTES
from gateway.images import dataurl
from gateway.images.decode import check_image
from gateway.images.intake import ImageParts, no_vision, require_vision
from gateway.images.limits import MAX_IMAGE_BYTES, MAX_IMAGES
from gateway.images.refs import ImageRef, shown
from gateway.openai.chat_input import chat_messages as _messages
from gateway.openai.schemas import ChatCompletionRequest
from gateway.responses.schemas import CreateResponse
from gateway.responses.translate import to_messages
from protocol.messages import ModelFacts
from tests.image_samples import data_url, encoded, png_header_only, truncated_png

MiB = 1024 * 1024
PNG = encoded("PNG")


def chat_req(*parts: Any) -> ChatCompletionRequest:
    return msgspec.convert({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, *parts]}]}, ChatCompletionRequest)


def image_part(url: str, detail: str | None = None) -> dict[str, Any]:
    inner: dict[str, Any] = {"url": url}
    if detail is not None:
        inner["detail"] = detail
    return {"type": "image_url", "image_url": inner}


async def load_one(url: str, allow_urls: bool = False) -> Any:
    images = ImageParts()
    _messages(chat_req(image_part(url)), images)
    return (await images.load(allow_urls))[0]


async def refusal(url: str, allow_urls: bool = False) -> APIError:
    with pytest.raises(APIError) as info:
        await load_one(url, allow_urls)
    assert info.value.status == 400
    assert info.value.param == "messages[0].content[1].image_url"
    payload = url.partition(",")[2]
    assert len(payload) < 8 or payload[:16] not in info.value.message  # no image data shown
    return info.value


# ---- finding image parts ------------------------------------------------------------------


def test_chat_parts_become_placeholders_in_order() -> None:
    images = ImageParts()
    msgs = _messages(chat_req(image_part("data:a", "low"), {"type": "image_url",
                                                           "image_url": "data:b"}), images)
    assert msgs[0]["content"] == [{"type": "text", "text": "What is this?"}, {"type": "image"},
                                  {"type": "image"}]
    assert images.refs == [
        ImageRef("messages[0].content[1].image_url", url="data:a", detail="low"),
        ImageRef("messages[0].content[2].image_url", url="data:b")]


@pytest.mark.parametrize(("part", "param"), [
    (image_part("data:x", "ultra"), "messages[0].content[1].image_url.detail"),
    ({"type": "image_url", "image_url": {"url": ""}}, "messages[0].content[1].image_url.url"),
    ({"type": "image_url", "image_url": {"url": 5}}, "messages[0].content[1].image_url.url"),
    ({"type": "image_url"}, "messages[0].content[1].image_url"),
])
def test_chat_part_shape_errors(part: dict[str, Any], param: str) -> None:
    with pytest.raises(APIError) as info:
        _messages(chat_req(part), ImageParts())
    assert info.value.status == 400 and info.value.param == param


def test_too_many_images() -> None:
    with pytest.raises(APIError) as info:
        _messages(chat_req(*[image_part("data:x")] * (MAX_IMAGES + 1)), ImageParts())
    assert info.value.code == "too_many_images"
    assert info.value.param == f"messages[0].content[{MAX_IMAGES + 1}].image_url"
    _messages(chat_req(*[image_part("data:x")] * MAX_IMAGES), ImageParts())  # the limit is fine


def test_responses_input_image() -> None:
    req = msgspec.convert({"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "hi"},
        {"type": "input_image", "image_url": "data:x", "detail": "high"}]}]}, CreateResponse)
    images = ImageParts()
    assert to_messages(req, images) == [{"role": "user", "content": [
        {"type": "text", "text": "hi"}, {"type": "image"}]}]
    assert images.refs == [ImageRef("input[0].content[1].image_url", url="data:x",
                                    detail="high")]
    with pytest.raises(APIError) as info:
        to_messages(msgspec.convert({"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_image", "file_id": "file-1"}]}]}, CreateResponse), ImageParts())
    assert info.value.param == "input[0].content[0].file_id"
    assert info.value.code == "unsupported_parameter"


def test_anthropic_image_blocks() -> None:
    req = msgspec.convert({"model": "m", "max_tokens": 5, "messages": [{"role": "user",
        "content": [{"type": "text", "text": "a"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": "QUJD"}},
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]},
        MessagesRequest)
    images = ImageParts()
    assert chat_messages(req, images) == [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "image"}, {"type": "image"}]}]
    assert images.refs == [
        ImageRef("messages[0].content[1].source", data="QUJD", media_type="image/png"),
        ImageRef("messages[0].content[2].source", url="https://x/y.png")]
    bad = msgspec.convert({"model": "m", "max_tokens": 5, "messages": [{"role": "user",
        "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]},
        MessagesRequest)
    with pytest.raises(APIError) as info:
        chat_messages(bad, ImageParts())
    assert info.value.param == "messages[0].content[0].source.type"


# ---- checking the bytes -------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"),
                                           ("WEBP", "image/webp"), ("GIF", "image/gif")])
async def test_valid_images_load(fmt: str, mime: str) -> None:
    got = await load_one(data_url(encoded(fmt), mime))
    assert (got.width, got.height) == (8, 6) and len(got.sha256) == 64
    if fmt != "GIF":
        assert got.data == encoded(fmt) and got.format == fmt


async def test_gif_is_its_first_frame_as_png() -> None:
    got = await load_one(data_url(encoded("GIF", frames=3), "image/gif"))
    assert got.format == "PNG" and got.data.startswith(b"\x89PNG")
    first = check_image(encoded("GIF", frames=1), "p")
    assert got.sha256 == first.sha256  # frames 2 and 3 differ, and are dropped


async def test_same_bytes_same_hash_different_bytes_different_hash() -> None:
    a = await load_one(data_url(PNG))
    b = await load_one(data_url(PNG))
    c = await load_one(data_url(encoded("PNG", color=(1, 2, 3))))
    assert a.sha256 == b.sha256 != c.sha256


@pytest.mark.parametrize(("url", "code"), [
    (data_url(truncated_png()), "invalid_image"),
    ("data:image/png;base64,", "empty_image"),
    (data_url(png_header_only(20000, 20000)), "image_too_large"),
    (data_url(png_header_only(8000, 8000)), "image_too_large"),  # 64 MP: ours, not Pillow's
    (data_url(png_header_only(0, 0)), "invalid_image"),
    (data_url(encoded("JPEG"), "image/png"), "image_type_mismatch"),
    (data_url(PNG, "image/bmp"), "unsupported_image_type"),
    (data_url(PNG, "text/plain"), "unsupported_image_type"),
    (data_url(b"GIF89a not really"), "invalid_image"),
    (data_url(b"just some text"), "invalid_image"),
    ("data:image/png;base64,!!!!", "invalid_base64"),
    ("data:image/png;base64,iVBO\nRw0K", "invalid_base64"),
    ("data:image/png;base64,iVBORw0", "invalid_base64"),  # unpadded
    ("data:image/png," + "x" * 10, "invalid_data_url"),  # not base64
    ("data:image/png;base64", "invalid_data_url"),
    ("file:///etc/passwd", "unsupported_image_url"),
    ("ftp://example.com/a.png", "unsupported_image_url"),
    ("not a url", "unsupported_image_url"),
    ("https://example.com/a.png", "image_urls_disabled"),
    ("http://127.0.0.1/a.png", "image_urls_disabled"),
])
async def test_malformed_images_are_400_with_param(url: str, code: str) -> None:
    assert (await refusal(url)).code == code


async def test_huge_data_url_is_refused_from_its_length(monkeypatch: pytest.MonkeyPatch) -> None:
    """50 MB of base64: refused before any of it is decoded."""
    def boom(*a: Any, **k: Any) -> bytes:
        raise AssertionError("decoded")

    monkeypatch.setattr(dataurl.base64, "b64decode", boom)
    err = await refusal("data:image/png;base64," + "A" * (50 * MiB))
    assert err.code == "image_too_large" and str(MAX_IMAGE_BYTES) in err.message


def test_limit_is_exact() -> None:
    ok = base64.b64encode(b"\0" * 30).decode()
    assert dataurl.decode_base64(ok, "p", limit=30) == b"\0" * 30
    with pytest.raises(APIError):
        dataurl.decode_base64(ok, "p", limit=29)


async def test_anthropic_base64_mime_checked() -> None:
    images = ImageParts()
    images.add(ImageRef("s", data=base64.b64encode(encoded("WEBP")).decode(),
                        media_type="image/jpeg"))
    with pytest.raises(APIError) as info:
        await images.load(False)
    assert info.value.code == "image_type_mismatch" and info.value.param == "s"


def test_shown_hides_data() -> None:
    url = data_url(PNG)
    assert "iVBOR" not in shown(url) and shown(url).startswith("data:image/png;base64,...")
    assert len(shown("https://example.com/" + "a" * 500)) < 80


# ---- body size and vision -----------------------------------------------------------------


def test_body_over_text_limit_only_with_image_data() -> None:
    images = ImageParts()
    images.add(ImageRef("p", url="data:image/png;base64," + "A" * (20 * MiB)))
    images.check_body(21 * MiB)  # the excess is image data
    with pytest.raises(APIError) as info:
        images.check_body(20 * MiB + MAX_BODY_BYTES + 100)  # 8 MiB of text besides
    assert info.value.status == 413
    with pytest.raises(APIError):
        ImageParts().check_body(MAX_BODY_BYTES + 1)
    remote = ImageParts()
    remote.add(ImageRef("p", url="https://example.com/" + "a" * 100))
    with pytest.raises(APIError):
        remote.check_body(MAX_BODY_BYTES + 1)  # a URL's characters are not image data


async def test_no_vision_refuses_after_validation() -> None:
    images = ImageParts()
    images.add(ImageRef("messages[0].content[1].image_url", url=data_url(PNG)))
    loaded = await images.load(False)
    text_only = ModelFacts(model="m")
    with pytest.raises(APIError) as info:
        require_vision("tiny", text_only, loaded)
    err = info.value
    assert err.status == 400 and err.code == "model_has_no_vision"
    assert err.message.startswith("The model 'tiny' has no vision")
    assert err.param == "messages[0].content[1].image_url"
    require_vision("tiny", text_only, [])  # no images: nothing to refuse
    require_vision("v", ModelFacts(model="m", capabilities=["vision"]), loaded)
    assert no_vision("a", "p").param == "p"


@pytest.mark.parametrize("part", [{"type": "input_audio", "input_audio": {"data": "x"}},
                                  {"type": "file", "file": {"file_id": "f"}}, {"text": "no type"}])
def test_other_chat_parts_are_refused_not_dropped(part: dict[str, Any]) -> None:
    with pytest.raises(APIError) as info:
        _messages(chat_req(part), ImageParts())
    assert info.value.param == "messages[0].content[1].type"
    assert info.value.code == "unsupported_parameter"


_SEEDS = [encoded(f) for f in ("PNG", "JPEG", "WEBP", "GIF")] + [encoded("GIF", frames=2)]


@settings(max_examples=300, deadline=None)
@given(seed=st.sampled_from(_SEEDS), cuts=st.lists(st.tuples(st.integers(0, 2000),
                                                             st.integers(0, 255)), max_size=6),
       keep=st.integers(0, 2000))
def test_damaged_files_are_400_never_anything_else(seed: bytes, cuts: list[tuple[int, int]],
                                                   keep: int) -> None:
    """Any corruption of a valid file (bytes changed, cut short) decodes or is a 400."""
    data = bytearray(seed)
    for pos, value in cuts:
        data[pos % len(data)] = value
    try:
        got = check_image(bytes(data[: max(keep, 1)]), "p")
    except APIError as exc:
        assert exc.status == 400 and exc.param == "p"
    else:
        assert got.width * got.height > 0


async def test_image_body_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Up to 64 MiB is read; past 8 MiB without any base64 it is 413 before decoding."""
    from gateway.images import body as body_mod
    from gateway.images.body import read_image_body
    from tests.gateway.test_read_body import request

    big_image = json.dumps({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * (9 * MiB)}}
    ]}]}).encode()
    req, size = await read_image_body(request([big_image]), ChatCompletionRequest)
    assert size == len(big_image) and req.messages[0].content is not None

    def never(*a: Any) -> Any:
        raise AssertionError("decoded")

    monkeypatch.setattr(body_mod, "decode_body", never)
    text = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (9 * MiB) + b'"}]}'
    with pytest.raises(APIError) as info:
        await read_image_body(request([text]), ChatCompletionRequest)
    assert info.value.status == 413
    with pytest.raises(APIError) as info:
        await read_image_body(request([b"x" * (65 * MiB)]), ChatCompletionRequest)
    assert info.value.status == 413


async def test_decodes_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Concurrent requests decode at most MAX_CONCURRENT_DECODES images at a time."""
    import asyncio
    import threading
    import time

    from gateway.images import intake
    from gateway.images.limits import MAX_CONCURRENT_DECODES

    lock, now, peak = threading.Lock(), [0], [0]

    def slow(*args: Any) -> Any:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1
        return check_image(*args)

    monkeypatch.setattr(intake, "check_image", slow)

    async def one() -> None:
        images = ImageParts()
        images.add(ImageRef("p", url=data_url(PNG)))
        await images.load(False)

    await asyncio.gather(*(one() for _ in range(6)))
    assert peak[0] == MAX_CONCURRENT_DECODES


async def test_text_model_refuses_before_decoding_or_fetching() -> None:
    """for_model: a model without vision answers the no-vision 400 without decoding (a truncated
    PNG) or fetching (a URL that would be refused as private): only the body's own checks run."""
    text_only, vision = ModelFacts(model="m"), ModelFacts(model="m", capabilities=["vision"])
    broken = ImageParts()
    broken.add(ImageRef("p", url=data_url(truncated_png())))
    broken.add(ImageRef("q", url="http://127.0.0.1:9/a.png"))
    with pytest.raises(APIError) as info:
        await broken.for_model("tiny", text_only, allow_urls=True)
    assert (info.value.code, info.value.param) == ("model_has_no_vision", "p")
    with pytest.raises(APIError) as info:
        await broken.for_model("v", vision, allow_urls=True)
    assert (info.value.code, info.value.param) == ("invalid_image", "p")
    bad = ImageParts()
    bad.add(ImageRef("p", url="data:image/png;base64,@@@"))  # the body's own checks still run
    with pytest.raises(APIError) as info:
        await bad.for_model("tiny", text_only, allow_urls=False)
    assert info.value.code == "invalid_base64"
    off = ImageParts()
    off.add(ImageRef("p", url="https://example.com/a.png"))
    with pytest.raises(APIError) as info:
        await off.for_model("tiny", text_only, allow_urls=False)
    assert info.value.code == "image_urls_disabled"
    assert await ImageParts().for_model("tiny", text_only, allow_urls=False) == []
