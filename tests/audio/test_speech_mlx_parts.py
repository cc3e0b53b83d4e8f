"""The MLX side of speech without weights: im2col convolutions equal MLX's own, and text is cut
into bounded phoneme pieces."""

from __future__ import annotations

import mlx.core as mx
import pytest

from worker.kinds.tts import fastconv
from worker.kinds.tts.g2p import MAX_PHONEMES, Phonemizer


@pytest.mark.parametrize("t,c,o,k,dilation,padding", [
    (300, 16, 24, 11, 5, 25), (200, 32, 32, 7, 3, 9), (50, 8, 4, 3, 1, 1), (40, 8, 4, 1, 1, 0),
    (40, 8, 4, 5, 1, 0)])
def test_conv1d_matches_mlx(t: int, c: int, o: int, k: int, dilation: int, padding: int) -> None:
    mx.random.seed(1)
    x, w = mx.random.normal((2, t, c)), mx.random.normal((o, k, c))
    want = mx.conv1d(x, w, padding=padding, dilation=dilation)
    got = fastconv.conv1d(x, w, padding=padding, dilation=dilation)
    assert got.shape == want.shape
    assert mx.allclose(got, want, atol=1e-3).item()


@pytest.mark.parametrize("t,c,o,k,stride,padding", [
    (30, 16, 8, 20, 10, 5), (40, 8, 6, 12, 6, 3), (20, 4, 4, 3, 1, 1), (20, 4, 4, 3, 2, 0)])
def test_conv_transpose1d_matches_mlx(t: int, c: int, o: int, k: int, stride: int,
                                      padding: int) -> None:
    mx.random.seed(2)
    x, w = mx.random.normal((1, t, c)), mx.random.normal((o, k, c))
    want = mx.conv_transpose1d(x, w, stride=stride, padding=padding)
    got = fastconv.conv_transpose1d(x, w, stride=stride, padding=padding)
    assert got.shape == want.shape
    assert mx.allclose(got, want, atol=1e-3).item()


def test_text_is_cut_into_bounded_pieces() -> None:
    vocab = {ch: i for i, ch in enumerate(" .,!?;:abcdefghijklmnopqrstuvwxyzæðŋɑɔəɛɜɡɪɹʃʊʌʒʤʧθᵊˈˌAIOWY")}
    g2p = Phonemizer(vocab)
    short = g2p.pieces("Hello there. How are you?", "en-us")
    assert len(short) == 2 and all(short)
    long_text = ("This sentence keeps going, and going, with many words in it, far longer than "
                 "one piece may be, so that it must be cut at its commas and then at its words "
                 "to keep every step of the worker short enough. ") * 3
    pieces = g2p.pieces(long_text, "en-us")
    assert len(pieces) > 3
    assert all(0 < len(p) <= MAX_PHONEMES for p in pieces)
    slow = g2p.pieces(long_text, "en-us", limit=30)
    assert all(len(p) <= 30 for p in slow) and len(slow) > len(pieces)
    assert g2p.pieces("... !!", "en-us") == []
