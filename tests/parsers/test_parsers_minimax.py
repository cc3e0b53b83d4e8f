"""MiniMax-M2 <minimax:tool_call><invoke name=..><parameter name=..> calls."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import WEATHER_TOOLS, Case, check_case, ids, tool_factory

SEARCH_TOOLS = [
    {
        "name": "search_web",
        "description": "Search function.",
        "parameters": {
            "type": "object",
            "properties": {
                "query_list": {"type": "array", "items": {"type": "string"}},
                "query_tag": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query_list", "query_tag"],
        },
    }
]
T = WEATHER_TOOLS
DOC = (
    "Let me help you query the weather.\n<minimax:tool_call>\n"
    '<invoke name="get_weather">\n<parameter name="city">San Francisco</parameter>\n'
    '<parameter name="unit">c</parameter>\n</invoke>\n</minimax:tool_call>'
)
SEARCH = (
    "<minimax:tool_call>\n"
    '<invoke name="search_web">\n'
    '<parameter name="query_tag">["technology", "events"]</parameter>\n'
    '<parameter name="query_list">["\\"OpenAI\\" \\"latest\\" \\"release\\""]</parameter>\n'
    "</invoke>\n"
    '<invoke name="search_web">\n'
    '<parameter name="query_tag">["technology", "events"]</parameter>\n'
    '<parameter name="query_list">["\\"Gemini\\" \\"latest\\" \\"release\\""]</parameter>\n'
    "</invoke>\n"
    "</minimax:tool_call>"
)


def invoke(name: str, **params: str) -> str:
    body = "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params.items())
    return f'<invoke name="{name}">\n{body}</invoke>\n'


def block(*invokes: str) -> str:
    return "<minimax:tool_call>\n" + "".join(invokes) + "</minimax:tool_call>"


CASES = [
    Case(
        "documented-weather",
        DOC,
        content="Let me help you query the weather.",
        calls=(("get_weather", {"city": "San Francisco", "unit": "c"}),),
        tools=T,
    ),
    Case(
        "documented-two-invokes",
        SEARCH,
        calls=(
            (
                "search_web",
                {
                    "query_tag": ["technology", "events"],
                    "query_list": ['"OpenAI" "latest" "release"'],
                },
            ),
            (
                "search_web",
                {
                    "query_tag": ["technology", "events"],
                    "query_list": ['"Gemini" "latest" "release"'],
                },
            ),
        ),
        tools=SEARCH_TOOLS,
    ),
    Case("plain", "Hello from MiniMax.", content="Hello from MiniMax."),
    Case(
        "typed",
        block(invoke("typed", i="7", n="-0.5", b="TRUE", o='{"x": null}', nn="12", s="true")),
        calls=(("typed", {"i": 7, "n": -0.5, "b": True, "o": {"x": None}, "nn": 12, "s": "true"}),),
        tools=T,
    ),
    Case("no-params", block('<invoke name="get_time">\n</invoke>\n'), calls=(("get_time", {}),)),
    Case(
        "single-quoted-name",
        "<minimax:tool_call><invoke name='f'><parameter name='a'>1</parameter></invoke>"
        "</minimax:tool_call>",
        calls=(("f", {"a": 1}),),
    ),
    Case(
        "value-stripped",
        block(invoke("get_weather", city="\n  Lima \n")),
        calls=(("get_weather", {"city": "Lima"}),),
        tools=T,
    ),
    Case(
        "two-blocks",
        block(invoke("get_weather", city="A")) + "\n" + block(invoke("get_weather", city="B")),
        calls=(("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})),
        tools=T,
    ),
    Case(
        "text-after",
        block(invoke("get_weather", city="A")) + "\n\nDone.",
        content="\n\nDone.",
        calls=(("get_weather", {"city": "A"}),),
        tools=T,
    ),
    Case(
        "no-schema-json-or-string",
        block(invoke("other", x="[1, 2]", y="plain text", z="false")),
        calls=(("other", {"x": [1, 2], "y": "plain text", "z": False}),),
    ),
    Case(
        "truncated-in-param",
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Lima'
        '</parameter>\n<parameter name="days">3',
        calls=(("get_weather", {"city": "Lima"}),),
        tools=T,
    ),
    Case(
        "truncated-in-header",
        'Hi\n<minimax:tool_call>\n<invoke name="get_w',
        content='Hi\n<minimax:tool_call>\n<invoke name="get_w',
    ),
    Case(
        "truncated-second-invoke-header",
        '<minimax:tool_call>\n<invoke name="a">\n</invoke>\n<invoke na',
        calls=(("a", {}),),
    ),
    Case(
        "invoke-without-name",
        "<minimax:tool_call><invoke>x</invoke></minimax:tool_call>",
        content="<minimax:tool_call><invoke>x</invoke></minimax:tool_call>",
    ),
    Case(
        "missing-parameter-close",
        '<minimax:tool_call><invoke name="f"><parameter name="a">1'
        '<parameter name="b">two</invoke></minimax:tool_call>',
        calls=(("f", {"a": 1, "b": "two"}),),
    ),
    Case(
        "empty-block",
        "<minimax:tool_call>\n</minimax:tool_call>",
        content="<minimax:tool_call>\n</minimax:tool_call>",
    ),
    Case("partial-marker", "see <minimax:tool", content="see <minimax:tool"),
    Case(
        "nullable-null",
        block(invoke("typed", nn="null", opt="null")),
        calls=(("typed", {"nn": None, "opt": None}),),
        tools=T,
    ),
    Case(
        "xml-in-string-value",
        block(invoke("write", content="<div>hi</div>")),
        calls=(("write", {"content": "<div>hi</div>"}),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_minimax(case: Case) -> None:
    check_case(tool_factory("minimax", case), case)
