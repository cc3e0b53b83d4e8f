"""Run the model over a paged batch, computing logits only where they are needed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import mlx.core as mx

from worker.cpu.fast_ops import wrap_fast_ops
from worker.cpu.gemv import running, wrap_gemv
from worker.cpu.qmatmul import wrap_quantized
from worker.engine import gated_delta
from worker.engine.attention import PagedBatch, routes_attention
from worker.engine.compile_mode import AUTO_MAX_ROWS, rows_for
from worker.engine.compiled_decode import CompiledDecode
from worker.kinds.vision.inputs import KEY_BASE
from worker.kv.dense import DenseCache, pays_for
from worker.kv.paged_kv import PagedKVStore
from worker.kv.request_pages import RequestPages
from worker.kv.state_capture import capturing
from worker.kv.state_capture import install as install_capture
from worker.kv.state_view import StateRows
from worker.spec.compiled_verify import CompiledVerify

# Architectures whose Model.__call__ is exactly `head(model(inputs, cache))`: for these the head
# runs on the last position only, and not at all for prompt chunks that need no logits.
_PLAIN_HEAD = {"llama", "mistral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "glm4_moe",
               "qwen3_next"}
# Architectures whose Model.__call__ is exactly `language_model(inputs, cache)`, itself plain
_WRAPPED_HEAD = {"qwen3_5", "qwen3_5_moe"}


def _split(model: Any) -> tuple[Any, Callable[[mx.array], mx.array]] | None:
    if hasattr(model, "split"):  # a vision model (worker/kinds/vision/model.py) says itself
        return model.split()  # type: ignore[no-any-return]
    if getattr(model, "model_type", None) in _WRAPPED_HEAD and hasattr(model, "language_model"):
        model = model.language_model
        return _plain_split(model, getattr(model, "args", None), getattr(model, "model", None))
    args = getattr(model, "args", None)
    inner = getattr(model, "model", None)
    if getattr(model, "model_type", getattr(args, "model_type", None)) not in _PLAIN_HEAD:
        return None
    return _plain_split(model, args, inner)


def _plain_split(model: Any, args: Any, inner: Any) -> tuple[Any, Callable[[mx.array], mx.array]] | None:
    """(body, head) of a model computing ``head(body(inputs, cache))``."""
    if inner is None or args is None:
        return None
    if getattr(args, "tie_word_embeddings", False):
        return inner, inner.embed_tokens.as_linear
    head = getattr(model, "lm_head", None)
    return (inner, head) if head is not None else None


class Tap(Protocol):
    """Rank 0 of a tensor-parallel group (worker/tp): hands each call's inputs to the others."""

    def call(self, rows: list[list[int]], kvs: list[RequestPages], starts: list[int],
             want_logits: bool, embeds: Any, positions: Any) -> None:
        """Before a __call__: send its plan."""

    def decode(self, tokens: mx.array, kvs: list[RequestPages], starts: list[int],
               positions: Any) -> mx.array:
        """Before a decode_lazy: send its plan; the tokens as every rank will have them."""
        ...

    def idle(self) -> None:
        """No row runs: the other ranks free what only running rows need."""


class Forward:
    """Calls the model for one group of rows and materializes the page writes at once.

    Evaluating each call's writes before the next call is built keeps every page-array update
    in place: two pending graphs over the same page array would force MLX to copy it.
    """

    def __init__(self, model: Any, store: PagedKVStore, dtype: mx.Dtype,
                 compile_rows: int | None = None) -> None:
        """COMPILE_ROWS: decode steps of up to that many rows run through ``CompiledDecode``
        (0: none; None: what RAPID_MLX_COMPILE_DECODE says, off when unset)."""
        self.model = model
        self.store = store
        self.dtype = dtype
        # float32 products of few rows in OpenBLAS's order without its packing
        # (worker/cpu/gemv.py); before _split, which binds the tied head's method
        self.gemv = wrap_gemv(model)
        if store.states is not None:  # a hybrid: verify forwards capture per-position states
            install_capture(model)
        # affine-quantized layers' products dequantized in registers (worker/cpu/qmatmul.py)
        self.quantized_layers = wrap_quantized(model)
        self.split = _split(model)
        self.cascade = routes_attention(model)
        self.tap: Tap | None = None  # rank 0 of a tensor-parallel group sets it
        self.sharded = False  # every rank must evaluate the whole model (its collectives)
        self.final: mx.array | None = None  # the last call's model output (sharded: evaluated)
        # an MTP drafter's hook: each call's hidden states (B, n, D), evaluated with the call
        self.on_hidden: Callable[[mx.array, list[RequestPages], list[int], list[int]], None] | None = None
        rows = rows_for("off", AUTO_MAX_ROWS, model) if compile_rows is None else compile_rows
        self.compiled = CompiledDecode(self._decode, store, rows) if rows > 0 else None
        # speculation's verify forwards (several positions per row) compile like decode steps
        self.compiled_verify = CompiledVerify(self._every, store, rows) if rows > 0 else None
        # decode steps attend a dense cache of the store's KV (worker/kv/dense.py; small models)
        small = pays_for(model)
        # (a windowed layer group's batches gather: the dense cache follows one page id space)
        self.dense = DenseCache(store) if small and not store.window_pages else None
        # RoPE and RMSNorm with fewer CPU kernels in our forwards (worker/cpu/fast_ops.py), on small
        # models: on the Qwen3 bench model (116 MB) plain 8-row steps became 1.8-2.6x slower,
        # growing with the KV pool's size (page writes no longer in place; bench/README.md,
        # "Keep page writes in place")
        self.fast_ops = wrap_fast_ops(model) if small else None

    def compiled_owners(self) -> dict[str, CompiledDecode]:
        """Its holders of compiled functions (``fns``: key -> function): decode, verify."""
        owners = {"decode": self.compiled, "verify": self.compiled_verify}
        return {name: o for name, o in owners.items() if o is not None}

    def idle(self) -> None:
        """No row runs: free the dense decode cache (worker/kv/dense.py), on every rank."""
        if self.dense is not None:
            self.dense.reset()
        if self.tap is not None:
            self.tap.idle()

    def __call__(self, rows: list[list[int]], kvs: list[RequestPages], starts: list[int],
                 want_logits: bool, embeds: list[mx.array | None] | None = None,
                 positions: mx.array | None = None) -> mx.array | None:
        """Feed each row's tokens at its start; return each row's last logits (B, V) if wanted.

        EMBEDS (a vision model's rows with images) gives a row's input embeddings (n, D) in
        place of its tokens' (a cache-key id there is not a token). POSITIONS (3, B, n) are the
        rotary positions of an M-RoPE model.
        """
        if self.tap is not None:
            self.tap.call(rows, kvs, starts, want_logits, embeds, positions)
        lengths = [len(r) for r in rows]
        n = max(lengths)
        if embeds is not None and any(e is not None for e in embeds):
            rows = [[t if t < KEY_BASE else 0 for t in r] for r in rows]
        tokens = mx.array([r + [0] * (n - len(r)) for r in rows])
        inputs = None
        if embeds is not None and any(e is not None for e in embeds):
            inputs = self._embeddings(tokens, embeds, n)
        out = None
        if n == 1 and want_logits and inputs is None:
            out = self._compiled(tokens, kvs, starts, positions)
        if out is None:
            out = self._build(tokens, kvs, starts, lengths, want_logits, inputs, positions)
        keep = [x for x in (out, self.final if self.sharded or self.on_hidden else None)
                if x is not None]
        mx.eval(*keep, self.store.arrays())
        return out

    def decode_lazy(self, tokens: mx.array, kvs: list[RequestPages], starts: list[int],
                    positions: mx.array | None = None) -> mx.array:
        """One token per row from an unevaluated (B,) array; the logits (B, V), not evaluated.

        The caller evaluates them (with ``store.arrays()``) before building the next call.
        """
        if self.tap is not None:
            tokens = self.tap.decode(tokens, kvs, starts, positions)
        out = self._compiled(tokens[:, None], kvs, starts, positions)
        if out is not None:
            return out
        out = self._build(tokens[:, None], kvs, starts, [1] * len(starts), True, None, positions)
        assert out is not None
        return out

    def feed(self, tokens: mx.array, kvs: list[RequestPages], starts: list[int]) -> None:
        """One token per row from a (B,) array, for a rank that reads no logits (a tensor-parallel
        follower): the model runs up to its hidden states, without the LM head when the model's
        head is separable, and they are evaluated with the page writes."""
        out = self._build(tokens[:, None], kvs, starts, [1] * len(starts), self.split is None)
        mx.eval(*(x for x in (out, self.final) if x is not None), self.store.arrays())

    def verify(self, rows: list[list[int] | mx.array], kvs: list[RequestPages], starts: list[int],
               positions: mx.array | None = None) -> mx.array:
        """Feed each row's tokens at its start; return the logits at every fed position (B, n, V).

        Speculative decoding verifies a row's draft tokens with these (row b's positions past
        len(rows[b]) are padding; a row may be an unevaluated token array). Handed to MLX
        (async_eval) with the page writes, not waited for: the caller's acceptance graph is
        built while the forward runs.
        """
        if self.tap is not None:
            raise ValueError("speculative decoding does not run in a tensor-parallel group")
        lengths = [len(r) for r in rows]
        n = max(lengths)
        if all(isinstance(r, list) for r in rows):
            tokens = mx.array([r + [0] * (n - len(r)) for r in rows])  # type: ignore[operator]
        else:  # a drafter's unevaluated tokens: padded on the device
            tokens = mx.stack([mx.pad(mx.array(r, dtype=mx.uint32), (0, n - len(r)))
                               if isinstance(r, list) else mx.pad(r.astype(mx.uint32), (0, n - len(r)))
                               for r in rows])
        out = self.compiled_every(tokens, kvs, starts, lengths, positions)
        if out is None:
            out = self._build(tokens, kvs, starts, lengths, True, None, positions, every=True)
        assert out is not None
        mx.async_eval(out, *([self.final] if self.on_hidden and self.final is not None else []),  # type: ignore[no-untyped-call]
                      *self.store.arrays())
        return out

    def _compiled(self, tokens: mx.array, kvs: list[RequestPages], starts: list[int],
                  positions: mx.array | None) -> mx.array | None:
        """A decode step's logits through the compiled step, or None where it does not apply."""
        if (self.compiled is None or positions is not None or self.sharded
                or self.on_hidden is not None or len(kvs) > self.compiled.max_rows):
            return None
        batch = PagedBatch(self.store, [kv.pages for kv in kvs], starts, [1] * len(starts),
                           self.dtype, tails=[kv.tail for kv in kvs], cascade=self.cascade,
                           bucket=True, dense=self.dense, window_tables=self._windows(kvs))
        if not self.compiled.fits(batch):
            # a K8V4 batch that reads quantized pages planned no working-set loads (it did not
            # fit), so the plain step may plan the batch again
            return None
        out = self.compiled(tokens, batch)
        if out is None:  # the step writes quantized pages: run this batch (its loads) plainly
            out = self._decode(tokens, batch)
        return out

    def compiled_every(self, tokens: mx.array, kvs: list[RequestPages], starts: list[int],
                       lengths: list[int], positions: mx.array | None) -> mx.array | None:
        """A verify batch's logits (B, n, V) through the compiled verify, or None where it does
        not apply (the rows limit is the decode step's)."""
        fn = self.compiled_verify
        if fn is None or positions is not None or self.sharded or self.on_hidden is not None:
            return None
        if not fn.takes(len(kvs)):
            return None
        batch = PagedBatch(self.store, [kv.pages for kv in kvs], starts, lengths, self.dtype,
                           tails=[kv.tail for kv in kvs], cascade=self.cascade, bucket=True,
                           dense=self.dense, gather=True, window_tables=self._windows(kvs))
        if not fn.fits(batch):
            return None
        out = fn(tokens, batch)
        if out is None:  # the batch writes quantized pages: run it plainly
            out = self._run(tokens, batch, True, every=True)
        return out

    def _windows(self, kvs: list[RequestPages]) -> list[list[int]] | None:
        """The windowed layer group's block tables of KVS (None: the store has no such group)."""
        return [kv.window for kv in kvs] if self.store.window_pages else None

    def _embeddings(self, tokens: mx.array, embeds: list[mx.array | None], n: int) -> mx.array:
        """(B, n, D) input embeddings: each row's given ones (padded), else its tokens'."""
        text = self.model.embed_tokens(tokens)
        rows = []
        for b, e in enumerate(embeds):
            if e is None:
                rows.append(text[b])
            else:
                pad = mx.zeros((n - e.shape[0], e.shape[1]), dtype=e.dtype)
                rows.append(mx.concatenate([e, pad]) if n > e.shape[0] else e)
        return mx.stack(rows).astype(text.dtype)

    def _build(self, tokens: mx.array, kvs: list[RequestPages], starts: list[int],
               lengths: list[int], want_logits: bool, inputs: mx.array | None = None,
               positions: mx.array | None = None, every: bool = False) -> mx.array | None:
        batch = PagedBatch(self.store, [kv.pages for kv in kvs], starts, lengths, self.dtype,
                           tails=[kv.tail for kv in kvs], cascade=self.cascade, dense=self.dense,
                           window_tables=self._windows(kvs))
        if self.store.states is not None:  # a hybrid model's recurrent layers
            batch.states = StateRows(self.store.states, kvs, starts, lengths,
                                     self.store.fmt.page_size, verify=every)
        return self._run(tokens, batch, want_logits, inputs, positions, every, (kvs, starts))

    def _decode(self, tokens: mx.array, batch: PagedBatch) -> mx.array:
        """The model over one decode batch: logits (B, V) (what the compiled step traces)."""
        out = self._run(tokens, batch, True)
        assert out is not None
        return out

    def _every(self, tokens: mx.array, batch: PagedBatch) -> mx.array:
        """The model over one verify batch: logits at every position (B, n, V) (compiled verify)."""
        out = self._run(tokens, batch, True, every=True)
        assert out is not None
        return out

    def _run(self, tokens: mx.array, batch: PagedBatch, want_logits: bool,
             inputs: mx.array | None = None, positions: mx.array | None = None,
             every: bool = False, rows: tuple[list[RequestPages], list[int]] | None = None
             ) -> mx.array | None:
        with running(self.gemv), gated_delta.running():
            if self.fast_ops is None:
                return self._model(tokens, batch, want_logits, inputs, positions, every, rows)
            self.fast_ops.use(batch.offset)
            try:
                return self._model(tokens, batch, want_logits, inputs, positions, every, rows)
            finally:
                self.fast_ops.use(None, active=False)

    def _model(self, tokens: mx.array, batch: PagedBatch, want_logits: bool,
               inputs: mx.array | None, positions: mx.array | None, every: bool,
               rows: tuple[list[RequestPages], list[int]] | None) -> mx.array | None:
        cache = batch.views()
        with capturing(batch.states.capture if batch.states is not None else None):
            return self._call(tokens, batch, cache, want_logits, inputs, positions, every, rows)

    def _call(self, tokens: mx.array, batch: PagedBatch, cache: list[Any], want_logits: bool,
              inputs: mx.array | None, positions: mx.array | None, every: bool,
              rows: tuple[list[RequestPages], list[int]] | None) -> mx.array | None:
        if self.split is not None:
            inner, head = self.split
            if positions is not None:
                hidden = inner(tokens, cache, inputs, positions)
            else:
                hidden = inner(tokens, cache) if inputs is None else inner(tokens, cache, inputs)
            self.final = hidden if self.sharded or self.on_hidden else None
            if self.on_hidden is not None:
                assert rows is not None  # the compiled step never runs with the hook
                self.on_hidden(hidden, *rows, batch.lengths)
            if every:
                return head(hidden)
            return head(_last(hidden, batch)) if want_logits else None
        logits = (self.model(tokens, cache=cache) if inputs is None
                  else self.model(tokens, cache=cache, inputs_embeds=inputs))
        self.final = logits if self.sharded else None
        if every:
            return logits  # type: ignore[no-any-return]
        return _last(logits, batch) if want_logits else None


def _last(x: mx.array, batch: PagedBatch) -> mx.array:
    """Each row's output at its last fed position (B, ...)."""
    if batch.n == 1:
        return x[:, 0, :]
    return _at(x, mx.array(batch.lengths) - 1)


def _at(x: mx.array, positions: mx.array) -> mx.array:
    """x[b, positions[b], :] for every row b."""
    return mx.take_along_axis(x, positions[:, None, None], axis=1)[:, 0, :]
