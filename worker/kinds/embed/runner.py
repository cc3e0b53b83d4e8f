"""The embedding runner: queued inputs of all requests through one padded, length-sorted forward."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from protocol import messages as m
from worker.kinds.embed.batching import Item, Pending, pick_batch
from worker.kinds.embed.inputs import Encoder, InputError
from worker.kinds.embed.model import EmbedModel, load_embed_model
from worker.serve.runner import BasicRunner, QueueFull

log = logging.getLogger("rapid_mlx.worker")

STEP_SECONDS = 4.0  # aim for one step to take about this long (the watchdog allows 30 s)
TOKENS_MIN, TOKENS_MAX = 1024, 16384  # padded tokens per forward, whatever the timing says


class EmbedRunner(BasicRunner):
    """Embeds requests' inputs in batches; a request's output comes when all its inputs are done."""

    def __init__(self, model: EmbedModel, encoder: Encoder, facts: m.ModelFacts, max_batch: int,
                 max_waiting: int) -> None:
        self.model = model
        self.encoder = encoder
        self.facts = facts
        self.max_batch = max(1, max_batch)
        self.max_waiting = max(1, max_waiting)
        self.requests: dict[str, Pending] = {}
        self.queued: list[Item] = []
        self.failed: list[m.RequestOutput] = []
        self.max_tokens = 4096
        self.stats = {"batches": 0, "inputs": 0, "tokens": 0, "padded_tokens": 0, "seconds": 0.0}

    def add(self, job: m.Work) -> None:
        """Tokenize and queue one Embed job (QueueFull at the bound; bad input fails it alone)."""
        if not isinstance(job, m.Embed):
            raise ValueError(f"an embedding model takes embedding requests, not {type(job).__name__}")
        if len(self.requests) >= self.max_waiting:
            raise QueueFull(f"{len(self.requests)} embedding requests are queued (the limit)")
        try:
            self.model.check_dimensions(job.dimensions)
            tokens = self.encoder.encode(job.inputs, job.truncate)
        except InputError as exc:
            self.failed.append(m.RequestOutput(
                request_id=job.request_id, finish_reason="error", error=str(exc),
                error_code="invalid_request_error", error_param=exc.param))
            return
        items = [Item(job.request_id, i, t) for i, t in enumerate(tokens)]
        self.requests[job.request_id] = Pending(job.request_id, items, job.dimensions,
                                                arrived=time.monotonic())
        self.queued.extend(items)

    def abort(self, request_ids: list[str]) -> None:
        """Forget these requests and their queued inputs."""
        gone = {r for r in request_ids if self.requests.pop(r, None) is not None}
        if gone:
            self.queued = [it for it in self.queued if it.request_id not in gone]

    def step(self) -> list[m.RequestOutput]:
        """Run one padded forward over the next batch; return the requests it completed."""
        self.steps += 1
        outputs, self.failed = self.failed, []
        batch = pick_batch(list(self.requests.values()), self.queued, self.max_batch,
                           self.max_tokens)
        if not batch:
            return outputs
        chosen = {id(it) for it in batch}
        self.queued = [it for it in self.queued if id(it) not in chosen]
        t0 = time.perf_counter()
        try:
            vectors = self._forward(batch)
        except Exception as exc:  # a failed forward fails the requests in it, nothing else
            log.exception("embedding forward failed")
            return outputs + self._fail_batch(batch, f"the embedding forward failed: {exc}")
        self._account(batch, time.perf_counter() - t0)
        for it, vec in zip(batch, vectors, strict=True):
            req = self.requests.get(it.request_id)
            if req is not None:
                req.done[it.index] = vec
        return outputs + self._finished()

    def _forward(self, batch: list[Item]) -> list[bytes]:
        width = max(len(it.tokens) for it in batch)
        ids = np.zeros((len(batch), width), dtype=np.int32)
        mask = np.zeros((len(batch), width), dtype=np.int32)
        for row, it in enumerate(batch):
            ids[row, :len(it.tokens)] = it.tokens
            mask[row, :len(it.tokens)] = 1
        dims = [self.requests[it.request_id].dimensions if it.request_id in self.requests else 0
                for it in batch]
        out = self.model.embed(mx.array(ids), mx.array(mask), dims)
        return [row.astype("<f4").tobytes() for row in out]

    def _account(self, batch: list[Item], seconds: float) -> None:
        padded = len(batch) * max(len(it.tokens) for it in batch)
        s = self.stats
        s["batches"] += 1
        s["inputs"] += len(batch)
        s["tokens"] += sum(len(it.tokens) for it in batch)
        s["padded_tokens"] += padded
        s["seconds"] += seconds
        if seconds > 0:  # keep the next step near STEP_SECONDS
            per_token = seconds / padded
            self.max_tokens = int(min(TOKENS_MAX, max(TOKENS_MIN, STEP_SECONDS / per_token)))
        for it in batch:
            req = self.requests.get(it.request_id)
            if req is not None:
                req.started = True

    def _finished(self) -> list[m.RequestOutput]:
        done = [p for p in self.requests.values() if p.finished]
        for p in done:
            del self.requests[p.request_id]
        return [m.RequestOutput(
            request_id=p.request_id, finish_reason="stop",
            embeddings=[p.done[i] for i in range(len(p.items))],
            prompt_tokens=sum(len(it.tokens) for it in p.items)) for p in done]

    def _fail_batch(self, batch: list[Item], message: str) -> list[m.RequestOutput]:
        ids = list(dict.fromkeys(it.request_id for it in batch if it.request_id in self.requests))
        self.abort(ids)
        return [m.RequestOutput(request_id=r, finish_reason="error", error=message,
                                error_code="internal_error") for r in ids]

    @property
    def has_work(self) -> bool:
        """True while inputs are queued or failures wait to be sent."""
        return bool(self.queued or self.failed)

    @property
    def running(self) -> int:
        """Requests with at least one input embedded."""
        return sum(1 for p in self.requests.values() if p.started)

    @property
    def waiting(self) -> int:
        """Requests none of whose inputs has run yet."""
        return sum(1 for p in self.requests.values() if not p.started)

    def numbers(self) -> dict[str, Any]:
        """Batches, inputs, tokens and seconds so far, and the current token budget per step."""
        return {"embed": {**self.stats, "seconds": round(float(self.stats["seconds"]), 3),
                          "max_tokens_per_step": self.max_tokens,
                          "queued_inputs": len(self.queued)}}


def load_runner(model: str, path: Path, config: dict[str, Any],
                args: argparse.Namespace) -> EmbedRunner:
    """Load the sentence encoder in PATH (mlx-embeddings) with its tokenizer and pooling."""
    loaded = load_embed_model(model, path, config)
    if getattr(args, "context_length", 0):  # --context-length caps the tokens per input
        loaded.cfg.max_length = min(loaded.cfg.max_length, int(args.context_length))
    encoder = Encoder(loaded.tokenizer, loaded.cfg.max_length, loaded.vocab_size,
                      loaded.cfg.prompt)
    return EmbedRunner(loaded, encoder, loaded.facts(model), args.max_batch, args.max_waiting)
