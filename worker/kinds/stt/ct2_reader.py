"""Read a CTranslate2 ``model.bin`` (binary format of ctranslate2/specs/model_spec.py) with numpy."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

# the DataType enum order of include/ctranslate2/types.h (ModelSpec._dtype_to_type_id)
DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, None)  # None: bfloat16
SUPPORTED_VERSIONS = (5, 6)


class CT2FormatError(ValueError):
    """The file is not a CTranslate2 model this reader understands."""


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, fmt: str) -> int:
        if self.at + struct.calcsize(fmt) > len(self.data):
            raise CT2FormatError(f"model.bin ends early at byte {self.at}")
        (value,) = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str:
        n = self.take("<H")  # length including the trailing NUL
        raw = self.data[self.at:self.at + n]
        if len(raw) != n or n == 0:
            raise CT2FormatError(f"model.bin has a cut string at byte {self.at}")
        self.at += n
        return raw[:-1].decode("utf-8")

    def raw(self, n: int) -> bytes:
        raw = self.data[self.at:self.at + n]
        if len(raw) != n:
            raise CT2FormatError(f"model.bin ends inside a variable at byte {self.at}")
        self.at += n
        return raw


def _bfloat16_to_float32(raw: bytes, shape: list[int]) -> np.ndarray:
    """bfloat16 bits are the high half of float32 bits."""
    halves = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return halves.view(np.float32).reshape(shape)


def read_ct2(path: Path) -> tuple[str, dict[str, np.ndarray]]:
    """The spec name and every variable (aliases resolved) of the CTranslate2 model file PATH."""
    cur = _Cursor(Path(path).read_bytes())
    version = cur.take("<I")
    if version not in SUPPORTED_VERSIONS:
        raise CT2FormatError(f"binary version {version} (this reader knows {SUPPORTED_VERSIONS})")
    spec = cur.string()
    cur.take("<I")  # spec revision
    variables: dict[str, np.ndarray] = {}
    for _ in range(cur.take("<I")):
        name = cur.string()
        shape = [cur.take("<I") for _ in range(cur.take("<B"))]
        type_id = cur.take("<B")
        nbytes = cur.take("<I")
        if type_id >= len(DTYPES):
            raise CT2FormatError(f"variable {name} has unknown dtype id {type_id}")
        raw = cur.raw(nbytes)
        dtype = DTYPES[type_id]
        if dtype is None:
            variables[name] = _bfloat16_to_float32(raw, shape)
        else:
            variables[name] = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")
                                            ).reshape(shape).copy()
    for _ in range(cur.take("<I")):
        alias, target = cur.string(), cur.string()
        if target in variables:
            variables[alias] = variables[target]
    return spec, variables


def write_ct2(path: Path, spec: str, variables: dict[str, np.ndarray], revision: int = 1) -> None:
    """Write VARIABLES as a CTranslate2 model file (version 6); used to build test fixtures."""
    ids = {np.dtype(d): i for i, d in enumerate(DTYPES) if d is not None}

    def string(s: str) -> bytes:
        b = s.encode("utf-8")
        return struct.pack("<H", len(b) + 1) + b + b"\0"

    out = [struct.pack("<I", 6), string(spec), struct.pack("<I", revision),
           struct.pack("<I", len(variables))]
    for name, value in variables.items():
        arr = np.asarray(value)  # (ascontiguousarray would make scalars 1-d)
        out += [string(name), struct.pack("<B", arr.ndim),
                b"".join(struct.pack("<I", d) for d in arr.shape),
                struct.pack("<B", ids[arr.dtype]), struct.pack("<I", arr.nbytes),
                arr.astype(arr.dtype.newbyteorder("<")).tobytes()]
    out.append(struct.pack("<I", 0))
    Path(path).write_bytes(b"".join(out))
