"""A constrained request's budget of mask time: its constraint's cost falls on it alone.

A mask is computed for every constrained row before each sample, and the whole batch waits for
the slowest: a `json_schema` with `"pattern": "^(a{300}){300}$"` cost ~0.1 s of mask work per
token, so its request ran for minutes and every other stream on the worker went 13x slower. So
each Constraint counts its own mask time (masks.py times each row alone until it has shown its
masks are cheap) and may spend GRACE_S plus PER_TOKEN_S per token it has consumed; past that
it fails with a clear error (a 400 naming the response format) and the batch stops waiting on
it. An ordinary schema's mask takes well under a millisecond a token (tens of microseconds on a
small vocabulary; ~1 ms for a first mask on a 150k one), far inside the budget; the slow
request above (20-100 ms a token on a 2-core x86 host) is stopped after 5-50 tokens, having held
the batch up about a second in all.
"""

from __future__ import annotations

GRACE_S = 0.5  # mask time any constrained request may spend, whatever its length
PER_TOKEN_S = 0.01  # and this much more per token it has consumed
SUSPECT_S = 0.005  # a fill this slow has its rows timed one by one from the next step


def over(spent: float, tokens: int) -> bool:
    """True when SPENT seconds of mask work for TOKENS consumed tokens is past the budget."""
    return spent > GRACE_S + PER_TOKEN_S * tokens


def refusal(spent: float, tokens: int) -> str:
    """Why a request over its budget was stopped."""
    return (f"its constraint is too costly to follow: {spent:.2f}s of grammar work for "
            f"{tokens} tokens, more than {GRACE_S:g}s + {PER_TOKEN_S * 1000:g} ms a token "
            "(simplify the schema: e.g. no large repetition counts in a pattern)")
