"""Vision bench: 8 concurrent image requests on a tiny multimodal model, ours vs mlx-vlm.

Ours: `python -m gateway serve PATH` (image requests batch with each other in the paged
engine), 8 streamed chat completions in flight, each with its own data-URL image. The peer:
`mlx_vlm.stream_generate` over the same 8 prompts one after another in one process
(`mlx_vlm.server` serves one request at a time, so a loop is its best case, without HTTP).
TTFT is measured from the moment all 8 are submitted; tokens/s = generated tokens / wall time.

    python -m bench.peers.vision [--family gemma3|qwen2_vl] [--max-tokens 32] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.servers import PY, ROOT, Server
from bench.serving import percentile, run_batch

MODELS = ROOT / "bench" / ".models"
COLORS = [(200, 30, 90), (0, 250, 10), (20, 40, 230), (250, 250, 0), (90, 90, 90),
          (255, 128, 0), (0, 200, 200), (120, 0, 160)]


def model_path(family: str) -> Path:
    """The tiny random-weight model of FAMILY (tests/vision_models.py), built once."""
    from tests.vision_models import BUILDERS

    path = MODELS / f"tiny-{family}"
    if not (path / "model.safetensors").exists():
        BUILDERS[family](path)
    return path


def png(color: tuple[int, int, int]) -> bytes:
    """A 64x48 PNG of one color."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(buf, format="PNG")
    return buf.getvalue()


def conversations() -> list[list[dict[str, Any]]]:
    """8 chats, each a question and its own image (as a data URL)."""
    out = []
    for i, c in enumerate(COLORS):
        url = "data:image/png;base64," + base64.b64encode(png(c)).decode()
        out.append([{"role": "user", "content": [
            {"type": "text", "text": f"Picture {i}: what is in it?"},
            {"type": "image_url", "image_url": {"url": url}}]}])
    return out


def ours(path: Path, max_tokens: int) -> dict[str, Any]:
    """8 concurrent streamed image requests against our server."""
    server = Server(name="ours-vision", kind="ours", model_path=str(path))
    server.start()
    try:
        server.wait_ready()
        convs: Any = conversations()
        asyncio.run(run_batch(server.base_url, server.alias, convs[:2], concurrency=2,
                              max_tokens=4, extra={"ignore_eos": True}))  # warm-up
        batch = asyncio.run(run_batch(server.base_url, server.alias, convs, concurrency=8,
                                      max_tokens=max_tokens, extra={"ignore_eos": True}))
    finally:
        server.stop()
    assert not batch.errors, batch.errors
    return {"tokens_per_s": batch.tokens_per_s, "ttft_p50_s": percentile(batch.ttfts, 50),
            "ttft_p95_s": percentile(batch.ttfts, 95), "generated_tokens": batch.generated_tokens,
            "wall_s": batch.wall}


PEER = r"""
import io, json, sys, time
from PIL import Image
from mlx_vlm import load, stream_generate
path, max_tokens, colors = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
model, processor = load(path)
tok = processor.tokenizer
def prompt(i):
    msgs = [{"role": "user", "content": [{"type": "text", "text": f"Picture {i}: what is in it?"},
                                        {"type": "image"}]}]
    return tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
for r in stream_generate(model, processor, prompt(0), image=[Image.new("RGB", (64, 48))],
                         max_tokens=4, temperature=0.0):
    pass  # warm-up
t0 = time.perf_counter()
ttfts, tokens = [], 0
for i, c in enumerate(colors):
    image = Image.new("RGB", (64, 48), tuple(c))
    first = None
    for r in stream_generate(model, processor, prompt(i), image=[image], max_tokens=max_tokens,
                             temperature=0.0):
        if first is None and r.token is not None:
            first = time.perf_counter() - t0
        n = r.generation_tokens
    ttfts.append(first)
    tokens += n
wall = time.perf_counter() - t0
print(json.dumps({"ttfts": ttfts, "tokens": tokens, "wall": wall}))
"""


def peer(path: Path, max_tokens: int) -> dict[str, Any]:
    """mlx-vlm's stream_generate over the 8 requests in a loop (a fresh process)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([PY, "-c", PEER, str(path), str(max_tokens), json.dumps(COLORS)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return {"tokens_per_s": r["tokens"] / r["wall"], "ttft_p50_s": percentile(r["ttfts"], 50),
            "ttft_p95_s": percentile(r["ttfts"], 95), "generated_tokens": r["tokens"],
            "wall_s": r["wall"]}


def main(argv: list[str] | None = None) -> int:
    """Run both sides REPEATS times (the best kept) and print a table and the JSON."""
    p = argparse.ArgumentParser(prog="python -m bench.peers.vision", description=__doc__)
    p.add_argument("--family", default="gemma3", choices=["gemma3", "qwen2_vl"])
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    path = model_path(args.family)
    best: dict[str, dict[str, Any]] = {}
    for _ in range(args.repeats):
        for name, fn in (("rapid-mlx", ours), ("mlx-vlm loop", peer)):
            r = fn(path, args.max_tokens)
            if name not in best or r["tokens_per_s"] > best[name]["tokens_per_s"]:
                best[name] = r
    print(f"tiny {args.family}, 8 concurrent image requests, {args.max_tokens} tokens each")
    print(f"{'':14}{'tok/s':>9}{'TTFT p50':>10}{'TTFT p95':>10}{'wall s':>8}")
    for name, r in best.items():
        print(f"{name:14}{r['tokens_per_s']:9.1f}{r['ttft_p50_s']:10.3f}{r['ttft_p95_s']:10.3f}"
              f"{r['wall_s']:8.2f}")
    ratio = best["rapid-mlx"]["tokens_per_s"] / best["mlx-vlm loop"]["tokens_per_s"]
    print(f"throughput ratio (ours / mlx-vlm): {ratio:.2f}")
    print(json.dumps({"family": args.family, "max_tokens": args.max_tokens, **best}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
