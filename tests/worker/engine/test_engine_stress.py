"""Randomized engine workloads: staggered arrivals, shared prefixes, tight pools, aborts.

Every trial must finish (no stuck request), every request that was not aborted must produce
exactly mlx-lm's greedy tokens, and the cache invariants must hold once the engine is idle.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from mlx_lm import load

from protocol.messages import SamplingParams
from tests.worker.engine.test_engine import PROMPTS, _reference, make_engine
from tests.worker.engine.test_paged_engine import _assert_idle_invariants
from tools.tiny_models.build import build
from worker.model.embedded import embedded_model_path


@pytest.fixture(scope="module", params=["demo", "hybrid"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Any, Any]:
    if request.param == "hybrid":  # Gated DeltaNet + attention: state slots and snapshots too
        return load(str(build("qwen3_5", tmp_path_factory.mktemp("hybrid"))))[:2]
    return load(str(embedded_model_path()))[:2]


@pytest.mark.parametrize(("kind", "seed"), [("none", s) for s in range(6)] + [("k8v4", s) for s in range(3)])
def test_random_workload_finishes_with_reference_outputs(model: tuple[Any, Any], kind: str,
                                                         seed: int) -> None:
    """none: exactly mlx-lm's tokens. K8V4: finishes, full-length outputs, pools back to idle."""
    mdl, tok = model
    rng = random.Random(seed)
    page = rng.choice([4, 8, 16])
    systems = [" ".join(rng.sample(PROMPTS, 8)) for _ in range(2)]
    requests = []
    for i in range(rng.randint(6, 12)):
        head = rng.choice(systems) + " " if rng.random() < 0.7 else ""
        ids = tok.encode(head + rng.choice(PROMPTS))
        requests.append((f"r{i}", ids, rng.randint(1, 24), rng.randint(0, 30)))  # id, ids, max, at
    longest = max(len(ids) + n for _, ids, n, _ in requests)
    engine = make_engine(mdl, tok, kind=kind, memory="1", page_size=page,
                         max_batch=rng.choice([2, 4, 8]),
                         prefill_budget=rng.choice([8, 32, 512]),
                         prefix_cache=rng.random() < 0.8)
    engine.kv.pool.__init__(engine.kv.pages_for(longest) + rng.randint(2, 12))
    aborted = {rid for rid, *_ in requests if rng.random() < 0.2}
    got: dict[str, list[int]] = {rid: [] for rid, *_ in requests}
    pending = sorted(requests, key=lambda r: r[3])
    for step in range(20_000):
        while pending and pending[0][3] <= step:
            rid, ids, n, _ = pending.pop(0)
            engine.add(rid, ids, SamplingParams(max_tokens=n, temperature=0.0))
        for out in engine.step():
            got[out.request_id].extend(out.token_ids)
        for rid in list(aborted):
            if len(got[rid]) >= 2:  # abort mid-generation
                engine.abort([rid])
                aborted.discard(rid)
                got[rid] = []
        if not pending and not engine.has_work:
            break
    else:
        raise AssertionError(f"stuck: {len(engine.running)} running, {len(engine.waiting)} waiting")
    for rid, ids, n, _ in requests:
        if got[rid] and kind == "none":
            assert got[rid] == _reference(mdl, tok, ids, n), rid
        elif got[rid]:
            assert len(got[rid]) == n or got[rid][-1] in tok.eos_token_ids, rid
    _assert_idle_invariants(engine)
    snaps = engine.kv.snapshots
    if snaps is not None:  # every state slot is free or a snapshot the tree holds
        assert snaps.running == 0
        assert snaps.pool.num_free + len(snaps.held) == snaps.pool.num_slots - 1
    if engine.kv.tails is not None:
        assert engine.kv.tails.num_used == 0, "a full-precision tail page outlived its request"
