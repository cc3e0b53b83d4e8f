"""Property tests: random text and chunkings never crash a parser and stream == whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsers import (
    OutputParser,
    make_reasoning_parser,
    make_tool_parser,
    reasoning_parser_names,
    tool_parser_names,
)
from tests.parsers import (
    test_parsers_deepseek,
    test_parsers_glm47,
    test_parsers_harmony,
    test_parsers_hermes,
    test_parsers_llama,
    test_parsers_minimax,
    test_parsers_qwen3_xml,
    test_parsers_think,
    test_parsers_ui_tars,
)
from tests.parsers.parsers_harness import WEATHER_TOOLS, Factory, check_invariants, normalized, run

MARKERS = [
    "<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<minimax:tool_call>",
    "</minimax:tool_call>", '<invoke name="', "</invoke>", '<parameter name="', "<think>",
    "</think>", "<|start|>", "assistant", "<|channel|>", "<|message|>", "<|end|>", "<|call|>",
    "<|return|>", "<|constrain|>", " to=functions.", "analysis", "final", "commentary",
    "<|python_tag|>", "<|python_start|>", "<|python_end|>", "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
    "function", "\nAction: ", "Action:", "Thought: ", "click(", "start_box='(1,2)')",
    "<|box_start|>", "<|box_end|>",
]  # fmt: skip
PIECES = [
    '{"name": "get_weather", "arguments": {"city": "A"}}',
    '{"name": "g", "parameters": {}}',
    "[f(a=1)]",
    "get_weather",
    "```json\n",
    "```",
    "null",
    "true",
    "3.5",
    "NaN",
    "\\",
    '"',
    "'",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ",",
    ":",
    ";",
    "=",
    ">",
    "<",
    "\n",
    " ",
    "\n\n",
    "é",
    "東",
]
FRAGMENTS = sorted(
    set(
        MARKERS
        + PIECES
        + [m[:k] for m in MARKERS for k in (1, 2, len(m) // 2, len(m) - 1) if k > 0]
    )
)

SAMPLES = [
    case.text
    for module in (
        test_parsers_hermes,
        test_parsers_qwen3_xml,
        test_parsers_glm47,
        test_parsers_minimax,
        test_parsers_deepseek,
        test_parsers_llama,
        test_parsers_ui_tars,
    )
    for case in module.CASES
]
SAMPLES += [c.text for c in test_parsers_harmony.TOOL_CASES + test_parsers_harmony.REASONING_CASES]
SAMPLES += [c.text for c in test_parsers_think.THINK_CASES + test_parsers_think.R1_CASES]

soup = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=3)), max_size=30).map(
    "".join
)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """A realistic sample, truncated / spliced with fragments / with a slice deleted."""
    text = draw(st.sampled_from(SAMPLES))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["cut", "insert", "delete", "concat"]))
        i = draw(st.integers(0, len(text)))
        if op == "cut":
            text = text[:i]
        elif op == "insert":
            text = text[:i] + draw(st.sampled_from(FRAGMENTS)) + text[i:]
        elif op == "delete":
            j = draw(st.integers(i, min(len(text), i + 8)))
            text = text[:i] + text[j:]
        else:
            text = text + draw(st.sampled_from(SAMPLES))
    return text


texts = st.one_of(soup, mutated())


def chunked(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def check(factory: Factory, text: str, cuts: list[int]) -> None:
    whole, deltas = run(factory, [text])
    check_invariants(whole, deltas)
    msg, deltas = run(factory, chunked(text, cuts))
    check_invariants(msg, deltas)
    assert normalized(msg) == normalized(whole)
    if len(text) <= 80:
        msg, _ = run(factory, list(text))
        assert normalized(msg) == normalized(whole)
    for call in whole.tool_calls:
        assert isinstance(json.loads(call.arguments), dict)


SETTINGS: dict[str, Any] = {
    "max_examples": 120,
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow],
    "database": None,
}
cut_lists = st.lists(st.integers(0, 10_000), max_size=8)


@pytest.mark.parametrize("name", tool_parser_names())
@settings(**SETTINGS)
@given(text=texts, cuts=cut_lists)
def test_tool_parser_properties(name: str, text: str, cuts: list[int]) -> None:
    check(lambda: make_tool_parser(name, WEATHER_TOOLS), text, cuts)


@pytest.mark.parametrize("opened", [False, True])
@pytest.mark.parametrize("name", reasoning_parser_names())
@settings(**SETTINGS)
@given(text=texts, cuts=cut_lists)
def test_reasoning_parser_properties(name: str, opened: bool, text: str, cuts: list[int]) -> None:
    check(lambda: make_reasoning_parser(name, think_opened=opened), text, cuts)


PIPELINES = [
    ("hermes", "qwen3"),
    ("qwen3_xml", "qwen3"),
    ("glm47", "glm4"),
    ("harmony", "harmony"),
    ("deepseek", "deepseek_r1"),
    ("minimax", "minimax"),
]


@pytest.mark.parametrize("tool,reasoning", PIPELINES)
@settings(**SETTINGS)
@given(text=texts, cuts=cut_lists, opened=st.booleans(), parse_tools=st.booleans())
def test_pipeline_properties(
    tool: str, reasoning: str, text: str, cuts: list[int], opened: bool, parse_tools: bool
) -> None:
    def factory() -> OutputParser:
        return OutputParser(
            tool, reasoning, tools=WEATHER_TOOLS, think_opened=opened, parse_tools=parse_tools
        )

    check(factory, text, cuts)
