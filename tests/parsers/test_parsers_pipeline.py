"""OutputParser: reasoning + tool parsers together, registry and detection."""

from __future__ import annotations

import pytest

from parsers import (
    OutputParser,
    detect_parsers,
    make_reasoning_parser,
    make_tool_parser,
    parse_whole,
    prompt_opens_think,
    reasoning_parser_names,
    tool_parser_names,
)
from tests.parsers.parsers_harness import (
    WEATHER_TOOLS,
    Case,
    check_case,
    ids,
    pipeline_factory,
)

HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
PARIS = ("get_weather", {"city": "Paris"})

# (tool parser, reasoning parser, parse_tools, case)
PIPELINE_CASES: list[tuple[str | None, str | None, bool, Case]] = [
    (
        "hermes",
        "qwen3",
        True,
        Case(
            "qwen3-think-then-call",
            "<think>\nUser wants weather.\n</think>\n\n" + HERMES_CALL,
            reasoning="User wants weather.",
            calls=(PARIS,),
        ),
    ),
    (
        "hermes",
        "qwen3",
        True,
        Case(
            "qwen3-opened-think-call-and-text",
            "Need a tool.\n</think>\n\nChecking.\n" + HERMES_CALL,
            reasoning="Need a tool.",
            content="Checking.",
            calls=(PARIS,),
            think_opened=True,
        ),
    ),
    (
        "hermes",
        "qwen3",
        True,
        Case(
            "call-inside-reasoning-ignored",
            "<think>maybe " + HERMES_CALL + "</think>No call.",
            reasoning="maybe " + HERMES_CALL,
            content="No call.",
        ),
    ),
    (
        "hermes",
        "qwen3",
        False,
        Case(
            "tool-choice-none-keeps-markup",
            "<think>r</think>" + HERMES_CALL,
            reasoning="r",
            content=HERMES_CALL,
        ),
    ),
    (
        "hermes",
        None,
        True,
        Case("tools-only", "Hi " + HERMES_CALL, content="Hi ", calls=(PARIS,)),
    ),
    (None, None, True, Case("passthrough", "<think>x</think>", content="<think>x</think>")),
    (
        "harmony",
        "harmony",
        True,
        Case(
            "harmony-both",
            "<|channel|>analysis<|message|>Need weather.<|end|>"
            "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
            '<|message|>{"city": "Paris"}<|call|>',
            reasoning="Need weather.",
            calls=(PARIS,),
        ),
    ),
    (
        "harmony",
        "harmony",
        True,
        Case(
            "harmony-truncated-call",
            "<|channel|>analysis<|message|>Need weather.<|end|>"
            '<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{"city": "Paris"}',
            reasoning="Need weather.",
            calls=(PARIS,),
        ),
    ),
    (
        "harmony",
        None,
        True,
        Case(
            "harmony-tool-parser-alone",
            "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b",
            reasoning="a",
            content="b",
        ),
    ),
    (
        "deepseek",
        "deepseek_r1",
        True,
        Case(
            "r1-reasoning-then-calls",
            "Plan: call tool.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
            '<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜>'
            "<｜tool▁calls▁end｜>",
            reasoning="Plan: call tool.",
            calls=(PARIS,),
            think_opened=True,
        ),
    ),
    (
        "glm47",
        "glm4",
        True,
        Case(
            "glm-think-call",
            "<think>Weather in Paris.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
            "<arg_value>Paris</arg_value>\n</tool_call>",
            reasoning="Weather in Paris.",
            calls=(PARIS,),
            tools=WEATHER_TOOLS,
        ),
    ),
    (
        "minimax",
        "minimax",
        True,
        Case(
            "minimax-opened-think-call",
            'The user asks.\n</think>\n\n<minimax:tool_call>\n<invoke name="get_weather">\n'
            '<parameter name="city">Paris</parameter>\n</invoke>\n</minimax:tool_call>',
            reasoning="The user asks.",
            calls=(PARIS,),
            think_opened=True,
            tools=WEATHER_TOOLS,
        ),
    ),
    (
        "qwen3_coder_xml",
        "qwen3",
        True,
        Case(
            "qwen3-xml-with-think",
            "<think>ok</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=days>\n4\n"
            "</parameter>\n</function>\n</tool_call>",
            reasoning="ok",
            calls=(("get_weather", {"days": 4}),),
            tools=WEATHER_TOOLS,
        ),
    ),
    (
        "llama",
        None,
        True,
        Case("llama-pythonic", "[get_weather(city='Paris')]", calls=(PARIS,)),
    ),
    (
        "ui_tars",
        None,
        True,
        Case(
            "ui-tars",
            "Thought: go\nAction: click(start_box='(1,2)')",
            content="Thought: go",
            calls=(("click", {"start_box": [1, 2]}),),
        ),
    ),
]


@pytest.mark.parametrize(
    "tool,reasoning,parse_tools,case",
    PIPELINE_CASES,
    ids=ids([c for *_, c in PIPELINE_CASES]),
)
def test_pipeline(tool: str | None, reasoning: str | None, parse_tools: bool, case: Case) -> None:
    check_case(pipeline_factory(tool, reasoning, parse_tools=parse_tools)(case), case)


def test_parse_whole_matches_output_parser() -> None:
    text = "<think>r</think>" + HERMES_CALL
    msg = parse_whole(text, "hermes", "qwen3")
    assert msg.reasoning == "r" and msg.content == ""
    assert [(c.name, c.arguments) for c in msg.tool_calls] == [("get_weather", '{"city": "Paris"}')]
    assert msg.tool_calls[0].id.startswith("call_")


def test_registry_names() -> None:
    assert tool_parser_names() == sorted(
        [
            "hermes",
            "qwen3_xml",
            "qwen3_coder_xml",
            "glm47",
            "harmony",
            "ui_tars",
            "llama",
            "deepseek",
            "minimax",
        ]
    )
    assert reasoning_parser_names() == sorted(
        ["qwen3", "deepseek_r1", "glm4", "harmony", "minimax"]
    )
    for name in tool_parser_names():
        make_tool_parser(name, WEATHER_TOOLS)
    for name in reasoning_parser_names():
        make_reasoning_parser(name, think_opened=True)


def test_unknown_names() -> None:
    with pytest.raises(ValueError, match="hermes"):
        make_tool_parser("nope")
    with pytest.raises(ValueError, match="qwen3"):
        make_reasoning_parser("nope")
    with pytest.raises(ValueError):
        OutputParser("nope", None)


def test_ids_stable_across_deltas() -> None:
    parser = make_tool_parser("qwen3_xml")
    deltas = [parser.feed(ch) for ch in "<function=f>\n<parameter=a>\n1\n</parameter>\n</function>"]
    deltas.append(parser.finish())
    calls = [tc for d in deltas for tc in d.tool_calls]
    assert calls[0].id and calls[0].name == "f" and calls[0].arguments == ""
    assert all(tc.index == 0 and tc.id is None for tc in calls[1:])
    assert "".join(tc.arguments for tc in calls) == '{"a": 1}'


def test_name_streams_before_arguments() -> None:
    parser = make_tool_parser("minimax")
    first = parser.feed('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="ci')
    assert [(tc.name, tc.arguments) for tc in first.tool_calls] == [("get_weather", "")]


def test_partial_marker_held_then_released() -> None:
    parser = make_tool_parser("hermes")
    assert parser.feed("Hello <tool_").content == "Hello"
    assert parser.feed("x> done").content == " <tool_x> done"
    assert parser.finish().content == ""


DETECT = [
    ("{{ '<|start|>assistant<|channel|>final<|message|>' }}", None, None, ("harmony", "harmony")),
    (None, None, "gpt_oss", ("harmony", "harmony")),
    (
        "{{'<｜Assistant｜>'}}{{'<｜tool▁calls▁begin｜>'}}<think>\n",
        None,
        None,
        ("deepseek", "deepseek_r1"),
    ),
    ("{{'<｜tool▁calls▁begin｜>'}}", None, None, ("deepseek", None)),
    ("<minimax:tool_call>", ["<think>"], None, ("minimax", "minimax")),
    ("<tool_call>{{ name }}<arg_key>k</arg_key>", None, None, ("glm47", "glm4")),
    ("<tool_call>\n<function=x>\n<parameter=y>", None, None, ("qwen3_coder_xml", None)),
    (
        "<tool_call>\n{{ tool_call | tojson }}\n</tool_call>",
        ["<think>", "</think>"],
        None,
        ("hermes", "qwen3"),
    ),
    ("<tool_call>", None, None, ("hermes", None)),
    (None, ["<|python_tag|>", "<|eot_id|>"], None, ("llama", None)),
    (None, None, "qwen2", ("hermes", None)),
    ("{{ messages }}", ["hello"], "mistral", (None, None)),
    ("<think>{{ x }}", None, None, (None, "qwen3")),
    (None, None, None, (None, None)),
]


@pytest.mark.parametrize("template,vocab,model_type,expected", DETECT)
def test_detect(
    template: str | None,
    vocab: list[str] | None,
    model_type: str | None,
    expected: tuple[str | None, str | None],
) -> None:
    assert detect_parsers(template, vocab, model_type) == expected


def test_prompt_opens_think() -> None:
    assert prompt_opens_think("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_think("<|im_start|>assistant\n<think>\n\n</think>\n\n")
