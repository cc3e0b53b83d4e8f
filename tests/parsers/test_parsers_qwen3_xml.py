"""Qwen3-Coder XML tool calls (qwen3_xml / qwen3_coder_xml)."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import WEATHER_TOOLS, Case, check_case, ids, tool_factory

T = WEATHER_TOOLS


def fn(name: str, *params: tuple[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<function={name}>\n{body}</function>"


def block(*functions: str) -> str:
    return "<tool_call>\n" + "\n".join(functions) + "\n</tool_call>"


CASES = [
    Case(
        "documented",
        block(fn("get_weather", ("city", "Paris"), ("days", "3"))),
        calls=(("get_weather", {"city": "Paris", "days": 3}),),
        tools=T,
    ),
    Case("plain", "No tools needed.", content="No tools needed."),
    Case(
        "text-around",
        "Checking.\n\n" + block(fn("get_weather", ("city", "Oslo"))) + "\n\nOne moment.",
        content="Checking.\n\nOne moment.",
        calls=(("get_weather", {"city": "Oslo"}),),
        tools=T,
    ),
    Case(
        "two-blocks",
        block(fn("get_weather", ("city", "A"))) + "\n" + block(fn("get_weather", ("city", "B"))),
        calls=(("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})),
        tools=T,
    ),
    Case(
        "two-functions-one-block",
        block(fn("get_weather", ("city", "A")), fn("get_weather", ("city", "B"))),
        calls=(("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})),
        tools=T,
    ),
    Case(
        "bare-function",
        "Sure.\n" + fn("get_weather", ("city", "Rome")),
        content="Sure.",
        calls=(("get_weather", {"city": "Rome"}),),
        tools=T,
    ),
    Case(
        "typed-values",
        block(
            fn(
                "typed",
                ("s", "123"),
                ("i", "42"),
                ("n", "3.5"),
                ("b", "True"),
                ("o", '{"k": [1, 2]}'),
                ("a", "[1, 2]"),
                ("nn", "null"),
                ("opt", "None"),
                ("e", "2"),
            )
        ),
        calls=(
            (
                "typed",
                {
                    "s": "123",
                    "i": 42,
                    "n": 3.5,
                    "b": True,
                    "o": {"k": [1, 2]},
                    "a": [1, 2],
                    "nn": None,
                    "opt": None,
                    "e": 2,
                },
            ),
        ),
        tools=T,
    ),
    Case(
        "no-schema-json-or-string",
        block(fn("other", ("x", '{"a": 1}'), ("y", "hello"), ("z", "7"))),
        calls=(("other", {"x": {"a": 1}, "y": "hello", "z": 7}),),
    ),
    Case(
        "python-literal-object",
        block(fn("typed", ("o", "{'a': True, 'b': None}"), ("i", "5.0"))),
        calls=(("typed", {"o": {"a": True, "b": None}, "i": 5}),),
        tools=T,
    ),
    Case(
        "bad-integer-stays-text",
        block(fn("typed", ("i", "five"))),
        calls=(("typed", {"i": "five"}),),
        tools=T,
    ),
    Case(
        "multiline-code",
        block(fn("write", ("path", "a.py"), ("content", "def f():\n    return '<x>'\n"))),
        calls=(("write", {"path": "a.py", "content": "def f():\n    return '<x>'\n"}),),
    ),
    Case(
        "indent-preserved",
        block(fn("typed", ("s", "  indented"))),
        calls=(("typed", {"s": "  indented"}),),
        tools=T,
    ),
    Case(
        "missing-parameter-close",
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n<parameter=b>\nx\n</function>\n</tool_call>",
        calls=(("f", {"a": 1, "b": "x"}),),
    ),
    Case("no-params", block("<function=get_time>\n</function>"), calls=(("get_time", {}),)),
    Case(
        "truncated-in-value",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n2",
        calls=(("get_weather", {"city": "Paris"}),),
        tools=T,
    ),
    Case(
        "truncated-in-header",
        "Let me see.\n<tool_call>\n<function=get_wea",
        content="Let me see.\n<tool_call>\n<function=get_wea",
    ),
    Case(
        "hermes-json-fallback",
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
        calls=(("f", {"a": 1}),),
    ),
    Case(
        "bad-function-name",
        "<tool_call><function=bad name>\n</function></tool_call>",
        content="<tool_call><function=bad name>\n</function></tool_call>",
    ),
    Case("partial-marker-at-end", "See <tool_ca", content="See <tool_ca"),
    Case("partial-function-at-end", "x <function", content="x <function"),
    Case("empty-block", "<tool_call>\n</tool_call>", content="<tool_call>\n</tool_call>"),
    Case(
        "unicode-value",
        block(fn("get_weather", ("city", "São Paulo 東京"))),
        calls=(("get_weather", {"city": "São Paulo 東京"}),),
        tools=T,
    ),
    Case(
        "missing-block-close",
        "<tool_call>\n<function=f>\n<parameter=a>\nv\n</parameter>\n</function>\n",
        calls=(("f", {"a": "v"}),),
    ),
]


@pytest.mark.parametrize("name", ["qwen3_xml", "qwen3_coder_xml"])
@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_qwen3_xml(name: str, case: Case) -> None:
    check_case(tool_factory(name, case), case)
