"""Windowed layers' pages released as the window slides (worker/kv/window_group.py), on the
windowed tiny models (gpt_oss: sliding 24, llama4: chunks of 32, gemma3_text: sliding 32).

Greedy tokens equal mlx-lm's alone over a generation four windows long, batched with prefill
chunks crossing the windows (10 tokens, and chunks longer than a window) and compiled decode
steps, after prefix hits (deep ones, and shallow ones whose window pages the tree no longer
has), across preemptions, and with speculative verify forwards rolled back; at every step the pools hold exactly what the rows and the tree hold, and no row
holds more windowed pages than its window needs (+2) while its full pages grow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import generate_step

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, make_engine
from tools.tiny_models.build import build
from worker.engine.attention import install
from worker.engine.core import Engine, model_dtype
from worker.engine.failures import verify
from worker.kv.setup import plan_kv, window_pool_pages
from worker.kv.window_group import group_for
from worker.spec.controller import Speculator

WINDOW = {"gpt_oss": 24, "llama4": 32, "gemma3_text": 32}


@pytest.fixture(scope="module", params=sorted(WINDOW))
def tiny(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[str, Any, Any]:
    dest = build(request.param, Path(tmp_path_factory.mktemp(request.param)))
    model, tok = load(str(dest))[:2]
    return request.param, model, tok


def _want(model: Any, ids: list[int], n: int) -> list[int]:
    return [int(t) for t, _ in generate_step(mx.array(ids), model, max_tokens=n)]


def _drive(engine: Engine, prompts: dict[str, list[int]], n: int) -> tuple[dict[str, list[int]], int]:
    """Run PROMPTS greedily for N tokens, checking the pools at every step; the tokens, and the
    most windowed pages a row held (each row also checked against its full pages' count)."""
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    for rid, ids in prompts.items():
        engine.add(rid, ids, params)
    got: dict[str, list[int]] = {rid: [] for rid in prompts}
    kv = engine.kv
    assert kv.window is not None and kv.window_pool is not None  # a windowed layer group
    bound, peak = kv.window.seq_pages(), 0
    for _ in range(50_000):
        if not engine.has_work:
            break
        for out in engine.step():
            got[out.request_id].extend(out.token_ids)
        verify(kv, engine.running)
        for r in engine.running:
            held = sum(1 for w in r.kv.window if w)
            peak = max(peak, held)
            if not r.prefilling:
                assert held <= bound, (r.computed, r.kv.window)
    assert not engine.running and kv.pool.num_used == kv.radix.num_pages  # type: ignore[union-attr]
    assert kv.window_pool.num_used == kv.radix.num_window_pages  # type: ignore[union-attr]
    return got, peak


def test_four_windows_alone_bounded(tiny: tuple[str, Any, Any]) -> None:
    arch, model, tok = tiny
    n = 4 * WINDOW[arch] + 8
    prompt = tok.encode(" ".join(PROMPTS[:6]))[:30]
    engine = make_engine(model, tok, page_size=16, prefill_budget=10)
    got, peak = _drive(engine, {"a": prompt}, n)
    assert got == {"a": _want(model, prompt, n)}
    assert 2 <= peak <= engine.kv.window.seq_pages()  # type: ignore[union-attr]
    # the tree keeps the full layers' pages of the whole sequence, the windowed ones only
    # where no window had left them behind
    radix = engine.kv.radix
    assert radix is not None and radix.num_pages == (30 + n - 1) // 16
    assert radix.num_window_pages < radix.num_pages // 2


def _batch(tok: Any) -> dict[str, list[int]]:
    shared = tok.encode(" ".join(PROMPTS[8:14]))[:40]
    return {str(i): shared + tok.encode(" ".join(PROMPTS[i: i + 6]))[: 5 + 9 * i]
            for i in range(6)}


@pytest.mark.parametrize("budget", [10, 70])
def test_batched_chunks_across_windows(tiny: tuple[str, Any, Any], budget: int) -> None:
    _, model, tok = tiny
    prompts = _batch(tok)
    want = {rid: _want(model, ids, 40) for rid, ids in prompts.items()}
    engine = make_engine(model, tok, page_size=16, prefill_budget=budget)
    got, _ = _drive(engine, prompts, 40)
    assert got == want
    assert engine.compiled is not None and engine.compiled.fns  # decode steps ran compiled


class Oracle:
    """A drafter proposing the reference's next tokens, one of them wrong every third call
    (verify forwards then keep some positions and roll the rest back)."""

    name = "ngram"

    def __init__(self, prompt_len: int, want: list[int]) -> None:
        self.prompt_len, self.want, self.calls = prompt_len, want, 0

    def propose(self, rows: list[Any], ks: list[int]) -> list[list[int]]:
        """The reference's next KS tokens."""
        out = []
        for r, k in zip(rows, ks, strict=True):
            done = len(r.tokens) - self.prompt_len
            draft = list(self.want[done: done + k])
            self.calls += 1
            if draft and self.calls % 3 == 0:
                draft[-1] = (draft[-1] + 1) % 100
            out.append(draft)
        return out

    def verified(self, row: Any, accepted: int, drafted: int) -> None:
        """Nothing to learn."""

    def release(self, row: Any) -> None:
        """Nothing held."""


def test_speculative_rollbacks(tiny: tuple[str, Any, Any]) -> None:
    """Verify forwards write several positions across the windows; rejected ones' pages go back
    in both groups."""
    arch, model, tok = tiny
    n = 3 * WINDOW[arch]
    prompt = tok.encode(" ".join(PROMPTS[:3]))[:30]
    want = _want(model, prompt, n)
    oracle = Oracle(len(prompt), want)
    engine = make_engine(model, tok, page_size=16, prefill_budget=32,
                         spec=Speculator(oracle, 4, pause=False, first_draft_at=1))
    got, _ = _drive(engine, {"r": prompt}, n)
    assert got == {"r": want}
    assert engine.stats.drafted_tokens > engine.stats.accepted_tokens > 0


def test_prefix_hits_deep_and_shallow(tiny: tuple[str, Any, Any]) -> None:
    arch, model, tok = tiny
    n = 3 * WINDOW[arch]
    engine = make_engine(model, tok, page_size=16, prefill_budget=64)
    prompt = tok.encode(" ".join(PROMPTS[:6]))[:40]
    first, _ = _drive(engine, {"a": prompt}, n)
    assert first["a"] == _want(model, prompt, n)
    tail = tok.encode(" ".join(PROMPTS[20:22]))[:7]
    # a second turn: the whole first sequence is cached, its last window too
    deep = prompt + first["a"][:-1] + tail
    hits = engine.kv.stats.hits
    got, _ = _drive(engine, {"b": deep}, 20)
    assert engine.kv.stats.hits - hits >= (len(prompt) + n - 1) // 16 * 16 - 16
    assert got["b"] == _want(model, deep, 20)
    # a branch off the middle of the generation: the tree's window pages there were released,
    # so the hit stops where they are all present (the prompt's end at most)
    shallow = prompt + first["a"][: WINDOW[arch] + 20] + tail
    hits = engine.kv.stats.hits
    got, _ = _drive(engine, {"c": shallow}, 20)
    assert engine.kv.stats.hits - hits <= len(prompt) + WINDOW[arch]
    assert got["c"] == _want(model, shallow, 20)


def _tight(model: Any, tok: Any, full_pages: int, max_batch: int, budget: int) -> Engine:
    """An engine whose memory gives the windowed pool its size and the full layers FULL_PAGES."""
    install()
    kw: dict[str, Any] = {"kind": "none", "page_size": 16, "group_size": 32,
                          "max_batch": max_batch, "context_length": 512,
                          "prefill_budget": budget}
    store = plan_kv(model, model_dtype(model), memory="64MiB", **kw).store
    group = group_for(store.kinds, 16, "none", False)
    assert group is not None
    layer_page = store.fmt.bytes_per_page() // store.fmt.num_layers
    windowed = window_pool_pages(group, max_batch, -(-budget // 16) + 1)
    memory = layer_page * (windowed * len(group.layers)
                           + full_pages * (store.fmt.num_layers - len(group.layers)))
    store = plan_kv(model, model_dtype(model), memory=str(memory), **kw).store
    assert store.num_pages == full_pages and store.window_pages == windowed
    return Engine(model, tok, store, context_length=512, max_batch=max_batch,
                  prefill_budget=budget)


def test_across_preemption(tiny: tuple[str, Any, Any]) -> None:
    _, model, tok = tiny
    prompts = {rid: ids for rid, ids in _batch(tok).items() if rid in "0246"}
    want = {rid: _want(model, ids, 150) for rid, ids in prompts.items()}
    engine = _tight(model, tok, 36, 3, 24)  # 3 rows of 12-16 pages each: preemptions
    got, _ = _drive(engine, prompts, 150)
    assert got == want
    assert engine.stats.preemptions > 0


def test_prompt_longer_than_the_windowed_pool(tiny: tuple[str, Any, Any]) -> None:
    """One row, prefill chunks of 16: a 400-token prompt needs 25 pages per layer, the windowed
    pool has 11; its published windowed pages leave the tree as the window passes them."""
    _, model, tok = tiny
    prompt = (tok.encode(" ".join(PROMPTS)) * 8)[:400]
    engine = _tight(model, tok, 60, 1, 16)
    assert engine.kv.window_pool is not None and engine.kv.window_pool.total == 10
    got, _ = _drive(engine, {"a": prompt}, 40)
    assert got == {"a": _want(model, prompt, 40)}
    radix = engine.kv.radix
    assert radix is not None and radix.num_pages == (400 + 39) // 16
    branch = prompt[:300] + prompt[:20]  # its window's pages at 288 left the tree: recomputed
    got, _ = _drive(engine, {"b": branch}, 20)
    assert got == {"b": _want(model, branch, 20)}
