"""Shared pieces of the speculative-decoding tests: models, prompts, engines, runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol.messages import RequestOutput, SamplingParams
from tests.worker.engine.test_engine import make_engine
from worker.engine.core import Engine
from worker.spec.controller import Speculator
from worker.spec.ngram import NgramDrafter

# repetitive prompts: the answers of these models repeat parts of them, so drafts get accepted
TEXT = ("Once upon a time there was a little girl named Lily. She liked to play in the park "
        "with her dog Max. Every day Lily and Max went to the park. ")
PROMPTS = [TEXT * 2 + tail for tail in (
    "Once upon", "Lily and", "Every day", "She liked", "The dog", "One day Lily", "Max", "In the")]


def spec_engine(mdl: Any, tok: Any, k: int = 4, min_n: int = 2, pause: bool = True,
                **kw: Any) -> Engine:
    """An engine that speculates with the n-gram drafter (K draft tokens at most; PAUSE: the
    timing-based pause, off where a test counts drafts). Rows draft from their first decode
    step on (the sampling tests judge the first decoded tokens)."""
    return make_engine(mdl, tok, spec=Speculator(NgramDrafter(min_n=min_n), k, pause=pause,
                                                 first_draft_at=1), **kw)


def run(engine: Engine, prompts: dict[str, list[int]], params: SamplingParams
        ) -> dict[str, list[RequestOutput]]:
    """Every request's outputs, in order, once the engine has no work left."""
    for rid, ids in prompts.items():
        engine.add(rid, ids, params)
    got: dict[str, list[RequestOutput]] = {rid: [] for rid in prompts}
    for _ in range(50_000):
        if not engine.has_work:
            engine.kv.check()
            return got
        for out in engine.step():
            got.setdefault(out.request_id, []).append(out)
    raise AssertionError("engine stuck")


def tokens(got: dict[str, list[RequestOutput]]) -> dict[str, list[int]]:
    """Each request's token ids."""
    return {rid: [t for o in outs for t in o.token_ids] for rid, outs in got.items()}


def summary(got: dict[str, list[RequestOutput]]) -> dict[str, tuple[Any, ...]]:
    """Each request's tokens, text, finish reason, stop sequence and token count."""
    return {rid: ([t for o in outs for t in o.token_ids], "".join(o.text for o in outs),
                  outs[-1].finish_reason, outs[-1].stop_sequence, outs[-1].completion_tokens)
            for rid, outs in got.items()}


def random_model_path(root: Path) -> Path:
    """The demo architecture with random weights (its greedy answers loop: drafts pass)."""
    from tests.random_model import random_model

    return random_model(root / "random")


def tiny_vocab_model(root: Path, vocab: int = 8, seed: int = 5) -> Path:
    """A random-weight Llama over a word-level tokenizer of VOCAB words (w0..): a real model
    folder whose next-token distributions are broad enough to test sampling statistics."""
    import json

    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama
    from tokenizers import Tokenizer, models, pre_tokenizers

    dest = root / f"tiny{vocab}"
    dest.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
              "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2,
              "rms_norm_eps": 1e-5, "vocab_size": vocab, "max_position_embeddings": 512,
              "tie_word_embeddings": False, "eos_token_id": vocab - 1}
    (dest / "config.json").write_text(json.dumps(config))
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    weights = {k: v * 0.5 if k == "lm_head.weight" else v  # broad distributions
               for k, v in tree_flatten(model.parameters())}
    mx.save_safetensors(str(dest / "model.safetensors"), weights)  # type: ignore[arg-type]
    words = {f"w{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(words, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # type: ignore[assignment]
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": f"w{vocab - 1}"}))
    return dest
