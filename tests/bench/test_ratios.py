"""The bench report logic: medians over rounds, ratios against the best peer, PASS/FAIL bars."""

from __future__ import annotations

from typing import Any

import pytest

from bench.ratios import annotate, bar, best_peer, median, median_summary, speed_bars

PEERS = ["mlx_lm", "rapid_mlx_ref"]


def rnd(tps: float, ttft: float | None = 0.1, requests: int = 4, ok: int = 4) -> dict[str, Any]:
    """One round's summary, as BatchResult.summary() makes it."""
    return {"tokens_per_s": tps, "ttft_p50_s": ttft, "ttft_p95_s": None if ttft is None else 2 * ttft,
            "requests": requests, "ok": ok, "generated_tokens": int(tps), "connect_retries": 1,
            "tokens_min": 1, "tokens_max": 128}


def entry(server: str, c: int, tps: list[float], ttft: list[float | None],
          workload: str = "chat") -> dict[str, Any]:
    runs = [rnd(t, f) for t, f in zip(tps, ttft, strict=True)]
    return {"server": server, "workload": workload, "concurrency": c, "median": median_summary(runs),
            "runs": runs}


def test_median_ignores_none_and_averages_the_middle_pair() -> None:
    assert median([3.0, None, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert median([None, None]) is None


def test_median_summary_takes_medians_not_the_best_round() -> None:
    m = median_summary([rnd(100.0, 0.3), rnd(300.0, 0.1), rnd(200.0, 0.2, ok=3)])
    assert m["tokens_per_s"] == 200.0  # the best round would be 300
    assert m["ttft_p50_s"] == 0.2 and m["ttft_p95_s"] == 0.4
    assert m["tokens_per_s_runs"] == [100.0, 300.0, 200.0]
    assert m["generated_tokens"] == 200  # counts from the median round
    assert (m["requests_all"], m["ok_all"], m["connect_retries"], m["rounds"]) == (12, 11, 3, 3)
    with pytest.raises(ValueError):
        median_summary([])


def test_best_peer_is_chosen_among_peers_only() -> None:
    rows = [entry("mlx_lm", 8, [100, 110, 90], [0.2, 0.2, 0.2]),
            entry("rapid_mlx_ref", 8, [150, 140, 160], [0.5, 0.4, 0.6]),
            entry("ours-k8v4-on", 8, [900, 900, 900], [0.01, 0.01, 0.01])]
    assert best_peer(rows, PEERS) == ("rapid_mlx_ref", 150.0)
    assert best_peer(rows, PEERS, key="ttft_p50_s", lowest=True) == ("mlx_lm", 0.2)
    assert best_peer(rows, ["nobody"]) is None


def test_annotate_rates_each_row_against_its_own_best_peer() -> None:
    tp = [entry("mlx_lm", 1, [100, 100, 100], [0.1, 0.1, 0.1]),
          entry("rapid_mlx_ref", 1, [50, 50, 50], [0.05, 0.05, 0.05]),
          entry("ours", 1, [130, 20, 140], [0.04, 0.05, 0.06]),
          entry("mlx_lm", 8, [200, 200, 200], [0.3, 0.3, 0.3]),
          entry("rapid_mlx_ref", 8, [400, 400, 400], [0.6, 0.6, 0.6]),
          entry("ours", 8, [600, 600, 600], [0.3, 0.3, 0.3]),
          entry("mlx_lm", 1, [80, 80, 80], [0.1, 0.1, 0.1], workload="edit"),
          entry("ours", 1, [40, 40, 40], [0.1, 0.1, 0.1], workload="edit")]
    annotate(tp, PEERS)
    ours1, ours8, edit1 = tp[2], tp[5], tp[7]
    assert ours1["best_peer_tps"] == ["mlx_lm", 100.0] and ours1["tps_vs_best_peer"] == 1.3
    assert ours1["best_peer_ttft"] == ["rapid_mlx_ref", 0.05] and ours1["ttft_vs_best_peer"] == 1.0
    assert ours8["best_peer_tps"] == ["rapid_mlx_ref", 400.0] and ours8["tps_vs_best_peer"] == 1.5
    assert ours8["ttft_vs_best_peer"] == 1.0
    assert edit1["best_peer_tps"] == ["mlx_lm", 80.0] and edit1["tps_vs_best_peer"] == 0.5
    assert tp[1]["tps_vs_best_peer"] == 0.5  # the weaker peer is rated too


def test_bar_verdicts() -> None:
    assert bar("x", 1.5, ">=", 1.5)["verdict"] == "PASS"
    assert bar("x", 1.49, ">=", 1.5)["verdict"] == "FAIL"
    assert bar("x", 1.0, "<=", 1.0)["verdict"] == "PASS"
    assert bar("x", 1.01, "<=", 1.0)["verdict"] == "FAIL"
    assert bar("x", None, ">=", 1.5)["verdict"] == "n/a"


def test_speed_bars_apply_the_issue_limits() -> None:
    tp = [entry("mlx_lm", 1, [100] * 3, [0.1] * 3), entry("ours-k8v4-on", 1, [129] * 3, [0.1] * 3),
          entry("ours-k8v4-off", 1, [130] * 3, [0.2] * 3),
          entry("mlx_lm", 8, [100] * 3, [0.5] * 3), entry("ours-k8v4-on", 8, [150] * 3, [0.6] * 3),
          entry("ours-k8v4-off", 8, [170] * 3, [0.2] * 3),
          entry("mlx_lm", 32, [100] * 3, [0.5] * 3), entry("ours-k8v4-on", 32, [151] * 3, [0.4] * 3),
          entry("ours-k8v4-on", 1, [50] * 3, [0.1] * 3, workload="edit"),
          entry("ours-ngram", 1, [101] * 3, [0.1] * 3, workload="edit"),
          entry("ours-ngram", 1, [60] * 3, [0.1] * 3)]
    annotate(tp, PEERS)
    got = {b["bar"]: (b["value"], b["limit"], b["verdict"])
           for b in speed_bars(tp, "ours-k8v4-on", "ours-k8v4-off", {"ours-ngram": "--speculative ngram"})}
    assert got["ours-k8v4-on tok/s vs best peer (mlx_lm), c=1"] == (1.29, ">= 1.3", "FAIL")
    assert got["ours-k8v4-on tok/s vs best peer (mlx_lm), c=8"] == (1.5, ">= 1.5", "PASS")
    assert got["ours-k8v4-on tok/s vs best peer (mlx_lm), c=32"] == (1.51, ">= 1.5", "PASS")
    assert got["ours-k8v4-on TTFT p50 vs best peer (mlx_lm), c=1"] == (1.0, "<= 1", "PASS")
    assert got["ours-k8v4-on TTFT p50 vs best peer (mlx_lm), c=8"] == (1.2, "<= 1", "FAIL")
    assert got["K8V4 cost: ours-k8v4-on / ours-k8v4-off tok/s, c=1"] == (0.992, ">= 0.95", "PASS")
    assert got["K8V4 cost: ours-k8v4-on / ours-k8v4-off tok/s, c=8"] == (0.882, ">= 0.95", "FAIL")
    assert got["ours-ngram (--speculative ngram) vs ours-k8v4-on tok/s, edit, c=1"] == (2.02, ">= 2", "PASS")
    assert got["ours-ngram (--speculative ngram) vs ours-k8v4-on tok/s, chat, c=1"][2] == "info"
    assert not any("c=32" in k and "K8V4 cost" in k for k in got)  # no K8V4-off row at 32
