"""Stored conversations without a server: item ids, replay, previous_response_id, saving."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
from starlette.requests import Request

from gateway.edge.errors import APIError
from gateway.responses.events import ResponseBuilder
from gateway.responses.history import as_input, input_items, replay
from gateway.responses.schemas import CreateResponse, InputItem
from gateway.responses.stored import Conversations
from gateway.responses.translate import to_messages
from gateway.storage.responses import ResponseStore


def _req(**kw: Any) -> CreateResponse:
    return msgspec.convert({"model": "m", "input": "hi", **kw}, CreateResponse)


def _request(key: str | None) -> Request:
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    return Request({"type": "http", "method": "POST", "path": "/v1/responses",
                    "headers": headers})


def test_input_items_get_unique_ids_and_text_parts() -> None:
    assert input_items(_req(), set())[0]["content"] == [{"type": "input_text", "text": "hi"}]
    items = input_items(_req(input=[
        {"role": "assistant", "content": "a", "id": "msg_1"},
        {"role": "user", "content": "b", "id": "msg_1"},  # a duplicate id is replaced
        {"type": "function_call_output", "call_id": "c", "output": "{}"}]), {"msg_0"})
    assert items[0] == {"id": "msg_1", "type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": "a"}]}
    assert items[1]["id"].startswith("msg_") and items[1]["id"] != "msg_1"
    assert items[2]["id"].startswith("fco_") and items[2]["output"] == "{}"


def test_replay_keeps_calls_and_reasoning_for_the_template() -> None:
    out = [{"id": "rs_1", "type": "reasoning", "summary": [], "status": "completed",
            "content": [{"type": "reasoning_text", "text": "think"}]},
           {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f",
            "arguments": '{"x": 1}', "status": "completed"}]
    items = replay({"output": out})
    follow = [{"type": "function_call_output", "call_id": "call_1", "output": "42"}]
    msgs = to_messages(_req(input=items + follow))
    assert msgs[0]["role"] == "assistant" and msgs[0]["reasoning_content"] == "think"
    assert msgs[0]["tool_calls"][0]["function"] == {"name": "f", "arguments": {"x": 1}}
    assert msgs[1] == {"role": "tool", "tool_call_id": "call_1", "content": "42", "name": "f"}
    assert [it.type for it in as_input(items)] == ["reasoning", "function_call"]


def test_owner_is_the_key_digest_only_with_keys() -> None:
    assert Conversations(None, keyed=False).owner(_request("k")) == ""
    keyed = Conversations(None, keyed=True)
    assert keyed.owner(_request("k")) == hashlib.sha256(b"k").hexdigest()


def test_previous_response_id(tmp_path: Path) -> None:
    async def body() -> None:
        store = ResponseStore(tmp_path / "r.sqlite3")
        await store.open()
        try:
            conv = Conversations(store, keyed=False)
            first = _req(input="one")
            items, weight = await conv.items(first, "", 123)
            assert weight == 123  # the body's size: nothing stored is continued
            b = ResponseBuilder("resp_1", {"store": True}, True)
            b.output.append({"id": "msg_out", "type": "message", "role": "assistant",
                             "status": "completed",
                             "content": [{"type": "output_text", "text": "two"}]})
            await conv.saver(first, "", items).commit(b.response("completed"))
            got, weight = await conv.items(_req(input="three", previous_response_id="resp_1"),
                                           "", 10)
            stored = await store.conversation("resp_1", "")
            assert stored is not None and weight == stored[2] > 10  # the stored bytes decide
            assert stored[2] == len(msgspec.json.encode(stored[0])) + sum(
                len(msgspec.json.encode(it)) for it in stored[1])
            assert [(it["id"], it["content"][0]["text"]) for it in got][1:2] == [
                ("msg_out", "two")]
            assert [it["content"][0]["text"] for it in got] == ["one", "two", "three"]
            for owner, code in [("other", "previous_response_not_found")]:
                with pytest.raises(APIError) as exc:
                    await conv.items(_req(previous_response_id="resp_1"), owner)
                assert (exc.value.status, exc.value.code, exc.value.param) == (
                    400, code, "previous_response_id")
            assert not conv.saver(_req(store=False), "", []).store
        finally:
            await store.close()
    asyncio.run(body())
    with pytest.raises(APIError) as exc:
        asyncio.run(Conversations(None, keyed=False).items(
            _req(previous_response_id="resp_1"), ""))
    assert exc.value.code == "unsupported_parameter" and "--no-store" in exc.value.message
    assert not Conversations(None, keyed=False).saver(_req(), "", []).store


def test_a_failed_write_is_never_reported_completed(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "r.sqlite3")  # never opened: every write fails
    saver = Conversations(store, keyed=False).saver(_req(), "", [])
    b = ResponseBuilder("resp_1", {"store": True}, True)
    done = {"type": "response.completed", "response": b.response("completed")}
    with pytest.raises(APIError) as exc:
        asyncio.run(saver.commit(done["response"]))
    assert exc.value.status == 500 and exc.value.code == "storage_error"
    last = asyncio.run(saver.final(b, done))
    assert last["type"] == "response.failed" and "could not be stored" in str(last)
    failed = b.fail("server_error", "worker died")
    assert asyncio.run(saver.failed(failed)) == failed  # no second error on top


def test_a_response_over_the_byte_bound_is_answered_store_false(tmp_path: Path) -> None:
    async def body() -> None:
        store = ResponseStore(tmp_path / "r.sqlite3", max_bytes=100)
        await store.open()
        try:
            saver = Conversations(store, keyed=False).saver(_req(), "", [])
            b = ResponseBuilder("resp_1", {"store": True}, True)
            done = {"type": "response.completed", "response": b.response("completed")}
            last = await saver.final(b, done)  # no error: the request does not fail
            assert last["type"] == "response.completed" and last["response"]["store"] is False
            assert await store.get("resp_1", "") is None
        finally:
            await store.close()
    asyncio.run(body())


def test_as_input_converts_in_chunks_with_the_same_result_and_errors() -> None:
    items = [{"id": f"m{i}", "type": "message", "role": "user",
              "content": [{"type": "input_text", "text": str(i)}]} for i in range(2500)]
    assert as_input(items) == msgspec.convert(items, list[InputItem])
    assert as_input([]) == []
    bad = [*items[:2000], {"type": 5}]
    with pytest.raises(msgspec.ValidationError, match=r"\$\[2000\]"):  # the item's own index
        as_input(bad)


def test_a_stored_conversation_has_at_most_max_stored_items(tmp_path: Path) -> None:
    """More items than MAX_STORED_ITEMS: a 400 when the response would be stored, else none
    (old code: no bound; a put of 100,000 items held the store thread 7.5 s)."""
    from gateway.edge.limits import MAX_STORED_ITEMS
    conv = Conversations(ResponseStore(tmp_path / "r.db"), keyed=False)
    items = [{"id": f"rs_{i}", "type": "reasoning"} for i in range(MAX_STORED_ITEMS)]
    assert conv.saver(_req(), "", items).store is True  # at the bound: stored
    with pytest.raises(APIError) as exc:
        conv.saver(_req(), "", [*items, {"id": "one_more", "type": "reasoning"}])
    assert (exc.value.status, exc.value.code, exc.value.param) == (400, "too_many_items", "input")
    assert conv.saver(_req(store=False), "", [*items, {"id": "x"}]).store is False
    assert Conversations(None, keyed=False).saver(_req(), "", [*items, {"id": "x"}]).store is False


def test_a_large_stored_response_is_served_without_decoding_it_on_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GET /v1/responses/{id} sends the stored JSON as it is. Old code: it was decoded and
    encoded again on the event loop (~140 ms for 7 MiB of instructions at load 5, every GET:
    one key polling its large response stalled every other stream)."""
    import json
    import threading

    from starlette.applications import Starlette
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from gateway.responses.retrieve import StoredEndpoints

    store = ResponseStore(tmp_path / "r.db")
    response = {"id": "resp_big", "object": "response", "instructions": "é" * (1 << 20)}
    on_loop: list[str] = []

    def spy(inner: Any, name: str) -> Any:
        def call(data: Any, *args: Any, **kwargs: Any) -> Any:
            big = len(data) > 1 << 20 if isinstance(data, (bytes, str)) else \
                data is not None and len(str(data)[:1 << 21]) > 1 << 20
            if big and not threading.current_thread().name.startswith("rapid-mlx-store"):
                on_loop.append(name)
            return inner(data, *args, **kwargs)
        return call

    async def app_with(store: ResponseStore) -> Starlette:
        await store.open()
        await store.put("resp_big", "", response, [])
        stored = StoredEndpoints(Conversations(store, keyed=False))
        return Starlette(routes=[Route("/v1/responses/{response_id}", stored.get)])

    with TestClient(Starlette()) as portal_client:
        app = portal_client.portal.call(app_with, store)  # type: ignore[union-attr]
        monkeypatch.setattr(msgspec.json, "decode", spy(msgspec.json.decode, "decode"))
        monkeypatch.setattr(json, "dumps", spy(json.dumps, "json.dumps"))
        with TestClient(app) as client:
            r = client.get("/v1/responses/resp_big")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert json.loads(r.content) == response
        assert on_loop == []  # old code: ['decode', 'json.dumps']
        portal_client.portal.call(store.close)  # type: ignore[union-attr]


def test_a_conversation_too_large_is_not_continued_into_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reasoning items with no assistant message after them reach no prompt, so a chain could
    grow by a whole body a turn at one token each, up to the store's byte bound (old code: any
    size continued and stored again). Now continuing a stored conversation of more than
    MAX_STORED_CONVERSATION_BYTES is a 400 unless the new turn is not stored."""
    from gateway.responses import stored as stored_module
    monkeypatch.setattr(stored_module, "MAX_STORED_CONVERSATION_BYTES", 1 << 20, raising=False)
    store = ResponseStore(tmp_path / "r.db")
    conv = Conversations(store, keyed=False)
    thought = {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "x" * 4096}]}

    async def go() -> None:
        await store.open()
        items, _ = await conv.items(_req(input=[thought] * 300), "")  # 1.2 MiB, no prompt
        await store.put("resp_1", "", {"id": "resp_1", "output": []}, items)
        with pytest.raises(APIError) as exc:
            await conv.items(_req(previous_response_id="resp_1"), "")
        assert (exc.value.status, exc.value.code) == (400, "conversation_too_large")
        assert exc.value.param == "previous_response_id"
        unstored = _req(previous_response_id="resp_1", store=False)
        items, weight = await conv.items(unstored, "")
        assert weight > 1 << 20 and len(items) == 301
        assert conv.saver(unstored, "", items, weight).store is False
        await store.close()

    asyncio.run(go())


def test_a_large_page_of_input_items_is_encoded_off_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GET .../input_items encodes its page in the large-body pool. Old code: json.dumps on the
    event loop (70-180 ms for 8 MiB of items at load 6, for any page a key asks for)."""
    import json
    import threading

    from starlette.applications import Starlette
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from gateway.responses.retrieve import StoredEndpoints

    store = ResponseStore(tmp_path / "r.db")
    items = [{"id": f"rs_{i}", "type": "reasoning",
              "content": [{"type": "reasoning_text", "text": "é" * (300 << 10)}]} for i in range(5)]
    on_loop: list[str] = []
    loop_thread: list[threading.Thread] = []

    def spy(inner: Any, name: str) -> Any:
        def call(data: Any, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() in loop_thread and isinstance(data, dict) \
                    and data.get("object") == "list":
                on_loop.append(name)
            return inner(data, *args, **kwargs)
        return call

    async def app_with(store: ResponseStore) -> Starlette:
        loop_thread.append(threading.current_thread())
        await store.open()
        await store.put("resp_big", "", {"id": "resp_big", "output": []}, items)
        stored = StoredEndpoints(Conversations(store, keyed=False))
        return Starlette(routes=[Route("/v1/responses/{response_id}/input_items",
                                       stored.input_items)])

    with TestClient(Starlette()) as portal_client:
        app = portal_client.portal.call(app_with, store)  # type: ignore[union-attr]
        monkeypatch.setattr(msgspec.json, "encode", spy(msgspec.json.encode, "encode"))
        monkeypatch.setattr(json, "dumps", spy(json.dumps, "json.dumps"))
        with TestClient(app) as client:
            loop_thread.append(client.portal.call(threading.current_thread))  # type: ignore
            r = client.get("/v1/responses/resp_big/input_items?order=asc")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        got = json.loads(r.content)
        assert got["data"] == items and (got["first_id"], got["last_id"]) == ("rs_0", "rs_4")
        assert on_loop == []  # old code: ['json.dumps']
        portal_client.portal.call(store.close)  # type: ignore[union-attr]
