"""Llama 3.x JSON and Llama 4 pythonic tool calls."""

from __future__ import annotations

import pytest

from tests.parsers.parsers_harness import Case, check_case, ids, tool_factory

SF = ("get_weather", {"city": "SF"})
CASES = [
    Case("json", '{"name": "get_weather", "parameters": {"city": "SF"}}', calls=(SF,)),
    Case(
        "python-tag",
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "SF"}}',
        calls=(SF,),
    ),
    Case(
        "semicolon-separated",
        '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}}',
        calls=(("a", {}), ("b", {"x": 1})),
    ),
    Case(
        "arguments-key",
        '{"type": "function", "name": "f", "arguments": {"q": "x"}}',
        calls=(("f", {"q": "x"}),),
    ),
    Case("json-not-a-call", '{"answer": 42}', content='{"answer": 42}'),
    Case(
        "json-name-but-data", '{"name": "John", "age": 30}', content='{"name": "John", "age": 30}'
    ),
    Case("list-not-calls", "[1, 2, 3] are numbers", content="[1, 2, 3] are numbers"),
    Case(
        "pythonic-two",
        '[get_weather(city="SF"), get_time(tz="PST")]',
        calls=(SF, ("get_time", {"tz": "PST"})),
    ),
    Case(
        "pythonic-literals",
        '[f(a=1, b=-2.5, c=True, d=None, e=[1, "x"], g={"k": "v"}, h=(1, 2))]',
        calls=(
            (
                "f",
                {
                    "a": 1,
                    "b": -2.5,
                    "c": True,
                    "d": None,
                    "e": [1, "x"],
                    "g": {"k": "v"},
                    "h": [1, 2],
                },
            ),
        ),
    ),
    Case(
        "python-start-end",
        "<|python_start|>[f(a=1)]<|python_end|>",
        calls=(("f", {"a": 1}),),
    ),
    Case("plain", "Hello there! How are you?", content="Hello there! How are you?"),
    Case(
        "leading-whitespace",
        '  \n{"name": "get_weather", "parameters": {"city": "SF"}}',
        calls=(SF,),
    ),
    Case(
        "call-then-text",
        '{"name": "f", "parameters": {}}\n\nSome text',
        content="\n\nSome text",
        calls=(("f", {}),),
    ),
    Case(
        "truncated-json",
        '{"name": "f", "parameters": {"a": ',
        content='{"name": "f", "parameters": {"a": ',
    ),
    # after prose, a JSON object with a name and parameters/arguments is a call (vLLM llama3_json)
    Case(
        "text-then-json-call",
        'Here is JSON: {"name": "f", "parameters": {}}',
        content="Here is JSON: ",
        calls=(("f", {}),),
    ),
    Case(
        "prose-calls-semicolons-then-text",
        'Calls: {"name": "a", "parameters": {"q": 1}}; {"name": "b", "arguments": {}} Done.',
        content="Calls:  Done.",
        calls=(("a", {"q": 1}), ("b", {})),
    ),
    Case(
        "prose-json-without-parameters-is-text",
        'Example: {"name": "John"} ok',
        content='Example: {"name": "John"} ok',
    ),
    Case(
        "prose-json-data-is-text",
        'Data {"name": "John", "age": 3} and {"q": "x"}',
        content='Data {"name": "John", "age": 3} and {"q": "x"}',
    ),
    Case(
        "prose-call-unknown-tool-is-text",
        'Try {"name": "nope", "parameters": {}}',
        content='Try {"name": "nope", "parameters": {}}',
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
    ),
    Case(
        "prose-call-known-tool",
        'Try {"name": "f", "parameters": {}}',
        content="Try ",
        calls=(("f", {}),),
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
    ),
    Case(
        "start-json-undeclared-name-is-text",
        '{"name": "John"} is the answer.',
        content='{"name": "John"} is the answer.',
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    ),
    Case(
        "start-json-declared-name-is-a-call",
        '{"name": "get_weather", "parameters": {"city": "SF"}}',
        calls=(SF,),
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    ),
    Case(
        "tagged-builtin-stays-a-call-with-tools",
        '<|python_tag|>{"name": "brave_search", "parameters": {"q": "x"}}',
        calls=(("brave_search", {"q": "x"}),),
        tools=[{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    ),
    Case("prose-brace-text", "Use {x} or {", content="Use {x} or {"),
    Case(
        "call-then-semicolon-text",
        '{"name": "f", "parameters": {}}; bye',
        content="; bye",
        calls=(("f", {}),),
    ),
    Case(
        "prose-truncated-call",
        'So: {"name": "f", "parameters": {"a": ',
        content='So: {"name": "f", "parameters": {"a": ',
    ),
    Case("positional-args", "[f(1)]", content="[f(1)]"),
    Case(
        "builtin-call",
        '<|python_tag|>brave_search.call(query="weather in SF")',
        calls=(("brave_search", {"query": "weather in SF"}),),
    ),
    Case("empty-list", "[]", content="[]"),
    Case("empty-object", "{}", content="{}"),
    Case("spaced-pythonic", "[ f ( a = 1 ) ]", calls=(("f", {"a": 1}),)),
    Case("bracket-note", "[Note] this is text", content="[Note] this is text"),
    Case(
        "brackets-inside-strings",
        "[f(s=\"a)b]c\", t='it\\'s')]",
        calls=(("f", {"s": "a)b]c", "t": "it's"}),),
    ),
    Case(
        "json-list-of-calls",
        '[{"name": "f", "parameters": {"a": 1}}]',
        calls=(("f", {"a": 1}),),
    ),
    Case(
        "code-is-content",
        "{% raw %} not json",
        content="{% raw %} not json",
    ),
    Case(
        "python-tag-mid-text",
        'Let me search.<|python_tag|>{"name": "get_weather", "parameters": {"city": "SF"}}',
        content="Let me search.",
        calls=(SF,),
    ),
    Case("truncated-pythonic", "[get_weather(city=", content="[get_weather(city="),
    Case(
        "call-expression-not-literal",
        "[f(a=os.system('x'))]",
        content="[f(a=os.system('x'))]",
    ),
    Case(
        "json-apostrophe",
        '{"name": "say", "parameters": {"text": "it\'s {fine}"}}',
        calls=(("say", {"text": "it's {fine}"}),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_llama(case: Case) -> None:
    check_case(tool_factory("llama", case), case)


def test_prose_call_length_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """After prose, a JSON object longer than PROSE_MAX is text (and is not held longer)."""
    import parsers.llama

    monkeypatch.setattr(parsers.llama, "PROSE_MAX", 40)
    long = 'A {"name": "f", "parameters": {"s": "' + "x" * 30 + '"}} and {"name": "f", "parameters": {}}'
    check_case(
        tool_factory("llama", Case("x", "")),
        Case("long", long, content='A {"name": "f", "parameters": {"s": "' + "x" * 30 + '"}} and ',
             calls=(("f", {}),)),
    )
