"""Compile grammar specs on worker threads, off the engine's step loop, through the cache."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from protocol.messages import GrammarSpec
from worker.grammar.backend import GrammarError, compile_matcher, make_tokenizer
from worker.grammar.cache import GrammarCache, spec_key
from worker.grammar.matcher import Constraint
from worker.grammar.pool import CompilePool
from worker.grammar.runaway import GUARDED_KINDS, NumberGuard, numeric_tokens
from worker.grammar.toolcalls import Literals, added_tokens, tool_calls_lark

log = logging.getLogger("rapid_mlx.worker")

COMPILE_TIMEOUT = 5.0  # seconds a request may wait for its grammar before it is refused
MAX_SPEC_CHARS = 256 * 1024  # a grammar text longer than this is refused uncompiled


class GrammarCompiler:
    """Turns a GrammarSpec into a Constraint future; errors come back as GrammarError."""

    def __init__(self, tokenizer: Any, n_vocab: int, eos_ids: list[int],
                 timeout: float = COMPILE_TIMEOUT) -> None:
        self.n_vocab = n_vocab
        self.timeout = timeout
        self.cache = GrammarCache()
        self._tok = make_tokenizer(tokenizer, n_vocab, eos_ids)
        self.think = think_tokens(tokenizer)
        self.literals = Literals(added_tokens(tokenizer))
        self._pool = CompilePool()  # a slow compile steps aside (worker/grammar/pool.py)
        self._numeric: np.ndarray | None = None  # built by the first JSON compile
        self._numeric_lock = threading.Lock()

    def submit(self, spec: GrammarSpec) -> Future[Constraint | None]:
        """Start compiling SPEC (or take it from the cache); the future holds a fresh Constraint."""
        return self._pool.submit(self.compile, spec)

    def compile(self, spec: GrammarSpec) -> Constraint | None:
        """Compile SPEC now, on the calling thread (None: SPEC needs no constraint here)."""
        if len(spec.text) > MAX_SPEC_CHARS:
            raise GrammarError(f"the {spec.kind} is longer than {MAX_SPEC_CHARS} characters")
        key = spec_key(spec)
        matcher = self.cache.get(key)
        if matcher is None:
            lark = tool_calls_lark(spec, self.literals) if spec.kind == "tool_calls" else spec
            if lark is None:
                return None
            matcher = compile_matcher(self._tok, lark)
            self.cache.put(key, matcher)
        guard = self.number_guard() if spec.kind in GUARDED_KINDS else None
        return Constraint(matcher, self.think if spec.after_think else None, guard)

    def number_guard(self) -> NumberGuard:
        """A fresh guard over this vocabulary's number-only tokens (built once, ~50 ms)."""
        with self._numeric_lock:
            if self._numeric is None:
                self._numeric = numeric_tokens(self.token_bytes, self.n_vocab)
        return NumberGuard(self._numeric, self.token_bytes)

    def token_bytes(self, token: int) -> bytes:
        """TOKEN's text as the grammar sees it."""
        return bytes(self._tok.decode_bytes([token]))

    def close(self) -> None:
        """Stop taking work; a compile in progress finishes on its own."""
        self._pool.shutdown()


def think_tokens(tokenizer: Any) -> tuple[int, int] | None:
    """The ids of ``<think>`` and ``</think>`` when both are single tokens, else None."""
    vocab = getattr(tokenizer, "vocab", None)
    if not isinstance(vocab, dict):
        get = getattr(tokenizer, "get_vocab", None)
        vocab = get() if callable(get) else {}
    ids = vocab.get("<think>"), vocab.get("</think>")
    return (ids[0], ids[1]) if isinstance(ids[0], int) and isinstance(ids[1], int) else None


class Compiling:
    """A request's grammar being compiled, with the time by which it must be done."""

    def __init__(self, spec: GrammarSpec, future: Future[Constraint | None],
                 deadline: float) -> None:
        self.spec = spec
        self.future = future
        self.deadline = deadline

    def settle(self, now: float) -> tuple[bool, Constraint | None, str | None]:
        """(settled, constraint, error): not settled while compiling and within the deadline."""
        if self.future.done():
            try:
                return True, self.future.result(), None
            except GrammarError as exc:
                return True, None, str(exc)
            except Exception as exc:  # a library failure on a hostile grammar fails only it
                log.warning("grammar compile failed: %r", exc)
                return True, None, f"the {self.spec.kind} could not be compiled: {exc}"
        if now < self.deadline:
            return False, None, None
        self.future.cancel()  # a compile already running finishes on its thread, unused (it
        # stopped holding a place among the pool's fast ones after SLOW_S: worker/grammar/pool.py)
        return True, None, f"the {self.spec.kind} took too long to compile (over the limit)"
