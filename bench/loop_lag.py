"""The worst event-loop stall each front door's largest allowed request causes in the gateway.

    python -m bench.loop_lag --rounds 3 --trees /tmp/old-checkout .

Each tree (a checkout) serves stories260K (the huge prompts end in a 400 from the gateway's
context check, after the decode, translation and checks: the work measured; Hub.submit's encoding
was measured in-process in session 13, bench/README.md) and,
when --embed names a converted MiniLM folder, an embeddings alias; in turn, round by round (the
machine is noisy). The gateway runs under bench/lag_probe.py: a task on its event loop sleeps
5 ms over and over and records how late it wakes. Each case's request is sent alone; its stall
is the worst lateness between sending it and its answer (plus 0.2 s). The continuation cases
continue a conversation of N tiny items stored into the server's data directory before it starts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.lag_probe import worst
from bench.loop_stall import STORED_ID, store_conversation

PROBE = Path(__file__).resolve().parent / "lag_probe.py"
BODY = 8 * 1024 * 1024 - 4096  # the largest body a door takes (edge/limits.py), less a margin
STORED_ITEMS = 110_000  # the conversation a continuation case continues


def fill(make: Callable[[list[Any]], dict[str, Any]], item: Any, limit: int = BODY) -> bytes:
    """The body MAKE([ITEM] * n) for the largest n whose JSON fits in LIMIT bytes."""
    one = len(json.dumps(make([item]), separators=(",", ":")))
    two = len(json.dumps(make([item, item]), separators=(",", ":")))
    n = (limit - one) // (two - one) + 1
    return json.dumps(make([item] * n), separators=(",", ":")).encode()


def _chat(msgs: list[Any], **kw: Any) -> dict[str, Any]:
    return {"model": "default", "max_tokens": 1, "messages": msgs, **kw}


def _fn(i: int | str = 0, props: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "function", "function": {"name": f"f{i}", "parameters": {
        "type": "object", "properties": props or {}}}}


def _deep(depth: int) -> Any:
    v: Any = "a"
    for _ in range(depth):
        v = [v]
    return v


USER = {"role": "user", "content": "hi"}
CASES: dict[str, tuple[str, Callable[[], bytes]]] = {
    "chat: empty messages": ("/v1/chat/completions", lambda: fill(
        _chat, {"role": "user", "content": ""})),
    "chat: empty messages, n=16": ("/v1/chat/completions", lambda: fill(
        lambda ms: _chat(ms, n=16), {"role": "user", "content": ""})),
    "chat: content parts": ("/v1/chat/completions", lambda: fill(
        lambda ps: _chat([{"role": "user", "content": ps}]), {"type": "text", "text": ""})),
    "chat: tools": ("/v1/chat/completions", lambda: fill(
        lambda ts: _chat([USER], tools=ts), {"type": "function", "function": {"name": "f"}})),
    "chat: one tool schema, many properties": ("/v1/chat/completions", lambda: fill(
        lambda ps: _chat([USER], tools=[_fn(0, {f"p{i}": p for i, p in enumerate(ps)})]),
        {"type": "string"}, BODY - 2 * 2**20)),
    "chat: forced tool, many properties": ("/v1/chat/completions", lambda: fill(
        lambda ps: _chat([USER], tools=[_fn(0, {f"p{i}": p for i, p in enumerate(ps)})],
                         tool_choice="required"), {"type": "string"}, BODY - 2 * 2**20)),
    "chat: json_schema, many properties": ("/v1/chat/completions", lambda: fill(
        lambda ps: _chat([USER], response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "object", "properties": {
                f"p{i}": p for i, p in enumerate(ps)}}}}), {"type": "string"},
        BODY - 2 * 2**20)),
    "chat: deep JSON x many": ("/v1/chat/completions", lambda: fill(
        lambda ms: _chat([USER], tools=[_fn(0, {"d": {"type": "array", "default": ms}})]),
        _deep(60))),
    "chat: 16 stops x 512, logit_bias 300": ("/v1/chat/completions", lambda: json.dumps(_chat(
        [USER], stop=["x" * 511 + str(i % 10) for i in range(16)],
        logit_bias={str(i): 1 for i in range(300)})).encode()),
    "completions: token ids": ("/v1/completions", lambda: fill(
        lambda ids: {"model": "default", "max_tokens": 1, "prompt": ids}, 1)),
    "completions: 64 prompts of ids": ("/v1/completions", lambda: json.dumps(
        {"model": "default", "max_tokens": 1, "prompt": [[1] * 40_000] * 64}).encode()),
    "completions: json_schema, many properties": ("/v1/completions", lambda: fill(
        lambda ps: {"model": "default", "max_tokens": 1, "prompt": "a", "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": {
                "type": "object", "properties": {f"p{i}": p for i, p in enumerate(ps)}}}}},
        {"type": "string"}, BODY - 2 * 2**20)),
    "responses: input items": ("/v1/responses", lambda: fill(
        lambda it: {"model": "default", "max_output_tokens": 16, "input": it},
        {"role": "user", "content": ""})),
    "responses: tools": ("/v1/responses", lambda: fill(
        lambda ts: {"model": "default", "max_output_tokens": 16, "input": "hi", "tools": ts},
        {"type": "function", "name": "f", "parameters": {}})),
    "responses: continue 110k stored items": ("/v1/responses", lambda: json.dumps(
        {"model": "default", "max_output_tokens": 16, "input": "and?",
         "previous_response_id": STORED_ID}).encode()),
    "messages: tool_use blocks": ("/v1/messages", lambda: fill(
        lambda bs: {"model": "default", "max_tokens": 1, "messages": [
            {"role": "assistant", "content": bs}]},
        {"type": "tool_use", "id": "t", "name": "f", "input": {}})),
    "messages: text blocks": ("/v1/messages", lambda: fill(
        lambda bs: {"model": "default", "max_tokens": 1, "messages": [
            {"role": "user", "content": bs}]}, {"type": "text", "text": "a"})),
    "messages: system blocks": ("/v1/messages", lambda: fill(
        lambda bs: {"model": "default", "max_tokens": 1, "system": bs,
                    "messages": [USER]}, {"type": "text", "text": "a"})),
    "messages: tools": ("/v1/messages", lambda: fill(
        lambda ts: {"model": "default", "max_tokens": 1, "messages": [USER], "tools": ts},
        {"name": "f", "input_schema": {"type": "object"}})),
    "embeddings: 2048 inputs of ids": ("/v1/embeddings", lambda: json.dumps(
        {"model": "minilm", "input": [[1] * 400] * 2048}).encode()),
    "embeddings: truncated ids": ("/v1/embeddings", lambda: fill(
        lambda ids: {"model": "minilm", "truncate": True, "input": [ids]}, 1)),
    "embeddings: 2048 short strings": ("/v1/embeddings", lambda: json.dumps(
        {"model": "minilm", "input": ["a b c"] * 2048}).encode()),
}


class Probed:
    """TREE's `rapid-mlx serve ARGS` under the lag probe, on a free port; stop() ends it."""

    def __init__(self, tree: Path, lagfile: Path, *args: str, gc_log: bool = False) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.e2e.harness import free_port

        self.lagfile = str(lagfile)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, str(PROBE), self.lagfile, "serve", "--port", str(self.port),
             "--log-level", "warning", *args], cwd=tree, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "RAPID_MLX_LAG_GC": "1" if gc_log else "0"})
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("Ready: "):
                break
        else:
            raise RuntimeError(f"{tree} did not start")
        self._drain = subprocess.Popen(["cat"], stdin=self.proc.stdout,
                                       stdout=subprocess.DEVNULL)

    def stall(self, path: str, raw: bytes) -> tuple[float, float, int, float]:
        """(worst loop lateness ms, seconds taken, status, longest GC ms (0 unless logged)) of
        one request."""
        time.sleep(0.3)  # let the previous answer's tail settle
        t0 = time.monotonic()
        try:
            status = httpx.post(self.base + path, content=raw, timeout=120,
                                headers={"content-type": "application/json"}).status_code
        except httpx.TimeoutException:
            status = 0
        took = time.monotonic() - t0
        time.sleep(0.2)
        end = time.monotonic()
        return (worst(self.lagfile, t0, end), took, status,
                worst(self.lagfile, t0, end, gc_pauses=True))

    def stop(self) -> None:
        """SIGTERM the server; wait for it."""
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._drain.wait(10)


def main() -> None:
    """Run the rounds; print a line per request and a table of medians."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--cases", nargs="+", default=list(CASES), help="substrings of case names")
    ap.add_argument("--gc", action="store_true", help="also log the longest GC pause")
    ap.add_argument("--embed", default="", help="a converted MiniLM folder (embeddings cases)")
    ap.add_argument("--context-length", default="",
                    help="the served context (default: the model's; a large one lets the huge "
                         "prompts reach the worker, which then takes minutes over them)")
    args = ap.parse_args()
    cases = {k: v for k, v in CASES.items() if any(s in k for s in args.cases)
             and (args.embed or "embeddings" not in k)}
    raws = {k: (p, make()) for k, (p, make) in cases.items()}
    tmp = Path(tempfile.mkdtemp(prefix="loop-lag-"))
    store_conversation(tmp / "template", STORED_ITEMS)
    models = ([args.embed, "default", "--served-model-name", "minilm",
               "--served-model-name", "default"] if args.embed else [])
    got: dict[tuple[str, str], list[float]] = {}
    for rnd in range(args.rounds):
        for t, tree in enumerate(args.trees):
            data = tmp / f"r{rnd}-t{t}"
            shutil.copytree(tmp / "template", data)
            srv = Probed(Path(tree).resolve(), data / "lag.txt", *models, "--data-dir",
                         str(data), *(["--context-length", args.context_length]
                                      if args.context_length else []), gc_log=args.gc)
            try:
                for name, (path, raw) in raws.items():
                    late, took, status, gcms = srv.stall(path, raw)
                    got.setdefault((tree, name), []).append(late)
                    print(f"round {rnd} {tree} | {name} | {len(raw) / 2**20:.2f} MiB | {status} | "
                          f"took {took * 1000:.0f} ms | worst lag {late:.0f} ms"
                          + (f" | longest GC {gcms:.0f} ms" if args.gc else ""), flush=True)
            finally:
                srv.stop()
                shutil.rmtree(data, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print("\n| case | MiB | " + " | ".join(f"{t} (median, max ms)" for t in args.trees) + " |")
    for name, (_, raw) in raws.items():
        cols = [f"{statistics.median(got[(t, name)]):.0f}, {max(got[(t, name)]):.0f}"
                for t in args.trees]
        print(f"| {name} | {len(raw) / 2**20:.2f} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
