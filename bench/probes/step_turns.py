"""CPU per Engine.step, before/after, in short alternating turns of two live processes.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.probes.step_turns \\
        --against ../base [--rows 1] [--turns 30] [--steps 100] [--model PATH]

One child process per checkout (this one and ``--against``) builds an engine (K8V4, greedy,
ROWS distinct 64-token prompts, ignoring EOS) and waits; the parent then asks each in turn (order
swapped every turn) for STEPS steps and reads back their CPU (all threads) and wall ms per step.
On a shared, loaded machine a slow drift in load hits both sides alike within a turn, so the
per-turn after/before ratio is steadier than medians of separate runs. Both sides decode the same tokens at the same positions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]


def child(model_path: str, rows: int) -> None:
    """Build the engine, warm it, then run N steps per line read and print CPU and wall ms/step."""
    from mlx_lm import load

    import worker.engine.core as eng
    from protocol.messages import SamplingParams
    from worker.engine.attention import install
    from worker.kv.setup import plan_kv

    model, tok = load(model_path)[:2]
    install()
    plan = plan_kv(model, eng.model_dtype(model), kind="k8v4", memory="512MiB", page_size=16,
                   group_size=32, max_batch=32, context_length=4096, working_set=True)
    engine = eng.Engine(model, tok, plan.store, context_length=4096, max_batch=32)
    params = SamplingParams(max_tokens=4000, temperature=0.0, ignore_eos=True)
    for i in range(rows):
        engine.add(str(i), [(7 * i + j) % 500 + 1 for j in range(64)], params)
    for _ in range(30):
        engine.step()
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        c, t = time.process_time(), time.perf_counter()
        for _ in range(n):
            engine.step()
        print(1000 * (time.process_time() - c) / n, 1000 * (time.perf_counter() - t) / n,
              flush=True)


def main() -> None:
    """Start both children, run the turns, print medians and the per-turn CPU ratio."""
    from bench.run_all import STORIES

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--against", required=True)
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--turns", type=int, default=30)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--model", default=str(STORIES))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.model, a.rows)
        return
    trees = {"before": Path(a.against).resolve(), "after": HERE}
    procs = {}
    for name, tree in trees.items():
        env = dict(os.environ, PYTHONPATH=str(tree))
        procs[name] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", "--against", a.against,
             "--rows", str(a.rows), "--model", a.model],
            cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        out = procs[name].stdout
        assert out is not None and out.readline().strip() == "ready", name
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in trees}
    for i in range(a.turns):
        for name in list(trees) if i % 2 == 0 else list(trees)[::-1]:
            p = procs[name]
            assert p.stdin is not None and p.stdout is not None
            p.stdin.write(f"{a.steps}\n")
            p.stdin.flush()
            cpu, wall = map(float, p.stdout.readline().split())
            res[name].append((cpu, wall))
    for p in procs.values():
        assert p.stdin is not None
        p.stdin.close()
        p.wait()
    for name, r in res.items():
        print(f"rows {a.rows} {name}: CPU ms/step median {statistics.median(c for c, _ in r):.3f}, "
              f"wall {statistics.median(w for _, w in r):.3f}")
    ratios = [x[0] / y[0] for x, y in zip(res["after"], res["before"], strict=True)]
    print(f"rows {a.rows} after/before CPU per turn: median {statistics.median(ratios):.3f}, "
          f"after lower in {sum(x < 1 for x in ratios)}/{len(ratios)} turns")


if __name__ == "__main__":
    main()
