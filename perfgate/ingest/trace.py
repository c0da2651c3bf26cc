"""Streaming reader for trace_view.json (Chrome trace; SCHEMAS.md §4).

Only what the gate needs is kept: the ``Overlap Analysis`` process's X events (Computing,
Communication, Communication(Not Overlapped), Free), the ``ProfilerStep#N`` windows and the
process names. Events are streamed with ijson (yajl2 C backend), so memory stays bounded by
the kept events, not the file size (these files reach several GB).

Timestamps: ``ts`` is a string (``"1736408883704643.212"``, absolute µs) in torch_npu output
and a number in other writers; both are converted to exact integer nanoseconds through
Decimal (ijson yields Decimal for numbers), never through float64 (P02).
Both roots are accepted: a bare JSON array (NPU) or ``{"traceEvents": [...]}`` (kineto) (P12).
X events with a negative duration are dropped and counted (P13); B/E pairs are not used.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import ijson
import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import OVERLAP_KINDS, OVERLAP_PROCESS

_STEP_PREFIX = "ProfilerStep#"
_BUF = 1 << 16


@dataclass(frozen=True)
class TraceSummary:
    """What perfgate keeps of one trace_view.json.

    ``overlap``: DataFrame ``kind`` (computing | comm | comm_not_overlapped | free),
    ``start_ns``, ``dur_ns``, ``end_ns`` (int64 ns). ``steps``: DataFrame ``step`` (str),
    ``start_ns``, ``end_ns`` from the host ProfilerStep#N events. ``n_events`` counts every
    event in the file; ``dropped_negative`` the X events dropped for a negative duration.
    """
    path: Path
    n_events: int
    processes: dict
    overlap: pd.DataFrame
    steps: pd.DataFrame
    dropped_negative: int

    @property
    def has_overlap(self) -> bool:
        return not self.overlap.empty


def _ns(value, path: Path, what: str) -> int:
    try:
        d = value if isinstance(value, Decimal) else Decimal(str(value).strip())
        return int((d * 1000).to_integral_value(rounding="ROUND_HALF_UP"))
    except (InvalidOperation, ValueError):
        raise InvalidCaptureError(f"{what} is not a number: {value!r}", path=path) from None


def _root_prefix(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError as e:
        raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    if not head:
        raise InvalidCaptureError("file is empty", path=path, byte_offset=0,
                                  hint="the export did not finish; re-export the capture")
    if head[:1] == b"[":
        return "item"
    if head[:1] == b"{":
        return "traceEvents.item"
    raise InvalidCaptureError(
        f"not a Chrome trace: expected a JSON array or an object with 'traceEvents', "
        f"found {head[:20]!r}", path=path, byte_offset=0)


class _CountingReader:
    """File wrapper that remembers how many bytes ijson has pulled (for error offsets)."""

    def __init__(self, f):
        self._f = f
        self.pos = 0
        self.last = 0

    def read(self, n=-1):
        data = self._f.read(n)
        self.last = len(data)
        self.pos += len(data)
        return data


def read_trace(path: Path) -> TraceSummary:
    """Stream a trace_view.json and keep the Overlap Analysis and step events.

    Raises:
        InvalidCaptureError: empty file, a root that is neither an array nor a traceEvents
            object, invalid or truncated JSON (message names the byte offset range where the
            parser stopped), or a file with no events at all.
    """
    path = Path(path)
    prefix = _root_prefix(path)
    size = os.path.getsize(path)
    processes: dict = {}
    cand = []          # (pid, kind, start_ns, dur_ns) for events named like Overlap Analysis ones
    steps = []
    n = 0
    dropped = 0
    try:
        raw_f = open(path, "rb")
    except OSError as e:
        raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    with raw_f as raw:
        reader = _CountingReader(raw)
        try:
            for ev in ijson.items(reader, prefix, buf_size=_BUF):
                n += 1
                if not isinstance(ev, dict):
                    continue
                ph = ev.get("ph")
                name = ev.get("name")
                if ph == "M":
                    if name == "process_name":
                        processes[ev.get("pid")] = (ev.get("args") or {}).get("name")
                    continue
                if ph != "X" or not isinstance(name, str):
                    continue
                kind = OVERLAP_KINDS.get(name)
                is_step = name.startswith(_STEP_PREFIX)
                if kind is None and not is_step:
                    continue
                start = _ns(ev.get("ts"), path, f"event {n} ts")
                dur = _ns(ev.get("dur", 0), path, f"event {n} dur")
                if dur < 0:
                    dropped += 1
                    continue
                if is_step:
                    steps.append((name[len(_STEP_PREFIX):].strip(), start, start + dur))
                else:
                    cand.append((ev.get("pid"), kind, start, dur))
        except (ijson.common.JSONError, UnicodeDecodeError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            end = reader.pos
            if "premature EOF" in str(e):
                msg = f"truncated JSON: the file ends at byte {size} inside an unfinished value"
                off = size
            else:
                msg = (f"invalid JSON ({first}) between bytes {max(0, end - reader.last)} and "
                       f"{end} of {size}")
                off = max(0, end - reader.last)
            hint = ("the trace writer did not finish; re-export the capture" if "premature EOF" in str(e)
                    else "the file is not valid JSON text (wrong file, encoding or a writer bug)")
            raise InvalidCaptureError(msg, path=path, byte_offset=off, hint=hint) from None
    if n == 0:
        raise InvalidCaptureError("trace has no events (an empty event list is not a capture)"
                                  if prefix == "item" or processes == {} else "trace has no events", path=path)
    overlap_pids = {pid for pid, pname in processes.items() if pname == OVERLAP_PROCESS}
    rows = [(k, s, d) for pid, k, s, d in cand if pid in overlap_pids]
    overlap = pd.DataFrame(rows, columns=["kind", "start_ns", "dur_ns"]).astype(
        {"start_ns": "int64", "dur_ns": "int64"})
    overlap["end_ns"] = overlap["start_ns"] + overlap["dur_ns"]
    step_df = pd.DataFrame(steps, columns=["step", "start_ns", "end_ns"]).astype(
        {"start_ns": "int64", "end_ns": "int64"})
    return TraceSummary(path=path, n_events=n, processes=processes, overlap=overlap,
                        steps=step_df, dropped_negative=dropped)
