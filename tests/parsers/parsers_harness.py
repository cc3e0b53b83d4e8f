"""Shared table-driven harness for the parser tests: whole vs. every chunking."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from parsers import OutputParser, aggregate, make_reasoning_parser, make_tool_parser
from parsers.types import ParseDelta, ParsedMessage

ID_RE = re.compile(r"call_[0-9a-f]{24}")


class Feeder(Protocol):
    def feed(self, text: str) -> ParseDelta: ...
    def finish(self) -> ParseDelta: ...


Factory = Callable[[], Feeder]


@dataclass(frozen=True)
class Case:
    """One input text and the expected parse."""

    id: str
    text: str
    content: str = ""
    calls: tuple[tuple[str, Any], ...] = ()
    reasoning: str = ""
    tools: Any = None
    think_opened: bool = False


def tool_factory(name: str, case: Case) -> Factory:
    return lambda: make_tool_parser(name, case.tools)


def reasoning_factory(name: str, case: Case) -> Factory:
    return lambda: make_reasoning_parser(name, think_opened=case.think_opened)


def pipeline_factory(
    tool: str | None, reasoning: str | None, **kw: Any
) -> Callable[[Case], Factory]:
    def make(case: Case) -> Factory:
        return lambda: OutputParser(
            tool, reasoning, tools=case.tools, think_opened=case.think_opened, **kw
        )

    return make


def run(factory: Factory, chunks: Sequence[str]) -> tuple[ParsedMessage, list[ParseDelta]]:
    parser = factory()
    deltas = [parser.feed(chunk) for chunk in chunks]
    deltas.append(parser.finish())
    return aggregate(deltas), deltas


def normalized(msg: ParsedMessage) -> tuple[str, str, list[tuple[str, str]]]:
    """The message without call ids (which are random per parser)."""
    return msg.content, msg.reasoning, [(c.name, c.arguments) for c in msg.tool_calls]


def check_invariants(msg: ParsedMessage, deltas: list[ParseDelta]) -> None:
    """Delta protocol: sequential indexes, id+name on first delta only, canonical JSON args."""
    seen: dict[int, str] = {}
    for delta in deltas:
        for tc in delta.tool_calls:
            if tc.index not in seen:
                assert tc.index == len(seen), "call indexes must count 0, 1, 2..."
                assert tc.id is not None and ID_RE.fullmatch(tc.id), tc.id
                assert tc.name, "first delta of a call names it"
                seen[tc.index] = tc.id
            else:
                assert tc.id is None and tc.name is None
    assert len(set(seen.values())) == len(seen), "ids are unique"
    for index, call in enumerate(msg.tool_calls):
        obj = json.loads(call.arguments)
        assert isinstance(obj, dict), call.arguments
        assert call.arguments == json.dumps(obj, ensure_ascii=False), call.arguments
        assert call.id == seen[index]


def check_stream_equals_whole(factory: Factory, text: str) -> ParsedMessage:
    """Parse whole, then at every 2-way split and char by char; all must agree."""
    whole, deltas = run(factory, [text])
    check_invariants(whole, deltas)
    ref = normalized(whole)
    for i in range(len(text) + 1):
        msg, deltas = run(factory, [text[:i], text[i:]])
        assert normalized(msg) == ref, f"split at {i}: {text[:i]!r} | {text[i:]!r}"
        check_invariants(msg, deltas)
    msg, deltas = run(factory, list(text))
    assert normalized(msg) == ref, "char-by-char"
    check_invariants(msg, deltas)
    return whole


def check_case(factory: Factory, case: Case) -> None:
    """The expected result, obtained whole and under every chunking."""
    whole = check_stream_equals_whole(factory, case.text)
    assert whole.content == case.content, (whole.content, case.content)
    assert whole.reasoning == case.reasoning, (whole.reasoning, case.reasoning)
    got = [(c.name, json.loads(c.arguments)) for c in whole.tool_calls]
    assert got == list(case.calls), got


def ids(cases: Sequence[Case]) -> list[str]:
    names = [c.id for c in cases]
    assert len(names) == len(set(names)), "duplicate case ids"
    return names


WEATHER_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "typed",
            "parameters": {
                "type": "object",
                "properties": {
                    "s": {"type": "string"},
                    "i": {"type": "integer"},
                    "n": {"type": "number"},
                    "b": {"type": "boolean"},
                    "o": {"type": "object"},
                    "a": {"type": "array", "items": {"type": "integer"}},
                    "nn": {"type": ["integer", "null"]},
                    "opt": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "e": {"enum": [1, 2, 3]},
                },
            },
        },
    },
]
