"""Forced tool calls: each family's call grammar accepts that family's canonical call text, the
family's parser reads it back as the same call, and malformed calls are refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mlx_lm import load

from parsers.callgrammar import call_grammar, families
from parsers.pipeline import parse_whole
from protocol.messages import GrammarSpec
from worker.grammar.compiler import GrammarCompiler
from worker.grammar.toolcalls import Literals
from worker.model.embedded import embedded_model_path

WEATHER = {"type": "object", "additionalProperties": False, "required": ["city", "days"],
           "properties": {"city": {"type": "string", "maxLength": 12},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7},
                          "units": {"enum": ["c", "f"]}}}
NOOP: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = [("get_weather", WEATHER), ("noop", NOOP)]
OPENAI_TOOLS = [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in TOOLS]
ARGS = {"city": "Paris", "days": 3, "units": "c"}
J = json.dumps(ARGS)  # the layout chat templates render arguments in (tojson)

CANONICAL = {
    "hermes": f'<tool_call>\n{{"name": "get_weather", "arguments": {J}}}\n</tool_call>',
    "llama": f'{{"name": "get_weather", "parameters": {J}}}',
    "deepseek": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
                 f"{J}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "harmony": f"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{J}"
               "<|call|>",
    "ui_tars": "Action: get_weather(city='Paris', days=3, units=\"c\")",
    "qwen3_xml": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                  "<parameter=days>\n3\n</parameter>\n<parameter=units>\nc\n</parameter>\n"
                  "</function>\n</tool_call>"),
    "glm47": ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
              "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>units</arg_key>\n"
              "<arg_value>c</arg_value>\n</tool_call>"),
    "minimax": ('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris'
                '</parameter>\n<parameter name="days">3</parameter>\n<parameter name="units">c'
                "</parameter>\n</invoke>\n</minimax:tool_call>"),
}
CANONICAL["qwen3_coder_xml"] = CANONICAL["qwen3_xml"]
# the same call with days out of bounds (8 > maximum 7)
BAD = {f: t.replace("3", "8", 1) if f != "llama" else t.replace(": 3", ": 8") for f, t in
       CANONICAL.items()}


@pytest.fixture(scope="module")
def tok() -> Any:
    return load(str(embedded_model_path()))[1]


@pytest.fixture(scope="module")
def compiler(tok: Any) -> GrammarCompiler:
    return GrammarCompiler(tok, 4096, sorted(tok.eos_token_ids))


def spec(family: str, tools: list[tuple[str, Any]] = TOOLS, multiple: bool = False) -> GrammarSpec:
    return GrammarSpec(kind="tool_calls", text=json.dumps(
        {"family": family, "tools": tools, "multiple": multiple}))


def walk(compiler: GrammarCompiler, tok: Any, s: GrammarSpec, text: str) -> bool:
    """True when the grammar takes every token of TEXT and is then complete."""
    c = compiler.compile(s)
    for t in tok.encode(text):
        if c.finished or not c.advance(t):  # nothing may follow a complete grammar
            return False
    return c.accepting


def test_every_family_has_a_canonical_case() -> None:
    assert sorted(CANONICAL) == families()


@pytest.mark.parametrize("family", sorted(CANONICAL))
def test_the_grammar_takes_the_call_and_the_parser_reads_it_back(
        family: str, compiler: GrammarCompiler, tok: Any) -> None:
    text = CANONICAL[family]
    assert walk(compiler, tok, spec(family), text)
    parsed = parse_whole(text, family, tools=OPENAI_TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("get_weather",
                                                                                ARGS)]
    assert not parsed.content.strip()


@pytest.mark.parametrize("family", sorted(CANONICAL))
def test_malformed_calls_are_refused(family: str, compiler: GrammarCompiler, tok: Any) -> None:
    assert BAD[family] != CANONICAL[family]
    assert not walk(compiler, tok, spec(family), BAD[family])  # an argument out of its schema
    assert not walk(compiler, tok, spec(family, [("noop", NOOP)]), CANONICAL[family])  # not offered
    assert not walk(compiler, tok, spec(family), "Sure! " + CANONICAL[family])  # text first


def test_parallel_calls_only_when_multiple(compiler: GrammarCompiler, tok: Any) -> None:
    two = CANONICAL["hermes"] + "\n" + CANONICAL["hermes"]
    assert walk(compiler, tok, spec("hermes", multiple=True), two)
    assert not walk(compiler, tok, spec("hermes"), two)
    assert len(parse_whole(two, "hermes", tools=OPENAI_TOOLS).tool_calls) == 2


SEPARATED = {"llama": "; ", "deepseek": "", "ui_tars": "\n"}


@pytest.mark.parametrize("family", sorted(set(CANONICAL) - {"harmony"}))
def test_several_calls_when_multiple(family: str, compiler: GrammarCompiler, tok: Any) -> None:
    """Two calls in the family's own layout; harmony's <|call|> ends the turn (one call)."""
    one = CANONICAL[family]
    if family == "deepseek":
        begin, end = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
        inner = one.removeprefix(begin).removesuffix(end)
        two = begin + inner + inner + end
    elif family == "minimax":
        head, _, rest = one.partition("\n")
        invoke = rest.rsplit("\n", 1)[0]
        two = f"{head}\n{invoke}\n{invoke}\n</minimax:tool_call>"
    elif family == "ui_tars":
        two = one + "\n" + one.removeprefix("Action: ")
    else:
        two = one + SEPARATED.get(family, "\n") + one
    assert walk(compiler, tok, spec(family, multiple=True), two)
    assert not walk(compiler, tok, spec(family), two)
    calls = parse_whole(two, family, tools=OPENAI_TOOLS).tool_calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", ARGS)] * 2


def test_added_tokens_become_token_references() -> None:
    lit = Literals({"<tool_call>": 7, "</tool_call>": 8})
    assert lit("<tool_call>\nx</tool_call>") == '<[7]> "\\n" "x" <[8]>'.replace('"\\n" "x"',
                                                                               '"\\nx"')
    assert lit("") == '""'
    assert call_grammar("hermes", TOOLS, multiple=False).startswith("start: call")
    with pytest.raises(ValueError):
        call_grammar("nope", TOOLS, multiple=False)


def auto_spec(family: str) -> GrammarSpec:
    return GrammarSpec(kind="tool_calls", text=json.dumps(
        {"family": family, "tools": TOOLS, "multiple": True, "auto": True}))


@pytest.mark.parametrize("family", ["hermes", "qwen3_xml", "glm47"])
def test_strict_auto_leaves_text_free_and_constrains_calls(
        family: str, compiler: GrammarCompiler, tok: Any) -> None:
    """<tool_call> is one added token of the demo tokenizer: text cannot write it, so text and
    constrained calls can alternate."""
    call = CANONICAL[family]
    assert walk(compiler, tok, auto_spec(family), "Just text, {\"no\": call} here.")
    assert walk(compiler, tok, auto_spec(family), f"Let me check. \n{call}\nThen {call}")
    assert not walk(compiler, tok, auto_spec(family), f"Let me check.\n{BAD[family]}")
    assert len(parse_whole(f"Let me check.\n{call}", family, tools=OPENAI_TOOLS).tool_calls) == 1


@pytest.mark.parametrize("family", ["llama", "ui_tars", "harmony", "minimax", "deepseek"])
def test_strict_auto_is_free_without_a_one_token_opening(family: str,
                                                        compiler: GrammarCompiler) -> None:
    """Their openings are plain text for this tokenizer (or there is none): no constraint."""
    assert compiler.compile(auto_spec(family)) is None


def test_every_lazy_grammar_is_valid_lark() -> None:
    import llguidance

    from parsers.callgrammar import OPENERS, lazy_call_grammar
    for family in OPENERS:
        assert llguidance.LLMatcher.validate_grammar(
            lazy_call_grammar(family, TOOLS, lit=Literals({OPENERS[family]: 5}))) == ""
    with pytest.raises(ValueError):
        lazy_call_grammar("llama", TOOLS, lit=Literals({}))


CODES = {"type": "object", "required": ["code", "note"], "properties": {
    "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "note": {"type": "string", "minLength": 2, "maxLength": 4},
    "empty": {"type": "string", "maxLength": 0}}}


@pytest.mark.parametrize(("family", "good", "bad"), [
    ("qwen3_xml", "<tool_call>\n<function=codes>\n<parameter=code>\nABC\n</parameter>\n"
     "<parameter=note>\nab c\n</parameter>\n</function>\n</tool_call>", ("ABC", "ABCD")),
    ("minimax", '<minimax:tool_call>\n<invoke name="codes">\n<parameter name="code">ABC'
     '</parameter>\n<parameter name="note">abc</parameter>\n</invoke>\n</minimax:tool_call>',
     (">abc<", "> abc<")),
    ("ui_tars", "Action: codes(code=\"ABC\", note='abcd')", ("'abcd'", "'abcde'")),
])
def test_string_patterns_and_lengths(family: str, good: str, bad: tuple[str, str],
                                     compiler: GrammarCompiler, tok: Any) -> None:
    s = spec(family, [("codes", CODES)])
    assert walk(compiler, tok, s, good)
    assert not walk(compiler, tok, s, good.replace(*bad))
    args = json.loads(parse_whole(good, family, tools=[{"type": "function", "function": {
        "name": "codes", "parameters": CODES}}]).tool_calls[0].arguments)
    assert args["code"] == "ABC" and 2 <= len(args["note"]) <= 4
