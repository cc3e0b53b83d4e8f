"""Run in the reference venv: sentence-transformers throughput on the sentences given on stdin.

Reads {"model", "sizes", "rounds", "threads", "sentences"}; prints {size: [embeddings/s per
round]} as JSON. Each round embeds the first `size` sentences as one encode() call, enough calls
to cover 256 inputs."""

import json
import sys
import time

import torch

job = json.load(sys.stdin)
torch.set_num_threads(int(job["threads"]))
from sentence_transformers import SentenceTransformer  # noqa: E402 - after the thread setting

model = SentenceTransformer(job["model"], device="cpu")
sentences = job["sentences"]
model.encode(sentences[:32], batch_size=32)  # warm up
out = {}
for size in job["sizes"]:
    calls = max(1, 256 // size)
    rates = []
    for _ in range(int(job["rounds"])):
        t0 = time.perf_counter()
        for c in range(calls):
            batch = [sentences[(c * size + i) % len(sentences)] for i in range(size)]
            model.encode(batch, batch_size=32)
        rates.append(calls * size / (time.perf_counter() - t0))
    out[str(size)] = rates
json.dump(out, sys.stdout)
