"""Split one decoded 30 s window's tokens into timed segments (Whisper's timestamp-token rules)."""

from __future__ import annotations

from typing import Any

import numpy as np

HOP_LENGTH = 160
SAMPLE_RATE = 16000
N_FRAMES = 3000  # mel frames in one 30 s window
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH
INPUT_STRIDE = 2  # mel frames per audio-context position
TIME_PRECISION = INPUT_STRIDE * HOP_LENGTH / SAMPLE_RATE  # 0.02 s per timestamp token


def split_window(tokens: list[int], ts_begin: int, seek: int, segment_size: int,
                 ) -> tuple[list[tuple[float, float, list[int]]], int, bool]:
    """(start, end, tokens) per segment, the next seek (frames) and whether the window ended on a
    single timestamp (all speech consumed), as openai-whisper's transcribe() decides them."""
    arr = np.array(tokens, dtype=np.int64)
    offset = seek * HOP_LENGTH / SAMPLE_RATE
    is_ts = arr >= ts_begin
    single_ending = is_ts[-2:].tolist() == [False, True]
    consecutive = (np.where(is_ts[:-1] & is_ts[1:])[0] + 1).tolist()
    out: list[tuple[float, float, list[int]]] = []
    if consecutive:
        slices = consecutive + ([len(arr)] if single_ending else [])
        last = 0
        for cut in slices:
            piece = arr[last:cut]
            out.append((offset + (int(piece[0]) - ts_begin) * TIME_PRECISION,
                        offset + (int(piece[-1]) - ts_begin) * TIME_PRECISION, piece.tolist()))
            last = cut
        if single_ending:
            return out, seek + segment_size, True
        return out, seek + (int(arr[last - 1]) - ts_begin) * INPUT_STRIDE, False
    duration = segment_size * HOP_LENGTH / SAMPLE_RATE
    stamps = arr[is_ts]
    if len(stamps) > 0 and int(stamps[-1]) != ts_begin:
        duration = (int(stamps[-1]) - ts_begin) * TIME_PRECISION
    out.append((offset, offset + duration, arr.tolist()))
    return out, seek + segment_size, single_ending


def segment_dicts(parts: list[tuple[float, float, list[int]]], seek: int, result: Any,
                  decode_text: Any, eot: int) -> list[dict[str, Any]]:
    """The segment dicts mlx-audio's word timing expects (text decoded, metrics attached)."""
    return [{"seek": seek, "start": float(start), "end": float(end),
             "text": decode_text([t for t in toks if t < eot]), "tokens": toks,
             "temperature": float(result.temperature), "avg_logprob": float(result.avg_logprob),
             "compression_ratio": float(result.compression_ratio),
             "no_speech_prob": float(result.no_speech_prob), "words": []}
            for start, end, toks in parts]
