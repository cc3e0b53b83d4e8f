"""Whisper's timestamp-token rules in worker/kinds/stt/segments.py (pure: no model)."""

from __future__ import annotations

from worker.kinds.stt.segments import split_window

TS = 1000  # timestamp_begin: token TS + k means k * 0.02 s


def test_consecutive_timestamps_split_segments_and_single_ending_consumes_window() -> None:
    toks = [TS + 0, 1, 2, TS + 50, TS + 50, 3, TS + 120]  # <0.00> a b <1.00><1.00> c <2.40>
    parts, seek, single = split_window(toks, TS, seek=3000, segment_size=3000)
    assert single and seek == 6000
    assert [(round(s, 2), round(e, 2)) for s, e, _ in parts] == [(30.0, 31.0), (31.0, 32.4)]
    assert parts[0][2] == [TS, 1, 2, TS + 50]


def test_unfinished_last_segment_is_left_for_the_next_window() -> None:
    toks = [TS + 0, 1, TS + 100, TS + 100, 2, 3]  # the text after <2.00> has no end stamp
    parts, seek, single = split_window(toks, TS, seek=0, segment_size=3000)
    assert not single and len(parts) == 1
    assert seek == 100 * 2  # resume at 2.00 s (2 mel frames per timestamp step)


def test_no_consecutive_timestamps_is_one_segment() -> None:
    parts, seek, single = split_window([TS, 5, 6, TS + 75], TS, seek=0, segment_size=500)
    assert len(parts) == 1 and parts[0][:2] == (0.0, 1.5) and seek == 500 and single
    parts, seek, _ = split_window([5, 6], TS, seek=100, segment_size=400)
    assert parts[0][:2] == (1.0, 5.0) and seek == 500
