"""1-D convolutions as one matrix product (im2col), for MLX's CPU backend where dilated and
transposed convolutions are slow: Kokoro's vocoder spends nearly all its time in them."""

from __future__ import annotations

from typing import Any

import mlx.core as mx


def conv1d(x: mx.array, weight: mx.array, stride: int = 1, padding: int = 0, dilation: int = 1,
           groups: int = 1, **unused: Any) -> mx.array:
    """mx.conv1d's result for x [N, T, C] and weight [O, K, C]: K shifted views times one GEMM."""
    out_ch, k, in_ch = weight.shape
    if groups != 1 or stride != 1 or k == 1 and padding == 0:
        if k == 1 and groups == 1 and stride == 1:
            return x @ weight.reshape(out_ch, in_ch).T
        return mx.conv1d(x, weight, stride=stride, padding=padding, dilation=dilation,
                         groups=groups)
    if padding:
        x = mx.pad(x, [(0, 0), (padding, padding), (0, 0)])
    t_out = x.shape[1] - dilation * (k - 1)
    cols = mx.concatenate([x[:, i * dilation: i * dilation + t_out, :] for i in range(k)], axis=-1)
    return cols @ weight.reshape(out_ch, k * in_ch).T


def conv_transpose1d(x: mx.array, weight: mx.array, stride: int = 1, padding: int = 0,
                     dilation: int = 1, output_padding: int = 0, groups: int = 1,
                     **unused: Any) -> mx.array:
    """mx.conv_transpose1d's result for x [N, T, C], weight [O, K, C]: one GEMM, overlap-add."""
    out_ch, k, in_ch = weight.shape
    if groups != 1 or dilation != 1 or k % stride:
        return mx.conv_transpose1d(x, weight, stride=stride, padding=padding, dilation=dilation,
                                   output_padding=output_padding, groups=groups)
    n, t, _ = x.shape
    cols = x @ weight.reshape(out_ch * k, in_ch).T  # [N, T, O*K] ordered (o, k)
    cols = cols.reshape(n, t, out_ch, k).transpose(0, 1, 3, 2)  # [N, T, K, O]
    full = (t - 1) * stride + k
    out = mx.zeros((n, full + stride, out_ch), dtype=x.dtype)
    for j in range(k // stride):  # taps j*stride .. j*stride+stride-1 land on one block each
        block = cols[:, :, j * stride:(j + 1) * stride, :].reshape(n, t * stride, out_ch)
        out = out + mx.pad(block, [(0, 0), (j * stride, full + stride - j * stride - t * stride),
                                   (0, 0)])
    end = full - padding + output_padding
    return out[:, padding:end, :]


class _MxWithFastConv:
    """mlx.core as seen by Kokoro's modules, with the two convolutions above swapped in."""

    conv1d = staticmethod(conv1d)
    conv_transpose1d = staticmethod(conv_transpose1d)

    def __getattr__(self, name: str) -> Any:
        return getattr(mx, name)


def install() -> None:
    """Make mlx-audio's Kokoro modules call these convolutions (before the model is built)."""
    from mlx_audio.tts.models.kokoro import istftnet, modules

    proxy = _MxWithFastConv()
    setattr(istftnet, "mx", proxy)  # noqa: B010  (replace the module global they call)
    setattr(modules, "mx", proxy)  # noqa: B010
