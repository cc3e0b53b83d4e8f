"""The MTP drafter: the checkpoint's own next-n layer proposes k tokens per row.

At absolute position i the layer reads the target's hidden state h_i (the last layer's output
after the final norm, as vLLM feeds DeepSeek/GLM MTP layers) and the embedding of token i+1,
and predicts token i+2. Its KV (one layer, own pages) covers the positions whose h_i the
target has verified; each proposal first catches up on those, then chains the layer k-1 more
times on its own output hidden state and proposal (as DeepSeek-V3 reuses one MTP module).
Hidden states come from the target's Forward through its ``on_hidden`` hook; positions the
drafter never saw (a prefix-cache hit) are skipped by starting the row's MTP context later.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import mlx.core as mx

from worker.kv.manager import KVManager
from worker.kv.paged_batch import PagedBatch
from worker.kv.request_pages import RequestPages
from worker.spec.draft_model import DraftModelDrafter
from worker.spec.mtp_hidden import MTPRow

if TYPE_CHECKING:
    from worker.engine.forward import Forward
    from worker.engine.request import Request
    from worker.kv.paged_kv import PagedKVStore

CATCH_UP_CHUNK = 512  # positions per MTP forward while a row catches up on its prompt
BATCHED_TAIL = 8  # at most this many positions join the batched first forward


class MTPHead(Protocol):
    """What the drafter needs of a loaded next-n layer (worker/spec/mtp_load.py's MTPHead)."""

    def hidden(self, tokens: mx.array, hidden: mx.array, positions: mx.array, cache: Any) -> mx.array:
        """Output hidden states for TOKENS after HIDDEN at absolute POSITIONS."""
        ...

    def logits(self, hidden: mx.array) -> mx.array:
        """Next-next-token logits from the layer's output hidden states."""
        ...


class MTPDrafter:
    """Proposes each row's continuation with the next-n layer: greedy, or sampled with its q."""

    name = "mtp"

    def __init__(self, head: MTPHead, store: PagedKVStore, dtype: mx.Dtype) -> None:
        self.head = head
        self.kv = KVManager(store, prefix_cache=False)
        self.dtype = dtype
        self.rows: dict[int, MTPRow] = {}  # id(target RequestPages) -> state

    def attach(self, forward: Forward) -> None:
        """Read the target's hidden states from every forward of FORWARD."""
        forward.on_hidden = self.capture

    def capture(self, hidden: mx.array, kvs: list[RequestPages], starts: list[int],
                lengths: list[int]) -> None:
        """Forward's hook: keep each row's hidden states (B, n, D) at its fed positions."""
        for b, (kv, start, n) in enumerate(zip(kvs, starts, lengths, strict=True)):
            st = self.rows.get(id(kv))
            if st is None or st.target() is not kv:
                # the engine replaces a row's pages object when it releases the row: then the
                # object dies and the state goes with it (also for rows that never drafted)
                st = self.rows[id(kv)] = MTPRow(weakref.ref(kv, self._dropper(id(kv))))
            st.hidden.put(start, hidden, b, n)

    def _dropper(self, key: int) -> Callable[[weakref.ref[RequestPages]], None]:
        def drop(ref: weakref.ref[RequestPages]) -> None:
            st = self.rows.get(key)
            if st is not None and st.target is ref:
                del self.rows[key]
                self.kv.release(st, cache=False)
        return drop

    # ---- the Drafter interface ------------------------------------------------------------

    def propose(self, rows: list[Request], ks: list[int]) -> list[list[int]]:
        """Up to ks[i] draft tokens to follow rows[i].tokens (greedy rows: the layer's argmax)."""
        return self.propose_with_probs(rows, ks)[0]

    def propose_with_probs(self, rows: list[Request], ks: list[int]
                           ) -> tuple[list[list[int]], list[mx.array | None]]:
        """Proposals and, for sampled rows, the distributions q (len, vocab) they were drawn from."""
        out: list[list[int]] = [[] for _ in rows]
        qs: list[mx.array | None] = [None for _ in rows]
        todo = [(i, st) for i, (r, k) in enumerate(zip(rows, ks, strict=True))
                if k > 0 and (st := self._ready(r, k)) is not None]
        if not todo:
            return out, qs
        states = [st for _, st in todo]
        owners = [rows[i] for i, _ in todo]
        ends = [r.computed for r in owners]  # the target's verified positions: 0..end-1
        feeds = [(st.done, end) for st, end in zip(states, ends, strict=True)]
        hidden = self._run(states, owners, feeds)
        samplers = [r.sampler for r in owners]
        tokens, q = DraftModelDrafter._pick(self.head.logits(hidden), samplers)
        steps = [(list(range(len(states))), tokens, q)]
        for st, (_, hi) in zip(states, feeds, strict=True):
            st.done = hi
            st.computed = hi - st.base
            st.hidden.forget_before(hi - 1)  # the last one stays: a repeated proposal needs it
        want = [ks[i] for i, _ in todo]
        at = list(range(len(states)))
        for n in range(1, max(want)):
            keep = [j for j, b in enumerate(at) if want[b] > n]
            at = [at[j] for j in keep]
            sel = mx.array(keep)
            toks = tokens if len(keep) == len(tokens) else tokens[sel]
            prev = hidden if len(keep) == hidden.shape[0] else hidden[sel]
            pos = [ends[b] + n - 1 for b in at]
            hidden = self._layer([states[b] for b in at], toks[:, None], prev[:, None],
                                 [p - states[b].base for b, p in zip(at, pos, strict=True)],
                                 [1] * len(at), mx.array(pos)[:, None])[:, 0]
            tokens, q = DraftModelDrafter._pick(self.head.logits(hidden),
                                                [samplers[b] for b in at])
            mx.eval(tokens, hidden, *([q] if q is not None else []), *self.kv.store.arrays())
            steps.append((at, tokens, q))
        per_row: list[list[int]] = [[] for _ in states]
        per_q: list[list[mx.array]] = [[] for _ in states]
        for at_n, toks_n, q_n in steps:
            picked: list[int] = toks_n.tolist()  # type: ignore[assignment]
            for j, b in enumerate(at_n):
                per_row[b].append(picked[j])
                if q_n is not None:
                    per_q[b].append(q_n[j])
        for b, (i, _) in enumerate(todo):
            out[i] = per_row[b]
            if not samplers[b].greedy:
                qs[i] = mx.stack(per_q[b])
        return out, qs

    def hopeful(self, row: Request) -> bool:
        """True when the row's hidden states were captured (else drafting needs no sync step)."""
        st = self.rows.get(id(row.kv))
        return st is not None and st.target() is row.kv and bool(st.hidden.chunks)

    def verified(self, row: Request, accepted: int, drafted: int) -> None:
        """Nothing to do: the next proposal keeps only what the target verified."""

    def release(self, row: Request) -> None:
        """Free the row's MTP pages and hidden states (also done when its pages object dies)."""
        st = self.rows.get(id(row.kv))
        if st is not None and st.target() is row.kv:
            del self.rows[id(row.kv)]
            self.kv.release(st, cache=False)

    # ---- helpers --------------------------------------------------------------------------

    def _ready(self, row: Request, k: int) -> MTPRow | None:
        """The row's state with the hidden states it needs, pages for k more positions."""
        st = self.rows.get(id(row.kv))
        end = row.computed
        if st is None or st.target() is not row.kv or row.vision is not None or end < 1 \
                or len(row.tokens) <= end:
            return None
        if st.done >= end:  # nothing new verified: repeat the last position (its hidden is kept)
            st.done = end - 1
        if st.done < st.base or st.hidden.span(st.done, end) is None:  # a gap: restart the MTP context
            first = st.hidden.first()
            if first >= end or st.hidden.span(first, end) is None:
                return None
            self.kv.release(st, cache=False)
            st.base = st.done = first
        st.computed = st.done - st.base
        if not self.kv.ensure(st, end + k - 1 - st.base):
            return None  # the MTP pool is full: no drafts for this row now
        while end - st.done > BATCHED_TAIL:  # long catch-ups run alone, in chunks
            n = min(CATCH_UP_CHUNK, end - st.done - 1)
            self._run([st], [row], [(st.done, st.done + n)], last=False)
            st.done += n
            st.computed = st.done - st.base
            st.hidden.forget_before(st.done - 1)
        return st

    def _run(self, states: list[MTPRow], owners: list[Request], feeds: list[tuple[int, int]],
             last: bool = True) -> mx.array:
        """Feed each row positions lo..hi-1 (target hidden, next token); each row's last output."""
        n = max(hi - lo for lo, hi in feeds)
        toks, hids, poss = [], [], []
        for st, r, (lo, hi) in zip(states, owners, feeds, strict=True):
            h = st.hidden.span(lo, hi)
            assert h is not None
            pad = n - (hi - lo)
            toks.append(r.tokens[lo + 1: hi + 1] + [0] * pad)
            hids.append(mx.pad(h, [(0, pad), (0, 0)]) if pad else h)
            poss.append(list(range(lo, hi)) + [hi] * pad)
        lengths = [hi - lo for lo, hi in feeds]
        out = self._layer(states, mx.array(toks), mx.stack(hids).astype(self.dtype),
                          [lo - st.base for st, (lo, _) in zip(states, feeds, strict=True)],
                          lengths, mx.array(poss))
        result = out[mx.arange(len(states)), mx.array(lengths) - 1] if last else out[:, :0]
        mx.eval(result, *self.kv.store.arrays())
        return result

    def _layer(self, states: list[MTPRow], tokens: mx.array, hidden: mx.array, starts: list[int],
               lengths: list[int], positions: mx.array) -> mx.array:
        """The next-n layer over (B, n) tokens and hidden states at local STARTS (lazy)."""
        batch = PagedBatch(self.kv.store, [st.kv.pages for st in states], starts, lengths,
                           self.dtype)
        return self.head.hidden(tokens, hidden, positions, batch.views()[0])
