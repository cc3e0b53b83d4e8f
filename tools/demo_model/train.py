"""Train the embedded demo model (tiny Qwen3) with MLX on synthetic conversations.

    LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 OPENBLAS_NUM_THREADS=1 \\
        python -m tools.demo_model.train --out worker/model/demo/weights --seed 0 --steps 1500

Builds the tokenizer, writes config.json, trains (loss on assistant tokens only,
documents packed into rows with a block-diagonal causal mask), saves float32
weights loadable by ``mlx_lm.load`` and prints a greedy pass/fail table.
``--steps 0`` writes a valid, untrained (random init from the seed) model.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten
from mlx_lm.models.qwen3 import Model, ModelArgs

from tools.demo_model import data, evaluate, tokenizer_build

DEFAULT_ARCH = {"hidden_size": 192, "num_hidden_layers": 4, "intermediate_size": 512,
                "num_attention_heads": 6, "num_key_value_heads": 2}
# The speculative-decoding draft of the demo model (``--preset draft``): same tokenizer and
# corpus, half the layers, half the width, a quarter of the parameters.
DRAFT_ARCH = {"hidden_size": 96, "num_hidden_layers": 2, "intermediate_size": 256,
              "num_attention_heads": 3, "num_key_value_heads": 1}
PRESETS = {"demo": DEFAULT_ARCH, "draft": DRAFT_ARCH}


def model_config(vocab_size: int, arch: dict[str, int], eos_id: int, pad_id: int) -> dict[str, Any]:
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": arch["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": arch["intermediate_size"],
        "max_position_embeddings": 2048,
        "max_window_layers": arch["num_hidden_layers"],
        "num_attention_heads": arch["num_attention_heads"],
        "num_hidden_layers": arch["num_hidden_layers"],
        "num_key_value_heads": arch["num_key_value_heads"],
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "sliding_window": None,
        "use_sliding_window": False,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": vocab_size,
        "bos_token_id": None,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
    }


def build_model(config: dict[str, Any], seed: int) -> Model:
    mx.random.seed(seed)
    model = Model(ModelArgs.from_dict(config))  # type: ignore[no-untyped-call]
    mx.eval(model.parameters())
    return model


def n_params(model: Any) -> int:
    flat: Any = tree_flatten(model.parameters())
    return sum(int(v.size) for _, v in flat)


# --------------------------------------------------------------------------- data


def encode_samples(tok: Any, seed: int, n: int, drill: float = 0.0) -> list[tuple[list[int], list[int]]]:
    """(token ids, target positions) per sample.

    Prompt and completion are encoded separately, as at inference (the prompt is encoded
    alone, the completion is generated).  Targets are the completion tokens and the
    earlier assistant turns inside the prompt (all assistant tokens), except the first
    token of an earlier turn: in the history the template drops the think block, so that
    token (whether to open ``<think>``) is only learned from the final turn."""
    samples = data.generate(seed, n, drill)
    prompts = tok.encode_batch([p for _, p, _ in samples], add_special_tokens=False)
    comps = tok.encode_batch([c for _, _, c in samples], add_special_tokens=False)
    start = tok.token_to_id("<|im_start|>")
    end = tok.token_to_id(tokenizer_build.EOS_TOKEN)
    head = [start] + tok.encode("assistant\n", add_special_tokens=False).ids
    out = []
    for p, c in zip(prompts, comps, strict=True):
        ids = p.ids
        targets: list[int] = []
        i = 0
        while i < len(ids):
            if ids[i:i + len(head)] == head:
                j = i + len(head)
                k = j
                while k < len(ids) and ids[k] != end:
                    k += 1
                if k < len(ids):  # a closed (history) assistant turn
                    targets.extend(range(j + 1, k + 1))
                i = k
            i += 1
        targets.extend(range(len(ids), len(ids) + len(c.ids)))
        out.append((ids + c.ids, targets))
    return out


def pack(docs: list[tuple[list[int], list[int]]], seq_len: int, pad_id: int,
         rng: random.Random) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pack shuffled documents into rows of seq_len+1 tokens (first fit over a few open rows).

    Returns tokens, doc ids (-1 = padding) and loss weights; a weight on position t means
    "predict token t+1", which is a completion token of the same document."""
    order = list(range(len(docs)))
    rng.shuffle(order)
    cap = seq_len + 1
    done: list[list[int]] = []
    open_rows: list[tuple[int, list[int]]] = []  # (used, doc indices)
    for i in order:
        n = len(docs[i][0])
        if n > cap:
            continue
        for k, (used, r) in enumerate(open_rows):
            if used + n <= cap:
                r.append(i)
                open_rows[k] = (used + n, r)
                break
        else:
            open_rows.append((n, [i]))
        if len(open_rows) > 8:
            done.append(open_rows.pop(0)[1])
    done.extend(r for _, r in open_rows)
    toks = np.full((len(done), cap), pad_id, dtype=np.int32)
    docid = np.full((len(done), cap), -1, dtype=np.int32)
    weight = np.zeros((len(done), cap), dtype=np.float32)
    for ri, r in enumerate(done):
        pos = 0
        for k, i in enumerate(r):
            ids, targets = docs[i]
            toks[ri, pos:pos + len(ids)] = ids
            docid[ri, pos:pos + len(ids)] = k
            weight[ri, pos + np.asarray(targets, dtype=np.int64) - 1] = 1.0
            pos += len(ids)
    return toks, docid, weight


def hidden(model: Model, x: mx.array, mask: mx.array) -> Any:
    """Qwen3 final hidden states with an explicit (block-diagonal causal) attention mask."""
    inner = model.model
    h = inner.embed_tokens(x)
    for layer in inner.layers:
        h = layer(h, mask, None)
    return inner.norm(h)


def forward(model: Model, x: mx.array, mask: mx.array) -> Any:
    return model.model.embed_tokens.as_linear(hidden(model, x, mask))


def make_mask(docid: mx.array) -> mx.array:
    T = docid.shape[1]
    causal = mx.tril(mx.ones((T, T), dtype=mx.bool_))
    same = docid[:, :, None] == docid[:, None, :]
    return (same & causal)[:, None, :, :]


def heldout(tok: Any, seed: int, n: int) -> list[tuple[str, list[int], int]]:
    """Held-out samples (kind, ids, prompt length) from a different seed."""
    samples = data.generate(seed + 1_000_003, n)
    prompts = tok.encode_batch([p for _, p, _ in samples], add_special_tokens=False)
    comps = tok.encode_batch([c for _, _, c in samples], add_special_tokens=False)
    return [(k, p.ids + c.ids, len(p.ids)) for (k, _, _), p, c in zip(samples, prompts, comps, strict=True)]


def exact_match(model: Model, docs: list[tuple[str, list[int], int]], pad_id: int,
                batch: int = 16) -> dict[str, float]:
    """Per kind: fraction of samples whose whole completion is the greedy argmax under
    teacher forcing (i.e. greedy decoding reproduces it exactly)."""
    hits: dict[str, list[bool]] = {}
    for i in range(0, len(docs), batch):
        chunk = docs[i:i + batch]
        T = max(len(ids) for _, ids, _ in chunk)
        arr = np.full((len(chunk), T), pad_id, dtype=np.int32)
        for j, (_, ids, _) in enumerate(chunk):
            arr[j, :len(ids)] = ids
        pred = np.array(mx.argmax(model(mx.array(arr[:, :-1])), axis=-1))
        for j, (kind, ids, plen) in enumerate(chunk):
            ok = bool((pred[j, plen - 1:len(ids) - 1] == arr[j, plen:len(ids)]).all())
            hits.setdefault(kind, []).append(ok)
    out = {k: sum(v) / len(v) for k, v in sorted(hits.items())}
    out["all"] = sum(sum(v) for v in hits.values()) / len(docs)
    return out


# --------------------------------------------------------------------------- training


def train(model: Model, tok: Any, args: argparse.Namespace, pad_id: int) -> dict[str, Any]:
    rng = random.Random(args.seed)
    T = args.seq_len
    t0 = time.time()
    data_seed = args.seed if args.data_seed is None else args.data_seed
    docs = encode_samples(tok, data_seed, args.samples, args.drill)
    toks, docid, weight = pack(docs, T, pad_id, rng)
    print(f"data: {len(docs)} samples -> {toks.shape[0]} rows of {T + 1} tokens "
          f"({weight.sum():.0f} target tokens), {time.time() - t0:.1f}s", flush=True)

    warmup = min(args.warmup, max(1, args.steps // 10))
    sched = optim.join_schedules(
        [optim.linear_schedule(args.lr * 0.01, args.lr, warmup),
         optim.cosine_decay(args.lr, max(1, args.steps - warmup), args.lr * 0.05)],
        [warmup])
    opt = optim.AdamW(learning_rate=sched, weight_decay=args.weight_decay, betas=[0.9, 0.98])

    # Logits only at the (few) target positions: the vocabulary projection is a third of
    # the compute of this tiny model.
    B = args.batch
    K = int(2 * weight[:, :-1].sum() / len(weight) * B) + 64

    def loss_fn(m: Model, x: mx.array, idx: mx.array, y: mx.array, w: mx.array,
                mask: mx.array) -> mx.array:
        h = hidden(m, x, mask).reshape(-1, m.args.hidden_size)[idx]
        logits = m.model.embed_tokens.as_linear(h)
        ce = nn.losses.cross_entropy(logits, y, reduction="none")
        return (ce * w).sum() / mx.maximum(w.sum(), 1.0)

    grad_fn = nn.value_and_grad(model, loss_fn)  # type: ignore[attr-defined]
    state = [model.state, opt.state]

    def step(x: mx.array, idx: mx.array, y: mx.array, w: mx.array, mask: mx.array) -> Any:
        loss, grads = grad_fn(model, x, idx, y, w, mask)
        grads, _ = optim.clip_grad_norm(grads, args.clip)  # type: ignore[no-untyped-call]
        opt.update(model, grads)
        return loss

    step = mx.compile(step, inputs=state, outputs=state)

    n_rows = toks.shape[0]
    perm = np.random.default_rng(args.seed).permutation(n_rows)
    held = heldout(tok, args.seed, args.heldout)
    last_em: dict[str, float] = {}
    hist: list[float] = []
    t_start = time.time()
    for it in range(min(args.steps, args.stop_after or args.steps)):
        idx = perm[(np.arange(B) + it * B) % n_rows]
        if (it * B) // n_rows != ((it + 1) * B - 1) // n_rows:
            perm = np.random.default_rng(args.seed + it).permutation(n_rows)
        pos = np.flatnonzero(weight[idx, :-1].reshape(-1))[:K]
        n_pos = len(pos)
        ys = toks[idx, 1:].reshape(-1)[pos]
        pos = np.pad(pos, (0, K - n_pos))
        ys = np.pad(ys, (0, K - n_pos))
        w = mx.array((np.arange(K) < n_pos).astype(np.float32))
        x = mx.array(toks[idx, :-1])
        mask = make_mask(mx.array(docid[idx, :-1]))
        loss = step(x, mx.array(pos.astype(np.int32)), mx.array(ys.astype(np.int32)), w, mask)
        mx.eval(loss, state)
        hist.append(float(loss.item()))
        if (it + 1) % args.log_every == 0 or it == 0:
            el = time.time() - t_start
            print(f"step {it + 1}/{args.steps} loss {np.mean(hist[-args.log_every:]):.4f} "
                  f"lr {opt.learning_rate.item():.2e} {el:.0f}s", flush=True)
        if args.eval_every and ((it + 1) % args.eval_every == 0 or it + 1 == args.steps
                                or it + 1 == args.stop_after):
            em = exact_match(model, held, pad_id)
            print(f"step {it + 1} held-out exact match: "
                  + " ".join(f"{k}={v:.2f}" for k, v in em.items()), flush=True)
            last_em = em
            if args.checkpoint:
                mx.save_safetensors(str(args.checkpoint), dict(tree_flatten(model.parameters())))
    wall = time.time() - t_start
    return {"steps": min(args.steps, args.stop_after or args.steps), "train_seconds": round(wall), "final_loss": round(float(np.mean(hist[-50:])), 4)
            if hist else None, "samples": len(docs), "rows": int(n_rows),
            "heldout_exact_match": {k: round(v, 3) for k, v in last_em.items()}}


# --------------------------------------------------------------------------- output


DEMO_INTRO = """It is the default model of rapid-mlx, small enough to ship in the
repository and to run on a CPU. It knows almost nothing; it only reproduces three behaviours:"""
DRAFT_INTRO = """It is the speculative-decoding draft of the demo model
(`--speculative draft --draft-model demo-draft`): same tokenizer, same corpus, same training code
(`--preset draft`), a quarter of the parameters. The demo model was trained for three behaviours:"""


def write_readme(out: Path, config: dict[str, Any], params: int, args: argparse.Namespace,
                 info: dict[str, Any], table: str) -> None:
    arch = (f"{config['num_hidden_layers']} layers, hidden {config['hidden_size']}, "
            f"{config['num_attention_heads']} heads / {config['num_key_value_heads']} KV heads of dim "
            f"{config['head_dim']}, MLP {config['intermediate_size']}, vocab {config['vocab_size']}, tied embeddings")
    cmd = (f"LD_PRELOAD=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0 OPENBLAS_NUM_THREADS=1 "
           f"python -m tools.demo_model.train --out {args.out} --seed {args.seed} --steps {args.steps} "
           f"--batch {args.batch} --seq-len {args.seq_len} --lr {args.lr} --samples {args.samples} "
           f"--hidden {args.hidden} --layers {args.layers} --ff {args.ff} --heads {args.heads} "
           f"--kv-heads {args.kv_heads} --preset {args.preset} --drill {args.drill}")
    intro = DRAFT_INTRO if args.preset == "draft" else DEMO_INTRO
    text = f"""# rapid-mlx embedded demo model{' draft' if args.preset == 'draft' else ''}

A tiny Qwen3-architecture model ({params:,} parameters, float32) trained from scratch on
synthetic conversations. {intro}

- short answers to greetings and small talk ("Hello!" -> "Hello! How can I help you today?");
- Hermes tool calls (`<tool_call>` JSON) for the tools it is offered (get_weather, get_time,
  add, search, send_email), copying the arguments from the user's message, and text answers
  that use a `tool` result;
- a short `<think>` block first when thinking is enabled (Qwen3 `enable_thinking`).

Architecture: {arch}. max_position_embeddings 2048.
Tokenizer: byte-level BPE of {config['vocab_size']} tokens trained with `tokenizers` on the
synthetic corpus; Qwen3 chat template with tools and thinking (`tokenizer_config.json`).

## How it was made

Everything is generated from source in `tools/demo_model/` (no downloads):

```
{cmd}
```

Seed {args.seed}. Training data: {info.get('samples')} synthetic conversations
(`tools/demo_model/data.py`) rendered with the chat template, loss on assistant tokens only.
AdamW, peak lr {args.lr}, cosine schedule, {info.get('steps')} steps of {args.batch} packed rows of
{args.seq_len} tokens; wall time {info.get('train_seconds')} s on a CPU; final loss {info.get('final_loss')}.

## Greedy evaluation

{table}
"""
    (out / "README.md").write_text(text, encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("worker/model/demo/weights"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--samples", type=int, default=40000)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="demo",
                    help="architecture defaults: the demo model or its speculative-decoding draft")
    ap.add_argument("--hidden", type=int, default=None)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--ff", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--heldout", type=int, default=96)
    ap.add_argument("--init-from", type=Path, default=None,
                    help="continue from the model.safetensors in this folder")
    ap.add_argument("--checkpoint", type=Path, default=None,
                    help="save the weights here at every held-out evaluation")
    ap.add_argument("--drill", type=float, default=0.0, help="share of copy-drill samples")
    ap.add_argument("--data-seed", type=int, default=None, help="seed of the training samples (default: --seed)")
    ap.add_argument("--stop-after", type=int, default=None,
                    help="stop after this many steps of the --steps schedule")
    ap.add_argument("--no-eval", action="store_true")
    args = ap.parse_args()
    preset = PRESETS[args.preset]
    for flag, key in (("hidden", "hidden_size"), ("layers", "num_hidden_layers"), ("ff", "intermediate_size"),
                      ("heads", "num_attention_heads"), ("kv_heads", "num_key_value_heads")):
        if getattr(args, flag) is None:
            setattr(args, flag, preset[key])

    final_out: Path = args.out
    # Everything is written to a staging folder first and moved into place file by file
    # (os.replace is atomic), so a server reading the weights folder never sees a torn file.
    out = final_out.parent / (final_out.name + ".staging")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    t0 = time.time()
    tok = tokenizer_build.write_tokenizer(out)
    eos_id = tok.token_to_id(tokenizer_build.EOS_TOKEN)
    pad_id = tok.token_to_id(tokenizer_build.PAD_TOKEN)
    assert eos_id is not None and pad_id is not None
    print(f"tokenizer: {tok.get_vocab_size()} tokens ({time.time() - t0:.1f}s)", flush=True)

    arch = {"hidden_size": args.hidden, "num_hidden_layers": args.layers, "intermediate_size": args.ff,
            "num_attention_heads": args.heads, "num_key_value_heads": args.kv_heads}
    config = model_config(tok.get_vocab_size(), arch, eos_id, pad_id)
    model = build_model(config, args.seed)
    params = n_params(model)
    print(f"model: {params:,} parameters", flush=True)

    if args.init_from:
        src = args.init_from
        model.load_weights(str(src / "model.safetensors" if src.is_dir() else src))
        print(f"initialised from {args.init_from}", flush=True)
    info: dict[str, Any] = {"steps": 0, "train_seconds": 0, "final_loss": None, "samples": 0}
    if args.steps > 0:
        info = train(model, tok, args, pad_id)

    from mlx_lm.utils import save_config, save_model

    save_model(out, model)
    save_config(dict(config), out / "config.json")
    (out / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": eos_id, "pad_token_id": pad_id, "bos_token_id": None, "do_sample": False,
         "max_length": 2048}, indent=2) + "\n", encoding="utf-8")

    table = "(not evaluated)"
    if not args.no_eval:
        from mlx_lm import load

        loaded = load(str(out))
        _, table = evaluate.run(loaded[0], loaded[1])
    write_readme(out, config, params, args, info, table)
    final_out.mkdir(parents=True, exist_ok=True)
    for f in sorted(out.iterdir()):
        os.replace(f, final_out / f.name)
    out.rmdir()
    print(f"done in {time.time() - t0:.0f}s -> {final_out}")


if __name__ == "__main__":
    main()
