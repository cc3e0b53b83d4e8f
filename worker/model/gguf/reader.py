"""Open a GGUF file: its metadata as plain Python values and its tensors (raw blocks, memory-mapped)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader

# the token list and merges are large: read them once, on demand, from the fields
_BULK = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
         "tokenizer.ggml.scores")


@dataclass
class RawTensor:
    """One stored tensor: its GGUF name, type, shape (rows first, as in the MLX/PyTorch layout)
    and bytes (one row of blocks per output row for quantized types)."""

    name: str
    qtype: GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray

    @property
    def type_name(self) -> str:
        """The GGML type's name (Q4_K, F32, ...)."""
        return str(self.qtype.name)


class GGUFFile:
    """A GGUF file's metadata and tensors."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._reader = GGUFReader(str(self.path))
        self.meta: dict[str, Any] = {}
        for key, field in self._reader.fields.items():
            if key in _BULK or key.startswith("GGUF."):
                continue
            self.meta[key] = field.contents()
        self.tensors: dict[str, RawTensor] = {t.name: RawTensor(t.name, t.tensor_type,
                                          tuple(int(n) for n in reversed(t.shape)), t.data)
                        for t in self._reader.tensors}

    def bulk(self, key: str) -> list[Any] | None:
        """A large array field (tokens, merges, token types, scores), or None when absent."""
        field = self._reader.fields.get(key)
        return None if field is None else list(field.contents())

    @property
    def architecture(self) -> str:
        """general.architecture (llama, qwen2, ...)."""
        return str(self.meta.get("general.architecture", ""))

    def arch(self, key: str, default: Any = None) -> Any:
        """An architecture-scoped value: ARCH.KEY (e.g. llama.block_count)."""
        return self.meta.get(f"{self.architecture}.{key}", default)
