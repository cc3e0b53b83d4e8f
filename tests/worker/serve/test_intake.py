"""The worker's own checks of a Generate job, and the intake thread that runs them."""

from __future__ import annotations

import select
import threading
import time
from typing import Any

import msgspec
import pytest
from mlx_lm import load

from protocol import messages as m
from worker.model.embedded import embedded_model_path
from worker.serve.intake import Intake, Prepared, output_cap, prepare
from worker.serve.validate import JobError, recover_request_id

VOCAB, CTX = 4096, 2048


@pytest.fixture(scope="module")
def tok() -> Any:
    return load(str(embedded_model_path()))[1]


def _gen(rid: str = "r", **kw: Any) -> m.Generate:
    params = kw.pop("params", m.SamplingParams(max_tokens=8))
    return m.Generate(request_id=rid, params=params, **kw)


@pytest.mark.parametrize("ids", [[999_999_999, 5], [4_294_967_295], [18_446_744_073_709_551_615],
                                 [VOCAB], [-1, 5], []])
def test_prompt_ids_outside_the_vocabulary_are_refused(tok: Any, ids: list[int]) -> None:
    with pytest.raises(JobError) as err:
        prepare(tok, _gen(prompt_ids=ids), VOCAB, CTX)
    assert err.value.code == "invalid_request_error"


def test_valid_prompt_ids_pass_and_fill_max_tokens(tok: Any) -> None:
    job = _gen(prompt_ids=[0, 5, VOCAB - 1], params=m.SamplingParams())
    assert prepare(tok, job, VOCAB, CTX) == ([0, 5, VOCAB - 1], False)
    assert job.params.max_tokens == CTX - 3


@pytest.mark.parametrize("params", [
    m.SamplingParams(temperature=float("nan")), m.SamplingParams(top_p=float("inf")),
    m.SamplingParams(top_p=1.5), m.SamplingParams(min_p=-0.1),
    m.SamplingParams(repetition_penalty=0.0), m.SamplingParams(presence_penalty=float("nan")),
    m.SamplingParams(top_logprobs=10_000), m.SamplingParams(stop=["x"] * 17),
    m.SamplingParams(stop=["x" * 513]), m.SamplingParams(stop_token_ids=[VOCAB]),
    m.SamplingParams(stop_token_ids=[-1]), m.SamplingParams(logit_bias={VOCAB: 1.0}),
    m.SamplingParams(logit_bias={-5: 1.0}), m.SamplingParams(logit_bias={5: 101.0}),
    m.SamplingParams(logit_bias={5: float("nan")}),
])
def test_unsafe_sampling_params_are_refused(tok: Any, params: m.SamplingParams) -> None:
    with pytest.raises(JobError):
        prepare(tok, _gen(prompt="hi", params=params), VOCAB, CTX)


def test_any_64_bit_seed_is_accepted(tok: Any) -> None:
    for seed in (-1, -(2**63), 2**64 - 1):
        prepare(tok, _gen(prompt="hi", params=m.SamplingParams(seed=seed, max_tokens=4)), VOCAB, CTX)


def test_context_checks_before_and_after_tokenizing(tok: Any) -> None:
    t0 = time.thread_time()  # CPU time of this thread: other processes do not count
    with pytest.raises(JobError) as err:  # 5M characters: refused without tokenizing
        prepare(tok, _gen(messages=[{"role": "user", "content": "a" * 5_000_000}]), VOCAB, CTX)
    assert err.value.code == "context_length_exceeded" and time.thread_time() - t0 < 0.5
    with pytest.raises(JobError) as err:  # under the character cap, over the context in tokens
        prepare(tok, _gen(prompt="Once upon a time. " * 500,
                          params=m.SamplingParams(max_tokens=100)), VOCAB, 512)
    assert err.value.code == "context_length_exceeded"
    with pytest.raises(JobError) as err:
        prepare(tok, _gen(prompt_ids=[5] * CTX), VOCAB, CTX)
    assert err.value.code == "context_length_exceeded"


def test_hostile_messages_become_request_errors(tok: Any) -> None:
    intake = Intake(tok, VOCAB, CTX)
    try:
        bad = [
            _gen("parts", messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]),
            _gen("role", messages=[{"role": 7, "content": "x"}]),
            _gen("none"),
            _gen("ok", messages=[{"role": "user", "content": "hello"}]),
        ]
        for job in bad:
            intake.submit(job)
        got = _collect(intake, 4)
        assert [p.job.request_id for p in got] == ["parts", "role", "none", "ok"]
        assert got[0].error is not None and got[2].error is not None  # role 7 may render or not
        assert got[3].error is None and got[3].ids
    finally:
        intake.close()


def test_cancelled_jobs_never_come_out(tok: Any) -> None:
    intake = Intake(tok, VOCAB, 1_000_000, chars_per_token=1_000_000)
    try:
        intake.submit(_gen("slow", prompt="Once upon a time. " * 20_000))
        intake.submit(_gen("kept", prompt="hello"))
        intake.cancel(["slow"])
        assert intake.pending == 1
        got = _collect(intake, 1)
        assert [p.job.request_id for p in got] == ["kept"] and intake.pending == 0
    finally:
        intake.close()


def _collect(intake: Intake, n: int, timeout: float = 30.0) -> list[Prepared]:
    got: list[Prepared] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        select.select([intake.fd], [], [], 0.5)
        got.extend(intake.ready())
    return got


def test_grammars_compile_off_the_loop_with_errors_and_a_timeout(tok: Any) -> None:
    """A compiled grammar comes out with its job; a bad one and a slow one fail only theirs."""
    from worker.grammar.compiler import GrammarCompiler

    compiler = GrammarCompiler(tok, VOCAB, sorted(tok.eos_token_ids), timeout=1.0)
    real = compiler.compile
    release, returned = threading.Event(), threading.Event()

    def compile_slowly(spec: m.GrammarSpec) -> Any:
        if spec.text == '{"type":"string"}':
            release.wait(60)  # a hostile compile: the request is refused at the deadline
            returned.set()
        return real(spec)

    compiler.compile = compile_slowly  # type: ignore[method-assign]
    intake = Intake(tok, VOCAB, CTX, grammars=compiler)
    try:
        for rid, text in (("slow", '{"type":"string"}'), ("ok", '{"type":"integer"}'),
                          ("bad", '{"type":"strin"}')):
            intake.submit(_gen(rid, prompt="hi", grammar=m.GrammarSpec(kind="json_schema",
                                                                       text=text)))
        intake.submit(_gen("free", prompt="hi"))
        got = {p.job.request_id: p for p in _collect(intake, 4)}
        assert got["ok"].grammar is not None and got["ok"].error is None
        assert got["free"].grammar is None and got["free"].error is None
        for rid, words in (("bad", "strin"), ("slow", "too long")):
            err = got[rid].error
            assert err is not None and err.code == "invalid_grammar" and words in str(err), rid
        assert not returned.is_set()  # refused at its deadline, not when the compile ends
    finally:
        release.set()
        intake.close()


def test_request_id_is_recovered_from_undecodable_frames() -> None:
    good = m.encode(_gen("abc", prompt_ids=[1, 2]))
    raw = msgspec.msgpack.decode(good)
    raw[7] = [True, 5]  # prompt_ids with a bool: not a list[int]
    frame = msgspec.msgpack.encode(raw)
    with pytest.raises(msgspec.ValidationError):
        m.decode_job(frame)
    assert recover_request_id(frame) == "abc"
    assert recover_request_id(b"\xc1garbage") is None
    assert recover_request_id(msgspec.msgpack.encode(["abort", ["x"]])) is None
    assert recover_request_id(msgspec.msgpack.encode({"type": "gen", "request_id": "d"})) == "d"
    long_id = "x" * 300
    deep = b"\x93" + msgspec.msgpack.encode("gen") + msgspec.msgpack.encode(long_id) + b"\x91" * 10**5
    assert recover_request_id(deep) == long_id
    assert recover_request_id(b"\x93\xa3gen\xa5ab") is None  # truncated id
    assert recover_request_id(b"") is None


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    {"type": "image"}, {"type": "input_image", "image_url": "data:x"},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
])
def test_non_text_parts_are_refused_not_dropped(tok: Any, part: dict[str, Any]) -> None:
    """A text-only worker given an image (or audio) part says so instead of answering without it."""
    job = _gen(messages=[{"role": "user", "content": [{"type": "text", "text": "Look:"}, part]}])
    with pytest.raises(JobError) as err:
        prepare(tok, job, VOCAB, CTX)
    assert err.value.code == "invalid_request_error"
    assert "messages[0].content[1]" in str(err.value) and "AAAA" not in str(err.value)


def test_text_and_refusal_parts_still_render(tok: Any) -> None:
    job = _gen(messages=[{"role": "user", "content": [{"type": "text", "text": "a"},
                                                      {"type": "input_text", "text": "b"}]},
                         {"role": "assistant", "content": [{"type": "refusal", "refusal": "NOPE"},
                                                           {"type": "output_text", "text": "c"}]},
                         {"role": "user", "content": "d"}])
    ids, _ = prepare(tok, job, VOCAB, CTX)
    text = tok.decode(ids)
    assert "ab" in text and "c" in text and "NOPE" not in text


class _BlockingTokenizer:
    """Wraps a tokenizer; encoding blocks until released (a prompt that takes long to prepare)."""

    def __init__(self, tok: Any) -> None:
        self.tok, self.gate, self.entered = tok, threading.Event(), threading.Event()

    def encode(self, *a: Any, **kw: Any) -> Any:
        if a and a[0] != "warm up":
            self.entered.set()
            self.gate.wait(10)
        return self.tok.encode(*a, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tok, name)


def test_preparing_for_is_the_age_of_the_job_being_prepared(tok: Any) -> None:
    """The heartbeat's preparing_for: 0 when intake is on no job, then the seconds the job it
    is on has taken so far (the gateway's watchdog bounds it), 0 again when it is done."""
    blocking = _BlockingTokenizer(tok)
    intake = Intake(blocking, VOCAB, CTX)
    try:
        assert intake.preparing_for == 0.0
        intake.submit(_gen("slow", prompt="hello there"))
        assert blocking.entered.wait(10)
        time.sleep(0.3)
        assert intake.preparing == 1 and intake.preparing_for >= 0.3
        blocking.gate.set()
        assert [p.job.request_id for p in _collect(intake, 1)] == ["slow"]
        assert intake.preparing == 0 and intake.preparing_for == 0.0
    finally:
        blocking.gate.set()
        intake.close()


def test_a_text_job_passes_an_image_job_still_preparing(tok: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a vision model jobs with images prepare on a lane of their own: a text job submitted
    after one whose images take long (here: until the test lets it go) comes out first; the
    heartbeat still counts and ages the image job, and it comes out once done. (One lane, as
    before, held the text job behind it.)"""
    import threading

    from worker.kinds.vision.inputs import VisionInput
    from worker.serve import intake as intake_mod

    entered, gate = threading.Event(), threading.Event()

    def slow_images(tokenizer: Any, processor: Any, token: int, job: m.Generate
                    ) -> tuple[VisionInput, bool]:
        entered.set()
        gate.wait(30)
        return VisionInput(ids=[5, 6, 7], pixels={}, spans=[(1, 2)]), False

    monkeypatch.setattr(intake_mod, "render_images", slow_images)
    intake = Intake(tok, VOCAB, CTX, vision=(object(), 6))
    image = m.ImageData(data=b"png", sha256="0" * 64)
    try:
        intake.submit(_gen("pic", messages=[{"role": "user", "content": [{"type": "image"}]}],
                           images=[image]))
        assert entered.wait(10)
        intake.submit(_gen("text", messages=[{"role": "user", "content": "hello"}]))
        first = _collect(intake, 1)
        assert [p.job.request_id for p in first] == ["text"] and first[0].error is None
        assert intake.preparing == 1 and intake.preparing_for > 0.0 and not gate.is_set()
        gate.set()
        (pic,) = _collect(intake, 1)
        assert pic.job.request_id == "pic" and pic.ids == [5, 6, 7] and pic.error is None
        assert intake.preparing == 0 and intake.preparing_for == 0.0 and intake.alive
        intake.submit(_gen("late", messages=[{"role": "user", "content": [{"type": "image"}]}],
                           images=[image]))
        intake.cancel(["late"])  # cancelling works on the image lane too
        intake.submit(_gen("after", prompt="hi"))
        assert [p.job.request_id for p in _collect(intake, 1)] == ["after"]
    finally:
        gate.set()
        intake.close()


def test_output_cap_clamps_to_the_context_and_fills_the_default() -> None:
    assert output_cap(32_000, 5_000) == 5_000  # more than the context has left: what is left
    assert output_cap(100, 5_000, 4096) == 100  # asked for: kept
    assert output_cap(0, 5_000, 4096) == 4096  # none asked: the server's cap
    assert output_cap(0, 3_000, 4096) == 3_000  # ... within the context
    assert output_cap(0, 3_000, 0) == 3_000  # no server cap: the rest of the context


def test_a_request_larger_than_the_context_left_is_clamped(tok: Any) -> None:
    job = _gen(prompt_ids=[5] * 100, params=m.SamplingParams(max_tokens=32_000))
    prepare(tok, job, VOCAB, CTX, default_max=64)
    assert job.params.max_tokens == CTX - 100
    job = _gen(prompt_ids=[5] * 100, params=m.SamplingParams())
    prepare(tok, job, VOCAB, CTX, default_max=64)
    assert job.params.max_tokens == 64
