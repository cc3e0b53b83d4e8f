"""Tensor-parallel plans in one process: rank 0's engine with a recording tap, then a second
Forward replaying the plans (as a follower does) writes the very same KV pages, so a plan holds
everything a rank needs. Plus the plan codec, the group's command lines and the refusals."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

from gateway.plane.tp_group import group_command, is_group, tensor_parallel
from protocol.messages import SamplingParams
from tests.conftest import shared_model
from tests.worker.engine.test_engine import make_engine
from worker.engine.core import model_dtype
from worker.engine.forward import Forward
from worker.kv.setup import UnsupportedModel, plan_kv
from worker.model.embedded import embedded_model_path
from worker.tp import plan as p
from worker.tp.command import DEFAULT_PORT, launch_command
from worker.tp.follower import follow
from worker.tp.leader import Leader
from worker.tp.link import _endpoint
from worker.tp.shard import shard_model


class _Tape:
    """A Link stand-in: rank 0's sends and token arrays recorded, then replayed in order."""

    def __init__(self) -> None:
        self.plans: list[bytes] = []
        self.toks: list[mx.array] = []

    def send(self, plan: p.Plan) -> None:
        self.plans.append(p.encode(plan))

    def tokens(self, tokens: mx.array | None, n: int) -> mx.array:
        if tokens is not None:
            self.toks.append(tokens)
            return tokens
        return self.toks.pop(0)

    def receive(self, parent: int | None = None) -> p.Plan:
        return p.decode(self.plans.pop(0))


@pytest.mark.parametrize(("name", "kind"), [("stories260K", "none"), ("embedded", "none"),
                                            ("embedded", "k8v4")])
def test_replayed_plans_write_the_same_pages(name: str, kind: str) -> None:
    path = embedded_model_path() if name == "embedded" else shared_model("stories260K")
    model, tok = load(str(path))[:2]
    # a group's ranks never run the compiled step (Forward.sharded): replay plain against plain
    engine = make_engine(model, tok, kind=kind, compile_decode="off")
    tape = _Tape()
    leader = Leader(tape)  # type: ignore[arg-type]
    engine.executor.forward.tap = leader
    prompts = ["Once upon a time", "The cat sat on the mat and", "Lily and Tom"]
    for i, text in enumerate(prompts):
        engine.add(str(i), tok.encode(text), SamplingParams(max_tokens=24, temperature=0.0))
    while engine.has_work:
        engine.step()
    mx.eval(engine.kv.store.arrays())
    tape.plans.append(p.encode(p.Stop("done")))
    kinds = {type(p.decode(b)).__name__ for b in tape.plans}
    assert {"Call", "Decode", "Stop"} <= kinds, kinds

    store = plan_kv(model, model_dtype(model), kind=kind, memory="64MiB", page_size=16,
                    group_size=32, max_batch=32, context_length=512).store
    if store.quantized:
        store.set_centers(engine.kv.store.k_center, engine.kv.store.v_center)
    follower = Forward(model, store, model_dtype(model))
    follower.sharded = True  # as run_follower sets it: the hidden states are evaluated
    heads = []
    if follower.split is not None:  # a follower never builds the LM head rank 0 samples from
        inner, head = follower.split
        follower.split = (inner, lambda h: heads.append(h) or head(h))
    assert follow(follower, tape) == "done"  # type: ignore[arg-type]
    assert not heads
    for a, b in zip(engine.kv.store.arrays(), store.arrays(), strict=True):
        assert np.array_equal(np.array(a), np.array(b))


def test_a_follower_frees_its_dense_cache_when_rank_0_is_idle() -> None:
    """Rank 0's engine tells the group once when no row runs (after forwards); a follower then
    frees its dense decode cache as rank 0 frees its own."""
    import worker.kv.dense as kv_dense

    model, tok = load(str(shared_model("stories260K")))[:2]
    engine = make_engine(model, tok, compile_decode="off")
    tape = _Tape()
    engine.executor.forward.tap = Leader(tape)  # type: ignore[arg-type]
    for i, text in enumerate(["Once upon a time", "The cat sat", "Lily and Tom", "One day",
                              "The sun was", "Mom said"][: kv_dense.MIN_ROWS + 2]):
        engine.add(str(i), tok.encode(text), SamplingParams(max_tokens=24, temperature=0.0,
                                                            ignore_eos=True))
    while engine.has_work:
        engine.step()
    engine.step()  # idle again: nothing more to tell
    tape.plans.append(p.encode(p.Stop("done")))
    kinds = [type(p.decode(b)).__name__ for b in tape.plans]
    assert kinds[-2:] == ["Idle", "Stop"] and kinds.count("Idle") == 1, kinds
    rank0 = engine.executor.forward.dense
    assert rank0 is not None and rank0.steps > 0 and rank0.nbytes == 0

    store = plan_kv(model, model_dtype(model), kind="none", memory="64MiB", page_size=16,
                    group_size=32, max_batch=32, context_length=512).store
    follower = Forward(model, store, model_dtype(model))
    follower.sharded = True
    tape.plans.insert(len(tape.plans) - 2, p.encode(p.Stop("before the idle")))
    assert follow(follower, tape) == "before the idle"  # type: ignore[arg-type]
    cache = follower.dense
    assert cache is not None and cache.steps == rank0.steps and cache.nbytes > 0
    assert follow(follower, tape) == "done"  # type: ignore[arg-type]
    assert cache.rows == 0 and cache.nbytes == 0 and cache.k[0] is None


def test_plan_codec_round_trips() -> None:
    plans: list[p.Plan] = [p.Call([[1, 2], [3]], [[0], [4, 5]], [0, 7], [0, 16], True),
                           p.Decode([[1]], [0], [9]), p.Shape(100, 4, "k8v4", 8, 1 << 20),
                           p.Idle(), p.Stop("bye")]
    assert [p.decode(p.encode(x)) for x in plans] == plans


def test_group_command_lines(tmp_path: Any) -> None:
    assert tensor_parallel(["--max-batch", "4"]) == 1 and not is_group([])
    assert tensor_parallel(["--tensor-parallel", "2"]) == 2
    assert tensor_parallel(["--tensor-parallel=4"]) == 4
    cmd = group_command(["python", "-m", "worker", "--tensor-parallel", "2"])
    assert cmd[1:3] == ["-m", "worker.tp.launch"] and cmd[-4:-2] == ["-m", "worker"]
    hosts = tmp_path / "hosts.json"
    hosts.write_text("[]")
    line = launch_command(["w", "--tensor-parallel", "2", "--tp-hostfile", str(hosts)])
    assert line[line.index("--hostfile") + 1] == str(hosts)
    assert line[line.index("--backend") + 1] == "ring"
    assert line[line.index("--starting-port") + 1] == str(DEFAULT_PORT)
    assert line[line.index("--") + 1 :] == ["w", "--tensor-parallel", "2", "--tp-hostfile",
                                           str(hosts)]


def test_plan_channel_endpoint(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = tmp_path / "ring.json"
    hosts.write_text(json.dumps([["127.0.0.1:5000"], ["127.0.0.1:5001"]]))
    monkeypatch.setenv("MLX_HOSTFILE", str(hosts))
    monkeypatch.setenv("RAPID_MLX_TP_DIR", str(tmp_path))  # the launcher's folder
    assert _endpoint() == f"ipc://{tmp_path}/plans"
    hosts.write_text(json.dumps([["10.0.0.1:5000"], ["10.0.0.2:5000"]]))
    assert _endpoint() == "tcp://10.0.0.1:*"


def test_unshardable_models_are_refused() -> None:
    model, _ = load(str(shared_model("stories260K")))[:2]  # 8 heads, 4 KV heads
    with pytest.raises(UnsupportedModel, match="do not split over 3"):
        shard_model(model, SimpleNamespace(size=3, group=None))  # type: ignore[arg-type]
    with pytest.raises(UnsupportedModel, match="cannot shard"):
        shard_model(SimpleNamespace(layers=[]), SimpleNamespace(size=2))  # type: ignore[arg-type]
