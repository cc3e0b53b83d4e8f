"""The wire: every message round-trips through its typed decoder, and nothing else decodes."""

from __future__ import annotations

import msgspec
import pytest

from protocol import messages as m


def _jobs() -> list[m.Job]:
    params = m.SamplingParams(max_tokens=5, temperature=0.0, stop=["\n"], seed=3)
    return [
        m.Generate(request_id="r1", params=params, messages=[{"role": "user", "content": "hi"}],
                   tools=[{"type": "function", "function": {"name": "f"}}],
                   chat_template_kwargs={"enable_thinking": False}),
        m.Generate(request_id="r2", params=m.SamplingParams(), prompt_ids=[1, 2, 3]),
        m.Embed(request_id="e", inputs=["a", [1, 2]], dimensions=8, truncate=True),
        m.Transcribe(request_id="t", audio=b"RIFF\x00", filename="a.wav", task="translate"),
        m.Speak(request_id="s", text="hi", voice="af", speed=1.5, audio_format="mp3",
                stream=True),
        m.Abort(request_ids=["r1", "r2"]),
        m.StatusQuery(query_id="q"),
        m.Shutdown(reason="bye"),
    ]


def _events() -> list[m.Event]:
    facts = m.ModelFacts(model="x", context_length=512, special_tokens=["<s>"])
    out = m.RequestOutput(request_id="r1", token_ids=[5], text="é", finish_reason="stop",
                          logprobs=[m.TokenLogprob(token="é", token_id=5, logprob=-0.5,
                                                   top=[("é", 5, -0.5)])])
    return [
        m.Ready(alias="a", boot_id="b", pid=1, protocol_version=m.PROTOCOL_VERSION, facts=facts),
        m.StepOutputs(boot_id="b", step=7, outputs=[out, m.RequestOutput(request_id="r2")]),
        m.StepOutputs(boot_id="b", step=8, outputs=[
            m.RequestOutput(request_id="e", embeddings=[b"\x00\x00\x80?"], finish_reason="stop"),
            m.RequestOutput(request_id="s", audio=b"ID3", duration=1.5),
            m.RequestOutput(request_id="t", text="hi", language="en", segments=[
                m.Segment(id=0, start=0.0, end=1.0, text="hi",
                          words=[m.Word(word="hi", start=0.1, end=0.4)])])]),
        m.Ready(alias="e", boot_id="c", pid=2, protocol_version=m.PROTOCOL_VERSION,
                facts=m.ModelFacts(model="e", kind="embed", embedding_dimensions=384,
                                   capabilities=["dimensions"])),
        m.Heartbeat(boot_id="b", step=7, running=1, waiting=0),
        m.Status(boot_id="b", query_id="q", body={"running": 1}),
        m.Dead(alias="a", boot_id="b", reason="oom"),
    ]


@pytest.mark.parametrize("job", _jobs(), ids=lambda j: type(j).__name__)
def test_jobs_round_trip(job: m.Job) -> None:
    assert m.decode_job(m.encode(job)) == job


@pytest.mark.parametrize("event", _events(), ids=lambda e: type(e).__name__)
def test_events_round_trip(event: m.Event) -> None:
    assert m.decode_event(m.encode(event)) == event


def test_directions_do_not_mix() -> None:
    with pytest.raises(msgspec.ValidationError):
        m.decode_job(m.encode(m.Heartbeat(boot_id="b", step=1, running=0, waiting=0)))
    with pytest.raises(msgspec.ValidationError):
        m.decode_event(m.encode(m.Abort(request_ids=[])))


def test_frames_are_tagged_arrays() -> None:
    frame = m.encode(m.Generate(request_id="r", params=m.SamplingParams(), prompt_ids=[1]))
    decoded = msgspec.msgpack.decode(frame)
    assert isinstance(decoded, list) and decoded[0] == "gen"
    assert decoded[1] == "r" and isinstance(decoded[2], list)  # params nest as an array too


def test_garbage_is_rejected_not_crashing() -> None:
    with pytest.raises((msgspec.DecodeError, msgspec.ValidationError)):
        m.decode_job(b"\x93\xa3gen\x01")


@pytest.mark.parametrize("msg", [*_jobs(), *_events()], ids=lambda x: type(x).__name__)
def test_a_frames_tag_is_read_without_decoding_it(msg: m.Job | m.Event) -> None:
    data = m.encode(msg)
    assert m.peek_tag(data) == type(msg).__struct_config__.tag
    for cut in range(len(m.peek_tag(data) or "") + 1):  # a cut-off head names no tag
        assert m.peek_tag(data[:cut]) is None


def test_a_tag_behind_long_array_headers_and_str8() -> None:
    import msgspec

    many = msgspec.msgpack.encode(["step", *range(20)])  # array16 header
    assert many[0] == 0xDC and m.peek_tag(many) == "step"
    long_tag = msgspec.msgpack.encode(["x" * 40, 1])  # str8 tag
    assert m.peek_tag(long_tag) == "x" * 40
    for data in (b"", b"\x91", b"\x91\x01", b"\xa4step", b"\xc1", b"\x92\xd9"):
        assert m.peek_tag(data) is None
