"""The grammar package alone (compile, cache, matcher, masks) and inside the engine."""

from __future__ import annotations

import json
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import jsonschema
import mlx.core as mx
import numpy as np
import pytest
from mlx_lm import load

from protocol.messages import GrammarSpec, SamplingParams
from tests.random_model import random_model
from tests.worker.engine.test_engine import make_engine
from worker.grammar import masks
from worker.grammar.backend import GrammarError
from worker.grammar.cache import GrammarCache
from worker.grammar.compiler import MAX_SPEC_CHARS, Compiling, GrammarCompiler
from worker.grammar.matcher import Constraint
from worker.model.embedded import embedded_model_path

PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 10},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tags": {"type": "array", "minItems": 1, "maxItems": 3,
                                  "items": {"enum": ["a", "b", "c"]}}}}


def spec(schema: dict[str, Any]) -> GrammarSpec:
    return GrammarSpec(kind="json_schema", text=json.dumps(schema))


@pytest.fixture(scope="module")
def demo() -> tuple[Any, Any]:
    return load(str(embedded_model_path()))[:2]


@pytest.fixture(scope="module")
def compiler(demo: tuple[Any, Any]) -> GrammarCompiler:
    _, tok = demo
    return GrammarCompiler(tok, 4096, sorted(tok.eos_token_ids))


def test_walks_a_valid_answer_and_refuses_a_wrong_token(demo: Any, compiler: GrammarCompiler) -> None:
    _, tok = demo
    c = compiler.compile(spec(PERSON))
    ids = tok.encode('{"name":"Ada","age":36,"tags":["a","c"]}')
    assert ids and not c.finished
    for t in ids[:-1]:
        assert c.advance(t) and not c.finished
    assert c.advance(ids[-1]) and c.finished and c.accepting
    bad = compiler.compile(spec(PERSON))
    assert not bad.advance(tok.encode("[")[0]) and bad.error


def test_cache_gives_fresh_copies_and_is_bounded(demo: Any) -> None:
    _, tok = demo
    comp = GrammarCompiler(tok, 4096, sorted(tok.eos_token_ids))
    comp.cache = GrammarCache(size=2)
    first = comp.compile(spec(PERSON))
    assert first.advance(tok.encode("{")[0])
    again = comp.compile(spec(PERSON))  # a copy at the start, untouched by FIRST's token
    assert comp.cache.hits == 1 and again.consumed == 0 and again.advance(tok.encode("{")[0])
    for i in range(3):
        comp.compile(spec({"type": "integer", "maximum": i}))
    assert len(comp.cache) == 2


@pytest.mark.parametrize("schema", [
    {"type": "strin"}, {"$ref": "#/$defs/nope"}, {"type": "string", "pattern": "(unclosed"},
    {"not": {"type": "string"}}, {"type": "array", "minItems": 5, "maxItems": 2},
    {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    {"type": "string", "format": "credit-card"}, [1, 2]])
def test_bad_schemas_are_grammar_errors(compiler: GrammarCompiler, schema: Any) -> None:
    t0 = time.thread_time()  # CPU time of this thread: other processes do not count
    with pytest.raises(GrammarError):
        compiler.compile(GrammarSpec(kind="json_schema", text=json.dumps(schema)))
    assert time.thread_time() - t0 < 1.0
    with pytest.raises(GrammarError):
        compiler.compile(GrammarSpec(kind="json_schema", text="x" * (MAX_SPEC_CHARS + 1)))


def test_compile_timeout_and_failure_settle() -> None:
    s = GrammarSpec(kind="json_object")
    slow: Future[Constraint] = Future()
    c = Compiling(s, slow, deadline=10.0)
    assert c.settle(now=5.0) == (False, None, None)
    done, grammar, error = c.settle(now=11.0)
    assert done and grammar is None and error and "too long" in error
    failed: Future[Constraint] = Future()
    failed.set_exception(GrammarError("nope"))
    assert Compiling(s, failed, 10.0).settle(0.0) == (True, None, "nope")


def test_masks_apply_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    bits = rng.integers(-(2**31), 2**31, size=(3, 4), dtype=np.int64).astype(np.int32)
    logits = mx.array(rng.normal(size=(3, 100)).astype(np.float32))
    out = np.array(masks.apply(logits, bits))
    allowed = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")[:, :100].astype(bool)
    assert np.array_equal(np.isfinite(out), allowed)
    assert np.array_equal(out[allowed], np.array(logits)[allowed])


def _drive(engine: Any, jobs: dict[str, tuple[SamplingParams, Constraint | None]],
           ids: list[int]) -> dict[str, tuple[str, str | None]]:
    for rid, (params, grammar) in jobs.items():
        engine.add(rid, ids, params, grammar=grammar)
    text: dict[str, str] = dict.fromkeys(jobs, "")
    finish: dict[str, str | None] = {}
    for _ in range(20_000):
        if not engine.has_work:
            return {rid: (text[rid], finish.get(rid)) for rid in jobs}
        for out in engine.step():
            assert out.error is None, out.error
            text[out.request_id] += out.text
            if out.finish_reason:
                finish[out.request_id] = out.finish_reason
    raise AssertionError("engine stuck")


@pytest.mark.parametrize(("overlap", "pages"), [(True, 0), (False, 0), (True, 40)])
def test_engine_constrained_and_free_rows_share_batches(
        tmp_path_factory: pytest.TempPathFactory, demo: Any, compiler: GrammarCompiler,
        overlap: bool, pages: int) -> None:
    """A random-weight model: every constrained answer is valid only because of the grammar."""
    path = random_model(tmp_path_factory.mktemp("random") / "m")
    model, tok = load(str(path))[:2]
    engine = make_engine(model, tok, overlap=overlap, memory="1" if pages else "64MiB",
                         page_size=4 if pages else 16)
    if pages:  # far too few pages for 12 rows: requests are preempted and recomputed
        engine.kv.pool.__init__(pages)
    hot = SamplingParams(max_tokens=80, temperature=1.0)
    jobs = {f"g{i}": (hot, compiler.compile(spec(PERSON))) for i in range(6)}
    jobs.update({f"f{i}": (SamplingParams(max_tokens=40, temperature=1.0, ignore_eos=True), None)
                 for i in range(6)})
    got = _drive(engine, jobs, tok.encode("Hello there, who are you?"))
    for rid, (text, finish) in got.items():
        if rid.startswith("g"):
            assert finish == "stop", (rid, text)
            jsonschema.validate(json.loads(text), PERSON)
        else:
            assert finish == "length"
    assert engine.stats.mask_seconds > 0
    if pages:
        assert engine.stats.preemptions > 0


def test_engine_length_when_max_tokens_comes_first(demo: Any, compiler: GrammarCompiler) -> None:
    model, tok = demo
    engine = make_engine(model, tok)
    got = _drive(engine, {"g": (SamplingParams(max_tokens=3, temperature=1.0),
                                compiler.compile(spec(PERSON)))}, tok.encode("Hello"))
    text, finish = got["g"]
    assert finish == "length" and text.startswith("{") and len(text) < 30


def test_random_model_path(tmp_path: Path) -> None:
    path = random_model(tmp_path / "m")
    assert (path / "model.safetensors").stat().st_size > 1_000_000


def test_engine_stop_string_inside_the_grammar(demo: Any, compiler: GrammarCompiler) -> None:
    """A stop string ends a constrained answer early, with the text before it (as OpenAI does)."""
    model, tok = demo
    engine = make_engine(model, tok)
    params = SamplingParams(max_tokens=80, temperature=1.0, stop=['"age"'])
    got = _drive(engine, {"g": (params, compiler.compile(spec(PERSON)))}, tok.encode("Hello"))
    text, finish = got["g"]
    assert finish == "stop" and text.startswith('{"name":"') and '"age"' not in text
    assert text.endswith(",")


def test_a_reasoning_section_comes_first_and_is_free(demo: Any, compiler: GrammarCompiler) -> None:
    model, tok = demo
    assert compiler.think == (3, 4)  # the demo tokenizer's <think> and </think>
    after = GrammarSpec(kind="json_schema", text=json.dumps(PERSON), after_think=True)
    c = compiler.compile(after)
    bits = masks.fill([c, compiler.compile(spec(PERSON))], 4096)
    allowed = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little").astype(bool)
    assert allowed[0, 3] and not allowed[1, 3]  # only the gated row may open thinking
    assert np.array_equal(np.delete(allowed[0], 3), np.delete(allowed[1], 3))
    for t in (3, *tok.encode("let me see"), 4):  # free inside, the grammar starts after </think>
        assert c.advance(t) and not c.finished
    assert masks.fill([c], 4096)[0].tolist() == masks.fill([compiler.compile(spec(PERSON))],
                                                          4096)[0].tolist()
    engine = make_engine(model, tok)
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hello!"}],
                                     add_generation_prompt=True) + tok.encode("<think>\n")
    opened = compiler.compile(after)
    engine.add("t", prompt, SamplingParams(max_tokens=150, temperature=0.0), True, opened)
    out = ""
    finish = None
    while engine.has_work:
        for o in engine.step():
            out += o.text
            finish = o.finish_reason or finish
    assert finish == "stop" and "</think>" in out, out
    answer = out.split("</think>", 1)[1]
    jsonschema.validate(json.loads(answer), PERSON)
