"""GLM-4.5/4.6/4.7 <tool_call>NAME<arg_key>..</arg_key><arg_value>..</arg_value> calls."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import WEATHER_TOOLS, Case, check_case, ids, tool_factory

T = WEATHER_TOOLS
GLM45 = (
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"
)
GLM47 = (
    "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Beijing</arg_value>"
    "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>"
)
BJ = ("get_weather", {"city": "Beijing", "days": 2})

CASES = [
    Case("glm45-newlines", GLM45, calls=(BJ,), tools=T),
    Case("glm47-inline", GLM47, calls=(BJ,), tools=T),
    Case("plain", "你好！有什么可以帮你？", content="你好！有什么可以帮你？"),
    Case(
        "text-before",
        "I'll look that up.\n" + GLM47,
        content="I'll look that up.",
        calls=(BJ,),
        tools=T,
    ),
    Case(
        "text-between-and-after",
        "A\n" + GLM47 + "\nB\n" + GLM45 + "\nC",
        content="A\nB\nC",
        calls=(BJ, BJ),
        tools=T,
    ),
    Case("two-calls", GLM45 + "\n" + GLM47, calls=(BJ, BJ), tools=T),
    Case("no-args", "<tool_call>get_time</tool_call>", calls=(("get_time", {}),)),
    Case("no-args-newline", "<tool_call>get_time\n</tool_call>", calls=(("get_time", {}),)),
    Case(
        "leading-newline",
        "<tool_call>\nget_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>",
        calls=(("get_weather", {"city": "Oslo"}),),
        tools=T,
    ),
    Case(
        "json-values-without-schema",
        '<tool_call>search<arg_key>filters</arg_key><arg_value>{"a": [1]}</arg_value>'
        "<arg_key>q</arg_key><arg_value>cats</arg_value>"
        "<arg_key>n</arg_key><arg_value>10</arg_value></tool_call>",
        calls=(("search", {"filters": {"a": [1]}, "q": "cats", "n": 10}),),
    ),
    Case(
        "typed-by-schema",
        "<tool_call>typed<arg_key>s</arg_key><arg_value>007</arg_value>"
        "<arg_key>b</arg_key><arg_value>false</arg_value>"
        "<arg_key>a</arg_key><arg_value>[3, 4]</arg_value>"
        "<arg_key>n</arg_key><arg_value>1e3</arg_value></tool_call>",
        calls=(("typed", {"s": "007", "b": False, "a": [3, 4], "n": 1000.0}),),
        tools=T,
    ),
    Case(
        "multiline-value",
        "<tool_call>note<arg_key>text</arg_key><arg_value>line1\nline2</arg_value></tool_call>",
        calls=(("note", {"text": "line1\nline2"}),),
    ),
    Case(
        "truncated-in-value",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Bei",
        calls=(("get_weather", {}),),
        tools=T,
    ),
    Case(
        "truncated-after-pair",
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Bern</arg_value>\n<arg_k",
        calls=(("get_weather", {"city": "Bern"}),),
        tools=T,
    ),
    Case("truncated-in-name", "ok <tool_call>get_wea", content="ok <tool_call>get_wea"),
    Case(
        "missing-value-close",
        "<tool_call>f<arg_key>a</arg_key><arg_value>1</tool_call>",
        calls=(("f", {"a": 1}),),
    ),
    Case(
        "json-body-fallback",
        '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>',
        calls=(("f", {"a": 1}),),
    ),
    Case("empty-block", "<tool_call></tool_call>", content="<tool_call></tool_call>"),
    Case("partial-marker", "x <tool_", content="x <tool_"),
    Case(
        "unknown-tag-in-body-ignored",
        "<tool_call>f<foo>bar</foo><arg_key>k</arg_key><arg_value>v</arg_value></tool_call>",
        calls=(("f", {"k": "v"}),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_glm47(case: Case) -> None:
    check_case(tool_factory("glm47", case), case)
