"""A real WorkerLoop answers hostile jobs with errors while a valid request completes unharmed."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from protocol import messages as m
from tests.worker.engine.test_engine import _reference
from tests.worker.serve.loop_harness import LoopRig
from worker.model.load import LoadedModel

VOCAB = 4096  # the demo model's


def _gen(rid: str, params: m.SamplingParams | None = None, **kw: Any) -> m.Generate:
    return m.Generate(request_id=rid, params=params or m.SamplingParams(max_tokens=8), **kw)


def _raw_gen(rid: str, prompt_ids: Any) -> bytes:
    """A Generate frame whose prompt_ids the typed decoder refuses (bools, nested lists...)."""
    raw = msgspec.msgpack.decode(m.encode(_gen(rid, prompt_ids=[1])))
    raw[7] = prompt_ids
    return msgspec.msgpack.encode(raw)


def test_hostile_jobs_get_errors_while_a_valid_request_completes(loaded: LoadedModel,
                                                                 rig: LoopRig) -> None:
    tok = loaded.tokenizer
    ids = tok.encode("Once upon a time")
    ref = _reference(loaded.model, tok, ids, 48)
    rig.send(_gen("good", m.SamplingParams(max_tokens=48, temperature=0.0), prompt_ids=ids))
    hostile: dict[str, m.Generate] = {
        "big-id": _gen("big-id", prompt_ids=[999_999_999, 5]),
        "u32": _gen("u32", prompt_ids=[4_294_967_295]),
        "u64": _gen("u64", prompt_ids=[18_446_744_073_709_551_615]),
        "vocab": _gen("vocab", prompt_ids=[VOCAB]),
        "negative": _gen("negative", prompt_ids=[-1, 5]),
        "empty": _gen("empty", prompt_ids=[]),
        "bias": _gen("bias", m.SamplingParams(logit_bias={VOCAB + 7: 5.0}), prompt="hi"),
        "nan": _gen("nan", m.SamplingParams(temperature=float("nan")), prompt="hi"),
        "stop-ids": _gen("stop-ids", m.SamplingParams(stop_token_ids=[2**40]), prompt="hi"),
        "parts": _gen("parts", messages=[{"role": "user", "content": [{"type": "text", "text": 1}]}]),
        "huge": _gen("huge", messages=[{"role": "user", "content": "x" * 3_000_000}]),
    }
    for job in hostile.values():
        rig.send(job)
    rig.send_raw(_raw_gen("bools", [True, 5]))
    rig.send_raw(_raw_gen("nested", [[1, 5]]))
    rig.send_raw(msgspec.msgpack.encode(["gen", "short"]))
    rig.send_raw(b"\xc1 not msgpack")
    rig.send_raw(b"two", b"frames")
    rig.send_raw(msgspec.msgpack.encode(["abort", "not-a-list"]))
    rig.send_raw(b"\x93" + msgspec.msgpack.encode("gen") + msgspec.msgpack.encode("deep")
                 + b"\x91" * 100_000 + b"\x01")  # nested too deep for any decoder
    rig.send(_gen("neg-seed", m.SamplingParams(max_tokens=6, temperature=1.0, seed=-1), prompt="hi"))
    errors = [*hostile, "bools", "nested", "short", "deep"]
    assert rig.wait(lambda: all(rig.finished(r) for r in [*errors, "good", "neg-seed"]), 120), \
        f"missing: {[r for r in [*errors, 'good', 'neg-seed'] if not rig.finished(r)]}"
    for rid in errors:
        out = rig.final(rid)
        assert out.finish_reason == "error" and out.error, rid
        want = "context_length_exceeded" if rid == "huge" else "invalid_request_error"
        assert out.error_code == want, (rid, out.error_code, out.error)
    assert rig.tokens("good") == ref and rig.final("good").error is None
    assert rig.final("neg-seed").error is None and len(rig.tokens("neg-seed")) > 0
    assert rig.thread.is_alive() and rig.error is None
    rig.send(m.StatusQuery(query_id="q"))
    assert rig.wait(lambda: any(isinstance(e, m.Status) for e in rig.others), 10)
    status = next(e for e in rig.others if isinstance(e, m.Status)).body
    assert status["running"] == status["waiting"] == 0
    assert status["kv_pages_used"] == status["prefix_cache_pages"]
    assert status["kv_dense_cache_bytes"] == 0  # idle: the dense decode cache is freed


def test_a_request_aborted_while_tokenizing_never_answers(loaded: LoadedModel) -> None:
    rig = LoopRig(loaded, chars_per_token=1_000)
    try:
        rig.send(_gen("big", messages=[{"role": "user", "content": "Once upon a time. " * 12_000}]))
        rig.send(m.Abort(request_ids=["big"]))
        rig.send(_gen("after", m.SamplingParams(max_tokens=4, temperature=0.0), prompt="hi"))
        assert rig.wait(lambda: rig.finished("after"), 120)
        rig.wait(lambda: False, 0.3)
        assert "big" not in rig.outputs  # intake is FIFO: its answer would have come first
        assert rig.runner.intake.pending == 0
    finally:
        rig.close()


def test_a_huge_prompt_does_not_stall_decoding(loaded: LoadedModel) -> None:
    """A prompt that takes seconds to tokenize, and one refused by its size, cost others nothing."""
    rig = LoopRig(loaded, chars_per_token=500)  # lets ~1M characters through to the tokenizer
    try:
        tok = loaded.tokenizer
        rig.send(_gen("long", m.SamplingParams(max_tokens=2_000, temperature=0.0, ignore_eos=True),
                      prompt_ids=tok.encode("Once upon a time")))
        assert rig.wait(lambda: len(rig.outputs.get("long", [])) >= 5, 60)
        t0 = time.monotonic()
        rig.send(_gen("refused", messages=[{"role": "user", "content": "y" * 5_000_000}]))
        rig.send(_gen("tokenized", messages=[{"role": "user",
                                              "content": "Once upon a time. " * 50_000}]))
        assert rig.wait(lambda: rig.finished("refused") and rig.finished("tokenized"), 180)
        t1 = time.monotonic()
        refused_at = next(t for t, o in rig.outputs["refused"] if o.finish_reason)
        assert rig.final("refused").error_code == "context_length_exceeded"
        assert refused_at - t0 < 2.0
        assert rig.final("tokenized").error_code == "context_length_exceeded"
        # tokenizing on the loop would stall it right away: the first gap would show it
        end = min(t1, max(t for t, _ in rig.outputs["long"]))
        times = [t0] + [t for t, _ in rig.outputs["long"] if t0 <= t <= end] + [end]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert len(times) > 10 and max(gaps) < 1.5, \
            f"decoding stalled {max(gaps):.2f}s while tokenizing for {t1 - t0:.1f}s"
        rig.send(m.Abort(request_ids=["long"]))
    finally:
        rig.close()


def test_a_failing_step_answers_errors_and_the_loop_keeps_serving(loaded: LoadedModel) -> None:
    from tests.worker.engine.test_step_failure import _FailOnce

    rig = LoopRig(loaded)
    try:
        tok = loaded.tokenizer
        ids = tok.encode("One day, a big dog")
        ref = _reference(loaded.model, tok, ids, 16)
        flaky = _FailOnce(rig.engine, victim="victim")
        rig.engine.executor.forward = flaky  # type: ignore[assignment]  # the loop thread reads it next step
        greedy = m.SamplingParams(max_tokens=16, temperature=0.0)
        rig.send(_gen("victim", greedy, prompt_ids=ids))
        assert rig.wait(lambda: rig.finished("victim"), 60)
        assert rig.final("victim").error_code == "internal_error" and not rig.tokens("victim")
        rig.send(_gen("next", greedy, prompt_ids=ids))
        assert rig.wait(lambda: rig.finished("next"), 60)
        assert rig.tokens("next") == ref and rig.thread.is_alive()
        rig.send(m.StatusQuery(query_id="q"))
        assert rig.wait(lambda: any(isinstance(e, m.Status) for e in rig.others), 10)
        status = next(e for e in rig.others if isinstance(e, m.Status)).body
        assert status["kv_pages_used"] == status["prefix_cache_pages"] and status["running"] == 0
    finally:
        rig.close()
