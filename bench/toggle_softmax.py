"""In-process A/B of worker/cpu/softmax: decode steps in alternating blocks with it on and off.

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.toggle_softmax \\
        [--model stories260K] [--rows 32] [--kv k8v4] [--block 6] [--pairs 20]

One engine (OpenBLAS threads as the worker sets them) decodes ROWS rows greedily (64-token random prompts, like bench.profile_decode);
blocks of BLOCK steps alternate ``cpu_softmax.ENABLED`` (the first of each pair chosen by a
coin), and each block's wall and process-CPU ms per step are recorded after a warm-up step. The
paired ratios (on / off, same pair) cancel most of the machine's drift; prints their median and
quartiles. Both settings give the same tokens (tests/worker/test_cpu_softmax.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from bench.profile_decode import _prompts, load


def main() -> None:
    """Run the paired blocks and print the ratios."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="stories260K")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--kv", default="k8v4")
    p.add_argument("--block", type=int, default=6)
    p.add_argument("--pairs", type=int, default=20)
    args = p.parse_args()

    import worker.cpu.softmax as cpu_softmax
    import worker.engine.core as eng
    from protocol.messages import SamplingParams
    from worker.engine.attention import install
    from worker.kv.setup import plan_kv

    assert cpu_softmax.native() is not None, "worker/cpu/native is not built"
    model, tok = load(args.model)
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        from worker.cpu.blas import apply_blas_policy

        apply_blas_policy(model)  # the worker's OpenBLAS threads (one for these models)
    install()
    plan = plan_kv(model, eng.model_dtype(model), kind=args.kv, memory="512MiB", page_size=16,
                   group_size=32, max_batch=32, context_length=1024, working_set=True)
    engine = eng.Engine(model, tok, plan.store, context_length=1024, max_batch=32)
    steps = 2 * args.pairs * (args.block + 1) + 8
    params = SamplingParams(max_tokens=steps + 16, temperature=0.0, ignore_eos=True)
    for i, ids in enumerate(_prompts(model.args.vocab_size, args.rows)):
        engine.add(str(i), ids, params)
    while engine.waiting or any(r.prefilling for r in engine.running):
        engine.step()
    for _ in range(8):
        engine.step()
    rng = np.random.default_rng(0)
    wall: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.pairs):
        order = [True, False] if rng.random() < 0.5 else [False, True]
        for on in order:
            cpu_softmax.ENABLED = on
            engine.step()  # the switch's first step (a new graph shape on compiled steps)
            t, c = time.perf_counter(), time.process_time()
            for _ in range(args.block):
                engine.step()
            wall[on].append((time.perf_counter() - t) * 1e3 / args.block)
            cpu[on].append((time.process_time() - c) * 1e3 / args.block)
    for name, d in (("wall", wall), ("cpu", cpu)):
        ratios = sorted(a / b for a, b in zip(d[True], d[False], strict=True))
        q = statistics.quantiles(ratios, n=4)
        print(f"{name}: on {statistics.median(d[True]):.2f} ms/step, off "
              f"{statistics.median(d[False]):.2f}; paired on/off median {statistics.median(ratios):.3f}"
              f" (quartiles {q[0]:.3f}-{q[2]:.3f}, {len(ratios)} pairs)")


if __name__ == "__main__":
    main()
