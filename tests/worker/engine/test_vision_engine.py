"""Image requests in the continuous-batching engine (Gemma 3, Qwen2-VL, Qwen2.5-VL via mlx-vlm,
each test on both where it takes `gemma`): greedy output
equals mlx-vlm's token for token alone, chunked, and batched with text-only requests; the radix
cache keys image positions by the image's content."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from protocol.messages import Generate, ImageData, SamplingParams
from tests.image_samples import encoded
from tests.vision_models import BUILDERS, MORE_BUILDERS, gemma3, reference
from worker.engine.attention import install
from worker.engine.core import Engine, model_dtype
from worker.kv.setup import plan_kv
from worker.model.load import LoadedModel, load_model
from worker.serve.intake import prepare_job
from worker.serve.text_runner import vision_of

pytestmark = pytest.mark.slow

CACHE = Path("/tmp/rapid-mlx-test-models")
N = 8  # tokens generated per request
COLORS = [(200, 30, 90), (0, 250, 10), (20, 40, 230), (250, 250, 0)]
QUESTIONS = ["What is in the image?", "Describe it.", "Which color?", "Is it big?"]


FAMILIES = {**BUILDERS, **MORE_BUILDERS}


@pytest.fixture(scope="module", params=list(FAMILIES))
def gemma(request: pytest.FixtureRequest) -> LoadedModel:
    """Each tiny family in turn: Gemma 3 (standard RoPE), Qwen2-VL and Qwen2.5-VL (M-RoPE)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    path = CACHE / f"tiny-{request.param}"
    if not (path / "model.safetensors").exists():
        FAMILIES[request.param](path)
    return load_model(str(path))


@pytest.fixture(scope="module")
def gemma32() -> LoadedModel:
    """The same family with head_dim 32: K8V4 quantizes KV in groups of 32."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    path = CACHE / "tiny-gemma3-hd32"
    if not (path / "model.safetensors").exists():
        gemma3(path, head_dim=32)
    return load_model(str(path))


def make_engine(model: Any, tok: Any, kind: str = "none", page_size: int = 16,
                **kw: Any) -> Engine:
    """An engine over a fresh paged KV pool (K8V4 in groups of 32)."""
    install()
    plan = plan_kv(model, model_dtype(model), kind=kind, memory="64MiB", page_size=page_size,
                   group_size=32, max_batch=32, context_length=512)
    assert plan.kind == kind, plan.reason
    return Engine(model, tok, plan.store, context_length=512, **kw)


def png(color: tuple[int, int, int]) -> bytes:
    return encoded("PNG", (64, 48), color)


def image_messages(question: str, count: int = 1) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "image"} for _ in range(count)]
    return [{"role": "user", "content": [{"type": "text", "text": question}, *parts]}]


def image_job(rid: str, question: str, colors: list[tuple[int, int, int]]) -> Generate:
    data = [png(c) for c in colors]
    return Generate(request_id=rid, params=SamplingParams(max_tokens=N, temperature=0.0),
                    messages=image_messages(question, len(colors)),
                    images=[ImageData(data=d, sha256=hashlib.sha256(d).hexdigest()) for d in data])


def text_job(rid: str, question: str) -> Generate:
    return Generate(request_id=rid, params=SamplingParams(max_tokens=N, temperature=0.0),
                    messages=[{"role": "user", "content": question}])


def expected(loaded: LoadedModel, job: Generate) -> list[int]:
    """mlx-vlm's greedy tokens for JOB, cut after the first end-of-turn as the engine stops."""
    import io

    images = [Image.open(io.BytesIO(i.data)).convert("RGB") for i in job.images]
    assert job.messages is not None
    _, out = reference(loaded.path, job.messages, images, max_tokens=N)
    eos = set(loaded.tokenizer.eos_token_ids)
    cut = next((i + 1 for i, t in enumerate(out) if t in eos), len(out))
    return out[:cut]


def run(engine: Any, loaded: LoadedModel, jobs: list[Generate]) -> dict[str, Any]:
    """Prepare JOBS as the worker's intake does, run them together; tokens and last outputs."""
    for job in jobs:
        ids, think, vision = prepare_job(loaded.tokenizer, job, loaded.facts.vocab_size, 512,
                                         vision=vision_of(loaded))
        engine.add(job.request_id, ids, job.params, think, None, vision)
    got: dict[str, list[int]] = {j.request_id: [] for j in jobs}
    last: dict[str, Any] = {}
    first: dict[str, Any] = {}
    for _ in range(10_000):
        if not engine.has_work:
            return {"tokens": got, "last": last, "first": first}
        for out in engine.step():
            assert out.error is None, out.error
            got[out.request_id].extend(out.token_ids)
            last[out.request_id] = out
            first.setdefault(out.request_id, out)
    raise AssertionError("engine stuck")


def test_facts_say_vision(gemma: LoadedModel) -> None:
    assert "vision" in gemma.facts.capabilities
    assert gemma.processor is not None


@pytest.mark.parametrize("budget", [512, 5])
def test_image_request_matches_mlx_vlm(gemma: LoadedModel, budget: int) -> None:
    """Alone, whole or in chunks of 5 (the image's 4 tokens split across chunks)."""
    job = image_job("a", "What is in the image?", [COLORS[0]])
    engine = make_engine(gemma.model, gemma.tokenizer, prefill_budget=budget)
    assert run(engine, gemma, [job])["tokens"]["a"] == expected(gemma, job)
    assert engine.stats.images_encoded == 1


def test_two_images_in_one_prompt(gemma: LoadedModel) -> None:
    job = image_job("two", "Which is brighter?", [COLORS[0], COLORS[1]])
    swapped = image_job("swapped", "Which is brighter?", [COLORS[1], COLORS[0]])
    engine = make_engine(gemma.model, gemma.tokenizer)
    got = run(engine, gemma, [job, swapped])["tokens"]
    assert got["two"] == expected(gemma, job)
    assert got["swapped"] == expected(gemma, swapped)


def mixed_jobs() -> list[Generate]:
    """4 image requests (4 images, 4 questions) and 4 text-only ones."""
    jobs = [image_job(f"img{i}", QUESTIONS[i], [COLORS[i]]) for i in range(4)]
    return jobs + [text_job(f"txt{i}", QUESTIONS[i] + " Answer in words.") for i in range(4)]


def test_eight_mixed_with_text_only(gemma: LoadedModel) -> None:
    """4 image requests and 4 text-only ones at once: each equals its own mlx-vlm answer."""
    jobs = mixed_jobs()
    engine = make_engine(gemma.model, gemma.tokenizer, prefill_budget=48)
    got = run(engine, gemma, jobs)["tokens"]
    assert got == {j.request_id: expected(gemma, j) for j in jobs}
    assert engine.stats.images_encoded == 4


def test_eight_mixed_with_k8v4(gemma32: LoadedModel) -> None:
    """K8V4 pages (8-bit keys, 4-bit values): the 8 mixed requests answer together exactly as
    each does alone, and mlx-vlm's first token (the prefill, images included) is among K8V4's
    top 5. Greedy tokens of a random-weight model drift from full precision (its logits are
    nearly tied: the argmax flips on 3 of 8 first tokens, text-only ones included)."""
    jobs = mixed_jobs()
    engine = make_engine(gemma32.model, gemma32.tokenizer, kind="k8v4", prefill_budget=48)
    together = run(engine, gemma32, jobs)["tokens"]
    for job in jobs:
        alone = make_engine(gemma32.model, gemma32.tokenizer, kind="k8v4")
        assert run(alone, gemma32, [job])["tokens"] == {job.request_id: together[job.request_id]}
    for job in jobs:
        job.params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=5)
    first = run(make_engine(gemma32.model, gemma32.tokenizer, kind="k8v4"), gemma32, jobs)
    for job in jobs:
        top = [t[1] for t in first["last"][job.request_id].logprobs[0].top]
        assert expected(gemma32, job)[0] in top, (job.request_id, top)


def test_cache_reuses_the_same_image_and_never_another(gemma: LoadedModel) -> None:
    """A long shared text prefix, then the image: the same image again reuses KV past the
    image (cached_tokens shows it, the answer is unchanged); a different image with the same
    text reuses only the text before the image, and its first token's distribution differs
    (a cache keyed on the text alone would hand it the first image's KV: the same one)."""
    prefix = "Look closely at the following picture and think about its colors. " * 3
    engine = make_engine(gemma.model, gemma.tokenizer, page_size=4)
    jobs = [image_job(rid, prefix, [c]) for rid, c in
            (("first", COLORS[0]), ("again", COLORS[0]), ("other", COLORS[1]))]
    for job in jobs:
        job.params = SamplingParams(max_tokens=N, temperature=0.0, logprobs=True, top_logprobs=5)
    first = jobs[0]
    a, again, other = (run(engine, gemma, [job]) for job in jobs)
    want = expected(gemma, first)
    assert a["tokens"]["first"] == want and again["tokens"]["again"] == want
    ids, _, vision = prepare_job(gemma.tokenizer, first, gemma.facts.vocab_size, 512,
                                 vision=vision_of(gemma))
    start, end = vision.spans[0]
    assert again["last"]["again"].cached_tokens >= end  # past the image's tokens
    assert other["last"]["other"].cached_tokens <= start  # never into another image's span
    def dist(r: dict[str, Any], rid: str) -> list[tuple[int, float]]:
        return [(t[1], round(t[2], 4)) for t in r["first"][rid].logprobs[0].top]

    assert dist(again, "again") == dist(a, "first")
    assert dist(other, "other") != dist(a, "first")
    assert other["tokens"]["other"] == expected(gemma, image_job("x", prefix, [COLORS[1]]))
    assert engine.stats.images_encoded == 2  # the repeat needed no vision tower at all


def test_intake_refuses_what_it_cannot_render(gemma: LoadedModel) -> None:
    """Images without a vision model, more images than placeholders, an image with a raw
    prompt, and a placeholder token typed as text: each a JobError (a 400), never a crash."""
    from worker.serve.validate import JobError

    vision = vision_of(gemma)
    job = image_job("a", "What?", [COLORS[0]])
    with pytest.raises(JobError, match="no vision"):
        prepare_job(gemma.tokenizer, job, gemma.facts.vocab_size, 512)
    extra = image_job("b", "What?", [COLORS[0], COLORS[1]])
    assert extra.messages is not None
    extra.messages[0]["content"] = extra.messages[0]["content"][:2]  # one placeholder, 2 images
    with pytest.raises(JobError, match="1 image parts but 2 images"):
        prepare_job(gemma.tokenizer, extra, gemma.facts.vocab_size, 512, vision=vision)
    raw = Generate(request_id="c", params=SamplingParams(max_tokens=4), prompt="hi",
                   images=job.images)
    with pytest.raises(JobError, match="chat messages"):
        prepare_job(gemma.tokenizer, raw, gemma.facts.vocab_size, 512, vision=vision)
    token = gemma.tokenizer.convert_ids_to_tokens(gemma.model.image_token_id)
    typed = image_job("d", f"What is {token} here?", [COLORS[0]])
    with pytest.raises(JobError, match="image spans|processor refused"):
        prepare_job(gemma.tokenizer, typed, gemma.facts.vocab_size, 512, vision=vision)


def test_image_cache_keys_are_outside_the_vocabulary(gemma: LoadedModel) -> None:
    """Image positions are keyed outside the vocabulary; every other position is its token."""
    from worker.kinds.vision.inputs import KEY_BASE

    _, _, vision = prepare_job(gemma.tokenizer, image_job("a", "Hi", [COLORS[0]]),
                               gemma.facts.vocab_size, 512, vision=vision_of(gemma))
    assert vision is not None
    start, end = vision.spans[0]
    assert all(k >= KEY_BASE for k in vision.key[start:end])
    assert vision.key[:start] == vision.ids[:start] and vision.key[end:] == vision.ids[end:]


def test_without_mlx_vlm_the_load_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from worker.kinds.vision.load import load_vision
    from worker.model.fetch import CannotLoad

    monkeypatch.setitem(sys.modules, "mlx_vlm.utils", None)  # `import mlx_vlm.utils` fails
    path = CACHE / "tiny-gemma3"
    with pytest.raises(CannotLoad, match=r"\[vision\]"):
        load_vision("tiny", path, {"model_type": "gemma3", "vision_config": {}})
