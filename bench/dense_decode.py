"""Decode steps with the dense decode cache (worker/kv_dense.py) against the page gather, in turns.

    LD_PRELOAD="$(.venv/bin/python -m worker.blas)" .venv/bin/python -m bench.dense_decode \\
        [--models stories260K,qwen3] [--rows 1,8,32] [--kv k8v4] [--steps 48] [--repeats 3]

One process, one model at a time; per round, in turns: ``gather`` (the dense cache off: the
page gather every step, as before), ``dense`` (on), ``refill`` (on, but every row refilled from
the pages every step: what a membership change costs, at worst), optionally ``dense-plain``
(on, no compiled step: ``RAPID_MLX_COMPILE_DECODE_MAX_ROWS=0``) and mlx-lm's BatchGenerator;
``NAME@ROWS`` runs variant NAME with compiled steps up to ROWS rows.
ms per step (wall / CPU of the process) of ``bench.profile_decode``'s loops, medians over the
rounds, and the median of the same-round ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from typing import Any

from bench.profile_decode import load, ours, theirs


def _variant(name: str) -> Callable[[], None]:
    """Set the dense cache up for variant NAME; returns the undo."""
    import worker.compile_mode as cm
    import worker.kv_dense as kd
    import worker.paged_batch as pb

    saved = (kd.ENABLED, pb.plan_dense, os.environ.get(cm.ROWS_ENV))
    name, _, rows = name.partition("@")  # NAME@ROWS: compiled steps up to ROWS rows
    if rows:
        os.environ[cm.ROWS_ENV] = rows
    kd.ENABLED = name != "gather"
    if name == "refill":
        def every_row(store: Any, *a: Any, **k: Any) -> Any:
            kd.cache_of(store).reset()
            return saved[1](store, *a, **k)

        pb.plan_dense = every_row  # type: ignore[assignment]
    if name == "dense-plain":
        os.environ[cm.ROWS_ENV] = "0"

    def undo() -> None:
        kd.ENABLED, pb.plan_dense = saved[0], saved[1]
        if saved[2] is None:
            os.environ.pop(cm.ROWS_ENV, None)
        else:
            os.environ[cm.ROWS_ENV] = saved[2]

    return undo


def main() -> None:
    """Parse the options, run the rounds, print the table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", default="stories260K,qwen3")
    p.add_argument("--rows", default="1,8,32")
    p.add_argument("--kv", default="k8v4", help="none or k8v4 (k8v4 falls back on head dim 8)")
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variants", default="gather,dense,refill,mlx-lm",
                   help="of gather, dense, refill, dense-plain, mlx-lm")
    args = p.parse_args()
    names = args.variants.split(",")
    print("| model | rows | " + " | ".join(f"{n}: wall / cpu" for n in names)
          + " | dense / gather: wall / cpu | mlx-lm / dense: wall / cpu |")
    print("|" + "---|" * (4 + len(names)))
    for model_name in args.models.split(","):
        model, tok = load(model_name)
        for rows in map(int, args.rows.split(",")):
            runs: dict[str, list[dict[str, float]]] = {n: [] for n in names}
            for _ in range(args.repeats):
                for n in names:
                    if n == "mlx-lm":
                        runs[n].append(theirs(model, rows, args.steps, False))
                        continue
                    undo = _variant(n)
                    try:
                        runs[n].append(ours(model, tok, rows, args.kv, args.steps, False))
                    finally:
                        undo()
            cells = " | ".join(
                f"{statistics.median(r['wall'] for r in runs[n]):.2f} / "
                f"{statistics.median(r['cpu'] for r in runs[n]):.2f}" for n in names)

            def ratio(a: str, b: str) -> str:
                if a not in runs or b not in runs:
                    return "-"
                return " / ".join(f"{statistics.median(x[c] / y[c] for x, y in zip(runs[a], runs[b], strict=True)):.2f}"
                                  for c in ("wall", "cpu"))

            print(f"| {model_name} | {rows} | {cells} | {ratio('dense', 'gather')} | "
                  f"{ratio('mlx-lm', 'dense')} |", flush=True)


if __name__ == "__main__":
    main()
