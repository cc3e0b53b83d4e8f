"""What the coding agents send that needed a fix at the protocol edge (no server).

The Codex CLI (0.171) request below is the shape it sends on every turn, shortened: function
tools, a `namespace` tool grouping the multi-agent functions, a hosted `web_search` tool,
`include`, `prompt_cache_key`, `client_metadata`, `reasoning.summary`, developer messages with ids.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import pytest

from gateway.doors.choice import Delta
from gateway.edge.errors import APIError
from gateway.responses.events import ResponseBuilder
from gateway.responses.schemas import CreateResponse
from gateway.responses.tooltypes import served_tools
from gateway.responses.translate import to_messages, to_tools

FN = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
CODEX = {
    "model": "default", "stream": True, "tool_choice": "auto", "parallel_tool_calls": True,
    "reasoning": {"summary": "auto"}, "store": False, "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "01a2", "client_metadata": {"x-codex-turn-metadata": "{}"},
    "tools": [
        {"type": "function", "name": "exec_command", "description": "Run", "strict": False,
         "parameters": FN},
        {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
         "tools": [{"type": "function", "name": "close_agent", "description": "Close",
                    "strict": False, "parameters": FN}]},
        {"type": "web_search", "external_web_access": False},
    ],
    "input": [
        {"type": "message", "id": "msg_1", "role": "developer",
         "content": [{"type": "input_text", "text": "You are Codex."}]},
        {"type": "message", "id": "msg_2", "role": "user",
         "content": [{"type": "input_text", "text": "Say hello."}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
        {"type": "function_call", "call_id": "c1", "name": "close_agent", "arguments": "{}",
         "namespace": "multi_agent_v1"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ],
}


def _req(**over: Any) -> CreateResponse:
    return msgspec.convert({**CODEX, **over}, CreateResponse)


def test_codex_request_is_served(caplog: pytest.LogCaptureFixture) -> None:
    req = _req()
    with caplog.at_level(logging.WARNING, "rapid_mlx.gateway"):
        tools, parse, prefix, _ = to_tools(req, "hermes")
    assert [t["function"]["name"] for t in tools or []] == ["exec_command", "close_agent"]
    assert parse and prefix == ""
    assert "web_search" in caplog.text  # left out, and said so
    msgs = to_messages(req)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[2]["tool_calls"][0]["function"]["name"] == "close_agent"


def test_a_call_into_a_namespace_carries_it() -> None:
    _, namespaces = served_tools(_req().tools or [])
    b = ResponseBuilder("resp_1", {}, True)
    b.namespaces = namespaces
    for name in ("close_agent", "exec_command"):
        b.feed(Delta(tool_calls=[{"index": 0 if name == "close_agent" else 1, "id": "c",
                                  "function": {"name": name, "arguments": "{}"}}]), 1)
    out = b.finish("tool_calls", {"output_tokens_details": {}})[-1]["response"]["output"]
    assert [(o["name"], o.get("namespace")) for o in out] == [
        ("close_agent", "multi_agent_v1"), ("exec_command", None)]


@pytest.mark.parametrize(("tools", "choice", "param"), [
    ([{"type": "banana"}], None, "tools[0].type"),
    ([{"type": "web_search"}], {"type": "web_search"}, "tool_choice"),
    ([{"type": "function", "name": "f"}, {"type": "namespace", "name": "n",
      "tools": [{"type": "function", "name": "f"}]}], None, "tools"),
    ([{"type": "namespace", "tools": []}], None, "tools[0].name"),
    ([{"type": "namespace", "name": "n", "tools": [{"type": "function"}]}], None,
     "tools[0].tools[0].name"),
    # inside a namespace as at the top: hosted types are left out, unknown ones refused
    ([{"type": "namespace", "name": "n", "tools": [{"type": "banana\nforged log line"}]}], None,
     "tools[0].tools[0].type"),
])
def test_refused_tools(tools: list[dict[str, Any]], choice: Any, param: str) -> None:
    with pytest.raises(APIError) as info:
        to_tools(_req(tools=tools, tool_choice=choice or "auto"), None)
    assert info.value.status == 400 and info.value.param == param


def test_only_hosted_tools_offered_is_a_plain_answer() -> None:
    assert to_tools(_req(tools=[{"type": "web_search"}, {"type": "custom", "name": "x"}]),
                    None) == (None, False, "", None)


def test_many_left_out_tools_log_one_short_line(caplog: pytest.LogCaptureFixture) -> None:
    """A body of 100k hosted tools is one log line naming each type once, not 1 MB of log."""
    tools = [{"type": "web_search"}] * 100_000 + [
        {"type": "namespace", "name": "n", "tools": [{"type": "mcp"}] * 1000}]
    with caplog.at_level(logging.WARNING, "rapid_mlx.gateway"):
        assert to_tools(_req(tools=tools), None) == (None, False, "", None)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "web_search" in line and "mcp" in line and len(line) < 300, line[:300]


def test_the_namespaces_lookup_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """The endpoint reads the namespaces after to_tools logged the left-out tools: one line."""
    with caplog.at_level(logging.WARNING, "rapid_mlx.gateway"):
        _, namespaces = served_tools(_req().tools or [], quiet=True)
    assert namespaces == {"close_agent": "multi_agent_v1"} and "web_search" not in caplog.text
