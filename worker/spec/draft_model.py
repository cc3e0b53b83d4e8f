"""The draft-model drafter: a small model sharing the target's tokenizer proposes k tokens per row.

The draft runs in the worker beside the target with its own paged KV (a second PagedKVStore,
KVManager and Forward, full-precision pages, no prefix tree). Each row's draft KV catches up on
the tokens it has not seen (the prompt, accepted and corrected tokens), then k batched decode
forwards propose k tokens; rejected proposals are cut off the row's draft KV at the next call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mlx.core as mx

from worker.engine.compile_mode import AUTO_MAX_ROWS, rows_for
from worker.engine.forward import Forward
from worker.engine.sampling import RowSampler, draw, prepare
from worker.kv.manager import KVManager
from worker.kv.request_pages import RequestPages
from worker.spec.fused_draft import FusedDraft

if TYPE_CHECKING:
    from worker.engine.request import Request
    from worker.kv.paged_kv import PagedKVStore

CATCH_UP_CHUNK = 512  # tokens per forward while a row's draft KV catches up on its prompt
BATCHED_TAIL = 8  # at most this many unseen tokens join the batched first forward


@dataclass(eq=False)
class DraftRow:
    """One row's draft KV: the tokens it was computed for (the first `computed` are in pages)."""

    owner: Request
    tokens: list[int] = field(default_factory=list)
    computed: int = 0
    kv: RequestPages = field(default_factory=RequestPages)
    pending: mx.array | None = None  # the last proposals, not read back yet
    cache_salt: str = ""  # its KVManager has no prefix tree


def _settle(d: DraftRow) -> None:
    """Read back d's last proposals: all but the last were fed, so they join d.tokens."""
    if d.pending is not None:
        fed: list[int] = d.pending.tolist()  # type: ignore[assignment]
        d.tokens.extend(fed[:-1])
        d.pending = None


def common_prefix(a: list[int], b: list[int], upto: int) -> int:
    """Length of the common prefix of A and B, at most UPTO."""
    upto = min(upto, len(a), len(b))
    if a[:upto] == b[:upto]:
        return upto
    return next(i for i in range(upto) if a[i] != b[i])


class DraftModelDrafter:
    """Proposes each row's continuation by the draft model: greedy, or sampled with its q."""

    name = "draft"

    def __init__(self, model: Any, store: PagedKVStore, dtype: mx.Dtype,
                 compile: bool | None = True) -> None:
        """COMPILE: the draft's decode forwards run through the compiled step as ``auto`` would
        (its pages are full precision, so it applies when its weights are small; False: never;
        None: the RAPID_MLX_COMPILE_DECODE default)."""
        self.kv = KVManager(store, prefix_cache=False)
        rows = None if compile is None else rows_for("auto" if compile else "off", AUTO_MAX_ROWS, model)
        self.forward = Forward(model, store, dtype, compile_rows=rows)
        # a greedy proposal's later steps in one compiled call (with compiled forwards)
        self.fused = (FusedDraft(self.forward._decode, store, self.forward.cascade, dtype,
                                 self.forward.dense)
                      if self.forward.compiled is not None and not store.quantized else None)
        self.vocab = int(model.args.vocab_size) if hasattr(model, "args") else None
        self.rows: dict[int, DraftRow] = {}
        self.catch_up_seconds = 0.0  # spent prefilling rows' draft KV (once per row, not per step)

    # ---- the Drafter interface ------------------------------------------------------------

    def propose(self, rows: list[Request], ks: list[int]) -> list[list[int]]:
        """Up to ks[i] draft tokens to follow rows[i].tokens (greedy rows: the draft's argmax)."""
        return self.propose_with_probs(rows, ks)[0]

    def propose_with_probs(self, rows: list[Request], ks: list[int]
                           ) -> tuple[list[list[int]], list[mx.array | None]]:
        """Proposals and, for sampled rows, the distributions q (len, vocab) they were drawn from."""
        lazy = self.propose_lazy(rows, ks)
        mx.eval(*[t for t, _ in lazy if t is not None])
        out: list[list[int]] = [t.tolist() if t is not None else [] for t, _ in lazy]  # type: ignore[misc]
        for d in self.rows.values():
            _settle(d)
        return out, [q for _, q in lazy]

    def propose_lazy(self, rows: list[Request], ks: list[int]
                     ) -> list[tuple[mx.array | None, mx.array | None]]:
        """Per row its ks[i] proposals (ks[i],) and their q (sampled rows), NOT evaluated.

        Each draft forward is handed to MLX as soon as it is built, and nobody waits: the
        target's verify forward can be built on these tokens and evaluated with them (one wait
        per speculative step). A row the draft cannot serve now gets (None, None).
        """
        out: list[tuple[mx.array | None, mx.array | None]] = [(None, None) for _ in rows]
        live = [(i, self._ready(r, k)) for i, (r, k) in enumerate(zip(rows, ks, strict=True)) if k > 0]
        todo = [(i, d) for i, d in live if d is not None]
        if not todo:
            return out
        drafts = [d for _, d in todo]
        samplers = [d.owner.sampler for d in drafts]
        want = [ks[i] for i, _ in todo]
        fed = [d.owner.tokens[d.computed:] for d in drafts]
        kvs, starts = [d.kv for d in drafts], [d.computed for d in drafts]
        if all(len(toks) == 1 for toks in fed) and self._fusable(drafts, samplers, want):
            return self._fused_proposal(rows, todo, fed, want[0])
        if all(len(toks) == 1 for toks in fed):  # one unseen token each: a (compiled) decode step
            logits = self.forward.decode_lazy(mx.array([toks[0] for toks in fed]), kvs, starts)
        else:
            logits = self._lazy_forward(fed, kvs, starts)
        for d, toks in zip(drafts, fed, strict=True):
            d.tokens, d.computed = list(d.owner.tokens), d.computed + len(toks)
        steps: list[tuple[list[int], mx.array, mx.array | None]] = []  # (rows, tokens, q)
        at = list(range(len(drafts)))
        tokens, q = self._pick(logits, [samplers[b] for b in at])
        mx.async_eval(tokens, *([q] if q is not None else []),  # type: ignore[no-untyped-call]
                      *self.kv.store.arrays())
        steps.append((at, tokens, q))
        if self._fusable(drafts, samplers, want):  # the other k - 1 steps: one compiled call
            rest = max(want) - 1
            assert self.fused is not None
            more = self.fused(tokens, [d.kv.pages for d in drafts], [d.computed for d in drafts], rest)
            mx.async_eval(more, *self.kv.store.arrays())  # type: ignore[no-untyped-call]
            for d in drafts:
                d.computed += rest
            for n in range(rest):
                steps.append((at, more[:, n], None))
        for n in range(len(steps), max(want)):
            keep = [j for j, b in enumerate(at) if want[b] > n]
            at = [at[j] for j in keep]
            inputs = tokens if len(keep) == len(tokens) else tokens[mx.array(keep)]
            logits = self.forward.decode_lazy(inputs, [drafts[b].kv for b in at],
                                              [drafts[b].computed for b in at])
            for b in at:
                drafts[b].computed += 1
            tokens, q = self._pick(logits, [samplers[b] for b in at])
            # handed to MLX, not waited for: the next forward is built while this one runs (its
            # page writes still evaluate in place, before the next graph reads the pages)
            mx.async_eval(tokens, *([q] if q is not None else []),  # type: ignore[no-untyped-call]
                          *self.kv.store.arrays())
            steps.append((at, tokens, q))
        per_row: list[list[mx.array]] = [[] for _ in drafts]
        per_q: list[list[mx.array]] = [[] for _ in drafts]
        for at_n, toks_n, q_n in steps:
            for j, b in enumerate(at_n):
                per_row[b].append(toks_n[j : j + 1])
                if q_n is not None:
                    per_q[b].append(q_n[j])
        for b, (i, d) in enumerate(todo):
            proposed = mx.concatenate(per_row[b]) if len(per_row[b]) > 1 else per_row[b][0]
            d.pending = proposed  # the first len-1 are in the draft KV (read back at verification)
            out[i] = (proposed, mx.stack(per_q[b]) if not samplers[b].greedy else None)
        return out

    def verified(self, row: Request, accepted: int, drafted: int) -> None:
        """Cut the row's draft KV back to the tokens the target kept; free pages beyond them."""
        d = self.rows.get(id(row))
        if d is not None:
            _settle(d)
            self._cut(d, common_prefix(d.tokens, row.tokens, d.computed))

    def release(self, row: Request) -> None:
        """Free the row's draft pages."""
        d = self.rows.pop(id(row), None)
        if d is not None:
            self.kv.release(d, cache=False)

    def lag(self, n: int) -> None:
        """Every row's draft KV forgets its last N tokens: its next proposal first catches up on
        N + 1 (as after a fully accepted one). The boot warm-up's way to that path's shapes."""
        for d in self.rows.values():
            _settle(d)
            self._cut(d, max(0, d.computed - n))

    # ---- helpers --------------------------------------------------------------------------

    def _fused_proposal(self, rows: list[Request], todo: list[tuple[int, DraftRow]],
                        fed: list[list[int]], k: int) -> list[tuple[mx.array | None, mx.array | None]]:
        """Every row fed its one unseen token, then k - 1 proposals: all k steps in one call."""
        out: list[tuple[mx.array | None, mx.array | None]] = [(None, None) for _ in rows]
        drafts = [d for _, d in todo]
        assert self.fused is not None
        proposed = self.fused(mx.array([toks[0] for toks in fed]), [d.kv.pages for d in drafts],
                              [d.computed for d in drafts], k)
        mx.async_eval(proposed, *self.kv.store.arrays())  # type: ignore[no-untyped-call]
        for b, (i, d) in enumerate(todo):
            d.tokens, d.computed = list(d.owner.tokens), d.computed + k
            d.pending = proposed[b]  # the first k-1 are in the draft KV (read back at verification)
            out[i] = (proposed[b], None)
        return out

    def _fusable(self, drafts: list[DraftRow], samplers: list[RowSampler], want: list[int]) -> bool:
        """True when the proposal's later steps run fused: greedy rows all wanting the same k > 1,
        few enough rows for the compiled step."""
        verify = self.forward.compiled_verify  # the fused steps take its row limit
        return (self.fused is not None and verify is not None and verify.takes(len(drafts))
                and min(want) == max(want) > 1 and all(s.greedy for s in samplers))

    def _ready(self, row: Request, k: int) -> DraftRow | None:
        """The row's draft state caught up to all but its last few tokens, pages for k more."""
        d = self.rows.get(id(row))
        if d is None or d.owner is not row:
            d = self.rows[id(row)] = DraftRow(row)
        _settle(d)
        if row.vision is not None or (self.vocab is not None
                                      and max(row.tokens[d.computed:], default=0) >= self.vocab):
            return None  # image positions or ids the draft does not know
        # the last token is always fed again: its logits give the first proposal
        self._cut(d, common_prefix(d.tokens, row.tokens, min(d.computed, len(row.tokens) - 1)))
        if not self.kv.ensure(d, len(row.tokens) + k - 1):
            return None  # the draft pool is full: no drafts for this row now
        t0 = time.perf_counter()
        while len(row.tokens) - d.computed > BATCHED_TAIL:
            n = min(CATCH_UP_CHUNK, len(row.tokens) - d.computed - 1)
            self.forward([row.tokens[d.computed:d.computed + n]], [d.kv], [d.computed], False)
            d.tokens, d.computed = row.tokens[:d.computed + n], d.computed + n
        self.catch_up_seconds += time.perf_counter() - t0
        return d

    def _lazy_forward(self, rows: list[list[int]], kvs: list[RequestPages], starts: list[int]
                      ) -> mx.array:
        """The last logits (B, V) of feeding ROWS at STARTS, not evaluated (Forward.__call__ waits)."""
        lengths = [len(r) for r in rows]
        n = max(lengths)
        tokens = mx.array([r + [0] * (n - len(r)) for r in rows])
        # a few tokens per row (after a fully accepted draft: its last proposal and the bonus
        # token): through the compiled verify when it applies, the last fed position's logits
        every = self.forward.compiled_every(tokens, kvs, starts, lengths, None)
        if every is not None:
            last = mx.array(lengths) - 1
            return mx.take_along_axis(every, last[:, None, None], axis=1)[:, 0, :]
        out = self.forward._build(tokens, kvs, starts, lengths, True)
        assert out is not None
        return out

    def _cut(self, d: DraftRow, keep: int) -> None:
        """Forget the row's draft KV from position KEEP on and return whole pages past it."""
        d.computed = keep
        del d.tokens[keep:]
        spare = d.kv.pages[self.kv.pages_for(keep):]
        if spare:
            del d.kv.pages[-len(spare):]
            self.kv.pool.free(spare)

    @staticmethod
    def _pick(logits: mx.array, samplers: list[RowSampler]) -> tuple[mx.array, mx.array | None]:
        """Each row's proposal (argmax, or a draw from its processed q) and q when any row samples."""
        tokens, scaled_logits = draw(prepare(logits, samplers)[0], samplers)
        return tokens, None if scaled_logits is None else mx.softmax(scaled_logits, axis=-1)
