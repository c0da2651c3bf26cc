"""Reader for communication.json (per rank; SCHEMAS.md §5).

Units in this file are milliseconds and MB (unlike the µs CSVs); times returned here are µs.
The per-kind ``"Total Op Info"`` entry is an aggregate of the ops beside it and is skipped
when summing, so nothing is counted twice (P08).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.kernels import IMPLICIT_STEP

TOTAL_KEY = "Total Op Info"
_STEP_RE = re.compile(r"^step(\d*)$")
OP_COLUMNS = ["step", "kind", "op", "group", "start_us", "elapse_us", "transit_us", "wait_us",
              "sync_us", "idle_us"]
LINK_COLUMNS = ["step", "kind", "op", "link", "size_mb", "time_us"]


@dataclass(frozen=True)
class CommData:
    """communication.json as two tables.

    ``ops``: one row per communication op — ``step`` (str), ``kind`` (collective | p2p),
    ``op`` (name without the ``@group`` hash), ``group``, ``start_us`` (absolute, float, NaN
    when absent), ``elapse_us``, ``transit_us``, ``wait_us``, ``sync_us``, ``idle_us``.
    ``links``: one row per (op, link type) — ``link`` (HCCS, RDMA, PCIE, SDMA, SIO, ...),
    ``size_mb`` (Transit Size, MB), ``time_us`` (Transit Time).
    """
    path: Path
    ops: pd.DataFrame
    links: pd.DataFrame


def _ms(info: dict, key: str) -> float:
    """ms -> us; a value that is not a finite, non-negative number is an error."""
    v = info.get(key, 0.0)
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{key} is {v!r}, not a number")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{key} is {v!r}, not a finite non-negative time")
    return float(v) * 1000.0


def read_communication(path: Path) -> CommData:
    """Read communication.json.

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
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        pos = getattr(e, "pos", None) if isinstance(e, json.JSONDecodeError) else getattr(e, "start", None)
        raise InvalidCaptureError(f"invalid JSON: {getattr(e, 'msg', e)}", path=path, byte_offset=pos) from None
    if not isinstance(doc, dict):
        raise InvalidCaptureError("expected a JSON object keyed by step", path=path)
    rows, links = [], []
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
                t = (info or {}).get("Communication Time Info") if isinstance(info, dict) else None
                if not isinstance(t, dict) or "Elapse Time(ms)" not in t:
                    raise InvalidCaptureError(
                        f"{step_key}.{kind}.{op} has no 'Communication Time Info.Elapse Time(ms)'",
                        path=path)
                name, _, group = op.partition("@")
                try:
                    start = t.get("Start Timestamp(us)")
                    rows.append({"step": step, "kind": kind, "op": name, "group": group,
                                 "start_us": float(start) if start is not None else float("nan"),
                                 "elapse_us": _ms(t, "Elapse Time(ms)"),
                                 "transit_us": _ms(t, "Transit Time(ms)"), "wait_us": _ms(t, "Wait Time(ms)"),
                                 "sync_us": _ms(t, "Synchronization Time(ms)"),
                                 "idle_us": _ms(t, "Idle Time(ms)")})
                    for link, li in ((info.get("Communication Bandwidth Info") or {}).items()):
                        if isinstance(li, dict):
                            links.append({"step": step, "kind": kind, "op": name, "link": link,
                                          "size_mb": float(li.get("Transit Size(MB)", 0.0) or 0.0),
                                          "time_us": _ms(li, "Transit Time(ms)")})
                except (TypeError, ValueError) as e:
                    raise InvalidCaptureError(f"{step_key}.{kind}.{op}: {e}", path=path) from None
    return CommData(path=path, ops=pd.DataFrame(rows, columns=OP_COLUMNS),
                    links=pd.DataFrame(links, columns=LINK_COLUMNS))
