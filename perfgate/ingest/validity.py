"""The validity model of one rank's files: what must hold before any figure combines them.

Each check is one KIND of fault, not one case (a new case of a known kind needs no new check):

* **Time values** (:func:`check_time_values`): every kernel start lies inside the capture's own
  span and no duration exceeds it. The span is the profiler's collection window when the rank
  records it (``profiler_info_<N>.json``: ``end_info.collectionTimeEnd`` minus
  ``MonotonicTimeEnd − start_info.start_monotonic``, host wall clock ns; measured on every real
  capture: all device tasks lie inside, 0.7 ms to 0.43 s after its begin), widened by
  :data:`WINDOW_SLACK_NS` for clock conversion; else the table's own start span, where a
  duration may exceed that span by at most :data:`MAX_TASK_NS` (HCCL's default execution
  timeout is 1,836 s) and the starts may spread over at most :data:`MAX_SPAN_NS`. A start whose
  ns value is a whole multiple of 10^12 ns (1,000 s) has visibly lost its precision (a
  spreadsheet's ``1.69512E+15``). Without a recorded window (raw msprof output) the starts must
  also keep each stream's order (:data:`STREAM_OVERLAP_NS`): a stream runs its tasks one after
  another, so when at least half of the consecutive task pairs of the streams start more than
  1 us before the previous task ends, the Start column is not in us (ms written as us) or the rows
  come from different captures. Measured on every fixture table with a Stream ID column: no
  profiler-written table has such a pair; a hand-made unit-test table of msprof-analyze has 4 of
  28. Each refusal names file, row and column (exit 3).
* **Time bases** (:func:`host_clock_mismatch`): the host ``ProfilerStep#N`` windows of the
  timeline and the device tasks of the kernel table must share a clock before a host − device
  figure (pre-launch, tail) is formed: each step's host window and device span must overlap or
  lie within :data:`CLOCK_SLACK_NS` of each other. If not, those host figures are left out and
  a warning names the time base (durations stay valid: P17).
* **Lost device tasks** (:func:`lost_launches`): host launches (flow starts of the
  ``async_npu`` / ``HostToDevice`` categories) whose flow has no end on the device. A step with
  such launches is incomplete (finding ``DEVICE_TASKS_LOST``): refused as a baseline, its counts
  not compared.

Devices (one rank folder, several ``Device_id`` values) are refused in the readers
(:func:`perfgate.ingest.steps.refuse_several_devices`), a step_trace_time.csv naming another
device than the kernel table by :func:`perfgate.ingest.load._refuse_other_device`, and a rank
whose kernel table is byte for byte another rank's by
:func:`perfgate.ingest.discover.refuse_copied_rank_files`. Cost on a 1M-row rank: a few numpy
passes over the start / duration columns (measured in benchmarks/bench_scale.py).
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import numpy as np

from perfgate.errors import InvalidCaptureError

WINDOW_SLACK_NS = 1_000_000_000            # 1 s either side of the recorded collection window
MAX_TASK_NS = 3_600 * 1_000_000_000        # 1 h beyond the start span, without a recorded window
MAX_SPAN_NS = 86_400 * 1_000_000_000       # 1 day of starts, without a recorded window
LOST_PRECISION_NS = 10 ** 12               # a start on a whole 1,000 s: digits went missing
CLOCK_SLACK_NS = 1_000_000_000             # host window vs device span of one step
STREAM_OVERLAP_NS = 1_000                  # a task starting > 1 us before its stream's previous task ends


def collection_window(info_path: Path | None) -> tuple[int, int] | None:
    """``(begin_ns, end_ns)`` host wall clock of the profiler's collection, from
    profiler_info_<N>.json (see module doc); None when the file lacks any of the three fields.
    Raises InvalidCaptureError (naming the file and field) when one is present but not a
    non-negative integer, or the monotonic end is not after its start: a damaged window must not
    silently switch the check off.
    Remembered per file version (path, device, inode, size, modification and change times): a rank's
    reader asks up to three times for the same file (kernel table, step trace, communication)."""
    if info_path is None:
        return None
    try:
        st = Path(info_path).stat()
    except OSError:
        return None
    return _collection_window(str(info_path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@functools.lru_cache(maxsize=256)
def _collection_window(info_path: str, *_version) -> tuple[int, int] | None:
    """:func:`collection_window` of one version of the file (the arguments after the path are
    its stat fields, the cache key only)."""
    try:
        doc = json.loads(Path(info_path).read_bytes())
        fields = {"end_info.collectionTimeEnd": doc["end_info"]["collectionTimeEnd"],
                  "end_info.MonotonicTimeEnd": doc["end_info"]["MonotonicTimeEnd"],
                  "start_info.start_monotonic": doc["start_info"]["start_monotonic"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None   # unreadable (its reader names that) or a field absent: no recorded window
    for name, v in fields.items():   # present but not what the profiler writes: never read as "no window"
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise InvalidCaptureError(f"{name} is {json.dumps(v)[:40]}, not a non-negative integer (ns): the "
                                      f"collection window that every kernel start is checked against cannot be "
                                      f"read", path=Path(info_path),
                                      hint="the file was edited or damaged after export: re-export the profiling data")
    end = fields["end_info.collectionTimeEnd"]
    span = fields["end_info.MonotonicTimeEnd"] - fields["start_info.start_monotonic"]
    if span <= 0:
        raise InvalidCaptureError(f"end_info.MonotonicTimeEnd ({fields['end_info.MonotonicTimeEnd']}) is not after "
                                  f"start_info.start_monotonic ({fields['start_info.start_monotonic']}): the "
                                  f"collection window cannot be read", path=Path(info_path),
                                  hint="the file was edited or damaged after export: re-export the profiling data")
    return end - span, end


def _ms_text(us: float) -> str:
    """A communication.json time (held in us) as the message quotes it, in ms: 3 decimals with
    thousands separators up to 10^12 ms, 6 significant digits beyond (not a 300-digit number),
    and a value whose us figure overflowed a float named as such."""
    ms = us / 1000
    if not np.isfinite(ms):
        return "beyond 1.8e305 ms (its us value overflows a float)"
    return f"{ms:,.3f} ms" if abs(ms) < 1e12 else f"{ms:.6g} ms"


def check_time_values(kernels, window: tuple[int, int] | None, window_source: str = "") -> None:
    """Refuse kernel-table times no profiler writes (see module doc).

    Raises:
        InvalidCaptureError: naming the kernel file, the data row and the column
            (Start Time(us) / Duration(us) or their msprof spellings)."""
    df = kernels.df
    if df.empty:
        return
    start = df["start_ns"].to_numpy()
    dur = df["dur_ns"].to_numpy()
    rows = df["row"].to_numpy()
    c_start = kernels.columns.get("start_us", "Start Time(us)")
    c_dur = kernels.columns.get("dur_us", "Duration(us)")
    path = kernels.path

    def refuse(mask, column, what, hint):
        i = int(np.argmax(mask))
        raise InvalidCaptureError(f"{column} {what(i)}: no profiler writes this value ({int(mask.sum())} row(s))",
                                  path=path, row=int(rows[i]), hint=hint)

    lost = (start % LOST_PRECISION_NS) == 0
    if lost.any():
        refuse(lost, c_start, lambda i: f"is {start[i] / 1000:.0f} us, a whole multiple of 1,000 s: its digits "
                                        f"were lost (a spreadsheet's scientific notation?)",
               "re-export the capture; never round-trip profiler tables through a spreadsheet")
    if window is not None:
        lo, hi = window[0] - WINDOW_SLACK_NS, window[1] + WINDOW_SLACK_NS
        length = window[1] - window[0]
        outside = (start < lo) | (start > hi)
        if outside.any():
            refuse(outside, c_start, lambda i: f"{start[i] / 1000:.3f} us lies outside the collection window "
                                               f"{window[0] / 1000:.0f}-{window[1] / 1000:.0f} us ({window_source})",
                   "the row was altered or comes from another capture")
        long = dur > length + 2 * WINDOW_SLACK_NS
        if long.any():
            refuse(long, c_dur, lambda i: f"{dur[i] / 1000:.3f} us is longer than the whole collection window "
                                          f"({length / 1000:,.0f} us, {window_source})",
                   "a task cannot outlast the profiling run that recorded it")
        return
    _check_stream_order(kernels, start, dur, rows, refuse, c_start)
    s0, s1 = int(start.min()), int(start.max())
    if s1 - s0 > MAX_SPAN_NS:
        med = int(np.median(start))
        far = np.abs(start - med) == np.abs(start - med).max()
        refuse(far, c_start, lambda i: f"{start[i] / 1000:.3f} us lies {abs(start[i] - med) / 1e9 / 86400:,.1f} "
                                       f"days from the table's median start",
               "the row was altered or comes from another capture")
    long = dur > (s1 - s0) + MAX_TASK_NS
    if long.any():
        refuse(long, c_dur, lambda i: f"{dur[i] / 1000:.3f} us ({dur[i] / 1e9 / 86400 / 365.25:,.1f} years) is "
                                      f"longer than the table's own span ({(s1 - s0) / 1000:,.3f} us of starts) "
                                      f"plus 1 h",
               "a corrupted clock or an altered row (HolisticTraceAnalysis#325)")


def _check_stream_order(kernels, start, dur, rows, refuse, c_start) -> None:
    """Refuse a table where at least half of the consecutive same-stream task pairs (at least
    two pairs) overlap by more than :data:`STREAM_OVERLAP_NS`. Rows without a stream (``Stream
    ID`` absent or N/A) are not judged."""
    col = kernels.df["stream_id"]
    codes = np.asarray(col.array.codes) if hasattr(col.array, "codes") else None
    if codes is None:
        return
    keep = codes >= 0
    if int(keep.sum()) < 3:
        return
    idx = np.flatnonzero(keep)
    idx = idx[np.lexsort((start[idx], codes[idx]))]
    c, s0, e0 = codes[idx], start[idx], start[idx] + dur[idx]
    same = c[1:] == c[:-1]
    early = same & (s0[1:] < e0[:-1] - STREAM_OVERLAP_NS)
    pairs, n_early = int(same.sum()), int(early.sum())
    if pairs >= 2 and 2 * n_early >= pairs:
        mask = np.zeros(len(rows), dtype=bool)
        mask[idx[1:][early][0]] = True
        refuse(mask, c_start,
               lambda i: (f"{start[i] / 1000:.3f} us starts before its stream's previous task ends, as in "
                          f"{n_early} of {pairs} consecutive same-stream task pairs (a stream runs its tasks in "
                          f"order)"),
               "the starts are not in us (ms written as us?) or the rows come from different captures")


def _device_step_spans(df) -> dict[str, tuple[int, int]]:
    """Step label (str) -> (first start_ns, last end_ns) of the kernel table's rows of that
    step; rows without a step are left out. One pass per column over the step codes of a
    categorical ``step`` column (a small rank's fixed cost: no group-by frame); any other column
    type by the group-by it replaces."""
    step = df["step"]
    if getattr(step.dtype, "name", None) == "category":
        codes = step.cat.codes.to_numpy()
        keep = codes >= 0
        codes = codes[keep].astype(np.int64)
        n = len(step.cat.categories)
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        last = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        np.minimum.at(first, codes, df["start_ns"].to_numpy(dtype=np.int64)[keep])
        np.maximum.at(last, codes, df["end_ns"].to_numpy(dtype=np.int64)[keep])
        seen = np.bincount(codes, minlength=n) > 0
        cats = step.cat.categories.tolist()
        return {str(cats[i]): (int(first[i]), int(last[i])) for i in np.flatnonzero(seen).tolist()}
    g = df.groupby("step", observed=True).agg(first=("start_ns", "min"), last=("end_ns", "max"))
    return {str(k): (int(a), int(b)) for k, a, b in zip(g.index.tolist(), g["first"].tolist(), g["last"].tolist())}


def host_clock_mismatch(trace, kernels) -> str | None:
    """None when the timeline's host step windows and the kernel table's device tasks share a
    clock (some step's window and device span overlap or lie within CLOCK_SLACK_NS), else a
    sentence naming both time bases. Steps present in only one file are not judged."""
    if trace is None or trace.steps.empty or kernels is None or kernels.df.empty:
        return None
    spans = _device_step_spans(kernels.df)
    worst = None
    ts = trace.steps
    for step, start, end in zip(ts["step"].tolist(), ts["start_ns"].tolist(), ts["end_ns"].tolist()):
        step, start, end = str(step), int(start), int(end)
        if step not in spans:
            continue
        first, last = spans[step]
        gap = max(first - end, start - last, 0)
        if gap <= CLOCK_SLACK_NS:
            return None
        worst = (step, gap, start, first) if worst is None or gap > worst[1] else worst
    if worst is None:
        return None
    step, gap, host0, dev0 = worst
    return (f"{trace.path.name} host step windows and {kernels.path.name} device tasks are on different time "
            f"bases (step {step}: host ProfilerStep starts at {host0 / 1000:.3f} us, its first device task at "
            f"{dev0 / 1000:.3f} us, {gap / 1e9:,.0f} s apart): host − device figures (pre-launch, tail gap, "
            f"host step length) are left out; durations are unaffected")


# Host -> device flows in a torch_npu timeline (SCHEMAS.md §4): ``async_npu`` (torch op -> its
# device task) and ``HostToDevice`` (CANN launch -> Ascend Hardware task). Found by a memchr-speed
# bytes search for the category literal; only each hit's own object (no nested braces) is read,
# in any key order, by three compiled regular expressions (~1 us per flow event; the character
# loop they replaced cost ~10 us, as much as the whole trace scan on a real-shaped trace).
_FLOW_CATS = (b"async_npu", b"HostToDevice")
_FIELD_RE = {k: re.compile(re.escape(k) + rb'[^:]*:[ "]*([^",} ]*)') for k in (b'"ph"', b'"id"', b'"ts"')}


def _field_loop(ev: bytes, key: bytes) -> bytes | None:
    """The value text after ``key`` in one flat event (the first ':' after it, then spaces and
    quotes skipped, up to a quote, comma, brace or space). Reference form of :func:`_field`."""
    i = ev.find(key)
    if i < 0:
        return None
    i = ev.find(b":", i + len(key)) + 1
    while ev[i:i + 1] in (b" ", b'"'):
        i += 1
    j = i
    while j < len(ev) and ev[j:j + 1] not in (b'"', b",", b"}", b" "):
        j += 1
    return ev[i:j]


def _field(ev: bytes, key: bytes) -> bytes | None:
    """Same value as :func:`_field_loop`, by one regular-expression search."""
    m = _FIELD_RE[key].search(ev)    # matches at the key's first occurrence whenever a ':' follows it
    return m.group(1) if m is not None else _field_loop(ev, key)


def flow_event(ev: bytes, cat: bytes, starts: dict, ended: set) -> None:
    """One hit of the category literal ``cat``: ``ev`` is the hit's own object (from the ``{``
    before it to the ``}`` after it). A flow start (``ph: s``) records its ts text under
    (cat, id), a flow end (``ph: f``) marks (cat, id) as reached. The trace scan applies the same
    rule vectorised (:func:`perfgate.ingest.tracebytes._flows`) and calls this function only for
    hits outside the common shape; this per-hit form is the reference."""
    if b'"cat"' in ev:
        ph, fid = _field(ev, b'"ph"'), _field(ev, b'"id"')
        if ph == b"s" and fid is not None:
            starts[(cat, fid)] = _field(ev, b'"ts"') or b"0"
        elif ph == b"f" and fid is not None:
            ended.add((cat, fid))


def _flows_in(data: bytes, starts: dict, ended: set) -> None:
    for cat in _FLOW_CATS:
        lit = b'"' + cat + b'"'
        pos = data.find(lit)
        while pos >= 0:
            lo, hi = data.rfind(b"{", 0, pos), data.find(b"}", pos)
            if lo >= 0 and hi > 0:
                flow_event(data[lo:hi + 1], cat, starts, ended)
            pos = data.find(lit, pos + len(lit))


def lost_launches(trace_path: Path, steps, flows: tuple | None = None) -> dict:
    """Host launches whose flow never reaches the device, per host step.

    Reads ``trace_path`` in 8 MiB blocks and matches every flow start (``ph: s``) / end
    (``ph: f``) of the ``async_npu`` and ``HostToDevice`` categories by (category, id). A start
    without an end is a launch whose device task is missing (the profiler dropped device tasks
    at the head of the RECORD window, Ascend/pytorch#167). Steps come from ``steps`` (the host
    ProfilerStep windows, ns); a start outside every window counts under ``"unassigned"``.

    ``flows``: ``(starts, ended)`` already collected by the trace scan
    (:attr:`perfgate.ingest.trace.TraceSummary.flows`, the byte-level extractor gathers them
    with the same per-hit rule, :func:`flow_event`); the file is then not read again.

    Returns:
        ``{step: {"async_npu": n, "HostToDevice": n, "first_ts_ns": int}}`` for steps with lost
        launches only (empty when every launch reached the device or the file has no flows).
    """
    if flows is not None:
        starts, ended = flows
    else:
        starts, ended = {}, set()
        carry = b""
        with open(trace_path, "rb") as f:
            while True:
                block = f.read(8 << 20)
                data = carry + block
                if block:
                    cut = data.rfind(b"}")
                    data, carry = (data[:cut + 1], data[cut + 1:]) if cut >= 0 else (b"", data)
                _flows_in(data, starts, ended)
                if not block:
                    break
    lost = [(k, ts) for k, ts in starts.items() if k not in ended]
    if not lost:
        return {}
    from decimal import Decimal
    def ns(ts: bytes) -> int:
        try:
            return int(Decimal(ts.decode()) * 1000)
        except ArithmeticError:
            return 0
    ts_ns = np.array([ns(ts) for _, ts in lost], dtype=np.int64)
    if steps is not None and len(steps):
        w = steps.sort_values("start_ns")
        ws, we = w["start_ns"].to_numpy(), w["end_ns"].to_numpy()
        idx = np.searchsorted(ws, ts_ns, side="right") - 1
        ok = (idx >= 0) & (ts_ns < we[np.clip(idx, 0, None)])
        labels = np.where(ok, w["step"].astype(str).to_numpy()[np.clip(idx, 0, None)], "unassigned")
    else:
        labels = np.full(len(lost), "implicit", dtype=object)
    out: dict = {}
    for ((cat, _), _ts), t, lab in zip(lost, ts_ns, labels):
        d = out.setdefault(str(lab), {"async_npu": 0, "HostToDevice": 0, "first_ts_ns": int(t)})
        d[cat.decode()] += 1
        d["first_ts_ns"] = min(d["first_ts_ns"], int(t))
    return out


def check_step_trace_values(step_trace, path: Path, window: tuple[int, int] | None, window_source: str = "") -> None:
    """Every step_trace_time.csv time (Computing, Communication, Free, Stage, ...; us) is at
    most the recorded collection window's length (+ 2 s of clock slack): no step lasts longer
    than the profiling run that recorded it. Nothing is bounded without a recorded window (the
    reader already refuses values above 1e12 us).

    Raises:
        InvalidCaptureError: naming the file, the data row and the column."""
    if window is None or step_trace is None or not len(step_trace):
        return
    from perfgate.ingest.steps import TIME_COLUMNS
    limit_us = (window[1] - window[0] + 2 * WINDOW_SLACK_NS) / 1000.0
    names = {"computing_us": "Computing", "comm_not_overlapped_us": "Communication(Not Overlapped)",
             "overlapped_us": "Overlapped", "comm_us": "Communication", "free_us": "Free", "stage_us": "Stage",
             "bubble_us": "Bubble", "comm_not_overlapped_excl_recv_us": "Communication(Not Overlapped and "
             "Exclude Receive)", "preparing_us": "Preparing"}
    for c in TIME_COLUMNS:
        if c not in step_trace:
            continue
        v = step_trace[c].to_numpy(dtype=float)
        bad = np.nan_to_num(np.abs(v)) > limit_us
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidCaptureError(
                f"{names.get(c, c)} {v[i]:,.3f} us "
                + ("is longer than" if v[i] > 0 else "is negative, and further from 0 than the length of")
                + f" the whole collection window ({limit_us - 2e6:,.0f} us, {window_source}): no profiler writes "
                f"this value", path=path, row=int(step_trace["row"].iloc[i]),
                hint="the row was altered or comes from another capture")


def check_comm_values(comm, window: tuple[int, int] | None, window_source: str = "") -> None:
    """Every communication.json op starts inside the recorded collection window (± 1 s of clock
    slack, as a kernel-table start: ``Start Timestamp(us)`` is the same host wall clock, within
    0.1-0.4 s of the window's ends in every real capture) and its duration (``Elapse`` /
    ``Transit`` / ``Wait`` / ``Synchronization`` / ``Idle Time(ms)``, held in us) is at most the
    window's length (+ 2 s of clock slack): no collective lasts longer than the profiling run that
    recorded it, and a file whose ops started an hour after the run ended is another capture's
    (a level2 communication.json copied into a level1 rank otherwise passes). Nothing is bounded without a recorded
    window.

    Raises:
        InvalidCaptureError: naming communication.json, the step, op and field."""
    if window is None or comm is None or not len(comm.ops):
        return
    limit_us = (window[1] - window[0] + 2 * WINDOW_SLACK_NS) / 1000.0
    ops = comm.ops

    def refuse(mask, what, hint):
        i = int(np.argmax(mask))
        op = ops.iloc[i]
        raise InvalidCaptureError(f"step{op['step']}.{op['kind']}.{op['op']}: Communication Time Info.{what(i)}",
                                  path=comm.path, hint=hint)

    start = ops["start_us"].to_numpy(dtype=float)
    outside = np.isfinite(start) & ((start < (window[0] - WINDOW_SLACK_NS) / 1000.0)
                                    | (start > (window[1] + WINDOW_SLACK_NS) / 1000.0))
    if outside.any():
        refuse(outside, lambda i: f"Start Timestamp(us) {start[i]:.3f} lies outside the collection window "
                                  f"{window[0] / 1000:.0f}-{window[1] / 1000:.0f} us ({window_source}; "
                                  f"{int(outside.sum())} op(s)): not this capture's communication",
               "the file comes from another capture; re-export the profiling data")
    for c, field in (("elapse_us", "Elapse Time(ms)"), ("transit_us", "Transit Time(ms)"),
                     ("wait_us", "Wait Time(ms)"), ("sync_us", "Synchronization Time(ms)"),
                     ("idle_us", "Idle Time(ms)")):
        v = ops[c].to_numpy(dtype=float)
        bad = np.nan_to_num(v) > limit_us
        if bad.any():
            refuse(bad, lambda i: f"{field} {_ms_text(v[i])} is longer than the whole collection window "
                                  f"({(limit_us - 2e6) / 1000:,.3f} ms, {window_source}): no profiler writes this value",
                   "the file was altered or comes from another capture")
