"""Facts about the machine and models, KV arithmetic, verdicts against the bars, the README tables."""

from __future__ import annotations

import json
import os
import platform
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench.plan import ModelRun
from bench.ratios import bar, best_peer, ratio, rows_of, speed_bars
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
    return ratio(a, b)


def verdicts(mr: ModelRun) -> list[dict[str, Any]]:
    """Issue 15's bars (see bench.ratios.speed_bars), the shared-prefix bars against the peer with
    the lowest TTFT p50, and the K8V4 size bar."""
    roles = mr.roles
    peers = roles.get("peers", [])
    out = speed_bars(mr.throughput, roles.get("ours", ""), roles.get("k8v4_off"), roles.get("variants"))
    sp_peer = best_peer([{"server": r["server"], "median": r} for r in mr.shared], peers,
                        key="ttft_p50_s", lowest=True)
    for name in [roles.get("ours"), roles.get("k8v4_off")]:
        sp = next((r for r in mr.shared if r["server"] == name), None)
        if sp:
            out.append(bar(f"{name} shared-prefix prompt tokens computed / total", sp["computed_frac"],
                           "<=", 0.15))
            out.append(bar(f"{name} shared-prefix TTFT p50 vs best peer "
                           f"({sp_peer[0] if sp_peer else '-'})",
                           ratio(sp["ttft_p50_s"], sp_peer[1] if sp_peer else None), "<=", 0.5))
    k = next((r for r in mr.kv if r["format"] == "K8V4 g32"), None)
    out.append(bar("K8V4 (g32, fp16 scale+bias) KV bytes vs fp16", k["vs_fp16"] if k else None, "<=", 0.45))
    for r in mr.kv:
        if r["source"] == "worker status" and r["format"].startswith("k8v4"):
            out.append(bar(f"{r['format']} KV bytes vs fp16", r["vs_fp16"], "<=", 0.45))
    return out


def render(results: dict[str, Any]) -> str:
    """The markdown results section (also printed)."""
    f = results["machine"]
    lines = [
        f"Run on {results['date']} with `{results['command']}` "
        f"({results['seconds']:.0f}s in total).",
        "",
        f"Machine: {f['cpus']} CPUs ({f['cpu_model']}), {f['ram_gib']} GiB RAM, no GPU; "
        f"BLAS `{f['blas_file'] or 'reference (none found)'}` preloaded into the peers (our workers preload it themselves); "
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
        lines += throughput_lines(mr)
        lines += ["", f"Shared prefix (~{mr['shared_prompt_tokens']}-token system prompt, "
                      f"{mr['shared'][0]['requests'] if mr['shared'] else 0} requests over all repeats, "
                      "concurrency 8; a fresh system prompt per repeat; token counts summed over the "
                      "repeats, TTFT and tok/s from the median repeat by TTFT p50):", "",
                  "| server | ok | prompt tokens (sum of usage) | computed | computed % | source | "
                  "cached (usage) | TTFT p50 | TTFT p50 vs best peer | TTFT p50 of each repeat | tok/s |",
                  "|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|"]
        base_sp = best_peer([{"server": r["server"], "median": r} for r in mr["shared"]],
                            mr.get("roles", {}).get("peers", ["mlx_lm"]), key="ttft_p50_s", lowest=True)
        for r in mr["shared"]:
            frac = f"{100 * r['computed_frac']:.1f}%" if r["computed_frac"] is not None else "-"
            ratio = _ratio(r["ttft_p50_s"], base_sp[1] if base_sp else None)
            lines.append(f"| {r['server']} | {r['ok']}/{r['requests']} | {r['prompt_tokens']} | {r['computed'] if r['computed'] is not None else '-'} | "
                         f"{frac} | {r.get('computed_source', '-')} | {r['cached_tokens']} | "
                         f"{fmt_s(r['ttft_p50_s'])} | "
                         f"{f'{ratio:.2f}x' if ratio else '-'} | "
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


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else "-"


def throughput_lines(mr: dict[str, Any]) -> list[str]:
    """The ratio summary and the per-row table of the chat and edit workloads (medians)."""
    roles = mr.get("roles", {})
    peers = roles.get("peers", [])
    ours = [s["name"] for s in mr["servers"] if s["name"] not in peers]
    rows = rows_of(mr["throughput"])
    if not rows:
        return []
    nrounds = max(t["median"].get("rounds", 1) for t in mr["throughput"])
    out = ["", f"Tokens/s of ours against the best peer of each row (median of {nrounds} rounds; "
               "TTFT p50 ratio in brackets; our default server is "
               f"`{roles.get('ours')}`):", "",
           "| workload | conc | best peer (tok/s) | " + " | ".join(f"{n}" for n in ours) + " |",
           "|---|---:|---|" + "---:|" * len(ours)]
    for (workload, c), ts in rows.items():
        by = {t["server"]: t for t in ts}
        bp = ts[0].get("best_peer_tps")
        cells = [f"{_x(by[n].get('tps_vs_best_peer'))} ({_x(by[n].get('ttft_vs_best_peer'))})"
                 if n in by else "-" for n in ours]
        out.append(f"| {workload} | {c} | {bp[0]} ({bp[1]:.1f}) | " + " | ".join(cells) + " |"
                   if bp else f"| {workload} | {c} | - | " + " | ".join(cells) + " |")
    out += ["", f"Streaming throughput (max_tokens 128; medians of {nrounds} rounds; chat = a short "
                "story request, edit = \"rewrite this text, fixing only the spelling\"):", "",
            "| workload | conc | server | requests | generated tokens (min-max per request) | tok/s | "
            "tok/s of each round | vs best peer | TTFT p50 | vs best peer | TTFT p95 | connect retries |",
            "|---|---:|---|---:|---|---:|---|---:|---:|---:|---:|---:|"]
    for (workload, c), ts in rows.items():
        for t in ts:
            m = t["median"]
            err = (f" ({m['requests_all'] - m['ok_all']} of {m['requests_all']} failed)"
                   if m.get("ok_all", m["ok"]) != m.get("requests_all", m["requests"]) else "")
            each = ", ".join(f"{x:.1f}" for x in m.get("tokens_per_s_runs", []))
            out.append(f"| {workload} | {c} | {t['server']} | {m['requests']}{err} | "
                       f"{m['generated_tokens']} ({m['tokens_min']}-{m['tokens_max']}) | "
                       f"{m['tokens_per_s']:.1f} | {each} | {_x(t.get('tps_vs_best_peer'))} | "
                       f"{fmt_s(m['ttft_p50_s'])} | {_x(t.get('ttft_vs_best_peer'))} | "
                       f"{fmt_s(m['ttft_p95_s'])} | {m['connect_retries']} |")
    return out


def write_readme(section: str) -> None:
    text = README.read_text() if README.exists() else f"# Benchmarks\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip() + f"\n\n## Results\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{BEGIN}\n{section}{END}{tail}")
