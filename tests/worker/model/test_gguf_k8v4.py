"""What K8V4 pages cost on a real model: top-1 agreement with full-precision pages, teacher-forced
over a fixed English text, on SmolLM2-135M-Instruct (converted from its GGUF file)."""

from __future__ import annotations

import math

import mlx.core as mx
import pytest
from mlx_lm import load

from tests.real_weights import SMOL, converted_or_skip
from tests.worker.engine.test_engine import make_engine
from tests.worker.engine.test_paged_engine import _teacher_forced_logprobs
from worker.model.load import choose_dtype

TEXT = (
    "The history of the bicycle begins in the early nineteenth century, when inventors in Europe "
    "built wooden machines that riders pushed along with their feet. Pedals attached to the front "
    "wheel came decades later, and the high-wheeled designs that followed were fast but dangerous. "
    "The safety bicycle, with two wheels of equal size and a chain driving the rear wheel, made "
    "cycling practical for ordinary people. Pneumatic tyres softened the ride, and within a few "
    "years millions of bicycles were sold. Cities built paths for them, clubs organised long rides "
    "in the countryside, and women in particular gained a new kind of independence. Today the "
    "bicycle remains one of the most efficient ways to travel: a rider uses less energy per "
    "kilometre than a walker, and the machine itself needs no fuel at all."
)


@pytest.mark.timeout(1200)
def test_k8v4_top1_agreement_with_full_precision_on_smollm2() -> None:
    model, tok = load(str(converted_or_skip(SMOL)))[:2]
    choose_dtype(model)
    ids = tok.encode(TEXT)
    assert len(ids) >= 150
    full = _teacher_forced_logprobs(make_engine(model, tok, kind="none", prefix_cache=False), ids)
    quant_engine = make_engine(model, tok, kind="k8v4", prefix_cache=False)
    assert quant_engine.kv.store.fmt.kind == "k8v4"
    quant = _teacher_forced_logprobs(quant_engine, ids)
    agree = int((full.argmax(-1) == quant.argmax(-1)).sum().item()) / (len(ids) - 1)
    targets = mx.array(ids[1:])[:, None]
    ppl_full = math.exp(-float(mx.take_along_axis(full, targets, axis=-1).mean().item()))
    ppl_quant = math.exp(-float(mx.take_along_axis(quant, targets, axis=-1).mean().item()))
    print(f"SmolLM2-135M K8V4 top-1 agreement {agree:.4f} over {len(ids) - 1} tokens, "
          f"perplexity {ppl_full:.3f} -> {ppl_quant:.3f}")
    assert agree >= 0.90  # measured 0.955 (149 of 156), perplexity +2.0%
    assert ppl_quant <= ppl_full * 1.05
