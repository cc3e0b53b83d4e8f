"""Cheap scans of a raw JSON body, before it is decoded: nesting depth, 64-bit integers and the
number of strings, arrays and objects (what decodes to many times its bytes).

Both look at the bytes with strings removed (brackets and digits inside strings never count) and
neither recurses: a body nested 100,000 deep is refused, not a RecursionError. An ordinary body
costs two C-level passes; only a body with many brackets or 19-digit numbers is looked at more
closely. Malformed JSON is left for the decoder to report.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.edge.limits import INT64_MAX, INT64_MIN, MAX_JSON_DEPTH, MAX_JSON_VALUES

_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_NOT_MARK = bytes(b for b in range(256) if b not in b'[]{}"')
_ONE_KIND = bytes.maketrans(b"{}", b"[]")  # depth does not care which kind of bracket
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19  # int64 has at most 19 digits
try:  # present wherever the workers run (mlx needs it); imported now, not in a request
    import numpy

    _np: Any = numpy
except ImportError:  # pragma: no cover
    _np = None
_RUN = re.compile(rb"\[+|\]+")
_SIGNED = bytes.maketrans(b"[]", b"\x01\xff")  # +1 / -1 as int8
_VECTOR_BYTES = 64 * 1024  # strip_strings goes vectorized from this size


def _above(bound: str) -> str:
    """A regex for the 19-digit numbers greater than BOUND (19 digits)."""
    alts = [f"{bound[:i]}[{int(d) + 1}-9][0-9]{{{18 - i}}}" for i, d in enumerate(bound) if d != "9"]
    return "|".join(alts)


# an integer literal outside int64 that is not part of a fraction or an exponent
_OUT_OF_RANGE = re.compile(
    rf"(?<![0-9.eE+\-])(?:-(?:[0-9]{{20,}}|{_above(str(-INT64_MIN))})"
    rf"|(?:[0-9]{{20,}}|{_above(str(INT64_MAX))}))(?![0-9.eE])".encode())


class JSONLimitError(ValueError):
    """A body breaks a structural limit; the message says which, CODE names it."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def _drop_escapes(raw: bytes) -> bytes:
    """RAW without its escape pairs, read left to right as a decoder does: no quote left is
    escaped, so its quotes alternate: open, close, open..."""
    return raw.replace(b"\\\\", b"").replace(b'\\"', b"")


def strip_strings(raw: bytes) -> bytes:
    """RAW with every JSON string literal removed."""
    return _strip_plain(_drop_escapes(raw)) if b'"' in raw else raw


def _strip_plain(plain: bytes) -> bytes:
    """PLAIN (a body whose escape pairs were dropped) with every string literal removed."""
    if _np is None or len(plain) < _VECTOR_BYTES:
        return b"".join(plain.split(b'"')[::2])
    # the same, vectorized: splitting a body of 100k short strings makes a million bytes objects
    # in one byte a position (a uint8 count wraps, its parity does not): ~4x the body at the peak
    arr = _np.frombuffer(plain, dtype=_np.uint8)
    quote = arr == 0x22
    inside = _np.cumsum(quote, dtype=_np.uint8)  # odd from an opening quote to its closing
    inside &= 1
    inside |= quote
    return bytes(arr[inside == 0].tobytes())


def depth_exceeds(skeleton: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the arrays/objects of SKELETON (strings removed) nest deeper than LIMIT."""
    brackets = skeleton.translate(_ONE_KIND, _NOT_BRACKET)
    inner = brackets.replace(b"[]", b"")  # drops the innermost pairs: one level, at C speed
    if len(inner) <= 2 * (limit - 1):  # too few brackets left to be that deep
        return False
    return _max_depth(inner) > limit - 1


def _max_depth(brackets: bytes) -> int:
    """The deepest nesting of a string of [ and ] (vectorized: a body can hold millions)."""
    if not brackets:
        return 0
    if _np is None:  # pragma: no cover
        depth = deepest = 0
        for run in _RUN.findall(brackets):
            depth += len(run) if run[0] == 0x5B else -len(run)
            deepest = max(deepest, depth)
        return deepest
    steps = _np.frombuffer(brackets.translate(_SIGNED), dtype=_np.int8)
    return max(0, int(_np.cumsum(steps, dtype=_np.int32).max()))


def out_of_range_int(skeleton: bytes) -> str | None:
    """The first integer literal of SKELETON outside int64, if any (as written)."""
    match = _OUT_OF_RANGE.search(skeleton)
    return match.group().decode() if match else None


def count_values(raw: bytes, skeleton: bytes) -> int:
    """The strings (keys included), arrays and objects of RAW (SKELETON: RAW without strings)."""
    return _count(_drop_escapes(raw), skeleton)


def _count(plain: bytes, skeleton: bytes) -> int:
    """count_values, given PLAIN: the body with its escape pairs dropped."""
    return plain.count(b'"') // 2 + skeleton.count(b"[") + skeleton.count(b"{")


def check_json(raw: bytes, depth: int = MAX_JSON_DEPTH, values: int = MAX_JSON_VALUES) -> None:
    """Raise JSONLimitError if RAW nests deeper than DEPTH, holds an integer outside int64 or
    more than VALUES strings, arrays and objects."""
    marks = raw.translate(None, _NOT_MARK)
    quotes = marks.count(b'"')
    deep = len(marks) - quotes > 2 * depth  # else it cannot be that deep
    long_ints = raw.translate(_DIGITS_AS_ZERO).find(_LONG_RUN) >= 0
    # an upper bound (escaped quotes and brackets inside strings count too): exact only if over
    many = quotes // 2 + marks.count(b"[") + marks.count(b"{") > values
    if not (deep or long_ints or many):
        return
    plain = _drop_escapes(raw) if quotes else raw  # once, for the skeleton and the count
    skeleton = _strip_plain(plain) if quotes else raw
    if many and _count(plain, skeleton) > values:
        raise JSONLimitError(f"The JSON body holds more than {values} strings, arrays and "
                             f"objects (keys included).", "json_too_many_values")
    if deep and depth_exceeds(skeleton, depth):
        raise JSONLimitError(f"The JSON body nests deeper than {depth} levels.", "json_too_deep")
    big = out_of_range_int(skeleton) if long_ints else None
    if big is not None:
        shown = big if len(big) <= 40 else f"{big[:37]}..."
        raise JSONLimitError(f"The JSON body holds the integer {shown}, outside the 64-bit "
                             f"range [{INT64_MIN}, {INT64_MAX}].", "integer_out_of_range")
