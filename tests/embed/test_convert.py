"""`rapid-mlx convert-embeddings` on the real MiniLM checkpoint: the folder it writes loads, and
--matryoshka-dims turns on `dimensions` (cut and renormalized) in the runner."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from protocol import messages as m
from tests.embed.refs import ROOT
from worker.kinds.embed.convert import copy_st_files
from worker.kinds.embed.runner import load_runner

pytestmark = pytest.mark.slow


def test_convert_with_matryoshka_dims(tmp_path: Path, minilm_src: Path) -> None:
    dst = tmp_path / "minilm-mrl"
    out = subprocess.run([sys.executable, "-m", "gateway", "convert-embeddings", str(minilm_src),
                          str(dst), "--matryoshka-dims", "384,128,64"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert (dst / "1_Pooling" / "config.json").exists() and (dst / "modules.json").exists()
    st = json.loads((dst / "config_sentence_transformers.json").read_text())
    assert st["matryoshka_dims"] == [384, 128, 64]
    again = subprocess.run([sys.executable, "-m", "gateway", "convert-embeddings",
                            str(minilm_src), str(dst)], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode != 0 and "not empty" in again.stderr  # never overwrites

    config = json.loads((dst / "config.json").read_text())
    r = load_runner("mrl", dst, config, argparse.Namespace(max_batch=8, max_waiting=8))
    assert "dimensions" in r.facts.capabilities
    r.add(m.Embed(request_id="full", inputs=["A man is playing a guitar."]))
    r.add(m.Embed(request_id="cut", inputs=["A man is playing a guitar."], dimensions=128))
    r.add(m.Embed(request_id="odd", inputs=["x"], dimensions=100))
    outs: dict[str, m.RequestOutput] = {}
    while r.has_work:
        outs.update((o.request_id, o) for o in r.step())
    full = np.frombuffer(outs["full"].embeddings[0], "<f4")
    cut = np.frombuffer(outs["cut"].embeddings[0], "<f4")
    assert cut.shape == (128,) and np.allclose(cut, full[:128] / np.linalg.norm(full[:128]),
                                               atol=1e-6)
    assert outs["odd"].error_param == "dimensions" and "384, 128, 64" in (outs["odd"].error or "")


def test_copy_st_files_skips_weights(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "2_Dense").mkdir(parents=True)
    dst.mkdir()
    (src / "modules.json").write_text("[]")
    (src / "2_Dense" / "config.json").write_text("{}")
    (src / "2_Dense" / "model.safetensors").write_bytes(b"x")
    copied = copy_st_files(src, dst)
    assert sorted(copied) == ["2_Dense/config.json", "modules.json"]
    assert not (dst / "2_Dense" / "model.safetensors").exists()
