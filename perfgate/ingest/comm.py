"""Reader for communication.json (per rank; SCHEMAS.md §5).

Units in this file are milliseconds and MB (unlike the µs CSVs); times returned here are µs.
The per-kind ``"Total Op Info"`` entry is an aggregate of the ops beside it and is skipped
when summing, so nothing is counted twice (P08).

Every numeric field read here (``Start Timestamp(us)``, ``Elapse`` / ``Transit`` / ``Wait`` /
``Synchronization`` / ``Idle Time(ms)``, a link's ``Transit Size(MB)`` / ``Transit Time(ms)``)
must be a finite, non-negative JSON number. The file has no not-applicable marker (SCHEMAS.md
§5; every value in the real samples is a number), so ``null``, a string such as ``"N/A"``,
and the ``NaN`` / ``Infinity`` tokens Python's json module accepts are an InvalidCaptureError
naming the file, the op (``step<N>.<kind>.<op>@<group>``), the field and its JSON text. A
field that is absent reads as 0 (``Start Timestamp(us)``: NaN), as before.
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


def _num(info: dict, key: str, absent: float = 0.0, where: str = "") -> float:
    """``info[key]`` as a float (``absent`` when the key is missing).

    Raises:
        ValueError: the value is not a finite, non-negative JSON number (``null``, a string,
            a bool, ``NaN``, ``Infinity``, negative); the message names ``where + key`` and
            the value as JSON text.
    """
    if key not in info:
        return absent
    v = info[key]
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}{key} is {json.dumps(v)}, not a number")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{where}{key} is {json.dumps(v)}, not a finite non-negative number")
    return float(v)


def _ms(info: dict, key: str, where: str = "Communication Time Info.") -> float:
    """ms -> us; a value that is not a finite, non-negative number is an error (:func:`_num`)."""
    return _num(info, key, where=where) * 1000.0


def read_communication(path: Path) -> CommData:
    """Read communication.json.

    Raises:
        InvalidCaptureError: empty file, invalid JSON (names the byte offset), a structure
            other than ``{"step<N>": {"collective"|"p2p": {op: {...}}}}``, or a numeric field
            that is not a finite non-negative number (names op, field and value).
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
                    rows.append({"step": step, "kind": kind, "op": name, "group": group,
                                 "start_us": _num(t, "Start Timestamp(us)", float("nan"),
                                                  "Communication Time Info."),
                                 "elapse_us": _ms(t, "Elapse Time(ms)"),
                                 "transit_us": _ms(t, "Transit Time(ms)"), "wait_us": _ms(t, "Wait Time(ms)"),
                                 "sync_us": _ms(t, "Synchronization Time(ms)"),
                                 "idle_us": _ms(t, "Idle Time(ms)")})
                    for link, li in ((info.get("Communication Bandwidth Info") or {}).items()):
                        if isinstance(li, dict):
                            where = f"Communication Bandwidth Info.{link}."
                            links.append({"step": step, "kind": kind, "op": name, "link": link,
                                          "size_mb": _num(li, "Transit Size(MB)", where=where),
                                          "time_us": _ms(li, "Transit Time(ms)", where)})
                except (TypeError, ValueError) as e:
                    raise InvalidCaptureError(f"{step_key}.{kind}.{op}: {e}", path=path) from None
    return CommData(path=path, ops=pd.DataFrame(rows, columns=OP_COLUMNS),
                    links=pd.DataFrame(links, columns=LINK_COLUMNS))
