"""Benchmark rapid-mlx against its peers, side by side in one process tree; report ratios.

    .venv/bin/python -m bench.run_all [--quick] [--models stories,qwen3,demo] [--concurrency 1,8,32]
        [--repeats N] [--peers mlx_lm,rapid_mlx_ref] [--k8v4 both|on|off]
        [--workloads chat,shared,edit] [--ours-flags "..."] [--ours-variant LABEL=FLAGS ...]
        [--write-readme]

For each model this starts the peers (``mlx_lm.server`` and the reference product ``rapid-mlx``
0.16.10 from its own venv, both with the same OpenBLAS preloaded that our workers preload) and
our server (``python -m gateway serve``; with K8V4 on and off when ``serve`` has
``--kv-cache-turboquant``), plus one more of ours per ``--ours-variant`` (e.g. a drafter), waits
for all of them, warms each up, then runs every workload against each server in turn (same
prompts, streaming, ``max_tokens`` 128, temperature 0, rounds in alternating order) and stops
them (process groups, always).  Printed: medians over the rounds, ratios against the best peer
of each row and PASS/FAIL against the bars of issue 15.  Results (every round too) go to
``bench/results/latest.json``; ``--write-readme`` rewrites the results section of
``bench/README.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.plan import ModelRun, Plan
from bench.prompts import (
    EDIT_INSTRUCTION,
    REPEAT_INSTRUCTION,
    edit_messages,
    shared_prefix_budget,
    system_prompt,
    user_messages,
)
from bench.ratios import annotate, median_summary
from bench.report import (
    README,
    context_length,
    fmt_s,
    kv_table,
    loadavg,
    machine_facts,
    model_config,
    render,
    verdicts,
    write_readme,
)
from bench.servers import (
    PEERS,
    ROOT,
    Server,
    ServerGroup,
    mapped_openblas,
    maps_openblas,
    openblas_path,
    peer_binary,
    peer_venv,
    serve_help,
)
from bench.serving import BatchResult, run_batch

RESULTS = ROOT / "bench" / "results"
STORIES = (ROOT / ".." / "shared" / "models" / "stories260K").resolve()
DEMO = ROOT / "worker" / "model" / "demo" / "weights"
MLX_LM_FLAGS = ["--decode-concurrency", "32", "--prompt-concurrency", "8"]
REF_FLAGS: list[str] = []  # its defaults: --max-num-seqs 256, --completion-batch-size 32, prefill 8


# ---- the run ------------------------------------------------------------------------------


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


def build_servers(model_path: str, k8v4_flag: bool, max_conc: int, peers: list[str],
                  k8v4: str = "both", ours_flags: list[str] | None = None,
                  variants: dict[str, list[str]] | None = None,
                  ref_flags: list[str] | None = None) -> tuple[list[Server], dict[str, Any]]:
    """The servers of one model run and their roles (peers, our default server, K8V4 off, variants).

    Our default server is the engine's default KV format (K8V4 on when it can be chosen); variants
    are that server plus their own extra flags (e.g. ``--speculative ngram``).
    """
    ours_common = ["--max-batch", str(max(32, max_conc)), *(ours_flags or [])]
    servers = []
    if "mlx_lm" in peers:
        servers.append(Server("mlx_lm", "mlx_lm", model_path, list(MLX_LM_FLAGS)))
    if "rapid_mlx_ref" in peers:
        servers.append(Server("rapid_mlx_ref", "rapid_mlx_ref", model_path, [*REF_FLAGS, *(ref_flags or [])]))
    roles: dict[str, Any] = {"peers": [s.name for s in servers], "k8v4_off": None, "variants": {}}
    default_kv: list[str] = []
    if k8v4_flag:
        default_kv = ["--kv-cache-turboquant", "k8v4"]
        if k8v4 in ("both", "on"):
            servers.append(Server("ours-k8v4-on", "ours", model_path, [*ours_common, *default_kv]))
            roles["ours"] = "ours-k8v4-on"
        if k8v4 in ("both", "off"):
            servers.append(Server("ours-k8v4-off", "ours", model_path,
                                  [*ours_common, "--kv-cache-turboquant", "none"]))
            roles["k8v4_off" if k8v4 == "both" else "ours"] = "ours-k8v4-off"
            if k8v4 == "off":
                default_kv = ["--kv-cache-turboquant", "none"]
    else:
        servers.append(Server("ours", "ours", model_path, ours_common))
        roles["ours"] = "ours"
    for label, flags in (variants or {}).items():
        name = f"ours-{label}"
        servers.append(Server(name, "ours", model_path, [*ours_common, *default_kv, *flags]))
        roles["variants"][name] = " ".join(flags)
    return servers, roles


KV_OF_PEER = {"mlx_lm": "fp32 (mlx-lm KVCache)",
              "rapid_mlx_ref": "model dtype (its default --kv-cache-dtype bf16 keeps a plain KVCache)"}


def run_model(name: str, path: Path, plan: Plan, k8v4_flag: bool, opts: dict[str, Any],
              scale: int = 1) -> ModelRun:
    t0 = time.monotonic()
    cfg = model_config(path)
    ctx = context_length(cfg)
    mr = ModelRun(name=name, path=str(path), config=cfg, loadavg=[loadavg()])
    servers, mr.roles = build_servers(str(path), k8v4_flag, max(plan.concurrency), **opts)
    blas = openblas_path()
    print(f"\n== {name} ({path}) ==", flush=True)
    with ServerGroup(servers):
        for s in servers:
            st = s.worker_status()
            pid = s.compute_pid()
            mr.servers.append({"name": s.name, "kind": s.kind, "command": s.command_line(),
                               "blas_mapped": maps_openblas(pid, blas) if blas else maps_openblas(pid),
                               "blas_files": mapped_openblas(pid),
                               "kv_format": st.get("kv_format") if s.kind == "ours" else KV_OF_PEER[s.kind],
                               "kv_format_note": st.get("kv_format_note"),
                               "prefix_cache": st.get("prefix_cache"), "dtype": st.get("dtype")})
            print(f"  {s.name}: up on :{s.port}; preloaded OpenBLAS mapped: "
                  f"{mr.servers[-1]['blas_mapped']} ({mr.servers[-1]['blas_files']}); "
                  f"kv_format: {mr.servers[-1]['kv_format']}", flush=True)
        for s in servers:
            warm_up(s, path, ctx, plan)
        if "chat" in plan.workloads:
            for c in plan.concurrency:
                n = plan.n_requests(c, scale)
                rounds(mr, servers, plan, "chat", c, n, lambda tag, k: user_messages(tag, k))
        if "edit" in plan.workloads:
            target = min(plan.edit_target, ctx - plan.max_tokens - 64)
            instruction = REPEAT_INSTRUCTION if path == DEMO else EDIT_INSTRUCTION
            for c in plan.edit_concurrency:
                n = plan.n_requests(c, scale)
                rounds(mr, servers, plan, "edit", c, n,
                       lambda tag, k: edit_messages(path, tag, k, target, instruction))
        annotate(mr.throughput, mr.roles["peers"])
        if "shared" in plan.workloads:
            shared_prefix(mr, servers, path, ctx, plan)
        reported = {s.name: s.worker_status() for s in servers if s.kind == "ours"}
        for label, st in reported.items():  # a drafter's acceptance over the whole run
            if st.get("speculative"):
                mr.notes.append(f"{label} ({st['speculative']}): {st.get('spec_accepted_tokens')} of "
                                f"{st.get('spec_draft_tokens')} draft tokens accepted (acceptance "
                                f"{st.get('spec_acceptance_rate')}) over every workload and its warm-up")
        mr.kv = kv_table(cfg, {k: v for k, v in reported.items() if v})
    mr.loadavg.append(loadavg())
    mr.seconds = round(time.monotonic() - t0, 1)
    return mr


def rounds(mr: ModelRun, servers: list[Server], plan: Plan, workload: str, c: int, n: int,
           prompts: Any) -> None:
    """``plan.repeats`` rounds of one row: same prompts for every server, order alternating;
    fresh prompts each round (``prompts(tag, n)``); the median over the rounds is kept."""
    runs: dict[str, list[dict[str, Any]]] = {s.name: [] for s in servers}
    for rep in range(plan.repeats):
        convs = prompts(f"{workload[:2]}{c}r{rep}", n)
        for s in servers if rep % 2 == 0 else servers[::-1]:
            b = _batch(s, convs, c, plan)
            runs[s.name].append(b.summary())
            print(f"  {workload} c={c:<3} round {rep} {s.name:<16} {b.tokens_per_s:8.1f} tok/s  "
                  f"TTFT p50 {fmt_s(b.summary()['ttft_p50_s'])}  "
                  f"tokens {b.generated_tokens}  errors {len(b.errors)}", flush=True)
    for s in servers:
        mr.throughput.append({"server": s.name, "workload": workload, "concurrency": c,
                              "requests": n, "median": median_summary(runs[s.name]),
                              "runs": runs[s.name]})


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
            print(f"  shared-prefix rep {rep} {s.name:<14} TTFT p50 {fmt_s(row['ttft_p50_s'])}  "
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
    p.add_argument("--models", default="stories,qwen3", help="comma list of: stories, qwen3, demo")
    p.add_argument("--concurrency", default=None, help="comma list (default 1,8,32; quick: 1,8)")
    p.add_argument("--repeats", "--rounds", type=int, default=None,
                   help="rounds per row and server, the median kept (default 3; quick: 1), and "
                        "shared-prefix repeats, median kept (default 5; quick: 1)")
    p.add_argument("--peers", default=",".join(PEERS),
                   help=f"comma list of peers (default {','.join(PEERS)}); rapid_mlx_ref needs "
                        "`sh deploy/ensure-peer-venv.sh` (skipped with a note when absent)")
    p.add_argument("--k8v4", choices=["both", "on", "off"], default="both",
                   help="our servers: K8V4 on (the default format) and off, or one of them")
    p.add_argument("--workloads", default="chat,shared,edit",
                   help="comma list of: chat (1/8/32 streams), shared (shared prefix), edit "
                        "(\"edit this text\": the answer repeats most of the prompt)")
    p.add_argument("--edit-concurrency", default="1", help="comma list for the edit workload")
    p.add_argument("--ours-flags", default="", help="extra `serve` flags for every server of ours")
    p.add_argument("--ref-flags", default="", help="extra `serve` flags for the reference product")
    p.add_argument("--ours-variant", action="append", default=[], metavar="LABEL=FLAGS",
                   help="one more server of ours, `ours-LABEL`: the default one plus FLAGS, "
                        "e.g. ngram=\"--speculative ngram\" (repeatable); bars vs the default")
    p.add_argument("--write-readme", action="store_true", help="rewrite the results section of bench/README.md")
    p.add_argument("--timeout", type=float, default=5400.0, help="give up after this many seconds")
    p.add_argument("--json", type=Path, default=RESULTS / "latest.json")
    args = p.parse_args(argv)

    conc = [int(x) for x in (args.concurrency or ("1,8" if args.quick else "1,8,32")).split(",") if x]
    workloads = tuple(w.strip() for w in args.workloads.split(",") if w.strip())
    if set(workloads) - {"chat", "shared", "edit"}:
        p.error(f"unknown workloads {sorted(set(workloads) - {'chat', 'shared', 'edit'})}")
    plan = Plan(quick=args.quick, concurrency=conc,
                repeats=args.repeats or (1 if args.quick else 3),
                shared_requests=16 if args.quick else 32,
                shared_repeats=args.repeats or (1 if args.quick else 5), workloads=workloads,
                edit_concurrency=tuple(int(x) for x in args.edit_concurrency.split(",") if x))
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = set(models) - {"stories", "qwen3", "demo"}
    if unknown:
        p.error(f"unknown models {sorted(unknown)}; choose from stories, qwen3, demo")
    peers = [x.strip() for x in args.peers.split(",") if x.strip()]
    if set(peers) - set(PEERS):
        p.error(f"unknown peers {sorted(set(peers) - set(PEERS))}; choose from {', '.join(PEERS)}")
    variants: dict[str, list[str]] = {}
    for v in args.ours_variant:
        label, sep, flags = v.partition("=")
        if not sep or not label.strip() or not flags.strip():
            p.error(f"--ours-variant wants LABEL=FLAGS, got {v!r}")
        variants[label.strip()] = shlex.split(flags)

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)  # also when started in the background (SIGINT ignored)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(int(args.timeout))
    t0 = time.monotonic()
    notes: list[str] = []
    if "rapid_mlx_ref" in peers and peer_binary() is None:
        msg = (f"the reference product is not installed in {peer_venv()}: rapid_mlx_ref skipped "
               "(build it with `sh deploy/ensure-peer-venv.sh`)")
        peers.remove("rapid_mlx_ref")
        notes.append(msg)
        print(f"NOTE: {msg}", flush=True)
    if not peers:
        p.error("no peer to compare against")
    opts: dict[str, Any] = {"peers": peers, "k8v4": args.k8v4, "ours_flags": shlex.split(args.ours_flags),
                            "variants": variants, "ref_flags": shlex.split(args.ref_flags)}
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
    if "rapid_mlx_ref" in peers:
        notes.append("rapid_mlx_ref is the reference product, PyPI `rapid-mlx` 0.16.10 (its own venv, "
                     "with its pinned mlx-lm 0.31.3 and torch 2.13.0 CPU), run with its defaults: "
                     "continuous batching (BatchedEngine over mlx-lm's BatchGenerator), --max-num-seqs "
                     "256, --completion-batch-size 32, --prefill-batch-size 8, stream interval 1, "
                     "memory-aware radix prefix cache. Each start gets a fresh private HOME, so its "
                     "~/.cache/rapid-mlx prefix snapshot never carries over: it starts cold.")
    if args.ref_flags:
        notes.append(f"rapid_mlx_ref ran with the extra flags `{args.ref_flags}`")
    if args.ours_flags:
        notes.append(f"every server of ours ran with the extra flags `{args.ours_flags}`")
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
                runs.append(run_model("stories260K", STORIES, plan, k8v4_flag, opts, scale=4))
            elif m == "demo":
                runs.append(run_model("demo model (tools/demo_model, trained)", DEMO, plan, k8v4_flag,
                                      opts, scale=2))
            else:
                from bench.build_qwen3_model import build

                path = build()
                runs.append(run_model("qwen3-4l-512 (float32, random weights)", path, plan, k8v4_flag,
                                      opts))
    except KeyboardInterrupt:
        print("interrupted; servers stopped", file=sys.stderr)
        rc = 130
    except BenchTimeout:
        print(f"gave up after --timeout {args.timeout:.0f}s; servers stopped", file=sys.stderr)
        rc = 124
    else:
        rc = 0
    finally:
        signal.alarm(0)
    if rc:
        if not runs:
            return rc
        # the models that finished are still worth keeping (not written into the README)
        notes.append(f"the run stopped early (exit {rc}): only the models below finished")
        args.write_readme = False

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
    return rc


if __name__ == "__main__":
    sys.exit(main())
