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

import json
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
from perfgate.ingest import tracebytes
from perfgate.ingest.jsonscan import ScanError, iter_selected

_STEP_PREFIX = "ProfilerStep#"
_BUF = 1 << 16
_ARROW_MIN_BYTES = 0  # files this small or smaller go straight to the exact scan
BYTE_SCAN = True      # False: skip the byte-level extractor (benchmarks time the Arrow path alone)


@dataclass(frozen=True)
class TraceSummary:
    """What perfgate keeps of one trace_view.json.

    ``overlap``: DataFrame ``kind`` (computing | comm | comm_not_overlapped | free),
    ``start_ns``, ``dur_ns``, ``end_ns`` (int64 ns). ``steps``: DataFrame ``step`` (str),
    ``start_ns``, ``end_ns`` from the host ProfilerStep#N events. ``n_events`` counts every
    event in the file; ``dropped_negative`` the X events dropped for a negative duration.
    ``flows``: ``(starts, ended)`` of the host -> device flows when the byte-level extractor
    read the file (see :func:`perfgate.ingest.validity.lost_launches`), else None.
    """
    path: Path
    n_events: int
    processes: dict
    overlap: pd.DataFrame
    steps: pd.DataFrame
    dropped_negative: int
    flows: tuple | None = None   # (starts, ended) host -> device flows, see validity.lost_launches

    @property
    def has_overlap(self) -> bool:
        return not self.overlap.empty


def _to_ns(values: list, path: Path, what: str) -> np.ndarray:
    """µs values (strings such as ``"1736408883704643.212"`` or ijson Decimals) -> exact
    int64 ns, converted in one vectorised pass (Arrow) instead of once per event."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    # an int is written out as it is: format(int, "f") goes through a float and loses the digits
    # beyond 2**53 (json.loads gives ints for integer ts); Decimals and floats in fixed notation
    texts = pa.array([None if v is None else v if isinstance(v, str) else str(v)
                      if type(v) is int else format(v, "f") for v in values], type=pa.string())
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


class _NoFastPath(Exception):
    """The Arrow line scan cannot read this file exactly (another layout, or invalid JSON):
    the exact scan reads it instead (and names any error with its byte offset)."""


ARROW_CHUNK = 64 << 20
# Separators torch_npu writes between the top-level events of its one-line array; each becomes
# a newline so that Arrow's JSON reader (C++, multi-threaded) sees one event per line.
_SEPS = (b"}, {", b"},{")
_FIELDS = ("name", "ph", "pid", "ts", "dur")


def _schemas():
    # ts: a string in torch_npu output (exact decimal text); dur: a number (read as float64,
    # converted exactly or refused, see _dur_ns) or a string in other writers
    base = [("name", pa.string()), ("ph", pa.string()), ("pid", pa.int64()), ("ts", pa.string())]
    return [pa.schema(base + [("dur", d)]) for d in (pa.float64(), pa.string())]


def _arrow_lines(buf: bytes, processes: dict, meta: list):
    """One block of whole events (``{...}`` separated by ``_SEPS``) -> an Arrow table of
    ``_FIELDS`` (no Python object per event). Raises _NoFastPath when Arrow cannot read it
    (a separator inside a string splits an event into invalid lines, so a wrong split always
    fails here: a proper prefix of a JSON object is never a complete JSON value)."""
    import pyarrow.json as pajson
    for sep in _SEPS:
        buf = buf.replace(sep, b"}\n{")
    if b'"process_name"' in buf:  # the few metadata events: parsed one by one (their args matter)
        i = buf.find(b'"process_name"')
        while i >= 0:
            a = buf.rfind(b"\n", 0, i) + 1
            b = buf.find(b"\n", i)
            b = len(buf) if b < 0 else b
            meta.append(buf[a:b])
            i = buf.find(b'"process_name"', b)
    last = None
    for schema in _schemas():
        try:
            return pajson.read_json(pa.BufferReader(buf), read_options=pajson.ReadOptions(block_size=1 << 24),
                                    parse_options=pajson.ParseOptions(explicit_schema=schema,
                                                                      unexpected_field_behavior="ignore"))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            last = e
    raise _NoFastPath(str(last))


def _arrow_scan(path: Path, start: int, size: int):
    """Read the torch_npu one-line event array with Arrow's JSON reader in ``ARROW_CHUNK``
    blocks cut at event separators (bounded memory). Returns ``(n_events, processes, table)``,
    ``table`` holding the Overlap Analysis candidate X events and the ProfilerStep#N events
    (columns ``_FIELDS``). Raises _NoFastPath for anything it cannot read exactly."""
    processes: dict = {}
    meta: list = []
    keep_names = pa.array(list(OVERLAP_KINDS))
    parts = []
    n = n_meta = 0
    with open(path, "rb") as f:
        f.seek(start)
        head = f.read(1)
        if head != b"[":
            raise _NoFastPath("no array")
        pending = f.read(ARROW_CHUNK).lstrip(b" \t\r\n")
        eof = f.tell() >= size
        if not pending.startswith(b"{"):
            raise _NoFastPath("first item is not an object")
        while True:
            if eof:
                body = pending.rstrip(b" \t\r\n")
                if not body.endswith(b"]"):
                    raise _NoFastPath("array not closed")
                body = body[:-1].rstrip(b" \t\r\n")
                rest = b""
            else:
                cut = max(pending.rfind(sep) for sep in _SEPS)
                if cut < 0:  # one event larger than a chunk
                    more = f.read(ARROW_CHUNK)
                    eof = not more or f.tell() >= size
                    pending += more
                    continue
                body, rest = pending[:cut + 1], pending[cut + 1:].lstrip(b" ,\t\r\n")
            if not body.endswith(b"}"):
                raise _NoFastPath("an item is not an object")
            t = _arrow_lines(body, processes, meta)
            n += t.num_rows
            name = t.column("name")
            n_meta += pc.sum(pc.and_(pc.equal(t.column("ph"), "M"), pc.equal(name, "process_name"))).as_py() or 0
            sel = pc.and_(pc.equal(t.column("ph"), "X"),
                          pc.or_(pc.is_in(name, value_set=keep_names), pc.starts_with(name, _STEP_PREFIX)))
            sel = pc.fill_null(sel, False)
            if pc.any(sel).as_py():
                parts.append(t.filter(sel))
            if eof:
                break
            more = f.read(ARROW_CHUNK)
            eof = not more or f.tell() >= size
            pending = rest + more
    for line in meta:
        try:
            ev = json.loads(line, parse_float=str)
        except ValueError:
            raise _NoFastPath("metadata event") from None
        if isinstance(ev, dict) and ev.get("ph") == "M" and ev.get("name") == "process_name":
            processes[ev.get("pid")] = (ev.get("args") or {}).get("name")
            n_meta -= 1
    if n_meta:  # a process_name spelt with escapes (not found by its bytes): read exactly
        raise _NoFastPath("process_name events")
    if parts and len({p.schema for p in parts}) > 1:  # dur a number in one block, a string in another
        parts = [p.set_column(4, "dur", pc.cast(p.column("dur"), pa.string())) for p in parts]
    table = pa.concat_tables(parts) if parts else None
    return n, processes, table


def _summary_from_arrow(path: Path, n: int, processes: dict, table) -> TraceSummary:
    """The TraceSummary of the kept events in ``table`` (same values as the exact scan)."""
    overlap_pids = [pid for pid, pname in processes.items() if pname == OVERLAP_PROCESS]
    empty = pa.table({f: pa.array([], type=pa.string()) for f in _FIELDS}) if table is None else table
    name = empty.column("name")
    is_kind = pc.is_in(name, value_set=pa.array(list(OVERLAP_KINDS)))
    ov = empty.filter(pc.and_(is_kind, pc.is_in(pc.cast(empty.column("pid"), pa.int64()),
                                                 value_set=pa.array(overlap_pids, type=pa.int64()))))
    st = empty.filter(pc.and_(pc.invert(is_kind), pc.starts_with(name, _STEP_PREFIX)))
    for t in (ov, st):
        if t.num_rows and t.column("ts").null_count:
            raise _NoFastPath("an event without ts")  # the exact scan names it
    ts, _ = exact_scaled_arrow(pc.utf8_trim_whitespace(ov.column("ts")), 1000, path=path,
                               column="event ts", allow_null=False) if ov.num_rows else (np.zeros(0, np.int64), 0)
    dur = _dur_ns(ov, path)
    kinds_in = list(OVERLAP_KINDS)
    code = pc.index_in(ov.column("name"), value_set=pa.array(kinds_in)).to_numpy(zero_copy_only=False) \
        if ov.num_rows else np.zeros(0, dtype=np.int64)
    kind_of = np.array([OVERLAP_KINDS[k] for k in kinds_in], dtype=object)
    neg = dur < 0
    dropped = int(neg.sum())
    overlap = pd.DataFrame({"kind": pd.Series(kind_of[code[~neg]], dtype=object),
                            "start_ns": ts[~neg], "dur_ns": dur[~neg]})
    overlap["end_ns"] = overlap["start_ns"] + overlap["dur_ns"]
    sts, _ = exact_scaled_arrow(pc.utf8_trim_whitespace(st.column("ts")), 1000, path=path,
                                column="event ts", allow_null=False) if st.num_rows else (np.zeros(0, np.int64), 0)
    sdur = _dur_ns(st, path)
    ok = sdur >= 0
    dropped += int((~ok).sum())
    sname = pc.utf8_trim_whitespace(pc.utf8_slice_codeunits(st.column("name"), len(_STEP_PREFIX))) \
        if st.num_rows else pa.array([], pa.string())
    step_df = pd.DataFrame({"step": [x for x, good in zip(sname.to_pylist(), ok) if good],
                            "start_ns": sts[ok], "end_ns": sts[ok] + sdur[ok]})
    return TraceSummary(path=path, n_events=n, processes=processes, overlap=overlap,
                        steps=step_df, dropped_negative=dropped)


def _dur_ns(t, path: Path) -> np.ndarray:
    """Event durations (µs) -> int64 ns, identical to the exact decimal conversion
    (round half up at 1 ns). A float64 ``dur`` is the correctly rounded value of its JSON
    text, so ``floor(dur·1000 + 0.5)`` equals the exact result unless ``dur·1000`` lies within
    float error of a half nanosecond; such a file is refused (_NoFastPath) and read exactly."""
    if not t.num_rows:
        return np.zeros(0, dtype=np.int64)
    col = t.column("dur")
    if pa.types.is_floating(col.type):
        v = pc.fill_null(col, 0.0).to_numpy() * 1000.0
        if not np.isfinite(v).all() or np.abs(v).max(initial=0.0) >= 2.0 ** 52:
            raise _NoFastPath("dur out of the exact float range")
        frac = v - np.floor(v)
        if (np.abs(frac - 0.5) <= np.maximum(1e-6, np.abs(v) * 1e-12)).any():
            raise _NoFastPath("a dur on a half nanosecond")
        return np.floor(v + 0.5).astype(np.int64)
    out, _ = exact_scaled_arrow(pc.utf8_trim_whitespace(pc.fill_null(col, "0")), 1000, path=path,
                                column="event dur", allow_null=False)
    return out


class _Kept:
    """The events a TraceSummary keeps, collected one parsed event at a time (every event of
    the exact scan, the few the byte extractor parses one by one): ``process_name`` metadata
    (pid -> name), X events named like an Overlap Analysis track (raw pid, name, ts, dur: the
    pid is filtered once every process name is known) and ``ProfilerStep#N`` windows."""

    def __init__(self) -> None:
        self.processes: dict = {}
        self.c_idx, self.c_pid, self.c_name, self.c_ts, self.c_dur = [], [], [], [], []
        self.s_name, self.s_ts, self.s_dur = [], [], []

    def take(self, ev, idx: int = -1) -> None:
        if not isinstance(ev, dict):
            return
        ph, name = ev.get("ph"), ev.get("name")
        if ph == "M":
            if name == "process_name":
                self.processes[ev.get("pid")] = (ev.get("args") or {}).get("name")
            return
        if ph != "X" or not isinstance(name, str):
            return
        if name in OVERLAP_KINDS:
            self.c_idx.append(idx)
            self.c_pid.append(ev.get("pid"))
            self.c_name.append(name)
            self.c_ts.append(ev.get("ts"))
            self.c_dur.append(ev.get("dur", 0))
        elif name.startswith(_STEP_PREFIX):
            self.s_name.append(name[len(_STEP_PREFIX):].strip())
            self.s_ts.append(ev.get("ts"))
            self.s_dur.append(ev.get("dur", 0))

    def overlap_pids(self) -> set:
        return {pid for pid, pname in self.processes.items() if pname == OVERLAP_PROCESS}

    def steps(self, path: Path, to_ns=None) -> tuple[pd.DataFrame, int]:
        """``(steps frame [step, start_ns, end_ns], windows dropped for a negative dur)``;
        InvalidCaptureError (from _to_ns) names a ts / dur that is not an exact number.
        ``to_ns``: the converter (default :func:`_to_ns`; the byte scan passes _texts_ns)."""
        to_ns = to_ns or _to_ns
        sts = to_ns(self.s_ts, path, "ts")
        sdur = to_ns(self.s_dur, path, "dur")
        ok = sdur >= 0
        return (pd.DataFrame({"step": [x for x, good in zip(self.s_name, ok) if good], "start_ns": sts[ok],
                              "end_ns": sts[ok] + sdur[ok]}), int((~ok).sum()))


def _texts_ns(values: list, path: Path, what: str) -> np.ndarray:
    """:func:`_to_ns` for the values json.loads gave the byte scan (``parse_float=str``: number
    texts, strings, ints), converted by :func:`perfgate.ingest.tracebytes._numbers` (numpy, the
    plain-decimal grammar ``-?d+(.d+)?`` and rounding of exact_scaled_arrow, no Arrow call: the
    few thousand ProfilerStep windows of a long capture took ~0.1 s through Arrow in a fresh
    process). Anything else (None, a float, a spaced or exponent text, beyond int64) goes to
    _to_ns itself, which gives the same values or names the same error."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    texts = [v if type(v) is str else str(v) if type(v) is int else None for v in values]
    if None in texts:
        return _to_ns(values, path, what)
    try:
        raw = ",".join(texts).encode("ascii")
    except UnicodeEncodeError:
        return _to_ns(values, path, what)
    lens = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    hi = np.cumsum(lens + 1) - 1
    buf = raw + bytes(tracebytes._PAD)
    b = np.frombuffer(buf, dtype=np.uint8)
    w64 = np.ndarray((len(b) - 7,), "<u8", buffer=buf, offset=0, strides=(1,))
    ok, _, ns = tracebytes._numbers(b, w64, hi - lens, hi, json_number=False)
    return ns if ok.all() else _to_ns(values, path, what)


def _bytes_summary(path: Path, start: int, size: int, prescan=None) -> TraceSummary:
    """The TraceSummary from :func:`perfgate.ingest.tracebytes.scan` (byte-level extractor):
    the fast Overlap-named X events as arrays, the few events it parsed (metadata, steps,
    unusual layouts) through the same rules as the exact scan. Raises _NoFastPath when the
    extractor refuses the file or a value is not exactly convertible (the caller falls back).
    ``prescan``: a callable giving that scan's result made elsewhere (see :func:`read_trace`)."""
    try:
        ex = prescan() if prescan is not None else tracebytes.scan(path, start, size)
    except tracebytes.NoFastPath as e:
        raise _NoFastPath(str(e)) from None
    if ex.n == 0:
        raise _NoFastPath("no events")
    kept = _Kept()
    for idx, ev in ex.parsed:
        kept.take(ev, idx)
    processes = kept.processes
    overlap_pids = kept.overlap_pids()
    if any(type(p) is not int or not -2 ** 63 <= p < 2 ** 63 for p in overlap_pids):
        raise _NoFastPath("an Overlap Analysis pid that is not an int64 integer")
    keep_slow = np.array([p in overlap_pids for p in kept.c_pid], dtype=bool)
    try:
        sl_ts = _texts_ns([v for v, k in zip(kept.c_ts, keep_slow) if k], path, "ts")
        sl_dur = _texts_ns([v for v, k in zip(kept.c_dur, keep_slow) if k], path, "dur")
        step_df, dropped_steps = kept.steps(path, to_ns=_texts_ns)
    except InvalidCaptureError:
        raise _NoFastPath("a value the exact scan names") from None
    kind_of = np.array([OVERLAP_KINDS[k] for k in tracebytes.KIND_NAMES], dtype=object)
    codes = {k: i for i, k in enumerate(tracebytes.KIND_NAMES)}
    keep_fast = np.isin(ex.pid, np.array(sorted(overlap_pids), dtype=np.int64))
    c_kind = np.array([codes[nm] for nm in kept.c_name], dtype=np.int64)
    all_fast = bool(keep_fast.all()) and not keep_slow.any()   # the usual case: no copy, no sort
    idx = ex.idx if all_fast else np.concatenate([ex.idx[keep_fast], np.array(kept.c_idx, dtype=np.int64)[keep_slow]])
    kind = ex.kind if all_fast else np.concatenate([ex.kind[keep_fast], c_kind[keep_slow]])
    ts = ex.ts_ns if all_fast else np.concatenate([ex.ts_ns[keep_fast], sl_ts])
    dur = ex.dur_ns if all_fast else np.concatenate([ex.dur_ns[keep_fast], sl_dur])
    order = tracebytes.file_order(idx)
    if order is not None:
        kind, ts, dur = kind[order], ts[order], dur[order]
    neg = dur < 0
    dropped = int(neg.sum())
    if dropped:
        kind, ts, dur = kind[~neg], ts[~neg], dur[~neg]
    # the three int64 columns in one block (no stacking copy, no column added later): scan's own
    # ts / dur rows where they are taken as they are, else a new one (bytearray-backed, no huge-page hint)
    n, cols = len(ts), None
    base = ts.base if ts is ex.ts_ns and dur is ex.dur_ns else None
    if isinstance(base, np.ndarray) and base.dtype == np.int64 and base.shape == (3 * n,) and base.flags.writeable \
            and ts.strides == dur.strides == (8,) and ts.ctypes.data == base.ctypes.data \
            and dur.ctypes.data == base.ctypes.data + 8 * n:
        cols = base.reshape(3, n)
    if cols is None:
        cols = np.frombuffer(bytearray(24 * n), dtype=np.int64).reshape(3, n)
        cols[0], cols[1] = ts, dur
    np.add(ts, dur, out=cols[2])
    overlap = pd.DataFrame(cols.T, columns=["start_ns", "dur_ns", "end_ns"], copy=False)
    overlap.insert(0, "kind", pd.Series(kind_of[kind], dtype=object))
    return TraceSummary(path=path, n_events=ex.n, processes=processes, overlap=overlap,
                        steps=step_df, dropped_negative=dropped + dropped_steps, flows=ex.flows)


def read_trace(path: Path, *, full_parse: bool = False, prescan=None) -> TraceSummary:
    """Stream a trace_view.json and keep the Overlap Analysis and step events.

    A bare event array is read first by the byte-level extractor
    (:mod:`perfgate.ingest.tracebytes`: numpy over 4 MiB blocks, every event's structure
    checked, the kept events' bytes verified against a template and their ts / dur converted
    to exact ns from their digits; no Python object per event; it also gathers the host ->
    device flows for :func:`perfgate.ingest.validity.lost_launches` in the same pass, as
    ``flows``). Whatever it cannot read exactly goes on to the paths below, unchanged.

    A bare event array in torch_npu's one-line layout (events separated by ``}, {`` or
    ``},{``) is then read by Arrow's JSON reader (C++, one event per line after the separators
    become newlines, 64 MiB blocks, only name/ph/pid/ts/dur kept: no Python object per event;
    every event's syntax is checked by Arrow). Anything it cannot read exactly (another layout,
    a pid or ts of another type, a dur on a half nanosecond, invalid JSON) falls back to the
    exact scan below, which gives the same summary or names the error.

    Otherwise a bare event array is read by :func:`perfgate.ingest.jsonscan.iter_selected`:
    a vectorised structural scan in 8 MiB blocks that JSON-parses only the events containing
    one of the kept names (every event's structure is still checked; see that module for
    exactly what is). A ``{"traceEvents": [...]}`` root, or ``full_parse=True``, streams
    every event through ijson (each one parsed). Both keep the same events and give the same
    summary; memory is bounded by the block size and the kept events, not the file size.

    ``prescan``: optional callable returning :func:`perfgate.ingest.tracebytes.scan_file` of
    ``path`` as made elsewhere (another process, started earlier), or raising what it raised;
    called only where the byte-level extractor would run, so the result and errors are those
    of a read without it.

    Raises:
        InvalidCaptureError: empty file, a root that is neither an array nor a traceEvents
            object, invalid or truncated JSON (message names the byte offset range where the
            parser stopped), or a file with no events at all.
    """
    path = Path(path)
    prefix = _root_prefix(path)
    size = os.path.getsize(path)
    kept = _Kept()
    take = kept.take

    n = 0
    try:
        raw_f = open(path, "rb")
    except OSError as e:
        raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    if prefix == "item" and not full_parse and size > _ARROW_MIN_BYTES and BYTE_SCAN:
        try:
            return _bytes_summary(path, _root_start(path), size, prescan)
        except _NoFastPath:
            pass  # the Arrow line scan below, then the exact scan
        except OSError as e:
            raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
    if prefix == "item" and not full_parse and size > _ARROW_MIN_BYTES:
        try:
            raw_f.close()
            fast_n, procs, table = _arrow_scan(path, _root_start(path), size)
            if fast_n:
                return _summary_from_arrow(path, fast_n, procs, table)
        except (_NoFastPath, InvalidCaptureError):
            pass  # the exact scan below reads it, or names the error with its byte offset
        except OSError as e:
            raise InvalidCaptureError(f"cannot read file: {e.strerror}", path=path) from None
        raw_f = open(path, "rb")
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
    processes = kept.processes
    if n == 0:
        raise InvalidCaptureError("trace has no events (an empty event list is not a capture)"
                                  if prefix == "item" or processes == {} else "trace has no events", path=path)
    overlap_pids = kept.overlap_pids()
    keep = np.array([p in overlap_pids for p in kept.c_pid], dtype=bool)
    ts = _to_ns([v for v, k in zip(kept.c_ts, keep) if k], path, "ts")
    dur = _to_ns([v for v, k in zip(kept.c_dur, keep) if k], path, "dur")
    kinds = [OVERLAP_KINDS[v] for v, k in zip(kept.c_name, keep) if k]
    neg = dur < 0
    dropped = int(neg.sum())
    overlap = pd.DataFrame({"kind": pd.Series([k for k, bad in zip(kinds, neg) if not bad], dtype=object),
                            "start_ns": ts[~neg], "dur_ns": dur[~neg]})
    overlap["end_ns"] = overlap["start_ns"] + overlap["dur_ns"]
    step_df, dropped_steps = kept.steps(path)
    return TraceSummary(path=path, n_events=n, processes=processes, overlap=overlap,
                        steps=step_df, dropped_negative=dropped + dropped_steps)
