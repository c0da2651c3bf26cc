"""Reader for communication.json (per rank; SCHEMAS.md §5).

Units in this file are milliseconds (unlike the µs CSVs); everything returned here is µs.
The per-kind ``"Total Op Info"`` entry is an aggregate of the ops beside it and is skipped
when summing, so nothing is counted twice (P08).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.kernels import IMPLICIT_STEP

TOTAL_KEY = "Total Op Info"
_STEP_RE = re.compile(r"^step(\d*)$")


def read_communication(path: Path) -> pd.DataFrame:
    """Read communication.json into one row per communication op.

    Returns:
        DataFrame ``step`` (str), ``kind`` (collective | p2p), ``op`` (op name without the
        ``@group`` hash), ``group`` (hash), ``elapse_us``, ``transit_us``, ``wait_us``
        (float64 µs, converted from the file's ms).

    Raises:
        InvalidCaptureError: empty file, invalid JSON (names the byte offset), or a structure
            other than ``{"step<N>": {"collective"|"p2p": {op: {...}}}}``.
    """
    path = Path(path)
    data = path.read_bytes()
    if not data.strip():
        raise InvalidCaptureError("file is empty", path=path)
    try:
        doc = json.loads(data)
    except json.JSONDecodeError as e:
        raise InvalidCaptureError(f"invalid JSON: {e.msg}", path=path, byte_offset=e.pos) from None
    if not isinstance(doc, dict):
        raise InvalidCaptureError("expected a JSON object keyed by step", path=path)
    rows = []
    for step_key, kinds in doc.items():
        m = _STEP_RE.match(step_key)
        if not m or not isinstance(kinds, dict):
            raise InvalidCaptureError(f"unexpected top-level key {step_key!r} (expected 'step<N>')",
                                      path=path)
        step = m.group(1).lstrip("0") or ("0" if m.group(1) else IMPLICIT_STEP)
        for kind, ops in kinds.items():
            if not isinstance(ops, dict):
                raise InvalidCaptureError(f"{step_key}.{kind} is not an object", path=path)
            for op, info in ops.items():
                if op == TOTAL_KEY:
                    continue
                t = (info or {}).get("Communication Time Info")
                if not isinstance(t, dict) or "Elapse Time(ms)" not in t:
                    raise InvalidCaptureError(
                        f"{step_key}.{kind}.{op} has no 'Communication Time Info.Elapse Time(ms)'",
                        path=path)
                name, _, group = op.partition("@")
                rows.append({"step": step, "kind": kind, "op": name, "group": group,
                             "elapse_us": float(t["Elapse Time(ms)"]) * 1000.0,
                             "transit_us": float(t.get("Transit Time(ms)", 0.0)) * 1000.0,
                             "wait_us": float(t.get("Wait Time(ms)", 0.0)) * 1000.0})
    return pd.DataFrame(rows, columns=["step", "kind", "op", "group", "elapse_us", "transit_us",
                                       "wait_us"])
