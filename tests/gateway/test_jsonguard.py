"""The raw-body scans: nesting depth and 64-bit integers, strings skipped, no recursion."""

from __future__ import annotations

import json
import time

import msgspec
import pytest

from gateway.edge.jsonguard import (
    JSONLimitError,
    check_json,
    count_values,
    depth_exceeds,
    out_of_range_int,
    strip_strings,
)
from gateway.edge.limits import MAX_JSON_DEPTH, MAX_JSON_VALUES


def nested(depth: int, open_: str = "[", close: str = "]") -> bytes:
    return (open_ * depth + close * depth).encode()


@pytest.mark.parametrize("raw,deep", [
    (nested(MAX_JSON_DEPTH), False),
    (nested(MAX_JSON_DEPTH + 1), True),
    (nested(1000), True),
    (nested(200_000), True),
    (b'{"a":' * 65 + b"1" + b"}" * 65, True),
    (b'{"a":' * 64 + b"1" + b"}" * 64, False),
    (b"[" + b"[1]," * 10_000 + b"[1]]", False),  # many brackets, shallow
    (b'[{"a":[{"b":' * 17 + b"1" + b"}]}]" * 17, True),  # mixed kinds: 68 deep
    (b"[" * 5000, True),  # unclosed, but a decoder would still recurse 5000 deep
    (b"]" * 5000, False),  # unbalanced, never deep: the decoder says so
])
def test_depth(raw: bytes, deep: bool) -> None:
    assert depth_exceeds(strip_strings(raw)) is deep
    if deep:
        with pytest.raises(JSONLimitError) as info:
            check_json(raw)
        assert info.value.code == "json_too_deep"


@pytest.mark.parametrize("raw", [
    b'{"a": "' + nested(1000) + b'"}',
    b'{"a": "\\"' + nested(1000) + b'"}',  # an escaped quote does not end the string
    b'{"a": "\\\\\\"' + nested(1000) + b'\\\\"}',
    b'{"' + nested(1000) + b'": 1}',  # keys are strings too
])
def test_brackets_inside_strings_do_not_count(raw: bytes) -> None:
    msgspec.json.decode(raw)  # a valid body
    check_json(raw)


def test_escapes_are_read_left_to_right() -> None:
    # "\\" ends with an escaped backslash, so the quote after it closes the string
    raw = b'{"a": "\\\\", "b": ' + nested(100) + b"}"
    assert depth_exceeds(strip_strings(raw))


@pytest.mark.parametrize("value,bad", [
    (2**63 - 1, False), (-(2**63), False), (2**63, True), (-(2**63) - 1, True),
    (2**64 - 1, True), (2**64, True), (10**19, True), (9 * 10**18, False), (-(10**18), False),
    (9300000000000000000, True), (9223372036854775807, False), (9223372036854775808, True),
    (10**4000, True),
])
def test_int_bounds(value: int, bad: bool) -> None:
    for raw in (json.dumps([value]).encode(), json.dumps({"deep": {"x": [1, value]}}).encode()):
        assert (out_of_range_int(strip_strings(raw)) is not None) is bad
        if bad:
            with pytest.raises(JSONLimitError) as info:
                check_json(raw)
            assert info.value.code == "integer_out_of_range"
        else:
            check_json(raw)


@pytest.mark.parametrize("raw", [
    b"[1.12345678901234567890123]",  # fraction digits
    b"[12345678901234567890.5]",  # a float's integer part
    b"[1e-12345678901234567890]", b"[1E+12345678901234567890]",  # exponents
    b'["123456789012345678901234567890"]',  # a string
    b'{"123456789012345678901234567890": 1}',  # a key
])
def test_long_digit_runs_that_are_not_integers(raw: bytes) -> None:
    check_json(raw)


def test_huge_integer_literal_is_refused_without_converting_it() -> None:
    with pytest.raises(JSONLimitError):  # int() would refuse 5,000 digits with a ValueError
        check_json(b'{"x": ' + b"9" * 100_000 + b"}")


@pytest.mark.parametrize("raw", [
    b'[' + b'"x",' * 1_000_000 + b'"x"]',
    b'[' + b'[[]],' * 1_000_000 + b'1]',
    b'{"a": "' + b"x" * 8_000_000 + b'"}',
    b'[' + b'9223372036854775807,' * 300_000 + b'1]',
])
def test_pathological_bodies_are_scanned_quickly(raw: bytes) -> None:
    # CPU time of this thread (the scans are single-threaded C and numpy): other processes on the
    # cores do not count in it, as they do in wall time (0.3 s of CPU took 1.25 s of wall time
    # beside two busy loops on 2 cores, against a 2 s wall-time bound). The slowest body takes
    # 0.3 s here; a scan per byte in Python takes 2.3 s.
    for values in (MAX_JSON_VALUES, 2**62):  # refused for too many values, or scanned in full
        started = time.thread_time()
        try:
            check_json(raw, values=values)
        except JSONLimitError as exc:
            assert exc.code == "json_too_many_values" and values == MAX_JSON_VALUES
        assert time.thread_time() - started < 1.0


@pytest.mark.parametrize("raw", [b"[[[]]]", b"[[],[[[]]],[]]", b'{"a":[{"b":[[1]]}],"c":[]}',
                                 b"]]][[", nested(70) + nested(3)])
def test_depth_without_numpy(raw: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pure-Python fallback agrees with the vectorized count."""
    from gateway.edge import jsonguard

    brackets = raw.translate(jsonguard._ONE_KIND, jsonguard._NOT_BRACKET)
    with_numpy = jsonguard._max_depth(brackets)
    monkeypatch.setattr(jsonguard, "_np", None)
    assert jsonguard._max_depth(brackets) == with_numpy


def test_large_bodies_strip_the_same_vectorized() -> None:
    """From 64 KiB strip_strings goes vectorized: the same skeleton as splitting on quotes."""
    one = b'{"a\\\\": "x\\"]]", "b": [1, {"c": "[[\\\\"}], "d": "\\u005d"},'
    raw = b"[" + one * 5000 + b'{"e": "unclosed [[['
    plain = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    assert len(raw) > 64 * 1024
    assert strip_strings(raw) == b"".join(plain.split(b'"')[::2])
    assert not depth_exceeds(strip_strings(raw))


@pytest.mark.parametrize("raw,values", [
    (b'{}', 1),
    (b'{"a": [1, 2.5, true, null, "x"]}', 4),  # object, key, array, string: numbers not counted
    (b'[{"a": "[{\\"}"}, "\\\\", "\\"["]', 6),  # brackets and quotes inside strings
    (b'{"' + b"[" * 100 + b'": "{{{"}', 3),
    (b"[" + b"[]," * 1000 + b"[]]", 1002),
])
def test_count_values(raw: bytes, values: int) -> None:
    msgspec.json.decode(raw)  # a valid body
    assert count_values(raw, strip_strings(raw)) == values
    check_json(raw, values=values)
    with pytest.raises(JSONLimitError) as info:
        check_json(raw, values=values - 1)
    assert info.value.code == "json_too_many_values" and str(values - 1) in str(info.value)


def test_values_inside_strings_are_not_counted() -> None:
    """A body whose strings hold many brackets and quotes (code, escaped JSON) passes: the
    quick count over-counts them, the exact one does not."""
    text = json.dumps('{"a": [[], {}], "b": "[{"}' * 100_000)  # 2.7M marks inside one string
    check_json(('{"messages": [{"role": "user", "content": ' + text + "}]}").encode())


@pytest.mark.parametrize("vectorized", [True, False])
@pytest.mark.parametrize("item,per_item", [
    (b'"a\\"b",', 1),  # an escaped quote inside a string
    (b'"\\\\",', 1),  # a string ending in an escaped backslash: its quote closes it
    (b'{"k\\\\\\"[": "\\\\\\"{\\\\"},', 3),  # escaped backslash then quote, brackets inside
    (b'["\\\\\\\\", "\\"\\""],', 3),
])
def test_the_count_bound_with_escapes(item: bytes, per_item: int, vectorized: bool,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Escaped quotes and backslashes inside strings: a body of exactly VALUES strings, arrays
    and objects passes, one over is refused, whether the body is stripped vectorized (from
    64 KiB) or by splitting (numpy absent)."""
    from gateway.edge import jsonguard

    if not vectorized:
        monkeypatch.setattr(jsonguard, "_np", None)
    raw = b"[" + item * 20_000 + b'"\\\\\\""]'  # the last string: an escaped backslash and quote
    assert len(raw) > 64 * 1024
    values = 1 + per_item * 20_000 + 1
    assert len(msgspec.json.decode(raw)) == 20_001  # a valid body
    assert count_values(raw, strip_strings(raw)) == values
    check_json(raw, values=values)
    with pytest.raises(JSONLimitError) as info:
        check_json(raw, values=values - 1)
    assert info.value.code == "json_too_many_values"
