"""Run in the reference venv: sentence-transformers throughput, one case per stdin line.

The first line is {"model", "threads", "sentences"}; each next line is {"size": N} and gets
back one line {"rate": embeddings/s}: the first N sentences per encode() call, enough calls to
cover 256 inputs (the same cases bench/peers/embeddings.py sends our server, interleaved with them)."""

import json
import sys
import time

import torch

job = json.loads(sys.stdin.readline())
torch.set_num_threads(int(job["threads"]))
from sentence_transformers import SentenceTransformer  # noqa: E402 - after the thread setting

model = SentenceTransformer(job["model"], device="cpu")
sentences = job["sentences"]
model.encode(sentences[:32], batch_size=32)  # warm up
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    size = int(json.loads(line)["size"])
    calls = max(1, 256 // size)
    t0 = time.perf_counter()
    for c in range(calls):
        model.encode([sentences[(c * size + i) % len(sentences)] for i in range(size)],
                     batch_size=32)
    print(json.dumps({"rate": calls * size / (time.perf_counter() - t0)}), flush=True)
