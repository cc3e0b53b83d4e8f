"""Llama 3.x JSON tool calls and Llama 4 pythonic ``[f(a=1), g(b="x")]`` calls."""

from __future__ import annotations

import enum
import re
from typing import Any

from parsers.base import Handler, StateMachineToolParser
from parsers.buffer import MarkerSet, TextBuffer
from parsers.llamacalls import parse_candidate, prose_calls
from parsers.scan import BracketScanner
from parsers.schema import tool_functions
from parsers.types import ParseDelta

_TAGS = ("<|python_tag|>", "<|python_start|>")
_SKIPPABLE = ("<|python_end|>", "<|eom_id|>", "<|eot_id|>")
_PROSE_MARKS = MarkerSet(_TAGS + ("{", "["))
_LEAD_TOKENS = _TAGS + _SKIPPABLE
_MAX_TOKEN = max(len(t) for t in _LEAD_TOKENS)
HEAD_WINDOW = 128
PROSE_MAX = 32_768  # longest JSON call object recognised after prose
# (complete head, head prefix) patterns deciding early whether a candidate can be a call
_HEADS = {
    "{": (re.compile(r'\{\s*"'), re.compile(r"\{\s*")),
    "[": (
        re.compile(r'\[\s*(?:[A-Za-z_][\w.]*\s*\(|\{\s*")'),
        re.compile(r"\[\s*(?:[A-Za-z_][\w.]*\s*|\{\s*)?"),
    ),
    "a": (re.compile(r"[A-Za-z_][\w.]*\s*\("), re.compile(r"[A-Za-z_][\w.]*\s*")),
}


class _State(enum.Enum):
    LEAD = 0  # at the start, after a tag, or between calls
    CANDIDATE = 1
    CONTENT = 2


class LlamaToolParser(StateMachineToolParser):
    """Llama tool calls: at the start, after ``<|python_tag|>``, between calls, or after prose.

    As in vLLM's ``llama3_json`` parser, a JSON call object may follow prose ("Here is the
    call: {...}") and several calls may be separated by ``;`` (the separators between calls
    are dropped; all other text is kept as content exactly); as in SGLang's ``pythonic``
    parser, so may a pythonic call list. After prose only such calls (see ``prose_calls``)
    of at most ``PROSE_MAX`` characters count. When the request declares tools, a call without
    ``<|python_tag|>`` (at the start too) must name one of them. Text that merely starts with
    ``{`` or ``[`` but is not a call comes back as content.
    """

    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        super().__init__(tools)
        self._known = frozenset(tool_functions(tools))
        self._buf = TextBuffer()
        self._state = _State.LEAD
        self._after_tag = False
        self._after_call = False
        self._sep = ""  # separators skipped after a call: dropped if another call follows
        self._kind = "{"
        self._prose = False
        self._start = 0
        self._head_ok = False
        self._scanner = BracketScanner(0, python=False)

    def _handlers(self) -> dict[enum.Enum, Handler]:
        return {
            _State.LEAD: self._on_lead,
            _State.CANDIDATE: self._on_candidate,
            _State.CONTENT: self._on_content,
        }

    def _on_lead(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        text, n = buf.text, len(buf)
        i = buf.pos
        while i < n and (text[i].isspace() or (text[i] == ";" and self._after_call)):
            i += 1
        if self._after_call:
            self._sep += text[buf.pos : i]
        else:
            self.emit_content(out, text[buf.pos : i])
        buf.pos = i
        if i >= n:
            if final:
                self._flush_sep(out)
            return False
        for token in _LEAD_TOKENS:
            if text.startswith(token, i):
                if token in _SKIPPABLE and not (self._after_call or self._after_tag):
                    break
                buf.pos = i + len(token)
                self._after_tag = self._after_tag or token in _TAGS
                return True
        else:
            piece = text[i : i + _MAX_TOKEN]
            if not final and any(len(piece) < len(t) and t.startswith(piece) for t in _LEAD_TOKENS):
                return False
        c = text[i]
        kind = c if c in "{[" else ("a" if self._after_tag and (c.isalpha() or c == "_") else "")
        if not kind:
            self._flush_sep(out)
            self._state = _State.CONTENT
            return True
        self._start_candidate(kind, prose=False)
        return True

    def _start_candidate(self, kind: str, *, prose: bool) -> None:
        buf = self._buf
        buf.compact()
        self._kind = kind
        self._prose = prose
        self._start = buf.pos
        self._head_ok = False
        self._scanner = BracketScanner(buf.pos, python=kind != "{")
        self._state = _State.CANDIDATE

    def _on_candidate(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        text = buf.text
        start = self._start
        if not self._head_ok:
            full, prefix = _HEADS[self._kind]
            end = min(len(text), start + HEAD_WINDOW)
            if full.match(text, start, end):
                self._head_ok = True
            else:
                m = prefix.match(text, start, end)
                if m is not None and m.end() == end and end - start < HEAD_WINDOW:
                    if not final:
                        return False
                return self._reject(out, start + 1 if self._kind == "{" or self._prose else start)
        limit = start + PROSE_MAX if self._prose else len(text)
        end = self._scanner.scan(text, min(limit, len(text)))
        if end < 0:
            if self._prose and len(text) >= limit:
                return self._reject(out, limit)
            return self._reject(out, len(text)) if final else False
        if self._prose:
            calls = prose_calls(self._kind, text[start:end], self._known)
        else:
            calls = parse_candidate(self._kind, text[start:end])
            if calls and not self._after_tag and self._undeclared(calls):
                calls = None  # an answer that is JSON data, such as {"name": "John"}
        if not calls or not self.emit_calls(out, calls):
            return self._reject(out, end if self._kind == "{" or self._prose else start)
        self._sep = ""
        buf.pos = end
        self._after_call = True
        self._after_tag = False
        self._state = _State.LEAD
        return True

    def _undeclared(self, calls: list[tuple[str, dict[str, Any]]]) -> bool:
        """True when the request declares tools and a call names another function."""
        return bool(self._known) and any(name not in self._known for name, _ in calls)

    def _reject(self, out: ParseDelta, upto: int) -> bool:
        """The candidate is text: emit it up to ``upto`` and scan on as content."""
        self._flush_sep(out)
        self.emit_content(out, self._buf.take(upto))
        self._state = _State.CONTENT
        return True

    def _flush_sep(self, out: ParseDelta) -> None:
        self.emit_content(out, self._sep)
        self._sep = ""

    def _on_content(self, out: ParseDelta, final: bool) -> bool:
        buf = self._buf
        hit = buf.find(_PROSE_MARKS)
        if hit is None:
            keep = 0 if final else buf.held(_PROSE_MARKS)
            self.emit_content(out, buf.take(len(buf) - keep))
            buf.compact()
            return False
        idx, marker = hit
        self.emit_content(out, buf.take(idx))
        if marker in ("{", "["):
            self._start_candidate(marker, prose=True)
            return True
        buf.pos += len(marker)
        self._after_tag = True
        self._after_call = False
        self._state = _State.LEAD
        return True
