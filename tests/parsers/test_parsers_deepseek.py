"""DeepSeek V3 / R1 / V3.1 tool calls with fullwidth markers."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import Case, check_case, ids, tool_factory

B, E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def v3(name: str, args: str) -> str:
    return f"{CB}function{SEP}{name}\n```json\n{args}\n```{CE}"


def v31(name: str, args: str) -> str:
    return f"{CB}{name}{SEP}{args}{CE}"


TOKYO = ("get_weather", {"location": "Tokyo"})
CASES = [
    Case("v3-single", B + v3("get_weather", '{"location": "Tokyo"}') + E, calls=(TOKYO,)),
    Case("v31-single", B + v31("get_weather", '{"location": "Tokyo"}') + E, calls=(TOKYO,)),
    Case(
        "v3-two",
        B + v3("a", '{"x": 1}') + "\n" + v3("b", "{}") + E,
        calls=(("a", {"x": 1}), ("b", {})),
    ),
    Case(
        "v31-two",
        B + v31("a", '{"x": 1}') + v31("b", '{"y": "z"}') + E,
        calls=(("a", {"x": 1}), ("b", {"y": "z"})),
    ),
    Case("plain", "The capital of France is Paris.", content="The capital of France is Paris."),
    Case(
        "text-before",
        "I'll check.\n\n" + B + v31("get_weather", '{"location": "Tokyo"}') + E,
        content="I'll check.\n\n",  # DeepSeek templates put nothing between text and calls
        calls=(TOKYO,),
    ),
    Case(
        "text-after",
        B + v31("get_weather", '{"location": "Tokyo"}') + E + "\nDone",
        content="\nDone",  # text after calls is kept exactly
        calls=(TOKYO,),
    ),
    Case(
        "missing-calls-end",
        B + v3("get_weather", '{"location": "Tokyo"}'),
        calls=(TOKYO,),
    ),
    Case(
        "truncated-in-json",
        "x" + B + CB + "get_weather" + SEP + '{"loc',
        content="x" + B + CB + "get_weather" + SEP + '{"loc',
    ),
    Case(
        "truncated-complete-json",
        B + CB + "get_weather" + SEP + '{"location": "Tokyo"}',
        calls=(TOKYO,),
    ),
    Case(
        "truncated-second-call",
        B + v31("a", "{}") + CB + "b" + SEP + '{"q": ',
        content=CB + "b" + SEP + '{"q": ',
        calls=(("a", {}),),
    ),
    Case(
        "invalid-json",
        B + v31("f", "{not json}") + E,
        content=B + v31("f", "{not json}") + E,
    ),
    Case(
        "bare-call", "Sure: " + v31("f", '{"a": [1]}'), content="Sure: ", calls=(("f", {"a": [1]}),)
    ),
    Case("empty-args", B + v31("now", "") + E, calls=(("now", {}),)),
    Case("partial-marker", "Sure<｜tool▁cal", content="Sure<｜tool▁cal"),
    Case(
        "v3-no-fence",
        B + CB + "function" + SEP + 'f\n{"a": 1}' + CE + E,
        calls=(("f", {"a": 1}),),
    ),
    Case(
        "unicode-args",
        B + v31("translate", '{"text": "你好，世界"}') + E,
        calls=(("translate", {"text": "你好，世界"}),),
    ),
    Case(
        "no-separator",
        B + CB + "justtext" + CE + E,
        content=B + CB + "justtext" + CE + E,
    ),
    Case(
        "json-with-markers-like-text",
        B + v31("echo", '{"s": "<｜not a marker｜>"}') + E,
        calls=(("echo", {"s": "<｜not a marker｜>"}),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_deepseek(case: Case) -> None:
    check_case(tool_factory("deepseek", case), case)
