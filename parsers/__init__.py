"""Streaming parsers for model output: reasoning, content and tool calls (pure Python).

Interface (all parsers are per response/choice and not thread-safe):

* ``parsers.types``: ``ToolCallDelta(index, id, name, arguments)`` (``id``/``name`` only on a
  call's first delta, ``arguments`` an increment of its JSON text), ``ParseDelta(content,
  reasoning, tool_calls)``, ``ToolCall(id, name, arguments)`` (complete canonical JSON
  object text) and ``ParsedMessage(content, reasoning, tool_calls)``.
* ``parsers.base.ToolParser(tools=None)``: ``feed(text) -> ParseDelta`` and
  ``finish() -> ParseDelta``. ``tools`` is the OpenAI ``tools`` list (used to type XML
  parameter values by JSON schema). Partial markers are held back until decided; at
  ``finish`` they become content. Malformed or truncated calls come back as content (or, for
  formats that announce the name first, as a call with the arguments that did parse).
  Content next to tool calls is kept exactly, except the separator the format's chat
  template puts before a call (``ToolParser.CONTENT_SEP``) and whitespace-only runs between
  calls (``parsers.segments``).
* ``parsers.base.ReasoningParser(*, think_opened=False, tool_blocks=())``: same
  ``feed``/``finish``; ``think_opened`` says the chat template already emitted the opening
  ``<think>``; ``tool_blocks`` (from ``ToolParser.reasoning_exits()``) are the call blocks
  that may end a reasoning section implicitly (``parsers.thinkcalls``).
* ``parsers.registry``: ``tool_parser_names()``, ``reasoning_parser_names()``,
  ``make_tool_parser(name, tools=None)``,
  ``make_reasoning_parser(name, *, think_opened, tool_blocks=())``;
  unknown names raise ``ValueError`` listing the known ones.
  Tool parsers: hermes, qwen3_xml, qwen3_coder_xml, glm47, harmony, ui_tars, llama,
  deepseek, minimax. Reasoning parsers: qwen3, deepseek_r1, glm4, harmony, minimax.
* ``parsers.pipeline``: ``OutputParser(tool_parser, reasoning_parser, *, tools=None,
  think_opened=False, parse_tools=True)`` with ``feed``/``finish`` (reasoning first, its
  content then through the tool parser); ``parse_whole(text, tool_parser=None,
  reasoning_parser=None, *, tools, think_opened, parse_tools) -> ParsedMessage`` and
  ``aggregate(deltas) -> ParsedMessage``.
* ``parsers.callgrammar``: ``call_grammar(family, tools, *, multiple, lit)`` -> a Lark grammar
  (llguidance dialect) of the family's call syntax, arguments constrained by each tool's
  schema (``parsers.xmlvalues``, ``parsers.pyvalues``, ``parsers.grammarterms``);
  ``lazy_call_grammar`` for free text with constrained calls; ``families()``.
* ``parsers.detect``: ``detect_parsers(chat_template, vocab, model_type=None) ->
  (tool_parser | None, reasoning_parser | None)`` and ``prompt_opens_think(prompt)``.

Guarantee: for any chunking of the same text, the aggregate of the streamed deltas equals
the non-streamed result (tool-call ids aside); parsing is linear in the text length.
"""

from parsers.base import ReasoningParser, ToolParser
from parsers.detect import detect_parsers, prompt_opens_think
from parsers.pipeline import OutputParser, aggregate, parse_whole
from parsers.registry import (
    make_reasoning_parser,
    make_tool_parser,
    reasoning_parser_names,
    tool_parser_names,
)
from parsers.types import ParseDelta, ParsedMessage, ToolCall, ToolCallDelta

__all__ = [
    "OutputParser",
    "ParseDelta",
    "ParsedMessage",
    "ReasoningParser",
    "ToolCall",
    "ToolCallDelta",
    "ToolParser",
    "aggregate",
    "detect_parsers",
    "make_reasoning_parser",
    "make_tool_parser",
    "parse_whole",
    "prompt_opens_think",
    "reasoning_parser_names",
    "tool_parser_names",
]
