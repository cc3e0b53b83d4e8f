"""Decode step with and without the compiled forward (RAPID_MLX_COMPILE_DECODE), same run.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.compile_decode \\
        [--models stories260K,qwen3] [--rows 1,8,32] [--kv none,k8v4] [--steps 32] [--repeats 3]

Each cell runs bench.profile_decode's Engine.step loop with the plain and the compiled step (and
mlx-lm's BatchGenerator unless --no-peer) in turns; it prints the medians of wall and CPU ms per
step and the compiled/plain ratios (below 1: the compiled step is cheaper). CPU time is the
steadier figure on a loaded machine. Every row count runs compiled here
(RAPID_MLX_COMPILE_DECODE_MAX_ROWS=64; the worker's default stops at 8 rows).
"""

from __future__ import annotations

import argparse
import os
import statistics

from bench.profile_decode import load, ours, theirs


def main() -> None:
    """Measure every (model, rows, kv) cell and print a markdown table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="stories260K,qwen3")
    p.add_argument("--rows", default="1,8,32")
    p.add_argument("--kv", default="none,k8v4")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-peer", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("RAPID_MLX_COMPILE_DECODE_MAX_ROWS", "64")
    print("| model | rows | kv | plain wall / cpu | compiled wall / cpu | compiled/plain wall | "
          "compiled/plain cpu | mlx-lm wall / cpu |")
    print("|" + "---|" * 8)
    for name in args.models.split(","):
        model, tok = load(name)
        for rows in map(int, args.rows.split(",")):
            runs: dict[str, list[dict[str, float]]] = {}
            for _ in range(args.repeats):
                for kind in args.kv.split(","):
                    for flag in ("0", "1"):
                        os.environ["RAPID_MLX_COMPILE_DECODE"] = flag
                        runs.setdefault(f"{kind}/{flag}", []).append(
                            ours(model, tok, rows, kind, args.steps, False))
                if not args.no_peer:
                    runs.setdefault("peer", []).append(theirs(model, rows, args.steps, False))
            os.environ.pop("RAPID_MLX_COMPILE_DECODE", None)
            med = {k: (statistics.median(r["wall"] for r in v), statistics.median(r["cpu"] for r in v))
                   for k, v in runs.items()}
            peer = "{:.2f} / {:.2f}".format(*med["peer"]) if "peer" in med else "-"
            for kind in args.kv.split(","):
                (pw, pc), (cw, cc) = med[f"{kind}/0"], med[f"{kind}/1"]
                print(f"| {name} | {rows} | {kind} | {pw:.2f} / {pc:.2f} | {cw:.2f} / {cc:.2f} | "
                      f"{cw / pw:.2f} | {cc / pc:.2f} | {peer} |", flush=True)


if __name__ == "__main__":
    main()
