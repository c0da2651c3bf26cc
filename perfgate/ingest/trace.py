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
from pathlib import Path

import ijson
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import OVERLAP_KINDS, OVERLAP_PROCESS
from perfgate.ingest.csvread import exact_scaled_arrow
from perfgate.ingest.jsonscan import ScanError, iter_selected

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


def _to_ns(values: list, path: Path, what: str) -> np.ndarray:
    """µs values (strings such as ``"1736408883704643.212"`` or ijson Decimals) -> exact
    int64 ns, converted in one vectorised pass (Arrow) instead of once per event."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    texts = pa.array([None if v is None else (v if isinstance(v, str) else format(v, "f")) for v in values],
                     type=pa.string())
    try:
        out, null = exact_scaled_arrow(pc.utf8_trim_whitespace(texts), 1000, path=path, column=f"event {what}",
                                       allow_null=False)
    except InvalidCaptureError as e:
        raise InvalidCaptureError(f"an event's {what} is not a number: {values[(e.row or 1) - 1]!r}",
                                  path=path) from None
    return out


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


# Bytes every kept event contains literally (see perfgate.ingest.jsonscan): the names of the
# Overlap Analysis events, the ProfilerStep prefix and the process_name metadata.
_NEEDLES = tuple(f'"{k}"'.encode() for k in OVERLAP_KINDS) + (f'"{_STEP_PREFIX}'.encode(), b'"process_name"')


def _root_start(path: Path) -> int:
    """Byte offset of the root ``[`` (after a UTF-8 BOM and whitespace)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    return len(head) - len(head.lstrip(b"\xef\xbb\xbf \t\r\n"))


def _ijson_events(raw, prefix: str, size: int, take) -> int:
    """Every event through ijson (yajl2 C backend), each handed to ``take``; returns the count."""
    reader = _CountingReader(raw)
    n = 0
    try:
        for ev in ijson.items(reader, prefix, buf_size=_BUF):
            n += 1
            take(ev)
    except (ijson.common.JSONError, UnicodeDecodeError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        end = reader.pos
        path = getattr(raw, "name", None)
        if "premature EOF" in str(e):
            raise InvalidCaptureError(f"truncated JSON: the file ends at byte {size} inside an unfinished value",
                                      path=path, byte_offset=size,
                                      hint="the trace writer did not finish; re-export the capture") from None
        off = max(0, end - reader.last)
        raise InvalidCaptureError(f"invalid JSON ({first}) between bytes {off} and {end} of {size}", path=path,
                                  byte_offset=off,
                                  hint="the file is not valid JSON text (wrong file, encoding or a writer bug)") from None
    return n


def read_trace(path: Path, *, full_parse: bool = False) -> TraceSummary:
    """Stream a trace_view.json and keep the Overlap Analysis and step events.

    A bare event array (torch_npu) is read by :func:`perfgate.ingest.jsonscan.iter_selected`:
    a vectorised structural scan in 8 MiB blocks that JSON-parses only the events containing
    one of the kept names (every event's structure is still checked; see that module for
    exactly what is). A ``{"traceEvents": [...]}`` root, or ``full_parse=True``, streams
    every event through ijson (each one parsed). Both keep the same events and give the same
    summary; memory is bounded by the block size and the kept events, not the file size.

    Raises:
        InvalidCaptureError: empty file, a root that is neither an array nor a traceEvents
            object, invalid or truncated JSON (message names the byte offset range where the
            parser stopped), or a file with no events at all.
    """
    path = Path(path)
    prefix = _root_prefix(path)
    size = os.path.getsize(path)
    processes: dict = {}
    c_pid, c_kind, c_ts, c_dur = [], [], [], []   # candidate Overlap Analysis events (raw values)
    s_name, s_ts, s_dur = [], [], []              # ProfilerStep#N windows

    def take(ev) -> None:
        if not isinstance(ev, dict):
            return
        ph = ev.get("ph")
        name = ev.get("name")
        if ph == "M":
            if name == "process_name":
                processes[ev.get("pid")] = (ev.get("args") or {}).get("name")
            return
        if ph != "X" or not isinstance(name, str):
            return
        kind = OVERLAP_KINDS.get(name)
        if kind is not None:
            c_pid.append(ev.get("pid"))
            c_kind.append(kind)
            c_ts.append(ev.get("ts"))
            c_dur.append(ev.get("dur", 0))
        elif name.startswith(_STEP_PREFIX):
            s_name.append(name[len(_STEP_PREFIX):].strip())
            s_ts.append(ev.get("ts"))
            s_dur.append(ev.get("dur", 0))

    n = 0
    try:
        raw_f = open(path, "rb")
    except OSError as e:
        raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    with raw_f as raw:
        if prefix == "item" and not full_parse:
            try:
                for count, events in iter_selected(raw, _root_start(path), size, _NEEDLES):
                    n += count
                    for ev in events:
                        take(ev)
            except ScanError as e:
                if e.truncated:
                    raise InvalidCaptureError(str(e), path=path, byte_offset=size,
                                              hint="the trace writer did not finish; re-export the capture") from None
                lo = max(0, e.offset - 1)
                raise InvalidCaptureError(
                    f"invalid JSON ({e}) between bytes {lo} and {e.offset + 1} of {size}", path=path,
                    byte_offset=e.offset,
                    hint="the file is not valid JSON text (wrong file, encoding or a writer bug)") from None
            except OSError as e:
                raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
        else:
            n = _ijson_events(raw, prefix, size, take)
    if n == 0:
        raise InvalidCaptureError("trace has no events (an empty event list is not a capture)"
                                  if prefix == "item" or processes == {} else "trace has no events", path=path)
    overlap_pids = {pid for pid, pname in processes.items() if pname == OVERLAP_PROCESS}
    keep = np.array([p in overlap_pids for p in c_pid], dtype=bool)
    ts = _to_ns([v for v, k in zip(c_ts, keep) if k], path, "ts")
    dur = _to_ns([v for v, k in zip(c_dur, keep) if k], path, "dur")
    kinds = [v for v, k in zip(c_kind, keep) if k]
    neg = dur < 0
    dropped = int(neg.sum())
    overlap = pd.DataFrame({"kind": pd.Series([k for k, bad in zip(kinds, neg) if not bad], dtype=object),
                            "start_ns": ts[~neg], "dur_ns": dur[~neg]})
    overlap["end_ns"] = overlap["start_ns"] + overlap["dur_ns"]
    sts = _to_ns(s_ts, path, "ts")
    sdur = _to_ns(s_dur, path, "dur")
    ok = sdur >= 0
    dropped += int((~ok).sum())
    step_df = pd.DataFrame({"step": [x for x, good in zip(s_name, ok) if good], "start_ns": sts[ok],
                            "end_ns": sts[ok] + sdur[ok]})
    return TraceSummary(path=path, n_events=n, processes=processes, overlap=overlap,
                        steps=step_df, dropped_negative=dropped)
