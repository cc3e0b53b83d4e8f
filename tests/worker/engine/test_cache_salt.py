"""The engine's prefix cache per namespace (a tenant's cache salt): same prompt, other salt, no hit."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _reference, make_engine
from worker.engine.failures import verify
from worker.kv.request_pages import RequestPages
from worker.model.embedded import embedded_model_path

GREEDY = SamplingParams(max_tokens=8, temperature=0.0)


@pytest.fixture(scope="module")
def model() -> tuple[Any, Any]:
    return load(str(embedded_model_path()))[:2]


def _finish(engine: Any, adds: list[tuple[str, str]], ids: list[int]) -> dict[str, Any]:
    """Run requests (id, salt) of IDS together; each one's (tokens, cached tokens)."""
    for rid, salt in adds:
        engine.add(rid, ids, GREEDY, cache_salt=salt)
    got: dict[str, Any] = {rid: ([], 0) for rid, _ in adds}
    for _ in range(10_000):
        if not engine.has_work:
            return got
        for out in engine.step():
            toks, _ = got[out.request_id]
            got[out.request_id] = (toks + list(out.token_ids), out.cached_tokens)
        verify(engine.kv, engine.running)  # locks and pages agree over every namespace
    raise AssertionError("engine stuck")


def test_a_salt_hits_only_its_own_prefix(model: tuple[Any, Any]) -> None:
    mdl, tok = model
    ids = tok.encode(" ".join(PROMPTS))
    ref = _reference(mdl, tok, ids, 8)
    engine = make_engine(mdl, tok, page_size=8)
    full = (len(ids) - 1) // 8 * 8
    assert _finish(engine, [("a1", "a")], ids)["a1"] == (ref, 0)
    assert _finish(engine, [("b1", "b")], ids)["b1"] == (ref, 0)  # a's pages are not b's
    assert _finish(engine, [("s1", "")], ids)["s1"] == (ref, 0)  # nor the shared namespace's
    again = _finish(engine, [("a2", "a"), ("b2", "b"), ("s2", "")], ids)
    assert again == {rid: (ref, full) for rid in ("a2", "b2", "s2")}  # each hits its own
    per_salt = (len(ids) + GREEDY.max_tokens - 1) // 8  # prompt and answer, in full pages
    assert engine.kv.pool.num_used == engine.kv.radix.num_pages == 3 * per_salt


def test_other_salts_do_not_wait_for_an_inflight_prefix(model: tuple[Any, Any]) -> None:
    """Arriving together, same-salt requests compute a prefix once; other salts compute their own."""
    mdl, tok = model
    ids = tok.encode(" ".join(PROMPTS))
    engine = make_engine(mdl, tok, page_size=8, prefill_budget=16)
    got = _finish(engine, [("a1", "a"), ("a2", "a"), ("b1", "b")], ids)
    assert got["a2"][1] > 0  # waited for a1's pages, then reused them
    assert got["b1"][1] == 0  # b neither waited for a's nor reused them


def test_inflight_prefix_waits_only_within_a_salt(model: tuple[Any, Any]) -> None:
    """Waiting for another salt's pages would delay a tenant by what another is computing (a
    timing side channel) for pages it could never share."""
    mdl, tok = model
    engine = make_engine(mdl, tok, page_size=8)
    ids = list(range(3, 3 + 40))

    class _Row:
        def __init__(self, salt: str, computed: int = 0) -> None:
            self.tokens, self.computed, self.cache_salt = ids, computed, salt
            self.kv = RequestPages(pages=[1])  # started: holds pages

    mine = _Row("a")
    assert engine.kv.shares_inflight_prefix(mine, [_Row("a")], len(ids))
    assert not engine.kv.shares_inflight_prefix(mine, [_Row("b")], len(ids))
    assert not engine.kv.shares_inflight_prefix(mine, [_Row("")], len(ids))
