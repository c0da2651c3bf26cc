"""The timeline scan run in a process of its own, beside the kernel table
(:func:`perfgate.ingest.load.load_rank` ``trace_pool``).

This module and what it imports need numpy alone (no pandas, no pyarrow), so the process starts
in ~0.3 s. It runs :func:`perfgate.ingest.tracebytes.scan` and sends back the
:class:`~perfgate.ingest.tracebytes.Extract` with its per-event arrays in the narrowest exact
integer types (:func:`compact`): on a trace of 2M kept events, 44 MB to pickle instead of
80 MB, which the scanning process and this one each hold twice while it is sent. The receiver
restores the int64 arrays (:func:`expand`), so what follows sees exactly what a scan in this
process would have given.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from perfgate.ingest.tracebytes import Extract, NoFastPath, scan


def scan_file(path) -> Extract:
    """:func:`perfgate.ingest.tracebytes.scan` of a file whose root is a bare event array
    (after a UTF-8 BOM and whitespace), compacted (:func:`compact`).

    Raises:
        NoFastPath: the root is not an array, or what ``scan`` refuses; OSError.
    """
    with open(path, "rb") as f:
        head = f.read(4096)
    body = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if body[:1] != b"[":
        raise NoFastPath("not a bare event array")
    return compact(scan(path, len(head) - len(body), os.path.getsize(path)))


_ARRAYS = ("idx", "pid", "kind", "ts_ns", "dur_ns")


def _narrowest(a: np.ndarray) -> np.ndarray:
    """``a`` (int64) in the narrowest signed integer type holding every value exactly."""
    if not len(a):
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return a.astype(t)
    return a


def compact(ex: Extract) -> Extract:
    """``ex`` with ``idx``, ``pid`` and ``kind`` in their narrowest exact integer types
    (``ts_ns`` / ``dur_ns`` stay int64: nanosecond timestamps need it)."""
    return dataclasses.replace(ex, **{k: _narrowest(getattr(ex, k)) for k in ("idx", "pid", "kind")})


def expand(ex: Extract) -> Extract:
    """The inverse of :func:`compact`: every per-event array int64 again (values unchanged)."""
    return dataclasses.replace(ex, **{k: getattr(ex, k).astype(np.int64, copy=False) for k in _ARRAYS})
