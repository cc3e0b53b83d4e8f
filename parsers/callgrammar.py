"""Each tool-call family's own call syntax as a Lark grammar (llguidance dialect), arguments
constrained by the tool's JSON schema, so that the family's parser reads the text back as calls.

``Lit`` renders a literal text as a grammar term; the worker passes one that writes the
tokenizer's added tokens (``<tool_call>``, ``<|call|>``) as token references.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from parsers.deepseek import CALL_BEGIN, CALL_END, CALLS_BEGIN, CALLS_END, SEP
from parsers.grammarterms import Lit, args_schema, json_term, quoted
from parsers.harmony import CALL, CHANNEL, MESSAGE
from parsers.hermes import HermesToolParser
from parsers.minimax import MiniMaxToolParser
from parsers.pyvalues import action_call
from parsers.ui_tars import ACTION
from parsers.xmlvalues import xml_call, xml_families

Tool = tuple[str, dict[str, Any]]  # (function name, parameters schema)


def _json_family(head: Callable[[str], str], tail: str, lit: Lit, tools: list[Tool]) -> list[str]:
    return [f"{lit(head(name))} {json_term(args_schema(params))} {lit(tail)}"
            for name, params in tools]


def _calls(family: str, tools: list[Tool], lit: Lit) -> tuple[list[str], str, str, str]:
    """(one rule body per tool, separator between calls, text before, text after the calls)."""
    if family == "hermes":
        block, end = HermesToolParser.BLOCK_OPEN[0], HermesToolParser.BLOCK_CLOSE
        return (_json_family(lambda n: f'{block}\n{{"name": {json.dumps(n)}, "arguments": ',
                             "}\n" + end, lit, tools), "\n", "", "")
    if family == "llama":
        return (_json_family(lambda n: f'{{"name": {json.dumps(n)}, "parameters": ', "}", lit,
                             tools), "; ", "", "")
    if family == "deepseek":
        return (_json_family(lambda n: f"{CALL_BEGIN}{n}{SEP}", CALL_END, lit, tools), "",
                CALLS_BEGIN, CALLS_END)
    if family == "harmony":
        return (_json_family(lambda n: f"{CHANNEL}commentary to=functions.{n} <|constrain|>json"
                             f"{MESSAGE}", CALL, lit, tools), "", "", "")
    if family == "ui_tars":
        return [action_call(name, params, lit) for name, params in tools], "\n", ACTION + " ", ""
    if family in xml_families():
        return [xml_call(family, name, params, lit) for name, params in tools], *_xml_frame(family)
    raise ValueError(f"no call grammar for tool parser {family!r}")


def _xml_frame(family: str) -> tuple[str, str, str]:
    if family == "minimax":
        # each <invoke> ends its own line: a lone "\n" separator would be a prefix of the
        # closing "\n</minimax:tool_call>", which the grammar's lexer cannot tell apart
        return "", MiniMaxToolParser.BLOCK_OPEN[0] + "\n", MiniMaxToolParser.BLOCK_CLOSE
    return "\n", "", ""


SINGLE_ONLY = frozenset({"harmony"})  # <|call|> ends the turn: one call per answer


def call_grammar(family: str, tools: list[Tool], *, multiple: bool, lit: Lit = quoted) -> str:
    """A Lark grammar for one call (or, with MULTIPLE, one or more) of any of TOOLS in
    FAMILY's syntax; ValueError for a family without one."""
    if not tools:
        raise ValueError("a call grammar needs at least one tool")
    bodies, sep, before, after = _calls(family, tools, lit)
    lines = [f"call_{i}: {body}" for i, body in enumerate(bodies)]
    one = " | ".join(f"call_{i}" for i in range(len(bodies)))
    lines.append(f"call: {one}")
    more = ""
    if multiple and family not in SINGLE_ONLY:
        more = f" ({lit(sep)} call)*" if sep else " call*"
    frame = [lit(before)] if before else []
    start = " ".join([*frame, "call" + more, *([lit(after)] if after else [])])
    return "\n".join([f"start: {start}", *lines]) + "\n"


# families whose calls open with a block marker: when that marker is one added token, free text
# (which cannot contain it) and constrained calls can alternate (strict tools under auto)
OPENERS = {"hermes": HermesToolParser.BLOCK_OPEN[0], "qwen3_xml": HermesToolParser.BLOCK_OPEN[0],
           "qwen3_coder_xml": HermesToolParser.BLOCK_OPEN[0],
           "glm47": HermesToolParser.BLOCK_OPEN[0], "minimax": MiniMaxToolParser.BLOCK_OPEN[0],
           "deepseek": CALLS_BEGIN}


def lazy_call_grammar(family: str, tools: list[Tool], *, lit: Lit) -> str:
    """Free text with calls anywhere, each call (from the family's opening marker on) in the
    call grammar; sound only when LIT writes the opening marker as a token (free text cannot
    produce it); ValueError for a family without an opening marker."""
    if family not in OPENERS:
        raise ValueError(f"tool parser {family!r} has no opening marker for a lazy grammar")
    bodies, sep, before, after = _calls(family, tools, lit)
    unit = "call" if sep else " ".join(
        [*([lit(before)] if before else []), "call+", *([lit(after)] if after else [])])
    lines = [f"call_{i}: {body}" for i, body in enumerate(bodies)]
    lines.append("call: " + " | ".join(f"call_{i}" for i in range(len(bodies))))
    # free text between calls doubles as their separator (a separator literal beside FREE
    # would be a prefix of it, which the lexer cannot tell apart)
    return "\n".join(["start: FREE? (unit FREE?)*", f"unit: {unit}", "FREE: /(.|\\n)+/",
                       *lines]) + "\n"


def families() -> list[str]:
    """The tool parser names that have a call grammar."""
    return sorted({"hermes", "llama", "deepseek", "harmony", "ui_tars", *xml_families()})

