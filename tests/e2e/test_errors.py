"""Bad input gets an OpenAI error envelope with the right status, never a 500 or a hang."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.e2e.harness import Server


def _post(server: Server, path: str, body: bytes | dict) -> httpx.Response:
    if isinstance(body, dict):
        return httpx.post(f"{server.url}{path}", json=body, timeout=30)
    return httpx.post(f"{server.url}{path}", content=body, timeout=30,
                      headers={"content-type": "application/json"})


def _envelope(r: httpx.Response) -> dict:
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


@pytest.mark.parametrize("body,param", [
    (b"{not json", None),
    ({"model": "default", "messages": "hi"}, "messages"),
    ({"model": "default", "messages": []}, "messages"),
    ({"model": "default", "messages": [{"role": "user", "content": "x"}], "temperature": 5}, "temperature"),
    ({"model": "default", "messages": [{"role": "user", "content": "x"}], "top_p": -1}, "top_p"),
    ({"model": "default", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"model": "default", "messages": [{"role": "user", "content": "x"}], "n": 99}, "n"),
    ({"model": "default", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "x"}]}, None),
    ({"model": "default", "messages": [{"role": "user", "content": "x"}], "stop": [""]}, "stop"),
])
def test_400s(server: Server, body: bytes | dict, param: str | None) -> None:
    r = _post(server, "/chat/completions", body)
    assert r.status_code == 400, r.text
    err = _envelope(r)
    assert err["type"] == "invalid_request_error"
    if param:
        assert err["param"] == param


def test_unknown_model_is_404_naming_available(server: Server) -> None:
    r = _post(server, "/chat/completions", {"model": "nope", "messages": [{"role": "user",
                                                                            "content": "x"}]})
    assert r.status_code == 404
    err = _envelope(r)
    assert err["code"] == "model_not_found" and "default" in err["message"]


def test_context_length_exceeded(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    long = "hello " * 20_000  # a prompt over the context (an output over it is clamped)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="default", messages=[{"role": "user", "content": long}],
                                       stream=True)
    assert info.value.code == "context_length_exceeded"
    assert "maximum context length is" in info.value.message


def test_completions_bad_prompt(server: Server) -> None:
    r = _post(server, "/completions", {"model": "default", "prompt": [1.5, "x"]})
    assert r.status_code == 400 and _envelope(r)["param"] == "prompt"


def test_unknown_route_and_method(server: Server) -> None:
    assert _envelope(httpx.get(f"{server.url}/nothing"))["code"] == "404"
    r = httpx.get(f"{server.url}/chat/completions")
    assert r.status_code == 405 and _envelope(r)


def test_server_still_serves_after_bad_input(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="x")
    out = client.chat.completions.create(model="default", messages=[{"role": "user",
                                                                      "content": "Hi"}], max_tokens=3)
    assert out.choices[0].finish_reason in ("stop", "length")
