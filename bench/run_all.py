"""Benchmark rapid-mlx against mlx_lm.server, side by side in one process tree; report ratios.

    .venv/bin/python -m bench.run_all [--quick] [--models stories,qwen3] [--concurrency 1,8,32]
                                      [--repeats N] [--write-readme]

For each model this starts ``mlx_lm.server`` (with the same OpenBLAS preloaded that our workers
preload) and our server (``python -m gateway serve``; with K8V4 off and on when ``serve`` has
``--kv-cache-turboquant``, otherwise once with the engine's default), waits for all of them, warms
each up, then runs every workload against each server in turn (same prompts, streaming,
``max_tokens`` 128, temperature 0) and stops them (process groups, always).  Printed: absolute
numbers, ratios ours / mlx_lm and PASS/FAIL against the bars of the engine issue.  Results also
go to ``bench/results/latest.json``; ``--write-readme`` rewrites the results section of
``bench/README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.servers import ROOT, Server, ServerGroup, maps_openblas, openblas_path, serve_help
from bench.serving import BatchResult, run_batch

BENCH = ROOT / "bench"
README = BENCH / "README.md"
RESULTS = BENCH / "results"
STORIES = (ROOT / ".." / "shared" / "models" / "stories260K").resolve()
BEGIN, END = "<!-- BENCH:RESULTS:BEGIN -->", "<!-- BENCH:RESULTS:END -->"
MAX_TOKENS = 128
GIB = 2**30
SEQ_LEN = 4096
MLX_LM_FLAGS = ["--decode-concurrency", "32", "--prompt-concurrency", "8"]
REQUESTS_PER_CONC = {1: 4}  # otherwise 2 * concurrency (two waves of the closed loop); x4 for stories

TOPICS = ["a cat who learns to swim", "a robot in a bakery", "the moon and a lighthouse",
          "a dragon that collects spoons", "two friends building a raft", "a lost umbrella",
          "a garden on a rooftop", "a clock that runs backwards", "a fox and a violin",
          "a snowman in summer", "an old map in the attic", "a train to the sea",
          "a bee who cannot fly", "a castle made of sand", "the smallest elephant",
          "a whale who sings", "a kite caught in a tree", "the last cookie",
          "a painter and a storm", "a bicycle race in the rain", "a tiny door in the wall",
          "a frog prince who likes soup", "a squirrel's treasure", "the girl who counted stars"]

WORDS = ("the of and to in is was for on that with as by at from this it be are an or which "
         "policy customer order account support refund shipping product service request team data "
         "always never must should may please note answer question clear short polite helpful safe "
         "user assistant system message rule example format list table detail step reason check "
         "time date price number name address email phone city country language style tone").split()


# ---- prompts ------------------------------------------------------------------------------


def _count_tokens(model_path: Path) -> Callable[[str], int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_path / "tokenizer.json"))
    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


def system_prompt(model_path: Path, target_tokens: int, seed: int) -> tuple[str, int]:
    """Deterministic policy-like text of about ``target_tokens`` tokens (never more) for this model."""
    count = _count_tokens(model_path)
    rng = random.Random(seed)
    sentences = [f"You are assistant number {seed} of the benchmark company. Follow these rules."]
    best = (sentences[0], count(sentences[0]))
    while True:
        n = rng.randint(8, 16)
        words = [rng.choice(WORDS) for _ in range(n)]
        sentences.append(f"Rule {len(sentences)}: " + " ".join(words).capitalize() + ".")
        text = " ".join(sentences)
        ntok = count(text)
        if ntok > target_tokens:
            return best
        best = (text, ntok)


def shared_prefix_budget(model_path: Path, ctx: int, plan: Plan, users: list[str]) -> int:
    """System-prompt tokens: ~1,000, or less so that prompt + max_tokens fits the context."""
    count = _count_tokens(model_path)
    room = ctx - plan.max_tokens - max(count(u) for u in users) - 24  # 24: chat template markup
    return min(plan.shared_target, room)


def user_messages(tag: str, n: int) -> list[list[dict[str, str]]]:
    """N distinct short chats; the tag comes first so no two workloads share more than the template."""
    return [[{"role": "user", "content": f"{tag}-{i}: tell me a story about {TOPICS[i % len(TOPICS)]}."}]
            for i in range(n)]


# ---- facts --------------------------------------------------------------------------------


def model_config(path: Path) -> dict[str, Any]:
    return dict(json.loads((path / "config.json").read_text()))


def context_length(cfg: dict[str, Any]) -> int:
    return int(cfg.get("max_position_embeddings") or 4096)


def machine_facts() -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    blas = openblas_path()
    return {
        "cpus": os.cpu_count(), "cpu_model": cpu or platform.processor(), "ram_gib": round(mem / GIB, 1),
        "blas": blas, "blas_file": os.path.realpath(blas) if blas else None,
        "mlx": version("mlx"), "mlx_lm": version("mlx-lm"), "python": platform.python_version(),
        "platform": platform.platform(), "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
    }


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# ---- KV arithmetic ------------------------------------------------------------------------


def kv_bytes_per_token_layer(cfg: dict[str, Any], fmt: str, group: int = 32) -> float | None:
    """KV bytes one token costs in one layer: fp32/fp16 pages, or K8V4 (8-bit K, 4-bit V) with a
    float16 scale and bias per ``group`` elements of head_dim (None when head_dim < group)."""
    h = int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    d = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    if fmt == "fp32":
        return 2 * h * d * 4
    if fmt == "fp16":
        return 2 * h * d * 2
    if d % group or d < group:
        return None
    meta = 2 * 2 * (d // group)  # fp16 scale + fp16 bias per group
    return h * (d * 8 / 8 + meta) + h * (d * 4 / 8 + meta)


def kv_table(cfg: dict[str, Any], reported: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    layers = int(cfg["num_hidden_layers"])
    fp16 = kv_bytes_per_token_layer(cfg, "fp16")
    rows = []
    for label, fmt, group in [("fp32", "fp32", 0), ("fp16", "fp16", 0), ("K8V4 g32", "k8v4", 32),
                              ("K8V4 g64", "k8v4", 64)]:
        b = kv_bytes_per_token_layer(cfg, fmt, group or 32)
        rows.append({"format": label, "bytes_per_token_layer": b,
                     "vs_fp16": round(b / fp16, 4) if b and fp16 else None,
                     "bytes_per_token": b * layers if b else None,
                     "seqs_4096_per_gib": int(GIB // (b * layers * SEQ_LEN)) if b else None,
                     "source": "config arithmetic"})
    for server, st in reported.items():
        b = st.get("kv_bytes_per_token_per_layer")
        if b:
            rows.append({"format": f"{st.get('kv_format')} (reported by {server})",
                         "bytes_per_token_layer": b, "vs_fp16": round(b / fp16, 4) if fp16 else None,
                         "bytes_per_token": b * layers,
                         "seqs_4096_per_gib": int(GIB // (b * layers * SEQ_LEN)),
                         "source": "worker status"})
    return rows


# ---- the run ------------------------------------------------------------------------------


@dataclass
class Plan:
    quick: bool
    concurrency: list[int]
    repeats: int
    shared_requests: int
    shared_concurrency: int = 8
    shared_repeats: int = 5
    shared_target: int = 1000
    max_tokens: int = MAX_TOKENS

    def n_requests(self, c: int, scale: int = 1) -> int:
        """Requests per throughput batch; ``scale`` lengthens batches of very fast models."""
        if self.quick:
            return max(2, c) * scale
        return REQUESTS_PER_CONC.get(c, 2 * c) * scale


@dataclass
class ModelRun:
    name: str
    path: str
    config: dict[str, Any]
    servers: list[dict[str, Any]] = field(default_factory=list)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    shared: list[dict[str, Any]] = field(default_factory=list)
    shared_prompt_tokens: int = 0
    kv: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    loadavg: list[str] = field(default_factory=list)


def _batch(server: Server, convs: list[list[dict[str, str]]], conc: int, plan: Plan,
           max_tokens: int | None = None) -> BatchResult:
    n = len(convs)
    per_req = 300.0
    budget = max(300.0, per_req * n / max(conc, 1))
    return asyncio.run(run_batch(server.base_url, server.request_model, convs, concurrency=conc,
                                 max_tokens=max_tokens or plan.max_tokens, request_timeout=per_req,
                                 batch_timeout=min(budget, 900.0)))


def warm_up(server: Server, model_path: Path, ctx: int, plan: Plan) -> None:
    """A few short requests, a concurrent burst and one long prompt, none sharing the workloads' text."""
    _batch(server, user_messages("warm-a", 2), 1, plan, 16)
    _batch(server, user_messages("warm-b", 8), 8, plan, 16)
    users = ["warm"]
    text, _ = system_prompt(model_path, shared_prefix_budget(model_path, ctx, plan, users), seed=999)
    _batch(server, [[{"role": "system", "content": text}, {"role": "user", "content": users[0]}]], 1, plan, 8)


def build_servers(model_path: str, k8v4_flag: bool, max_conc: int) -> list[Server]:
    ours_common = ["--max-batch", str(max(32, max_conc))]
    servers = [Server("mlx_lm", "mlx_lm", model_path, list(MLX_LM_FLAGS))]
    if k8v4_flag:
        servers.append(Server("ours-k8v4-off", "ours", model_path,
                              [*ours_common, "--kv-cache-turboquant", "none"]))
        servers.append(Server("ours-k8v4-on", "ours", model_path,
                              [*ours_common, "--kv-cache-turboquant", "k8v4"]))
    else:
        servers.append(Server("ours", "ours", model_path, ours_common))
    return servers


def run_model(name: str, path: Path, plan: Plan, k8v4_flag: bool, scale: int = 1) -> ModelRun:
    t0 = time.monotonic()
    cfg = model_config(path)
    ctx = context_length(cfg)
    mr = ModelRun(name=name, path=str(path), config=cfg, loadavg=[loadavg()])
    servers = build_servers(str(path), k8v4_flag, max(plan.concurrency))
    print(f"\n== {name} ({path}) ==", flush=True)
    with ServerGroup(servers):
        for s in servers:
            st = s.worker_status()
            mr.servers.append({"name": s.name, "command": s.command_line(),
                               "blas_mapped": maps_openblas(s.compute_pid()),
                               "kv_format": st.get("kv_format") if s.kind == "ours" else "fp32 (mlx-lm KVCache)",
                               "kv_format_note": st.get("kv_format_note"),
                               "prefix_cache": st.get("prefix_cache"), "dtype": st.get("dtype")})
            print(f"  {s.name}: up on :{s.port}; OpenBLAS mapped: {mr.servers[-1]['blas_mapped']}; "
                  f"kv_format: {mr.servers[-1]['kv_format']}", flush=True)
        for s in servers:
            warm_up(s, path, ctx, plan)
        # throughput: same prompts for every server; order rotates between repeats
        for c in plan.concurrency:
            n = plan.n_requests(c, scale)
            best: dict[str, BatchResult] = {}
            runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
            for rep in range(plan.repeats):
                order = servers if rep % 2 == 0 else servers[::-1]
                for s in order:
                    b = _batch(s, user_messages(f"tp{c}r{rep}", n), c, plan)
                    runs[s.name].append(b.summary())
                    if s.name not in best or b.tokens_per_s > best[s.name].tokens_per_s:
                        best[s.name] = b
                    print(f"  c={c:<3} rep {rep} {s.name:<14} {b.tokens_per_s:8.1f} tok/s  "
                          f"TTFT p50 {_fmt_s(b.summary()['ttft_p50_s'])}  "
                          f"tokens {b.generated_tokens}  errors {len(b.errors)}", flush=True)
            for s in servers:
                mr.throughput.append({"server": s.name, "concurrency": c, "requests": n,
                                      "best": best[s.name].summary(), "runs": runs[s.name]})
        shared_prefix(mr, servers, path, ctx, plan)
        reported = {s.name: s.worker_status() for s in servers if s.kind == "ours"}
        mr.kv = kv_table(cfg, {k: v for k, v in reported.items() if v})
    mr.loadavg.append(loadavg())
    mr.seconds = round(time.monotonic() - t0, 1)
    return mr


def shared_prefix(mr: ModelRun, servers: list[Server], path: Path, ctx: int, plan: Plan) -> None:
    """One ~1,000-token system prompt, distinct short user messages, concurrency 8, repeated.

    Each repeat has a system prompt no server has seen (its own seed), the same for every
    server; the order of servers alternates. The row kept per server is its median repeat by
    TTFT p50: single runs of this workload swing by 2-3x for mlx_lm.server (0.27-0.77 s in one
    morning's runs), so five repeats by default.
    """
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
    for rep in range(plan.shared_repeats):
        users = user_messages(f"sp{rep}", plan.shared_requests)
        target = shared_prefix_budget(path, ctx, plan, [m[0]["content"] for m in users])
        if rep == 0 and target < plan.shared_target:
            mr.notes.append(f"context is {ctx} tokens, so the shared system prompt is ~{target} "
                            f"tokens instead of ~{plan.shared_target}")
        text, ntok = system_prompt(path, target, seed=100 + rep)
        mr.shared_prompt_tokens = ntok
        convs = [[{"role": "system", "content": text}, *m] for m in users]
        for s in servers if rep % 2 == 0 else servers[::-1]:
            before = s.worker_status()
            b = _batch(s, convs, plan.shared_concurrency, plan)
            after = s.worker_status()
            row: dict[str, Any] = {"server": s.name, "system_prompt_tokens": ntok, **b.summary()}
            if s.kind == "ours" and "prompt_tokens_computed" in after and "prompt_tokens_computed" in before:
                row["computed"] = after["prompt_tokens_computed"] - before["prompt_tokens_computed"]
                row["computed_source"] = "worker status prompt_tokens_computed"
            elif b.cached_tokens is not None:
                row["computed"] = b.prompt_tokens - b.cached_tokens
                row["computed_source"] = "usage: prompt_tokens - cached_tokens"
            else:
                row["computed"] = None
            row["computed_frac"] = (round(row["computed"] / b.prompt_tokens, 4)
                                    if row["computed"] is not None and b.prompt_tokens else None)
            runs[s.name].append(row)
            print(f"  shared-prefix rep {rep} {s.name:<14} TTFT p50 {_fmt_s(row['ttft_p50_s'])}  "
                  f"computed {row['computed']}/{b.prompt_tokens} prompt tokens  "
                  f"errors {len(b.errors)}", flush=True)
    for s in servers:
        rows = sorted(runs[s.name], key=lambda r: r["ttft_p50_s"] if r["ttft_p50_s"] is not None
                      else float("inf"))
        kept = dict(rows[(len(rows) - 1) // 2])
        kept["ttft_p50_runs"] = [r["ttft_p50_s"] for r in runs[s.name]]
        # token counts over every repeat: where each system prompt ends within a KV page varies
        for key in ("prompt_tokens", "cached_tokens", "computed", "requests", "ok"):
            values = [r.get(key) for r in runs[s.name]]
            kept[key] = None if any(v is None for v in values) else sum(values)
        kept["computed_frac"] = (round(kept["computed"] / kept["prompt_tokens"], 4)
                                 if kept["computed"] is not None and kept["prompt_tokens"] else None)
        mr.shared.append(kept)


# ---- verdicts and tables ------------------------------------------------------------------


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}s"


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _tp(mr: ModelRun, server: str, c: int) -> dict[str, Any] | None:
    return next((t["best"] for t in mr.throughput if t["server"] == server and t["concurrency"] == c), None)


def _k8v4_state(mr: ModelRun, server: str) -> str:
    """'off' or 'on' for the KV bars this server stands for."""
    if server == "ours-k8v4-off":
        return "off"
    if server == "ours-k8v4-on":
        return "on"
    info = next((s for s in mr.servers if s["name"] == server), {})
    return "on" if info.get("kv_format") == "k8v4" else "off"


def verdicts(mr: ModelRun) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def bar(what: str, value: float | None, op: str, limit: float) -> None:
        ok = None if value is None else (value >= limit if op == ">=" else value <= limit)
        out.append({"bar": what, "value": value, "limit": f"{op} {limit}",
                    "verdict": "n/a" if ok is None else ("PASS" if ok else "FAIL")})

    ours = [s["name"] for s in mr.servers if s["name"] != "mlx_lm"]
    for state in ("off", "on"):
        if not any(_k8v4_state(mr, n) == state for n in ours):
            out.append({"bar": f"tok/s vs mlx_lm with K8V4 {state}", "value": None, "limit": "",
                        "verdict": "not measured (no server with K8V4 " + state + ")"})
    for name in ours:
        state = _k8v4_state(mr, name)
        fmt = next((s.get("kv_format") for s in mr.servers if s["name"] == name), None)
        label = f"K8V4 {state}" + (f", pages {fmt}" if fmt and fmt != ("k8v4" if state == "on" else "none") else "")
        limits = {1: 0.9, 8: 1.0, 32: 1.0} if state == "off" else {8: 0.8, 32: 0.8}
        for c, lim in limits.items():
            a, b = _tp(mr, name, c), _tp(mr, "mlx_lm", c)
            if a is None or b is None:
                continue
            bar(f"{name} ({label}) tok/s vs mlx_lm, c={c}", _ratio(a["tokens_per_s"], b["tokens_per_s"]),
                ">=", lim)
        sp = next((r for r in mr.shared if r["server"] == name), None)
        spm = next((r for r in mr.shared if r["server"] == "mlx_lm"), None)
        if sp:
            bar(f"{name} shared-prefix prompt tokens computed / total", sp["computed_frac"], "<=", 0.15)
            base_ttft = spm["ttft_p50_s"] if spm else None
            bar(f"{name} shared-prefix TTFT p50 vs mlx_lm", _ratio(sp["ttft_p50_s"], base_ttft), "<=", 0.5)
    k = next((r for r in mr.kv if r["format"] == "K8V4 g32"), None)
    bar("K8V4 (g32, fp16 scale+bias) KV bytes vs fp16", k["vs_fp16"] if k else None, "<=", 0.45)
    for r in mr.kv:
        if r["source"] == "worker status" and r["format"].startswith("k8v4"):
            bar(f"{r['format']} KV bytes vs fp16", r["vs_fp16"], "<=", 0.45)
    return out


def render(results: dict[str, Any]) -> str:
    """The markdown results section (also printed)."""
    f = results["machine"]
    lines = [
        f"Run on {results['date']} with `{results['command']}` "
        f"({results['seconds']:.0f}s in total).",
        "",
        f"Machine: {f['cpus']} CPUs ({f['cpu_model']}), {f['ram_gib']} GiB RAM, no GPU; "
        f"BLAS `{f['blas_file'] or 'reference (none found)'}` preloaded into both servers; "
        f"mlx {f['mlx']}, mlx-lm {f['mlx_lm']}, Python {f['python']}. "
        f"Other jobs shared the machine (load average before/after each model is listed): "
        "absolute numbers are noisy, the ratios are the point.",
        "",
    ]
    for note in results["notes"]:
        lines.append(f"- {note}")
    if results["notes"]:
        lines.append("")
    for mr in results["models"]:
        cfg = mr["config"]
        lines += [f"### {mr['name']}", "",
                  f"`{mr['path']}` — {cfg.get('model_type')}, {cfg['num_hidden_layers']} layers, hidden "
                  f"{cfg['hidden_size']}, {cfg['num_attention_heads']} heads / "
                  f"{cfg.get('num_key_value_heads')} KV heads, head_dim "
                  f"{cfg.get('head_dim') or cfg['hidden_size'] // cfg['num_attention_heads']}, vocab "
                  f"{cfg['vocab_size']}, context {context_length(cfg)}. {mr['seconds']:.0f}s; load "
                  f"average {' -> '.join(mr['loadavg'])}.", ""]
        for s in mr["servers"]:
            note = f" ({s['kv_format_note']})" if s.get("kv_format_note") else ""
            lines.append(f"- `{s['name']}`: `{s['command']}` — KV pages: {s['kv_format']}{note}; "
                         f"OpenBLAS mapped: {s['blas_mapped']}")
        for note in mr["notes"]:
            lines.append(f"- {note}")
        lines += ["", f"Streaming throughput (max_tokens 128; best of {results['plan']['repeats']} "
                      "repeats by tokens/s, TTFT from that repeat):", "",
                  "| conc | server | requests | generated tokens (min-max per request) | tok/s | "
                  "ratio vs mlx_lm | TTFT p50 | TTFT p95 | connect retries |",
                  "|---:|---|---:|---|---:|---:|---:|---:|---:|"]
        for t in mr["throughput"]:
            b = t["best"]
            base = next(x["best"] for x in mr["throughput"]
                        if x["server"] == "mlx_lm" and x["concurrency"] == t["concurrency"])
            ratio = _ratio(b["tokens_per_s"], base["tokens_per_s"])
            err = f" ({b['requests'] - b['ok']} failed)" if b["ok"] != b["requests"] else ""
            lines.append(f"| {t['concurrency']} | {t['server']} | {b['requests']}{err} | "
                         f"{b['generated_tokens']} ({b['tokens_min']}-{b['tokens_max']}) | "
                         f"{b['tokens_per_s']:.1f} | {'' if t['server'] == 'mlx_lm' else f'{ratio:.2f}x' if ratio else '-'} | "
                         f"{_fmt_s(b['ttft_p50_s'])} | {_fmt_s(b['ttft_p95_s'])} | {b['connect_retries']} |")
        lines += ["", f"Shared prefix (~{mr['shared_prompt_tokens']}-token system prompt, "
                      f"{mr['shared'][0]['requests'] if mr['shared'] else 0} requests over all repeats, "
                      "concurrency 8; a fresh system prompt per repeat; token counts summed over the "
                      "repeats, TTFT and tok/s from the median repeat by TTFT p50):", "",
                  "| server | ok | prompt tokens (sum of usage) | computed | computed % | source | "
                  "cached (usage) | TTFT p50 | TTFT p50 vs mlx_lm | TTFT p50 of each repeat | tok/s |",
                  "|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|"]
        base_sp = next((r for r in mr["shared"] if r["server"] == "mlx_lm"), None)
        for r in mr["shared"]:
            frac = f"{100 * r['computed_frac']:.1f}%" if r["computed_frac"] is not None else "-"
            ratio = _ratio(r["ttft_p50_s"], base_sp["ttft_p50_s"] if base_sp else None)
            lines.append(f"| {r['server']} | {r['ok']}/{r['requests']} | {r['prompt_tokens']} | {r['computed'] if r['computed'] is not None else '-'} | "
                         f"{frac} | {r.get('computed_source', '-')} | {r['cached_tokens']} | "
                         f"{_fmt_s(r['ttft_p50_s'])} | "
                         f"{'' if r['server'] == 'mlx_lm' else f'{ratio:.2f}x' if ratio else '-'} | "
                         f"{', '.join(_fmt_s(x) for x in r.get('ttft_p50_runs', []))} | "
                         f"{r['tokens_per_s']:.1f} |")
        lines += ["", "KV bytes per token per layer, and 4,096-token sequences a 1 GiB KV budget holds "
                      "(all layers):", "",
                  "| format | bytes/token/layer | vs fp16 | bytes/token (all layers) | 4096-token seqs in 1 GiB | source |",
                  "|---|---:|---:|---:|---:|---|"]
        for r in mr["kv"]:
            if r["bytes_per_token_layer"] is None:
                lines.append(f"| {r['format']} | n/a (head_dim not a multiple of the group) | | | | {r['source']} |")
                continue
            lines.append(f"| {r['format']} | {r['bytes_per_token_layer']:g} | {r['vs_fp16']:.3f} | "
                         f"{r['bytes_per_token']:g} | {r['seqs_4096_per_gib']} | {r['source']} |")
        lines += ["", "Bars:", "", "| bar | measured | limit | verdict |", "|---|---:|---|---|"]
        for v in mr["verdicts"]:
            val = "-" if v["value"] is None else f"{v['value']:g}"
            lines.append(f"| {v['bar']} | {val} | {v['limit']} | **{v['verdict']}** |")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write_readme(section: str) -> None:
    text = README.read_text() if README.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip() + f"\n\n## Results\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n{section}{END}{tail}")


# ---- entry point --------------------------------------------------------------------------


def _on_signal(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


class BenchTimeout(BaseException):
    """The whole run exceeded --timeout (a BaseException so no request handler swallows it)."""


def _on_alarm(_signum: int, _frame: object) -> None:
    raise BenchTimeout("benchmark exceeded --timeout")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small subset (< ~3 minutes)")
    p.add_argument("--models", default="stories,qwen3", help="comma list of: stories, qwen3")
    p.add_argument("--concurrency", default=None, help="comma list (default 1,8,32; quick: 1,8)")
    p.add_argument("--repeats", type=int, default=None,
                   help="throughput repeats per server, best kept (default 3; quick: 1), and "
                        "shared-prefix repeats, median kept (default 5; quick: 1)")
    p.add_argument("--write-readme", action="store_true", help="rewrite the results section of bench/README.md")
    p.add_argument("--timeout", type=float, default=2400.0, help="give up after this many seconds")
    p.add_argument("--json", type=Path, default=RESULTS / "latest.json")
    args = p.parse_args(argv)

    conc = [int(x) for x in (args.concurrency or ("1,8" if args.quick else "1,8,32")).split(",") if x]
    plan = Plan(quick=args.quick, concurrency=conc,
                repeats=args.repeats or (1 if args.quick else 3),
                shared_requests=16 if args.quick else 32,
                shared_repeats=args.repeats or (1 if args.quick else 5))
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(models) - {"stories", "qwen3"}
    if unknown:
        p.error(f"unknown models {sorted(unknown)}; choose from stories, qwen3")

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)  # also when started in the background (SIGINT ignored)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(int(args.timeout))
    t0 = time.monotonic()
    notes: list[str] = []
    help_text = serve_help()
    k8v4_flag = "--kv-cache-turboquant" in help_text
    if not k8v4_flag:
        msg = ("`python -m gateway serve` has no `--kv-cache-turboquant` yet: K8V4 on/off cannot be "
               "chosen, so our server ran once with the engine's default KV format (shown per model "
               "as `kv_format`, read from the worker status); the bars of that format are checked")
        notes.append(msg)
        print(f"NOTE: {msg}", flush=True)
    if openblas_path() is None:
        notes.append("no system OpenBLAS found: both servers ran on MLX's reference BLAS")
    notes.append("mlx_lm.server flags: " + " ".join(MLX_LM_FLAGS) + " (its defaults, already sized for "
                 "concurrency 32; in a side probe --prompt-concurrency 32 gave 12-23% fewer tokens/s at "
                 "concurrency 32). It batches every request without a "
                 "seed through one BatchGenerator and caches KV of finished prompts and of system-prompt "
                 "segments (LRU, 10 entries), so it has its own prefix caching.")
    notes.append("Neither server is asked to ignore EOS (mlx_lm.server has no ignore_eos); generated "
                 "token counts come from each server's usage and tokens/s uses the actual counts.")
    notes.append("mlx_lm.server is an http.server with a listen backlog of 5 and HTTP/1.0 (a new "
                 "connection per request): with many simultaneous clients some connections are reset; "
                 "the client retries them (counted as connect retries) and the delay stays in TTFT.")
    runs: list[ModelRun] = []
    try:
        for m in models:
            if m == "stories":
                if not (STORIES / "config.json").exists():
                    msg = f"stories260K skipped: {STORIES} is absent"
                    print(msg, flush=True)
                    notes.append(msg)
                    continue
                # ~20x faster than the Qwen3 model: 4x the requests so batches last seconds
                runs.append(run_model("stories260K", STORIES, plan, k8v4_flag, scale=4))
            else:
                from bench.build_qwen3_model import build

                path = build()
                runs.append(run_model("qwen3-4l-512 (float32, random weights)", path, plan, k8v4_flag))
    except KeyboardInterrupt:
        print("interrupted; servers stopped", file=sys.stderr)
        return 130
    except BenchTimeout:
        print(f"gave up after --timeout {args.timeout:.0f}s; servers stopped", file=sys.stderr)
        return 124
    finally:
        signal.alarm(0)

    cmd = "python -m bench.run_all " + " ".join(argv if argv is not None else sys.argv[1:])
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "command": cmd.strip(),
        "seconds": round(time.monotonic() - t0, 1), "machine": machine_facts(), "notes": notes,
        "plan": plan.__dict__, "models": [],
    }
    for mr in runs:
        d = mr.__dict__.copy()
        d["verdicts"] = verdicts(mr)
        results["models"].append(d)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    section = render(results)
    print("\n" + section)
    print(f"results: {args.json}")
    if args.write_readme:
        write_readme(section)
        print(f"README updated: {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
