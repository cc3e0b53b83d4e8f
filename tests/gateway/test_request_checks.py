"""Typed request schemas and the checks that need the model: prompts, token ids, logit_bias,
fan-out, characters, refused options. No server."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.doors import checks
from gateway.doors.jobs import chat_params, completion_params, encodable
from gateway.doors.structured import grammar_for
from gateway.edge.errors import APIError, from_validation
from gateway.edge.limits import ALLOWED_TEMPLATE_KWARGS, CHARS_PER_TOKEN, MAX_CHOICES
from gateway.openai.schemas import ChatCompletionRequest, CompletionRequest
from protocol.messages import (
    Generate,
    GrammarSpec,
    ModelFacts,
    SamplingParams,
    decode_job,
    encode,
)
from worker.serve.prompt import ALLOWED_TEMPLATE_KWARGS as WORKER_ALLOWED

VOCAB, CTX = 4096, 2048


def completion(prompt: Any, **kw: Any) -> CompletionRequest:
    return msgspec.convert({"model": "m", "prompt": prompt, **kw}, CompletionRequest)


def chat(**kw: Any) -> ChatCompletionRequest:
    return msgspec.convert({"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw},
                           ChatCompletionRequest)


def refused(fn: Any, *args: Any) -> APIError:
    with pytest.raises(APIError) as info:
        fn(*args)
    assert info.value.status == 400
    return info.value


def invalid(body: bytes, type_: type) -> APIError:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.json.decode(body, type=type_)
    return from_validation(info.value)


@pytest.mark.parametrize("prompt,expected", [
    ("hi", [{"prompt": "hi"}]),
    (["a", "b"], [{"prompt": "a"}, {"prompt": "b"}]),
    ([1, 2, 4095], [{"prompt_ids": [1, 2, 4095]}]),
    ([[1], [2, 3]], [{"prompt_ids": [1]}, {"prompt_ids": [2, 3]}]),
])
def test_prompt_shapes(prompt: Any, expected: list[dict[str, Any]]) -> None:
    req = completion(prompt)
    assert checks.split_prompt(req.prompt, VOCAB, CTX) == expected
    assert checks.prompt_count(req.prompt) == len(expected)


@pytest.mark.parametrize("prompt", [[4096], [999999999, 5], [4294967295], [[5], [4096]]])
def test_token_ids_outside_the_vocabulary(prompt: Any) -> None:
    err = refused(checks.split_prompt, completion(prompt).prompt, VOCAB, CTX)
    assert err.param == "prompt" and "4096" in err.message


@pytest.mark.parametrize("prompt", [["a", 5], [[5], 5], [[5], "a"], [5, [5]]])
def test_mixed_prompt_lists(prompt: Any) -> None:
    assert refused(checks.split_prompt, completion(prompt).prompt, VOCAB, CTX).param == "prompt"


@pytest.mark.parametrize("body,param", [
    (b"[-1]", "prompt[0]"), (b"[[-1, 5]]", "prompt[0][0]"), (b"[true]", "prompt[0]"),
    (b"[[true, 5]]", "prompt[0][0]"), (b"[]", "prompt"), (b"[[]]", "prompt[0]"),
    (b"[1.5]", "prompt[0]"), (b"{}", "prompt"), (b"null", "prompt"), (b"true", "prompt"),
])
def test_prompt_typing(body: bytes, param: str) -> None:
    err = invalid(b'{"model": "m", "prompt": ' + body + b"}", CompletionRequest)
    assert err.param == param


def test_token_id_prompt_longer_than_the_context() -> None:
    err = refused(checks.split_prompt, [1] * (CTX + 1), VOCAB, CTX)
    assert err.code == "context_length_exceeded"
    checks.split_prompt([1] * CTX, VOCAB, CTX)


def test_character_precheck() -> None:
    checks.check_chars(CTX * CHARS_PER_TOKEN, CTX, "messages")
    err = refused(checks.check_chars, CTX * CHARS_PER_TOKEN + 1, CTX, "messages")
    assert err.code == "context_length_exceeded" and err.param == "messages"
    checks.check_chars(10**9, 0, "messages")  # unknown context: the worker decides
    err = refused(checks.split_prompt, "x" * (CTX * CHARS_PER_TOKEN + 1), VOCAB, CTX)
    assert err.param == "prompt"


def test_text_chars_counts_every_string_without_recursion() -> None:
    assert checks.text_chars([{"role": "user", "content": [{"type": "text", "text": "abc"}]}]) \
        == len("role") + len("user") + len("content") + len("type") + len("text") * 2 + 3
    deep: Any = "x"
    for _ in range(50_000):
        deep = [deep]
    assert checks.text_chars(deep) == 1


def test_fanout_cap() -> None:
    checks.check_fanout(4, 16)
    checks.check_fanout(1, MAX_CHOICES)
    err = refused(checks.check_fanout, 250, 16)
    assert err.param == "prompt" and err.code == "too_many_choices" and str(MAX_CHOICES) in \
        err.message


@pytest.mark.parametrize("seed,ok", [(-1, True), (-(2**63), True), (2**63 - 1, True),
                                     (2**63, False), (-(2**63) - 1, False)])
def test_seed_is_int64(seed: int, ok: bool) -> None:
    body = b'{"model": "m", "messages": [{"role": "user"}], "seed": %d}' % seed
    if ok:
        req = msgspec.json.decode(body, type=ChatCompletionRequest)
        assert chat_params(req).seed == seed
    else:
        assert invalid(body, ChatCompletionRequest).param == "seed"


def test_logit_bias_reaches_the_sampling_params() -> None:
    params = chat_params(chat(logit_bias={"5": -100, "4095": 100}), vocab=VOCAB)
    assert params.logit_bias == {5: -100.0, 4095: 100.0}
    assert completion_params(completion("x", logit_bias={"7": 1.5}), vocab=VOCAB).logit_bias == \
        {7: 1.5}
    wire = decode_job(encode(Generate(request_id="r", params=params, prompt="x")))
    assert isinstance(wire, Generate) and wire.params.logit_bias == {5: -100.0, 4095: 100.0}
    assert chat_params(chat()).logit_bias == {}


def test_logit_bias_is_checked() -> None:
    assert refused(chat_params, chat(logit_bias={"4096": 1}), None, VOCAB).param == "logit_bias"
    for body in (b'{"5": 100.5}', b'{"5": -101}', b'{"a": 1}', b'{"-1": 1}', b'{"": 1}',
                 b'{"12345678901": 1}',
                 ("{" + ",".join(f'"{i}": 1' for i in range(301)) + "}").encode()):
        err = invalid(b'{"model": "m", "messages": [{"role": "user"}], "logit_bias": ' + body +
                      b"}", ChatCompletionRequest)
        assert err.param == "logit_bias", body


def test_response_format() -> None:
    assert grammar_for(None, None) is None and grammar_for("text", None) is None
    assert grammar_for("json_object", None) == GrammarSpec(kind="json_object")
    spec = grammar_for("json_schema", {"name": "x", "schema": {"type": "object"}, "strict": True})
    assert spec == GrammarSpec(kind="json_schema", text='{"type":"object"}')
    bad: list[tuple[Any, str]] = [
        (None, "missing_required_parameter"), ({"name": "a b", "schema": {}}, "invalid_value"),
        ({"schema": [1]}, "invalid_value"),
        ({"schema": {"enum": list(range(1001))}}, "schema_too_large"),
        ({"schema": {"properties": {f"p{i}": {} for i in range(2001)}}}, "schema_too_large"),
        ({"schema": {"description": "x" * 70_000}}, "schema_too_large"),
        ({"schema": {"allOf": [[1] * 10] * 2001}}, "schema_too_large")]
    for js, code in bad:
        err = refused(grammar_for, "json_schema", js)
        assert err.param == "response_format" and err.code == code, (js, err.message)
    assert refused(grammar_for, "yaml", None, "text.format").param == "text.format"
    err = invalid(b'{"model": "m", "messages": [{"role": "user"}], "response_format": '
                  b'{"type": "yaml"}}', ChatCompletionRequest)
    assert err.param == "response_format.type"


def test_template_kwargs_allow_list() -> None:
    assert ALLOWED_TEMPLATE_KWARGS == WORKER_ALLOWED  # the gateway's copy is in sync
    checks.check_template_kwargs({"enable_thinking": False, "reasoning_effort": "low"})
    checks.check_template_kwargs(None)
    err = refused(checks.check_template_kwargs, {"enable_thinking": True, "tokenize": True})
    assert err.param == "chat_template_kwargs" and "'tokenize'" in err.message


def test_vocab_and_context_from_the_workers_facts() -> None:
    facts = ModelFacts(model="m", vocab_size=4096, context_length=2048)
    assert checks.vocab_size(facts) == 4096 and checks.context_length(facts, 99) == 2048
    assert checks.vocab_size(None) == checks.UNKNOWN_VOCAB
    assert checks.context_length(ModelFacts(model="m"), 99) == 99


def test_unencodable_job_is_a_400_not_a_500() -> None:
    job = Generate(request_id="r", params=SamplingParams(), messages=[{"x": 2**64}])
    assert refused(encodable, job).status == 400
    encodable(Generate(request_id="r", params=SamplingParams(seed=-(2**63)), prompt="x"))
