"""The KV store's row writes in place on the CPU (worker/cpu/native's ``write_rows``).

MLX's scatter copies a whole page array when an earlier reader still holds its buffer at the
moment the write is encoded; with overlapped decode that is often the last step's attention,
queued but not yet run (worker/cpu/native/rows.cpp says why). ``writer`` gives the store
(``PagedKVStore.put_rows``) and its dense decode cache the native write, which writes the
array's own buffer unless a reader not yet queued (or a kept handle) refers to the old version,
when the extension loads and MLX runs on the CPU; else MLX's scatter
(``worker.kv.paged_kv.scatter_rows``), as before. Same values either way: both copy the rows' bytes.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from worker.cpu.native import load
from worker.kv.scatter import PutRows, scatter_rows

ENABLED = True  # tests and benches compare against MLX's scatter with this off
INDEX_DTYPES = (mx.int32, mx.uint32, mx.int64, mx.uint64)
_loaded: dict[str, Any] = {}


def native() -> Any | None:
    """The extension module (loaded once), or None with one log line why not."""
    if "module" not in _loaded:
        _loaded["module"] = load("_rows", "row writes", "MLX's scatter", fma=False)
    return _loaded["module"]


def writer() -> PutRows:
    """``write_rows`` when the extension is usable on this device, else MLX's scatter."""
    if not ENABLED or mx.default_device() != mx.cpu or native() is None:
        return scatter_rows
    return write_rows


def row_write_status() -> dict[str, int]:
    """The worker status fields: native row writes so far made in place and into a copy (a
    growing copy count means MLX's copies are back)."""
    module = native() if ENABLED else None
    in_place, copied = module.counts() if module is not None else (0, 0)
    return {"kv_row_writes_in_place": int(in_place), "kv_row_writes_copied": int(copied)}


def write_rows(dst: mx.array, rows: mx.array, values: mx.array) -> mx.array:
    """DST (N, C) with ROWS (R,) set to VALUES (R, C), in DST's buffer (other shapes, dtypes
    or devices: MLX's scatter)."""
    module = native()
    if (module is None or mx.default_device() != mx.cpu or dst.ndim != 2 or rows.ndim != 1
            or rows.dtype not in INDEX_DTYPES
            or values.shape != (rows.shape[0], dst.shape[1])):
        return scatter_rows(dst, rows, values)
    out: mx.array = module.write_rows(dst, rows, values.astype(dst.dtype))
    return out


def copy_rows(put_rows: PutRows, dst: mx.array, rows: mx.array, src: mx.array,
              src_rows: mx.array) -> mx.array:
    """DST with ROWS set to SRC's rows SRC_ROWS, written by PUT_ROWS: the native write gathers
    and writes in one node (same values), any other writer gets ``src[src_rows]``."""
    module = native() if put_rows is write_rows else None
    if (module is None or mx.default_device() != mx.cpu or dst.ndim != 2 or src.ndim != 2
            or src.dtype != dst.dtype or src.shape[1] != dst.shape[1] or rows.ndim != 1
            or src_rows.shape != rows.shape or rows.dtype not in INDEX_DTYPES
            or src_rows.dtype not in INDEX_DTYPES):
        return put_rows(dst, rows, src[src_rows])
    out: mx.array = module.copy_rows(dst, rows, src, src_rows)
    return out


def write_centered(put_rows: PutRows, dst: mx.array, rows: mx.array, values: mx.array,
                   center: mx.array) -> mx.array | None:
    """DST with ROWS set to VALUES (R, C) minus CENTER (K, C) (row r minus center row r % K),
    subtracted and written in one native node when PUT_ROWS is the native write (float32, CPU):
    MLX's subtraction's bits. None otherwise: the caller subtracts with MLX's ops."""
    module = native() if put_rows is write_rows else None
    if (module is None or mx.default_device() != mx.cpu or dst.ndim != 2 or rows.ndim != 1
            or values.ndim != 2 or center.ndim != 2 or rows.dtype not in INDEX_DTYPES
            or values.shape != (rows.shape[0], dst.shape[1]) or center.shape[1] != dst.shape[1]
            or not dst.dtype == values.dtype == center.dtype == mx.float32):
        return None
    out: mx.array = module.write_rows_centered(dst, rows, values, center)
    return out
