"""The embedding runner's parts without weights: batching, queueing, inputs, pooling, configs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from protocol import messages as m
from worker.kinds import registry
from worker.kinds.embed.batching import Item, Pending, pick_batch
from worker.kinds.embed.inputs import Encoder, InputError
from worker.kinds.embed.model import truncate
from worker.kinds.embed.pooling import normalize, pool
from worker.kinds.embed.runner import EmbedRunner
from worker.kinds.embed.st_config import BadFolder, pooling_mode, read_embed_config
from worker.model.fetch import CannotLoad
from worker.serve.runner import QueueFull


class FakeTokenizer:
    """One token per word, between [CLS]=1 and [SEP]=2; words are ids 10 + len(word)."""

    def __call__(self, texts: list[str], add_special_tokens: bool = True, truncation: bool = False,
                 max_length: int | None = None) -> dict[str, Any]:
        out = []
        for t in texts:
            ids = [1, *(10 + len(w) for w in t.split()), 2]
            if truncation and max_length and len(ids) > max_length:
                ids = [*ids[:max_length - 1], 2]
            out.append(ids)
        return {"input_ids": out}


class FakeModel:
    """Records each forward's shape; the vector of a row is [sum of ids, length, dims]."""

    def __init__(self, dims: list[int] | None = None) -> None:
        self.shapes: list[tuple[int, int]] = []
        self.dims = dims or []

    def check_dimensions(self, dims: int) -> None:
        if dims and dims not in self.dims:
            raise InputError("does not support dimensions", "dimensions")

    def embed(self, ids: mx.array, mask: mx.array, dims: list[int]) -> list[np.ndarray]:
        self.shapes.append((ids.shape[0], ids.shape[1]))
        a, k = np.array(ids), np.array(mask)
        return [np.array([(a[i] * k[i]).sum(), k[i].sum(), d], dtype=np.float32)
                for i, d in enumerate(dims)]


def runner(max_batch: int = 4, max_waiting: int = 8, dims: list[int] | None = None,
           max_length: int = 16) -> EmbedRunner:
    enc = Encoder(FakeTokenizer(), max_length=max_length, vocab_size=100)
    return EmbedRunner(FakeModel(dims), enc, m.ModelFacts(model="fake", kind="embed"),  # type: ignore[arg-type]
                       max_batch, max_waiting)


def drain(r: EmbedRunner) -> list[m.RequestOutput]:
    outs: list[m.RequestOutput] = []
    for _ in range(100):
        if not r.has_work:
            return outs
        outs += r.step()
    raise AssertionError("the runner never ran dry")


def vec(raw: bytes) -> list[float]:
    return np.frombuffer(raw, dtype="<f4").tolist()


def test_inputs_of_concurrent_requests_share_one_forward() -> None:
    r = runner(max_batch=8)
    r.add(m.Embed(request_id="a", inputs=["one two", "three"]))
    r.add(m.Embed(request_id="b", inputs=["four five six"]))
    outs = drain(r)
    assert r.model.shapes == [(3, 5)]  # type: ignore[attr-defined]
    by = {o.request_id: o for o in outs}
    assert [vec(e)[1] for e in by["a"].embeddings] == [4, 3]  # in input order, not batch order
    assert by["a"].prompt_tokens == 7 and by["b"].prompt_tokens == 5
    assert all(o.finish_reason == "stop" for o in outs)


def test_batches_are_bounded_and_sorted_by_length() -> None:
    r = runner(max_batch=4, max_length=64)
    texts = [" ".join(["w"] * n) for n in (9, 1, 5, 3, 7, 2, 8, 4, 6, 10)]
    r.add(m.Embed(request_id="a", inputs=texts))
    outs = r.step()
    assert outs == [] and r.model.shapes == [(4, 12)]  # type: ignore[attr-defined]  # 4 longest
    outs = drain(r)
    assert r.model.shapes == [(4, 12), (4, 8), (2, 4)]  # type: ignore[attr-defined]
    assert len(outs) == 1 and [vec(e)[1] - 2 for e in outs[0].embeddings] == [
        9, 1, 5, 3, 7, 2, 8, 4, 6, 10]


def test_token_budget_limits_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    import worker.kinds.embed.runner as mod

    monkeypatch.setattr(mod, "TOKENS_MIN", 40)  # the timing-driven budget stays at 40 tokens
    monkeypatch.setattr(mod, "TOKENS_MAX", 40)
    r = runner(max_batch=32, max_length=64)
    r.max_tokens = 40
    r.add(m.Embed(request_id="a", inputs=[" ".join(["w"] * 18)] * 5))  # 20 tokens each
    drain(r)
    assert r.model.shapes == [(2, 20), (2, 20), (1, 20)]  # type: ignore[attr-defined]


def test_oldest_request_is_never_starved() -> None:
    requests = [Pending("old", []), Pending("new", [])]
    queued = [Item("new", i, [1] * 2) for i in range(10)] + [Item("old", 0, [1] * 30)]
    batch = pick_batch(requests, queued, max_batch=4, max_tokens=1000)
    assert any(it.request_id == "old" for it in batch) and len(batch) == 4


def test_queue_bound_and_abort() -> None:
    r = runner(max_waiting=2)
    r.add(m.Embed(request_id="a", inputs=["x"]))
    r.add(m.Embed(request_id="b", inputs=["y"]))
    with pytest.raises(QueueFull):
        r.add(m.Embed(request_id="c", inputs=["z"]))
    assert r.waiting == 2 and r.running == 0
    r.abort(["a"])
    outs = drain(r)
    assert [o.request_id for o in outs] == ["b"] and not r.requests


def test_bad_inputs_fail_their_request_only() -> None:
    r = runner(dims=[2])
    r.add(m.Embed(request_id="ids", inputs=[[1, 100, 2]]))
    r.add(m.Embed(request_id="long", inputs=[" ".join(["w"] * 20)]))
    r.add(m.Embed(request_id="dims", inputs=["x"], dimensions=3))
    r.add(m.Embed(request_id="ok", inputs=["x y"], dimensions=2))
    by = {o.request_id: o for o in drain(r)}
    assert by["ids"].error_param == "input" and "vocabulary" in (by["ids"].error or "")
    assert "16" in (by["long"].error or "") and by["long"].error_code == "invalid_request_error"
    assert by["dims"].error_param == "dimensions"
    assert by["ok"].finish_reason == "stop" and vec(by["ok"].embeddings[0])[2] == 2
    with pytest.raises(ValueError):
        r.add(m.Speak(request_id="s", text="hi"))


def test_truncate_cuts_text_and_ids_to_the_limit() -> None:
    enc = Encoder(FakeTokenizer(), max_length=4, vocab_size=100)
    assert enc.encode(["a b c d e", [1, 5, 6, 7, 8, 2]], truncate=True) == [
        [1, 11, 11, 2], [1, 5, 6, 7]]
    with pytest.raises(InputError, match="at most 4"):
        enc.encode([[1, 5, 6, 7, 8]], truncate=False)
    with pytest.raises(InputError, match="empty"):
        enc.encode([[]], truncate=False)


def test_a_failing_forward_fails_only_its_batch() -> None:
    r = runner(max_batch=1)
    r.add(m.Embed(request_id="a", inputs=["x"]))
    r.add(m.Embed(request_id="b", inputs=["y"]))

    def boom(*_: Any) -> list[np.ndarray]:
        raise RuntimeError("boom")

    real = r.model.embed
    r.model.embed = boom  # type: ignore[method-assign]
    first = r.step()
    r.model.embed = real  # type: ignore[method-assign]
    rest = drain(r)
    assert [(o.request_id, o.finish_reason) for o in first] == [("a", "error")]
    assert [(o.request_id, o.finish_reason) for o in rest] == [("b", "stop")]


def test_poolings_match_their_definitions() -> None:
    h = mx.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    mask = mx.array([[1, 1, 0], [1, 1, 1]])
    hn = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert np.allclose(np.array(pool(h, mask, "mean"))[0], hn[0, :2].mean(0))
    assert np.allclose(np.array(pool(h, mask, "cls")), hn[:, 0])
    assert np.allclose(np.array(pool(h, mask, "lasttoken")), [hn[0, 1], hn[1, 2]])
    assert np.allclose(np.array(pool(h, mask, "max"))[0], hn[0, 1])
    assert np.allclose(np.array(pool(h, mask, "mean_sqrt_len"))[1], hn[1].sum(0) / np.sqrt(3))
    assert np.allclose(np.linalg.norm(np.array(normalize(h[:, 0])), axis=-1), 1)
    cut = truncate(np.array([3, 4, 12], dtype=np.float32), 2)
    assert np.allclose(cut, [0.6, 0.8])


def _folder(tmp: Path, pooling: dict[str, Any], modules: list[str], st: dict[str, Any] | None = None,
            bert: dict[str, Any] | None = None) -> Path:
    (tmp / "1_Pooling").mkdir()
    (tmp / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (tmp / "modules.json").write_text(json.dumps(
        [{"idx": i, "name": str(i), "path": "1_Pooling" if t == "Pooling" else "",
          "type": f"sentence_transformers.models.{t}"} for i, t in enumerate(modules)]))
    if st is not None:
        (tmp / "config_sentence_transformers.json").write_text(json.dumps(st))
    if bert is not None:
        (tmp / "sentence_bert_config.json").write_text(json.dumps(bert))
    return tmp


def test_sentence_transformers_config(tmp_path: Path) -> None:
    path = _folder(tmp_path, {"pooling_mode_cls_token": True}, ["Transformer", "Pooling"],
                   bert={"max_seq_length": 128})
    cfg = read_embed_config(path, {"model_type": "bert", "max_position_embeddings": 512,
                                   "hidden_size": 384})
    assert (cfg.pooling, cfg.normalize, cfg.max_length, cfg.dims) == ("cls", False, 128, [])
    assert pooling_mode({"pooling_mode": "lasttoken"}) == "lasttoken"
    with pytest.raises(BadFolder):
        pooling_mode({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True})


def test_matryoshka_sizes(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _folder(tmp_path / "a", {"pooling_mode_mean_tokens": True}, ["Transformer", "Pooling", "Normalize"],
                st={"matryoshka_dims": [64, 384, 128]})
    cfg = read_embed_config(a, {"model_type": "bert", "hidden_size": 384})
    assert cfg.normalize and cfg.dims == [384, 128, 64]
    b = _folder(tmp_path / "b", {"pooling_mode": "lasttoken"}, ["Transformer", "Pooling", "Normalize"])
    qwen = read_embed_config(b, {"model_type": "qwen3", "hidden_size": 1024})
    assert qwen.pooling == "lasttoken" and 1024 in qwen.dims and 32 in qwen.dims
    assert 31 not in qwen.dims


def test_serving_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlx_embeddings" else real(name, *a))
    with pytest.raises(CannotLoad) as err:
        registry.load_runner("embed", "some/model", Path("/nonexistent"), {}, None)  # type: ignore[arg-type]
    assert "'embeddings' extra" in str(err.value) and "rapid-mlx[embeddings]" in str(err.value)


def test_equal_lengths_fill_one_batch() -> None:
    requests = [Pending("a", [])]
    queued = [Item("a", i, [1] * n) for i, n in enumerate([5, 3, 5, 3, 5, 3, 5, 3])]
    assert [len(it.tokens) for it in pick_batch(requests, queued, 4, 1000)] == [5, 5, 5, 5]


def test_fast_erf_and_gelu_match_the_exact_ones() -> None:
    import math

    import mlx.nn as nn

    from worker.kinds.embed.fast_ops import FastGELU, erf, swap_gelu

    xs = np.linspace(-6, 6, 20001, dtype=np.float32)
    ref = np.array([math.erf(float(v)) for v in xs])
    assert np.abs(np.array(erf(mx.array(xs))) - ref).max() < 1e-6
    x = mx.array(xs)
    assert float(mx.abs(FastGELU()(x) - nn.gelu(x)).max()) < 5e-6

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.act = nn.GELU()
            self.tanh = nn.GELU(approx="tanh")  # an approximate GELU stays as it is
            self.layers = [nn.Linear(2, 2)]

    block = Block()
    assert swap_gelu(block) == 1
    assert isinstance(block.act, FastGELU) and isinstance(block.tanh, nn.GELU)


def test_gateway_side_never_imports_mlx() -> None:
    import subprocess
    import sys

    code = ("import sys, gateway.app, gateway.cli, gateway.openai.embeddings; "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('mlx', 'mlx_embeddings', 'transformers', 'torch')]; print(bad); assert not bad")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stdout + out.stderr
