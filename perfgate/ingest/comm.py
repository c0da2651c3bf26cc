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

import gc
import json
import math
import re
from itertools import chain, compress, repeat
from operator import attrgetter, eq, itemgetter, methodcaller, not_
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import msgspec
import pandas as pd
import pyarrow as pa

from perfgate import jsonout
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.jsonscan import load_error
from perfgate.ingest.kernels import IMPLICIT_STEP, refuse_control_characters

TOTAL_KEY = "Total Op Info"
_STEP_RE = re.compile(r"^step([0-9]*)$")   # ASCII digits only: \d also takes "step٥٠"
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
    try:
        f = float(v)
    except OverflowError:   # an integer beyond a float (1 followed by 400 zeros)
        f = math.inf
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{where}{key} is {_shown(v)}, not a finite non-negative number")
    return f


def _shown(v) -> str:
    """A JSON number as the message quotes it: its JSON text, an integer of more than 20 digits
    shortened to its first digits and its length."""
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10 ** 20:
        digits = str(abs(v))
        return f"{'-' if v < 0 else ''}{digits[:6]}... ({len(digits)} digits)"
    return json.dumps(v)


def _ms(info: dict, key: str, where: str = "Communication Time Info.") -> float:
    """ms -> us; a value that is not a finite, non-negative number is an error (:func:`_num`)."""
    return _num(info, key, where=where) * 1000.0


def read_communication(path: Path) -> CommData:
    """Read communication.json.

    Decoded by msgspec into typed records holding only the fields read here (:func:`_fast`):
    the parts perfgate does not read (each link's ``Size Distribution``, bandwidths, ratios) are
    skipped without a Python object, and the fields are gathered column by column with C-level
    passes. 0.15 s for a 30 MB file of 26,180 ops over 5,236 steps, where orjson's parse into
    dicts plus the gather took 0.33 s (a replicated level1 rank, inside a fingerprint). Any file the fast path does not take
    cleanly (msgspec refuses its JSON or its structure, or a value the checks refuse) is read
    again by the reference reader :func:`read_communication_loop` (Python's json module, one dict
    per op), which gives the same tables or raises the error naming the op, field and value.

    Returns:
        :class:`CommData` (times in us, sizes in MB; see there).

    Raises:
        InvalidCaptureError: empty file, invalid JSON (names the byte offset), a file cut short
            ("truncated JSON: the file ends at byte N inside an unfinished value",
            :func:`perfgate.ingest.jsonscan.ends_unfinished`), a structure
            other than ``{"step<N>": {"collective"|"p2p": {op: {...}}}}``, or a numeric field
            that is not a finite non-negative number (names op, field and value), or a key
            naming a kind, op or link that holds a control character (NUL, ESC, DEL, ...;
            names the key: :func:`_refuse_control_names`).
    """
    path = Path(path)
    data = path.read_bytes()
    if data.strip():
        ops, links = _fast(data)
        if ops is not None:
            return _refuse_control_names(CommData(path=path, ops=ops, links=links))
    return read_communication_loop(path, data)


def _refuse_control_names(comm: CommData) -> CommData:
    """``comm``, when no key naming a kind, an op (``<op>@<group>``) or a link holds a control
    character (:func:`perfgate.ingest.kernels.refuse_control_characters`, the kernel tables'
    check): such a name would reach the report and the JUnit XML.

    Raises:
        InvalidCaptureError: naming the file and the key (``step<N>.<kind>.'<op>@<group>'``),
            the control character shown escaped."""
    def error(df, i, what):
        r = df.iloc[i]
        step = "step" + ("" if r["step"] == IMPLICIT_STEP else str(r["step"]))
        where = (f"{step}.{r['kind']!r}" if what == "kind" else
                 f"{step}.{r['kind']}.{r['op'] + '@' + r['group']!r}" if what == "op" else
                 f"{step}.{r['kind']}.{r['op']}.{_BANDWIDTH_INFO}.{r['link']!r}")
        return InvalidCaptureError(f"{where}: the {what} name holds a control character (no profiler "
                                   f"writes one)", path=comm.path)

    for df, col, what in ((comm.ops, "kind", "kind"), (comm.ops, "op", "op"), (comm.ops, "group", "op"),
                          (comm.links, "link", "link")):
        if len(df):
            refuse_control_characters(comm.path, df[col], col, lambda i, v, df=df, what=what: error(df, i, what))
    return comm


_TIME_INFO, _BANDWIDTH_INFO = "Communication Time Info", "Communication Bandwidth Info"


class _Link(msgspec.Struct, gc=False):
    """One link of an op's ``Communication Bandwidth Info`` (the fields read; others skipped)."""
    size_mb: float = msgspec.field(name="Transit Size(MB)", default=0.0)
    time_ms: float = msgspec.field(name="Transit Time(ms)", default=0.0)


class _TimeInfo(msgspec.Struct, gc=False):
    """An op's ``Communication Time Info`` (the fields read; ``Elapse Time(ms)`` required, as by
    the reference reader; a missing start time reads as NaN, the others as 0)."""
    elapse_ms: float = msgspec.field(name="Elapse Time(ms)")
    start_us: float = msgspec.field(name="Start Timestamp(us)", default=float("nan"))
    transit_ms: float = msgspec.field(name="Transit Time(ms)", default=0.0)
    wait_ms: float = msgspec.field(name="Wait Time(ms)", default=0.0)
    sync_ms: float = msgspec.field(name="Synchronization Time(ms)", default=0.0)
    idle_ms: float = msgspec.field(name="Idle Time(ms)", default=0.0)


class _Op(msgspec.Struct, gc=False):
    """One op's entry (``Total Op Info`` has the same form)."""
    time: _TimeInfo = msgspec.field(name=_TIME_INFO)
    links: dict[str, _Link] | None = msgspec.field(name=_BANDWIDTH_INFO, default=None)


_DECODER = msgspec.json.Decoder(dict[str, dict[str, dict[str, _Op]]])
_OP_NUMBERS = attrgetter("start_us", "elapse_ms", "transit_ms", "wait_ms", "sync_ms", "idle_ms")
_LINK_NUMBERS = attrgetter("size_mb", "time_ms")


def _fast(data: bytes):
    """``(ops, links)`` DataFrames of a communication.json's bytes, or ``(None, None)`` when
    anything differs from what the reference reader (:func:`read_communication_loop`) accepts
    without error: msgspec refuses the JSON (invalid, cut short, ``NaN`` tokens) or its structure
    (a value of another type, a missing ``Elapse Time(ms)``, a link that is not an object), a key
    is not ``step<N>``, or a number is not finite and non-negative. The reference reader then
    reads the file again and names the fault. The cyclic garbage collector is paused during the
    decode (the dicts it makes would trigger collections that find nothing)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            doc = _DECODER.decode(data)
        except (msgspec.DecodeError, RecursionError):   # ValidationError included; nested ~1,000 deep
            return None, None
        return _gather(doc)
    finally:
        if enabled:
            gc.enable()


def _numbers(records: list, getter, n_fields: int, start_col: int | None = None) -> np.ndarray | None:
    """``getter``'s fields of every record as a float64 array (rows x fields), or None when a
    value is not finite and non-negative. NaN is allowed in column ``start_col`` only: there it
    can only be the default of an absent start time (JSON has no NaN literal)."""
    if not records:
        return np.zeros((0, n_fields))
    arr = np.fromiter(chain.from_iterable(map(getter, records)), dtype=np.float64,
                      count=len(records) * n_fields).reshape(len(records), n_fields)
    bad = ~np.isfinite(arr)
    if start_col is not None:
        bad[:, start_col] &= ~np.isnan(arr[:, start_col])
    return None if bad.any() or (arr < 0).any() else arr


def _step_labels(keys: list) -> np.ndarray | None:
    """The step label of every top-level key (``step<N>`` -> N without leading zeros, ``step0...``
    -> ``"0"``, ``step`` -> implicit) as an object array, or None when a key is not ``step<N>``.
    C-level passes over the keys (regex match, group, lstrip), the two special cases by mask."""
    matches = list(map(_STEP_RE.match, keys))
    if None in matches:
        return None
    digits = list(map(methodcaller("group", 1), matches))
    stripped = list(map(str.lstrip, digits, repeat("0")))
    out = np.empty(len(keys), dtype=object)
    out[:] = stripped
    empty = np.fromiter(map(not_, stripped), dtype=bool, count=len(keys))
    had = np.fromiter(map(bool, digits), dtype=bool, count=len(keys))
    out[empty & had] = "0"
    out[empty & ~had] = IMPLICIT_STEP
    return out


def _gather(doc: dict):
    """``(ops, links)`` DataFrames from a decoded communication.json (:data:`_DECODER`: step ->
    kind -> op -> :class:`_Op`), gathered column by column (C-level passes: no Python call per
    step, kind, op or link), or ``(None, None)`` when a top-level key is not ``step<N>`` or a
    number is not finite and non-negative."""
    kinds_list = list(doc.values())
    step_lab = _step_labels(list(doc))
    if step_lab is None:
        return None, None
    kind_names = np.empty(sum(map(len, kinds_list)), dtype=object)
    kind_names[:] = list(chain.from_iterable(kinds_list))
    ops_list = list(chain.from_iterable(map(dict.values, kinds_list)))
    nops = list(map(len, ops_list))
    keys = list(chain.from_iterable(ops_list))
    infos = list(chain.from_iterable(map(dict.values, ops_list)))
    step_of = np.repeat(np.repeat(step_lab, list(map(len, kinds_list))), nops)
    kind_of = np.repeat(kind_names, nops)
    total = np.fromiter(map(eq, keys, repeat(TOTAL_KEY)), dtype=bool, count=len(keys))
    if total.any():   # the per-kind aggregate is not an op
        keep = ~total
        keys, infos = list(compress(keys, keep.tolist())), list(compress(infos, keep.tolist()))
        step_of, kind_of = step_of[keep], kind_of[keep]
    if not keys:
        return pd.DataFrame([], columns=OP_COLUMNS), pd.DataFrame([], columns=LINK_COLUMNS)
    op_num = _numbers(list(map(attrgetter("time"), infos)), _OP_NUMBERS, 6, start_col=0)
    if op_num is None:
        return None, None
    bws = list(map(attrgetter("links"), infos))
    if None in bws:
        bws = [b or {} for b in bws]
    l_idx = np.repeat(np.arange(len(bws), dtype=np.int64), list(map(len, bws)))
    link_num = _numbers(list(chain.from_iterable(map(dict.values, bws))), _LINK_NUMBERS, 2)
    if link_num is None:
        return None, None
    parts = list(map(str.partition, keys, repeat("@")))
    # string columns through Arrow (pandas' own list -> str conversion checks every element),
    # handed to the frame as arrays: a dict of Series is aligned on its index (~0.4 ms a frame)
    text = {"step": pa.array(step_of.tolist(), pa.string()), "kind": pa.array(kind_of.tolist(), pa.string()),
            "op": pa.array(list(map(itemgetter(0), parts)), pa.string()),
            "group": pa.array(list(map(itemgetter(2), parts)), pa.string())}
    cols = {c: text[c].to_pandas().array for c in text}
    cols["start_us"] = op_num[:, 0].copy()
    with np.errstate(over="ignore"):   # ms beyond 1.8e305: inf us, which the value checks refuse by name
        for j, c in enumerate(("elapse_us", "transit_us", "wait_us", "sync_us", "idle_us"), start=1):
            cols[c] = op_num[:, j] * 1000.0
    ops = pd.DataFrame({c: cols[c] for c in OP_COLUMNS})
    if not len(l_idx):
        return ops, pd.DataFrame([], columns=LINK_COLUMNS)
    take = pa.array(l_idx, pa.int64())
    with np.errstate(over="ignore"):
        link_us = link_num[:, 1] * 1000.0
    links = pd.DataFrame({"step": text["step"].take(take).to_pandas().array,
                          "kind": text["kind"].take(take).to_pandas().array,
                          "op": text["op"].take(take).to_pandas().array,
                          "link": pa.array(list(chain.from_iterable(bws)), pa.string()).to_pandas().array,
                          "size_mb": link_num[:, 0].copy(), "time_us": link_us})   # LINK_COLUMNS' order
    return ops, links


def read_communication_loop(path: Path, data: bytes | None = None) -> CommData:
    """The reference reader (Python's json module, one dict per op and per link): what
    :func:`read_communication` falls back to for a file its fast path does not take, and the
    oracle of its equivalence tests. Same contract and errors as :func:`read_communication`."""
    path = Path(path)
    if data is None:
        data = path.read_bytes()
    if not data.strip():
        raise InvalidCaptureError("file is empty", path=path)
    try:
        doc = jsonout.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise load_error(path, data, e) from None   # truncated (as trace_view.json says it) / invalid
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
                    bw = info.get(_BANDWIDTH_INFO)
                    if bw is not None and not isinstance(bw, dict):
                        raise ValueError(f"{_BANDWIDTH_INFO} is {json.dumps(bw)[:40]}, not an object")
                    for link, li in (bw or {}).items():
                        where = f"{_BANDWIDTH_INFO}.{link}."
                        if not isinstance(li, dict):
                            raise ValueError(f"{where[:-1]} is {json.dumps(li)[:40]}, not an object")
                        links.append({"step": step, "kind": kind, "op": name, "link": link,
                                      "size_mb": _num(li, "Transit Size(MB)", where=where),
                                      "time_us": _ms(li, "Transit Time(ms)", where)})
                except (TypeError, ValueError) as e:
                    raise InvalidCaptureError(f"{step_key}.{kind}.{op}: {e}", path=path) from None
    try:   # a "\\ud800"-style escape: json.loads makes a lone surrogate, no text
        comm = CommData(path=path, ops=pd.DataFrame(rows, columns=OP_COLUMNS),
                        links=pd.DataFrame(links, columns=LINK_COLUMNS))
    except UnicodeEncodeError:   # pandas 3's string columns refuse it
        raise _lone_surrogate_error(rows, links, path) from None
    if _holds_lone_surrogate(comm):   # pandas 2's object columns keep it
        raise _lone_surrogate_error(rows, links, path)
    return _refuse_control_names(comm)


def _holds_lone_surrogate(comm: CommData) -> bool:
    """Whether a name (kind, op, group, link; each distinct value once) is not text: a lone
    surrogate read from a ``"\\ud800"`` escape. pandas 3's string columns refuse one when built;
    pandas 2's object columns (the only pandas on Python 3.10) keep it."""
    return any(_not_text(v) for df, cols in ((comm.ops, ("kind", "op", "group")), (comm.links, ("link",)))
               for c in cols if len(df) for v in pd.unique(df[c]))


def _lone_surrogate_error(rows, links, path) -> InvalidCaptureError:
    """The error naming the first op or link whose name holds a lone surrogate."""
    def shown(v) -> str:
        return str(v).encode("utf-8", "backslashreplace").decode()
    bad = next((r for r in rows + links if any(_not_text(v) for v in r.values())), {})
    step = "step" + ("" if bad.get("step") == IMPLICIT_STEP else shown(bad.get("step", "")))
    if "link" in bad:   # a link row: its op as written (without the group), then the link
        where = f"{step}.{shown(bad['kind'])}.{shown(bad['op'])}.{_BANDWIDTH_INFO}.{shown(bad['link'])}"
    else:
        where = f"{step}.{shown(bad.get('kind', ''))}.{shown(bad.get('op', '')) + '@' + shown(bad.get('group', ''))}"
    return InvalidCaptureError(f"{where}: a name holds an escaped lone surrogate (such as \\ud800), "
                               f"which is not text", path=path,
                               hint="the file was edited or damaged after export: re-export the profiling data")


def _not_text(v) -> bool:
    """A str that cannot be encoded as UTF-8 (a lone surrogate from a JSON escape)."""
    if not isinstance(v, str):
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
