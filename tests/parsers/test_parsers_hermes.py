"""Hermes / Qwen JSON tool calls in <tool_call> blocks."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import Case, check_case, ids, tool_factory

W = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
_WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}
CASES = [
    Case("plain", "Hello, world!", content="Hello, world!"),
    Case("empty", "", content=""),
    Case("whitespace-only", "\n\n", content="\n\n"),
    Case("single", f"<tool_call>\n{W}\n</tool_call>", calls=(("get_weather", {"city": "Paris"}),)),
    Case(
        "text-before",
        f"Let me check the weather.\n\n<tool_call>\n{W}\n</tool_call>",
        # the template renders content + "\n<tool_call>": one newline is the separator
        content="Let me check the weather.\n",
        calls=(("get_weather", {"city": "Paris"}),),
    ),
    # exact content: only the template's "\n" before <tool_call> is a separator
    Case(
        "text-space-before-call",
        f"Let me check. <tool_call>\n{W}\n</tool_call>",
        content="Let me check. ",
        calls=(("get_weather", {"city": "Paris"}),),
    ),
    Case(
        "text-between-calls",
        f"A\n<tool_call>{W}</tool_call>\n\n<tool_call>{W}</tool_call>  \n",
        content="A",
        calls=(("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Paris"})),
    ),
    # arguments given as serialized JSON text (vLLM test_hermes_tool_parser.py, Granite 4)
    Case(
        "arguments-serialized-object",
        '<tool_call>{"name": "f", "arguments": "{\\"p\\": \\"max\\"}"}</tool_call>',
        calls=(("f", {"p": "max"}),),
    ),
    Case(
        "arguments-serialized-twice",
        '<tool_call>{"name": "f", "arguments": "\\"{\\\\\\"p\\\\\\": 1}\\""}</tool_call>',
        calls=(("f", {"p": 1}),),
    ),
    # a bare string (or any non-object) is not a call's arguments: the block stays content
    Case(
        "arguments-bare-string",
        '<tool_call>{"name": "f", "arguments": "hello"}</tool_call>',
        content='<tool_call>{"name": "f", "arguments": "hello"}</tool_call>',
    ),
    Case(
        "arguments-serialized-list",
        '<tool_call>{"name": "f", "arguments": "[1]"}</tool_call>',
        content='<tool_call>{"name": "f", "arguments": "[1]"}</tool_call>',
    ),
    Case(
        "text-after",
        f"<tool_call>\n{W}\n</tool_call>\nI asked for it.",
        content="\nI asked for it.",
        calls=(("get_weather", {"city": "Paris"}),),
    ),
    Case(
        "two-calls",
        '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "b", "arguments": {"y": [1, 2]}}\n</tool_call>',
        calls=(("a", {"x": 1}), ("b", {"y": [1, 2]})),
    ),
    Case(
        "compact-no-newlines",
        '<tool_call>{"name":"f","arguments":{"q":"x y"}}</tool_call>',
        calls=(("f", {"q": "x y"}),),
    ),
    Case(
        "arguments-as-string",
        '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',
        calls=(("f", {"a": 1}),),
    ),
    Case(
        "parameters-key",
        '<tool_call>{"name": "f", "parameters": {"a": true}}</tool_call>',
        calls=(("f", {"a": True}),),
    ),
    Case("no-arguments", '<tool_call>{"name": "now"}</tool_call>', calls=(("now", {}),)),
    Case(
        "unicode",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "東京 \\u00e9"}}</tool_call>',
        calls=(("get_weather", {"city": "東京 é"}),),
    ),
    Case(
        "several-objects-one-block",
        '<tool_call>\n{"name": "a", "arguments": {}}\n{"name": "b", "arguments": {"x": 1}}\n'
        "</tool_call>",
        calls=(("a", {}), ("b", {"x": 1})),
    ),
    Case(
        "code-fence-inside",
        '<tool_call>\n```json\n{"name": "f", "arguments": {"a": 1}}\n```\n</tool_call>',
        calls=(("f", {"a": 1}),),
    ),
    Case(
        "malformed-json",
        'Try: <tool_call>{"name": "f", "arguments": {</tool_call> ok',
        content='Try: <tool_call>{"name": "f", "arguments": {</tool_call> ok',
    ),
    Case(
        "missing-name",
        '<tool_call>{"arguments": {}}</tool_call>',
        content='<tool_call>{"arguments": {}}</tool_call>',
    ),
    Case(
        "nan-rejected",
        '<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>',
        content='<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>',
    ),
    Case("empty-block", "<tool_call></tool_call>", content="<tool_call></tool_call>"),
    Case(
        "truncated-json",
        'Sure.\n<tool_call>\n{"name": "f", "argu',
        content='Sure.\n<tool_call>\n{"name": "f", "argu',
    ),
    Case(
        "truncated-complete-json",
        '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n',
        calls=(("f", {"a": 1}),),
    ),
    Case(
        "truncated-partial-close",
        '<tool_call>{"name": "f", "arguments": {}}</tool_',
        calls=(("f", {}),),
    ),
    Case("partial-open-at-end", "Use the <tool", content="Use the <tool"),
    # Qwen2.5-Coder-1.5B's real answer to a get_weather request: a fenced JSON call
    Case("fenced-call", f"```json\n{W}\n```", tools=[_WEATHER],
         calls=(("get_weather", {"city": "Paris"}),)),
    Case("fenced-call-text-around", f"Sure.\n```json\n{W}\n```\nDone.", tools=[_WEATHER],
         content="Sure.\nDone.", calls=(("get_weather", {"city": "Paris"}),)),
    # a fenced block naming no declared tool, or no call at all, is content, exactly
    Case("fenced-undeclared", f"```json\n{W}\n```", content=f"```json\n{W}\n```"),
    Case("fenced-other-json", 'See:\n```json\n{"a": 1}\n```', tools=[_WEATHER],
         content='See:\n```json\n{"a": 1}\n```'),
    Case("fenced-unclosed", f"```json\n{W}", tools=[_WEATHER], content=f"```json\n{W}"),
    Case("fenced-python", "```python\nprint(1)\n```", tools=[_WEATHER],
         content="```python\nprint(1)\n```"),
    Case("other-tags", "a <tool> b <tool_calls> c", content="a <tool> b <tool_calls> c"),
    Case("stray-close", "x </tool_call> y", content="x </tool_call> y"),
    Case(
        "good-then-bad",
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>oops</tool_call>',
        content="\n<tool_call>oops</tool_call>",
        calls=(("a", {}),),
    ),
    Case(
        "nested-braces-in-strings",
        '<tool_call>{"name": "run", "arguments": {"code": "if x: {\\n  y = \\"}\\"\\n}"}}</tool_call>',
        calls=(("run", {"code": 'if x: {\n  y = "}"\n}'}),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_hermes(case: Case) -> None:
    check_case(tool_factory("hermes", case), case)
