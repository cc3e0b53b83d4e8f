"""Stored responses end to end: the real server and workers, the demo model, the openai SDK."""

from __future__ import annotations

import json
import sqlite3
import stat
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

WEATHER = [{"type": "function", "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]
NO_THINK = {"effort": "none"}
PAGE = 16  # the workers' KV page: the radix cache shares whole pages


def _client(server: Server, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0)


def _ask(client: openai.OpenAI, text: str = "Say hello.", **kw: Any) -> Any:
    kw.setdefault("reasoning", NO_THINK)
    return client.responses.create(model="default", input=text, max_output_tokens=12,
                                   temperature=0, **kw)


def test_created_equals_retrieved_and_delete(server: Server) -> None:
    client = _client(server)
    created = _ask(client)
    assert created.store is True
    got = client.responses.retrieve(created.id)
    assert got.model_dump() == created.model_dump()
    raw = httpx.delete(f"{server.url}/responses/{created.id}", timeout=10)
    assert raw.json() == {"id": created.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    again = httpx.delete(f"{server.url}/responses/{created.id}", timeout=10)
    assert again.status_code == 404 and again.json()["error"]["param"] == "response_id"
    second = _ask(client)
    client.responses.delete(second.id)  # the SDK's own delete
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(second.id)


def test_input_items_pagination_both_orders(server: Server) -> None:
    client = _client(server)
    convo = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"line {i}"}
             for i in range(7)]
    created = _ask(client, convo)  # type: ignore[arg-type]
    for order in ("asc", "desc"):
        seen, after = [], None
        while True:
            page = client.responses.input_items.list(created.id, limit=3, order=order,
                                                     **({"after": after} if after else {}))
            assert len(page.data) <= 3
            assert page.first_id == page.data[0].id and page.last_id == page.data[-1].id
            seen += page.data
            if not page.has_more:
                break
            after = page.last_id
        texts = [it.content[0].text for it in seen]  # type: ignore[union-attr]
        want = [m["content"] for m in convo]
        assert texts == (want if order == "asc" else want[::-1])
        assert len({it.id for it in seen}) == 7 and all(it.id.startswith("msg_") for it in seen)
    default = client.responses.input_items.list(created.id)  # desc, 20
    assert [it.id for it in default.data] == [it.id for it in seen]
    for query, param in [("limit=0", "limit"), ("limit=101", "limit"), ("limit=x", "limit"),
                         ("order=up", "order"), ("after=msg_nope", "after")]:
        r = httpx.get(f"{server.url}/responses/{created.id}/input_items?{query}", timeout=10)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (query, r.text)


def test_previous_response_id_reuses_the_kv(server: Server) -> None:
    client = _client(server)
    system = "You are a terse assistant who answers in one line. " * 8
    first = _ask(client, "My name is Ada.", instructions=system)
    second = _ask(client, "What is my name?", instructions=system,
                  previous_response_id=first.id)
    assert second.previous_response_id == first.id
    u1, u2 = first.usage, second.usage
    assert u1 is not None and u2 is not None
    assert u2.input_tokens > u1.input_tokens + u1.output_tokens  # the history is in the prompt
    # the template renders the earlier assistant turn without the generation prompt's empty
    # think block, so the prompts part a few tokens before turn 1's end: all but one page
    assert u2.input_tokens_details.cached_tokens >= (u1.input_tokens // PAGE - 1) * PAGE > 0
    items = client.responses.input_items.list(second.id, order="asc").data
    assert [(it.type, getattr(it, "role", None)) for it in items] == [
        ("message", "user"), ("message", "assistant"), ("message", "user")]
    assert items[1].id == first.output[0].id  # the output item, replayed with its id
    # instructions are not carried over: a third turn without them has none
    third = _ask(client, "And again?", previous_response_id=second.id)
    assert third.instructions is None
    assert len(client.responses.input_items.list(third.id).data) == 5


@pytest.mark.parametrize("thinking", [False, True])
def test_tool_round_trip_through_previous_response_id(server: Server, thinking: bool) -> None:
    client = _client(server)
    kw: dict[str, Any] = {"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}} \
        if thinking else {"reasoning": NO_THINK}
    first = client.responses.create(model="default", input="What's the weather in Paris?",
                                    tools=WEATHER, temperature=0, max_output_tokens=200,
                                    **kw)  # type: ignore[arg-type]
    calls = [o for o in first.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather", first.output
    result = {"type": "function_call_output", "call_id": calls[0].call_id,
              "output": json.dumps({"city": "Paris", "temperature_c": 21, "sky": "sunny"})}
    second = client.responses.create(model="default", input=[result],  # type: ignore[list-item]
                                     previous_response_id=first.id, tools=WEATHER,
                                     temperature=0, max_output_tokens=120,
                                     **kw)  # type: ignore[arg-type]
    assert second.output_text and not [o for o in second.output if o.type == "function_call"]
    if not thinking:
        assert "21" in second.output_text or "sunny" in second.output_text.lower()
    u1, u2 = first.usage, second.usage
    assert u1 is not None and u2 is not None
    cached = u2.input_tokens_details.cached_tokens
    if thinking:
        # the reasoning item and the call are replayed as generated, after the last user turn
        # (which the template renders with its thinking): the KV of generated tokens is reused
        assert [o.type for o in first.output] == ["reasoning", "function_call"]
        assert cached > u1.input_tokens
    else:  # the template drops the empty think block of the generation prompt from history
        assert cached >= (u1.input_tokens // PAGE - 1) * PAGE > 0


def test_streamed_response_is_stored(server: Server) -> None:
    last: dict[str, Any] = {}
    with httpx.stream("POST", f"{server.url}/responses", timeout=60, json={
            "model": "default", "input": "Say hello.", "reasoning": NO_THINK, "stream": True,
            "temperature": 0, "max_output_tokens": 12}) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                last = json.loads(line[6:])
    assert last["type"] in ("response.completed", "response.incomplete")
    final = last["response"]
    assert final["store"] is True
    got = httpx.get(f"{server.url}/responses/{final['id']}", timeout=10).json()
    assert got == final
    sdk = _client(server).responses.retrieve(final["id"])  # and the SDK reads it back
    assert sdk.output_text == "".join(p["text"] for p in final["output"][0]["content"])


def test_store_false_is_not_retrievable(server: Server) -> None:
    client = _client(server)
    resp = _ask(client, store=False)
    assert resp.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(resp.id)
    r = httpx.post(f"{server.url}/responses", timeout=30, json={
        "model": "default", "input": "hi", "previous_response_id": resp.id})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "previous_response_not_found"
    assert r.json()["error"]["param"] == "previous_response_id"


def test_stream_query_on_retrieve_is_refused(server: Server) -> None:
    resp = _ask(_client(server))
    r = httpx.get(f"{server.url}/responses/{resp.id}?stream=true", timeout=10)
    assert r.status_code == 400 and r.json()["error"]["param"] == "stream"


def test_openapi_lists_the_stored_routes(server: Server) -> None:
    spec = httpx.get(f"{server.base}/openapi.json", timeout=10).json()
    paths = spec["paths"]
    assert set(paths["/v1/responses/{response_id}"]) == {"get", "delete"}
    items = paths["/v1/responses/{response_id}/input_items"]["get"]
    assert {p["name"] for p in items["parameters"]} == {"response_id", "limit", "order", "after"}
    assert "ResponseItemList" in spec["components"]["schemas"]


def test_no_store() -> None:
    srv = Server("--no-store").wait_ready()
    try:
        client = _client(srv)
        resp = _ask(client)
        assert resp.store is False  # store defaults to true: answered, not refused
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(resp.id)
        with pytest.raises(openai.BadRequestError) as exc:
            _ask(client, previous_response_id=resp.id)
        assert "--no-store" in exc.value.message
        assert not list(Path(srv.own_data_dir or "").iterdir())  # no database was created
    finally:
        srv.stop()


def test_visibility_per_key_and_retention() -> None:
    srv = Server("--api-key", "key-one", "--api-key", "key-two",
                 "--responses-max-count", "3").wait_ready()
    try:
        one, two = _client(srv, "key-one"), _client(srv, "key-two")
        mine = _ask(one)
        assert one.responses.retrieve(mine.id).id == mine.id
        with pytest.raises(openai.NotFoundError):
            two.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            two.responses.input_items.list(mine.id)
        with pytest.raises(openai.NotFoundError):
            two.responses.delete(mine.id)
        with pytest.raises(openai.BadRequestError):
            _ask(two, previous_response_id=mine.id)
        follow = _ask(one, previous_response_id=mine.id).id
        assert one.responses.retrieve(follow).previous_response_id == mine.id
        # retention: 3 survive; over the bound the key holding the most loses its oldest (of two
        # holding as much, the one holding the oldest): key-one keeps its follow-up
        later = [_ask(two).id for _ in range(3)]
        with pytest.raises(openai.NotFoundError):
            one.responses.retrieve(mine.id)
        assert one.responses.retrieve(follow).id == follow
        with pytest.raises(openai.NotFoundError):
            two.responses.retrieve(later[0])
        assert [two.responses.retrieve(rid).id for rid in later[1:]] == later[1:]
        db = Path(srv.own_data_dir or "") / "responses.sqlite3"
        with sqlite3.connect(db) as conn:
            owners = {r[0] for r in conn.execute("SELECT owner FROM responses")}
        assert len(owners) == 2 and not any("key-" in o for o in owners)  # digests, not keys
    finally:
        srv.stop()


def test_survives_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = Server("--data-dir", str(data)).wait_ready()
    try:
        created = _ask(_client(srv))
    finally:
        srv.stop()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    again = Server("--data-dir", str(data)).wait_ready()
    try:
        client = _client(again)
        assert client.responses.retrieve(created.id).model_dump() == created.model_dump()
        follow = _ask(client, "More?", previous_response_id=created.id)
        assert follow.status in ("completed", "incomplete")
    finally:
        again.stop()


def test_byte_bound_drops_the_oldest_and_the_file_follows() -> None:
    bound = 24 << 10
    srv = Server("--responses-max-bytes", "24KiB").wait_ready()
    try:
        client = _client(srv)
        note = "Summarize this note in one word. " + "The quick brown fox jumps. " * 60
        made = [_ask(client, f"{i}. {note}") for i in range(16)]  # ~3 KiB each: twice the bound
        assert all(r.store for r in made)
        db = Path(srv.own_data_dir or "") / "responses.sqlite3"
        with sqlite3.connect(db) as conn:
            sizes = dict(conn.execute("SELECT id, size FROM responses"))
        assert 0 < sum(sizes.values()) <= bound
        kept = [r.id for r in made if r.id in sizes]
        assert 2 <= len(kept) < len(made) and kept == [r.id for r in made[-len(kept):]]
        for gone in made[:-len(kept)]:  # the oldest first
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve(gone.id)
        assert [client.responses.retrieve(rid).id for rid in kept] == kept
        follow = _ask(client, "One more word?", previous_response_id=kept[-1])
        assert follow.store and client.responses.retrieve(follow.id).id == follow.id
        assert db.stat().st_size <= 4 * bound, db.stat().st_size  # pages, indexes, slack
    finally:
        srv.stop()


def test_a_response_larger_than_the_byte_bound_is_answered_not_stored() -> None:
    srv = Server("--responses-max-bytes", "200").wait_ready()
    try:
        client = _client(srv)
        resp = _ask(client)
        assert resp.status in ("completed", "incomplete") and resp.store is False
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(resp.id)
        with pytest.raises(openai.BadRequestError):
            _ask(client, previous_response_id=resp.id)
        last: dict[str, Any] = {}
        with httpx.stream("POST", f"{srv.url}/responses", timeout=60, json={
                "model": "default", "input": "Say hello.", "reasoning": NO_THINK,
                "stream": True, "temperature": 0, "max_output_tokens": 12}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    last = json.loads(line[6:])
        assert last["type"] in ("response.completed", "response.incomplete")
        assert last["response"]["store"] is False
        assert any("not stored" in line for line in srv.lines)
    finally:
        srv.stop()


def test_a_conversation_too_long_to_store_is_refused_before_generation(server: Server) -> None:
    """Old code: any number of input items was stored (a row each, rewritten at every turn of
    a chain, on the store's one thread): 100,000 empty reasoning items, no prompt token, held
    every key's store reads 7.5 s, longer at each turn. Now a conversation of more than
    MAX_STORED_ITEMS (with previous_response_id's) is a 400 unless it is not stored."""
    from gateway.edge.limits import MAX_STORED_ITEMS
    half = MAX_STORED_ITEMS // 2 + 1
    thoughts = [{"type": "reasoning", "content": []}] * half

    def post(**body: Any) -> httpx.Response:
        return httpx.post(f"{server.url}/responses", timeout=120, json={
            "model": "default", "max_output_tokens": 2, "reasoning": NO_THINK, **body})

    first = post(input=[*thoughts, {"role": "user", "content": "Hi"}])
    assert first.status_code == 200, first.text  # half the bound: stored
    r = post(input=[*thoughts, {"role": "user", "content": "Hi"}],
             previous_response_id=first.json()["id"])
    assert r.status_code == 400, r.text  # old code: 200, twice as many items stored
    err = r.json()["error"]
    assert (err["code"], err["param"]) == ("too_many_items", "input")
    assert str(MAX_STORED_ITEMS) in err["message"]
    unstored = post(input=[*thoughts, {"role": "user", "content": "Hi"}], store=False,
                    previous_response_id=first.json()["id"])
    assert unstored.status_code == 200, unstored.text
