"""Kokoro-82M's weights out of its ONNX export (float or int8), named and laid out as PyTorch's."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

# where the export's node paths differ from the PyTorch module names
_PREFIXES = [("encoder/predictor/", "predictor."), ("encoder/text_encoder/", "text_encoder."),
             ("encoder/bert_encoder/", "bert_encoder."), ("encoder/bert/", "bert."),
             ("encoder/", "predictor."), ("decoder/decoder/", "decoder.")]
_PLAIN_CONVS = ("noise_convs.", "F0_proj", "N_proj")  # convs without weight norm
_WEIGHT_OPS = {"MatMulInteger", "MatMul", "Gather", "ConvInteger", "Conv", "ConvTranspose",
               "DynamicQuantizeLSTM", "LSTM"}
_IOFC_TO_IFGO = [0, 2, 3, 1]  # ONNX LSTM gate blocks (i, o, f, c) -> PyTorch's (i, f, g, o)


def module_path(node_name: str) -> str:
    """'/encoder/F0.1/conv1/Conv_quant' -> 'predictor.F0.1.conv1' (the PyTorch module)."""
    parts = [p for p in node_name.strip("/").split("/")][:-1]
    parts = [re.sub(r"_\d+$", "", p) for p in parts]  # query_1: the shared layer's later calls
    kept = [p for i, p in enumerate(parts) if not (i + 1 < len(parts)
                                                   and parts[i + 1].startswith(p + "."))]
    path = "/".join(kept) + "/"
    for old, new in _PREFIXES:
        if path.startswith(old):
            return (new + path[len(old):]).replace("/", ".").strip(".")
    return path.strip("/").replace("/", ".")


def _rename(init_name: str) -> str:
    """A named initializer of the export ('decoder.decoder.x.bias') -> the PyTorch key."""
    for old, new in (("encoder.", ""), ("decoder.decoder.", "decoder.")):
        if init_name.startswith(old):
            return new + init_name[len(old):]
    return init_name


class Export:
    """The initializers and nodes of one ONNX graph, with int8 weights turned back into floats."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self.graph = graph
        self.arrays = {t.name: numpy_helper.to_array(t) for t in graph.initializer}

    def dequant(self, name: str, zero_point: str | None = None, axis: int = -1) -> np.ndarray:
        """The float weight behind NAME (itself float, or NAME_quantized with its scale)."""
        if not name.endswith("_quantized"):
            return self.arrays[name].astype(np.float32)
        base = name[: -len("_quantized")]
        q = self.arrays[name].astype(np.float32)
        scale = self.arrays[base + "_scale"].astype(np.float32)
        zp_name = base + "_zero_point" if base + "_zero_point" in self.arrays else zero_point
        zp = self.arrays[zp_name].astype(np.float32) if zp_name else np.float32(0)
        if scale.ndim == 1 and axis != -1:
            shape = [1] * q.ndim
            shape[axis] = -1
            scale, zp = scale.reshape(shape), np.reshape(zp, shape if zp.ndim else ())
        return (q - zp) * scale

    def weights(self) -> dict[str, np.ndarray]:
        """Every weight of the model as a PyTorch state dict (Linear [out, in], Conv [out, in, k])."""
        out: dict[str, np.ndarray] = {}
        for node in self.graph.node:
            if node.op_type in _WEIGHT_OPS:
                self._node(node, out)
        for name, arr in self.arrays.items():  # biases, norms, Snake alphas keep their names
            if name.startswith(("encoder.", "decoder.decoder.")) and not name.endswith(
                    ("_quantized", "_scale", "_zero_point", "_reshape_shape")) \
                    and ".stft." not in name and arr.dtype == np.float32:
                out.setdefault(_rename(name), arr)
        return out

    def _node(self, node: Any, out: dict[str, np.ndarray]) -> None:
        ins = list(node.input)
        if node.op_type == "Gather":
            if ins[0] in self.arrays:
                out[_rename(ins[0].removesuffix("_quantized"))] = self.dequant(ins[0])
            return
        if node.op_type in ("DynamicQuantizeLSTM", "LSTM"):
            self._lstm(module_path(node.name), node, out)
            return
        weight = ins[1]
        if weight not in self.arrays:
            return
        path = module_path(node.name)
        if ".istft" in path or ".stft" in path:
            return
        if node.op_type in ("MatMulInteger", "MatMul"):
            zp = ins[3] if len(ins) > 3 else None
            out.setdefault(path + ".weight", self.dequant(weight, zp).T.copy())
            return
        w = self.dequant(weight, ins[3] if len(ins) > 3 else None, axis=0)
        if any(k in path for k in _PLAIN_CONVS):
            out[path + ".weight"] = w
        else:  # weight norm folded by the export: v = w, g = |w| (norm over all but dim 0)
            out[path + ".weight_v"] = w
            out[path + ".weight_g"] = np.sqrt((w * w).sum(axis=(1, 2), keepdims=True))

    def _lstm(self, path: str, node: Any, out: dict[str, np.ndarray]) -> None:
        ins = list(node.input)
        quant = node.op_type == "DynamicQuantizeLSTM"
        if quant:  # W [dirs, in, 4h], R [dirs, h, 4h], scales per direction
            w, r = (self._dq_lstm(ins[1], ins[8], ins[9]), self._dq_lstm(ins[2], ins[10], ins[11]))
        else:  # W [dirs, 4h, in], R [dirs, 4h, h]
            w, r = self.arrays[ins[1]], self.arrays[ins[2]]
        bias = self.arrays[ins[3]]
        for d, suffix in enumerate(("_l0", "_l0_reverse")[: w.shape[0]]):
            out[f"{path}.weight_ih{suffix}"] = _gates(w[d])
            out[f"{path}.weight_hh{suffix}"] = _gates(r[d])
            wb, rb = np.split(bias[d], 2)
            out[f"{path}.bias_ih{suffix}"] = _gates(wb)
            out[f"{path}.bias_hh{suffix}"] = _gates(rb)

    def _dq_lstm(self, name: str, scale: str, zero_point: str) -> np.ndarray:
        q = self.arrays[name].astype(np.float32)
        s = self.arrays[scale].astype(np.float32).reshape(q.shape[0], 1, -1)
        zp = self.arrays[zero_point].astype(np.float32).reshape(q.shape[0], 1, -1)
        return ((q - zp) * s).transpose(0, 2, 1)


def _gates(x: np.ndarray) -> np.ndarray:
    """Reorder the four gate blocks along axis 0 from ONNX's order to PyTorch's."""
    blocks = np.split(x, 4, axis=0)
    return np.ascontiguousarray(np.concatenate([blocks[i] for i in _IOFC_TO_IFGO], axis=0))
