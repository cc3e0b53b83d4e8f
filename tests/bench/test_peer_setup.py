"""Bench peers: roles of a run, the reference product's private HOME and env, OpenBLAS checks."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bench.prompts import EDIT_INSTRUCTION, _count_tokens, edit_messages
from bench.ratios import annotate
from bench.report import throughput_lines
from bench.run_all import build_servers
from bench.servers import Server, mapped_openblas, maps_openblas
from tests.bench.test_ratios import entry

DEMO = Path(__file__).resolve().parents[2] / "worker" / "model" / "demo" / "weights"


def test_build_servers_roles_with_both_peers_k8v4_and_a_variant() -> None:
    servers, roles = build_servers("/m", True, 32, ["mlx_lm", "rapid_mlx_ref"], "both",
                                   ["--foo", "1"], {"ngram": ["--speculative", "ngram"]})
    names = [s.name for s in servers]
    assert names == ["mlx_lm", "rapid_mlx_ref", "ours-k8v4-on", "ours-k8v4-off", "ours-ngram"]
    assert roles == {"peers": ["mlx_lm", "rapid_mlx_ref"], "ours": "ours-k8v4-on",
                     "k8v4_off": "ours-k8v4-off", "variants": {"ours-ngram": "--speculative ngram"}}
    assert servers[-1].argv_extra == ["--max-batch", "32", "--foo", "1", "--kv-cache-turboquant", "k8v4",
                                      "--speculative", "ngram"]
    assert servers[3].argv_extra[-2:] == ["--kv-cache-turboquant", "none"]
    servers, roles = build_servers("/m", False, 8, ["mlx_lm"])
    assert [s.name for s in servers] == ["mlx_lm", "ours"] and roles["ours"] == "ours"


def test_reference_product_gets_a_private_home_and_its_own_env(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # a stand-in rapid-mlx that records its environment and then waits to be stopped
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    out = tmp_path / "env.txt"
    exe = venv / "bin" / "rapid-mlx"
    exe.write_text(f"#!/bin/sh\nenv > {out}.tmp && mv {out}.tmp {out}\nexec sleep 60\n")
    exe.chmod(0o755)
    monkeypatch.setenv("RAPID_MLX_PEER_VENV", str(venv))
    monkeypatch.setenv("RAPID_MLX_API_KEY", "ours-only")
    s = Server("rapid_mlx_ref", "rapid_mlx_ref", "/model", log_dir=tmp_path / "logs")
    assert s.argv()[:3] == [str(exe), "serve", "/model"]
    s.start()
    try:
        deadline = time.monotonic() + 10
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
        home = s.home
        assert home and env["HOME"] == home and Path(home).is_dir() and home != os.environ.get("HOME")
        assert env["RAPID_MLX_TELEMETRY"] == "0" and "RAPID_MLX_API_KEY" not in env
        assert s.command_line().startswith("HOME=$(mktemp -d) ")
    finally:
        s.stop(grace=2.0)
    assert s.home is None and not Path(home).exists()


def test_maps_openblas_counts_only_the_preloaded_file() -> None:
    files = mapped_openblas(os.getpid())
    assert files is not None
    assert maps_openblas(os.getpid(), "/nonexistent/libopenblas.so.0") is False
    if files:
        assert maps_openblas(os.getpid(), files[0]) is True
    assert mapped_openblas(None) is None


@pytest.mark.skipif(not DEMO.exists(), reason="demo model weights absent")
def test_edit_prompts_are_distinct_and_within_the_budget() -> None:
    chats = edit_messages(DEMO, "ed1r0", 3, 120)
    texts = [c[0]["content"] for c in chats]
    assert len(set(texts)) == 3 and all(t.startswith(EDIT_INSTRUCTION) for t in texts)
    count = _count_tokens(DEMO)
    para = [t.split(". ", 1)[1] for t in texts]
    assert all(60 <= count(p) <= 120 for p in para)


def test_throughput_table_names_the_best_peer() -> None:
    tp = [entry("mlx_lm", 8, [100] * 3, [0.2] * 3), entry("rapid_mlx_ref", 8, [120, 110, 130], [0.5] * 3),
          entry("ours", 8, [180] * 3, [0.1] * 3)]
    annotate(tp, ["mlx_lm", "rapid_mlx_ref"])
    mr = {"roles": {"peers": ["mlx_lm", "rapid_mlx_ref"], "ours": "ours"}, "throughput": tp,
          "servers": [{"name": n} for n in ("mlx_lm", "rapid_mlx_ref", "ours")]}
    text = "\n".join(throughput_lines(mr))
    assert "| chat | 8 | rapid_mlx_ref (120.0) | 1.50x (0.50x) |" in text
    assert "120.0, 110.0, 130.0" in text
