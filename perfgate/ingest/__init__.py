"""Ingest: profiler files -> typed per-rank tables. The only layer that knows raw headers.

Entry point: :func:`load_capture` (:mod:`perfgate.ingest.load`). The names below are loaded on
first use, so that importing one reader (e.g. :mod:`perfgate.ingest.tracebytes` in the process
that scans a timeline beside the tables) does not import pandas and pyarrow with the package.
"""
from __future__ import annotations

from perfgate.ingest.discover import RankLocation, discover  # light (no pandas); binds the function

__all__ = ["Capture", "RankCapture", "load_capture", "load_rank", "as_capture_error", "AUTO_TRACE_BYTES",
           "TRACE_AHEAD_BYTES", "trace_worth_reading_ahead", "discover", "RankLocation"]

# name -> module defining it, imported when the name is first asked for (PEP 562)
_LAZY = {
    **{n: "perfgate.ingest.load" for n in ("Capture", "RankCapture", "load_capture", "load_rank",
                                            "as_capture_error", "AUTO_TRACE_BYTES", "TRACE_AHEAD_BYTES",
                                            "trace_worth_reading_ahead", "memory_budget", "memory_needed",
                                            "PARTIAL_TABLES")},
    "KernelTable": "perfgate.ingest.kernels", "IMPLICIT_STEP": "perfgate.ingest.kernels",
    "TraceSummary": "perfgate.ingest.trace",
}


def __getattr__(name):
    where = _LAZY.get(name)
    if where is None:  # a submodule (`from perfgate.ingest import validity`) is imported by Python itself
        raise AttributeError(f"module 'perfgate.ingest' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
