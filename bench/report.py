"""Facts about the machine and models, KV arithmetic, verdicts against the bars, the README tables."""

from __future__ import annotations

import json
import os
import platform
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.plan import ModelRun
from bench.servers import ROOT, openblas_path

README = ROOT / "bench" / "README.md"
BEGIN, END = "<!-- BENCH:RESULTS:BEGIN -->", "<!-- BENCH:RESULTS:END -->"
GIB = 2**30
SEQ_LEN = 4096

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

# ---- verdicts and tables ------------------------------------------------------------------


def fmt_s(x: float | None) -> str:
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
                         f"{fmt_s(b['ttft_p50_s'])} | {fmt_s(b['ttft_p95_s'])} | {b['connect_retries']} |")
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
                         f"{fmt_s(r['ttft_p50_s'])} | "
                         f"{'' if r['server'] == 'mlx_lm' else f'{ratio:.2f}x' if ratio else '-'} | "
                         f"{', '.join(fmt_s(x) for x in r.get('ttft_p50_runs', []))} | "
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
