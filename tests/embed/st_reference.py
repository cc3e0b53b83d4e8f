"""Run in the reference venv: sentence-transformers embeddings of the sentences on stdin (JSON)."""

import json
import sys

import torch
from sentence_transformers import SentenceTransformer

torch.set_num_threads(2)
job = json.load(sys.stdin)
model = SentenceTransformer(job["model"], device="cpu")
vectors = model.encode(job["sentences"], batch_size=32, convert_to_numpy=True)
json.dump([v.tolist() for v in vectors], sys.stdout)
