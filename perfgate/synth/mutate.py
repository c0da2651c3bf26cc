"""Consistent mutations of a capture on disk (real or synthetic), for tests and benchmarks.

Every mutation edits one rank's ``ASCEND_PROFILER_OUTPUT/`` in place; work on a copy.
``add_calls`` keeps all files mutually consistent (the self-checks still pass), the others
break exactly one thing on purpose.
"""
from __future__ import annotations

import csv
import io
import json
import re
from decimal import Decimal
from pathlib import Path

from perfgate.ingest.aliases import KERNEL_ALIASES, OVERLAP_PROCESS

DEFAULT_SUFFIX = re.compile(r"(?:_+\d+)+$")


def _read_csv(path: Path):
    text = path.read_text(encoding="utf-8-sig")
    crlf = "\r\n" in text[:4096]
    rows = list(csv.reader(io.StringIO(text, newline="")))
    return rows[0], rows[1:], crlf


def _write_csv(path: Path, header, rows, crlf):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n" if crlf else "\n")
    w.writerow(header)
    w.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8", newline="")


def _col(header, canon):
    for name in KERNEL_ALIASES[canon]:
        if name in header:
            return header.index(name)
    raise KeyError(canon)


def _ns(cell: str) -> int:
    return int(Decimal(cell.strip()) * 1000)


def _us_text(ns: int, like: str) -> str:
    text = f"{ns // 1000}.{ns % 1000:03d}"
    return text + ("\t" if like.endswith("\t") else "")


def add_calls(output_dir, family: str, factor: int = 2, *, suffix: re.Pattern = DEFAULT_SUFFIX) -> list:
    """Multiply the calls of kernel ``family`` by ``factor`` on this rank, placing each new
    task inside the rank's idle (Free) time of the same step, and update trace_view.json
    (a Computing event added, the Free event shortened) and step_trace_time.csv (Computing
    up, Free down by the same amount). A rank without trace_view.json (the LLM capture
    msinsight/test/st/level2) takes the idle gaps between its kernel rows' merged intervals.
    Returns the ``(start_ns, dur_ns)`` of the new tasks.

    Raises:
        ValueError: the family has no rows, or there is not enough idle time to place a task.
    """
    out = Path(output_dir)
    kd = out / "kernel_details.csv"
    header, rows, crlf = _read_csv(kd)
    ci_name, ci_start, ci_dur = _col(header, "name"), _col(header, "start_us"), _col(header, "dur_us")
    ci_step = _col(header, "step_id") if any(h in header for h in KERNEL_ALIASES["step_id"]) else None
    originals = [r for r in rows if suffix.sub("", r[ci_name]) == family]
    if not originals:
        raise ValueError(f"no rows of family {family!r} in {kd}")
    trace_path = out / "trace_view.json"
    if not trace_path.is_file():   # no timeline (a text export without it): gaps from the kernel rows
        added, per_step, new_rows = _place_in_row_gaps(rows, originals, factor, family, ci_start, ci_dur, ci_step)
        rows.extend(new_rows)
        _write_csv(kd, header, rows, crlf)
        count_in_op_statistic(out, header, new_rows)
        _shift_step_trace(out, per_step)
        return added
    events = json.loads(trace_path.read_text(encoding="utf-8"))
    ov_pid = next(e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
                  and (e.get("args") or {}).get("name") == OVERLAP_PROCESS)
    comp_tid = next((e["tid"] for e in events if e.get("pid") == ov_pid and e.get("ph") == "X"
                     and e.get("name") == "Computing"), 0)
    steps = [(e["name"].split("#", 1)[1], _ns(str(e["ts"])), _ns(str(e["ts"])) + int(Decimal(str(e["dur"])) * 1000))
             for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    free = sorted((i for i, e in enumerate(events) if e.get("pid") == ov_pid and e.get("ph") == "X"
                   and e.get("name") == "Free"), key=lambda i: _ns(str(events[i]["ts"])))
    added = []
    per_step: dict[str, int] = {}
    new_rows = []
    for r in originals:
        dur = _ns(r[ci_dur])
        step = r[ci_step].strip() if ci_step is not None else None
        win = next(((s, e) for lab, s, e in steps if lab == step), None)
        for _ in range(factor - 1):
            slot = None
            for i in free:
                fs = _ns(str(events[i]["ts"]))
                fd = int(round(Decimal(str(events[i]["dur"])) * 1000))
                if fd > dur + 2 and (win is None or win[0] <= fs < win[1]):
                    slot = (i, fs, fd)
                    break
            if slot is None:
                raise ValueError(f"no idle gap longer than {dur / 1000} us left for {family!r}")
            i, fs, fd = slot
            start = fs + 1
            events[i]["ts"] = f"{(start + dur) // 1000}.{(start + dur) % 1000:03d}"
            events[i]["dur"] = (fd - dur - 1) / 1000
            events.append({"name": "Free", "pid": ov_pid, "tid": events[i].get("tid", 3),
                           "ts": f"{fs // 1000}.{fs % 1000:03d}", "dur": 0.001, "ph": "X"})
            events.append({"name": "Computing", "pid": ov_pid, "tid": comp_tid,
                           "ts": f"{start // 1000}.{start % 1000:03d}", "dur": dur / 1000, "ph": "X"})
            nr = list(r)
            nr[ci_start] = _us_text(start, r[ci_start])
            new_rows.append(nr)
            added.append((start, dur))
            key = step if step is not None else ""
            per_step[key] = per_step.get(key, 0) + dur
    rows.extend(new_rows)
    _write_csv(kd, header, rows, crlf)
    count_in_op_statistic(out, header, new_rows)
    trace_path.write_text(json.dumps(events), encoding="utf-8")
    _shift_step_trace(out, per_step)
    return added


def count_in_op_statistic(out: Path, header, new_rows, sign: int = 1) -> None:
    """Add (``sign`` 1) or take away (-1) ``new_rows`` (kernel_details rows under ``header``) in
    the op_statistic.csv of folder ``out`` when it holds one: their (Type, Accelerator Core)
    pair's Count and Total Time(us) move, Avg follows, Ratio(%) is recomputed over the file
    (SCHEMAS.md §3), as the export would have written them, so ``op_statistic_vs_kernels``
    still passes."""
    path = out / "op_statistic.csv"
    if not path.is_file() or not new_rows:
        return
    sh, srows, crlf = _read_csv(path)
    ti, ci = _col(header, "op_type"), _col(header, "core_type")
    di = _col(header, "dur_us")
    at = {(r[sh.index("OP Type")], r[sh.index("Core Type")]): r for r in srows}
    total_i, count_i = sh.index("Total Time(us)"), sh.index("Count")
    for nr in new_rows:
        row = at.get((nr[ti].strip(), nr[ci].strip()))
        if row is None:
            continue   # a pair the file does not count (communication): nothing to add
        row[count_i] = str(int(row[count_i]) + sign)
        row[total_i] = str(Decimal(row[total_i].strip()) + sign * Decimal(nr[di].strip()))
        if "Avg Time(us)" in sh and int(row[count_i]):
            row[sh.index("Avg Time(us)")] = f"{Decimal(row[total_i]) / int(row[count_i]):.3f}"
    if "Ratio(%)" in sh:
        whole = sum(Decimal(r[total_i]) for r in srows) or Decimal(1)
        for r in srows:
            r[sh.index("Ratio(%)")] = f"{Decimal(r[total_i]) * 100 / whole:.3f}"
    _write_csv(path, sh, srows, crlf)


def _shift_step_trace(out: Path, per_step: dict) -> None:
    """step_trace_time.csv (when present): Computing up and Free down by each step's added ns."""
    st = out / "step_trace_time.csv"
    if st.is_file():
        h, srows, scrlf = _read_csv(st)
        ic, ifree, istep = h.index("Computing"), h.index("Free"), h.index("Step")
        for sr in srows:
            d = per_step.get(sr[istep].strip(), 0) if per_step.keys() != {""} else sum(per_step.values())
            sr[ic] = repr(float(sr[ic]) + d / 1000)
            sr[ifree] = repr(float(sr[ifree]) - d / 1000)
        _write_csv(st, h, srows, scrlf)


def _place_in_row_gaps(rows, originals, factor, family, ci_start, ci_dur, ci_step):
    """For a rank without trace_view.json: place each new task of ``family`` in an idle gap of
    its step, the gaps being those between the merged intervals of the step's kernel rows (all
    streams). Returns ``(added, per_step ns, new rows)``.

    Raises:
        ValueError: no gap longer than the task left in its step."""
    by_step: dict = {}
    for r in rows:
        key = r[ci_step].strip() if ci_step is not None else ""
        s0 = _ns(r[ci_start])
        by_step.setdefault(key, []).append((s0, s0 + _ns(r[ci_dur])))
    gaps: dict = {}
    for key, iv in by_step.items():
        iv.sort()
        g, end = [], iv[0][1]
        for s0, e0 in iv[1:]:
            if s0 > end:
                g.append([end, s0])
            end = max(end, e0)
        gaps[key] = g
    added, per_step, new_rows = [], {}, []
    for r in originals:
        dur = _ns(r[ci_dur])
        key = r[ci_step].strip() if ci_step is not None else ""
        for _ in range(factor - 1):
            gap = next((g for g in gaps.get(key, ()) if g[1] - g[0] > dur + 2), None)
            if gap is None:
                raise ValueError(f"no idle gap longer than {dur / 1000} us left for {family!r}"
                                 + (f" in step {key}" if key else ""))
            start = gap[0] + 1
            gap[0] = start + dur
            nr = list(r)
            nr[ci_start] = _us_text(start, r[ci_start])
            new_rows.append(nr)
            added.append((start, dur))
            per_step[key] = per_step.get(key, 0) + dur
    return added, per_step, new_rows


#: torch_npu kernel_details.csv header -> raw msprof op_summary_*.csv header (SCHEMAS.md: the same
#: rows under two headers; msprof has no Step Id column)
MSPROF_HEADER = {"Name": "Op Name", "Type": "OP Type", "Accelerator Core": "Task Type",
                 "Start Time(us)": "Task Start Time(us)", "Duration(us)": "Task Duration(us)",
                 "Wait Time(us)": "Task Wait Time(us)", "Block Dim": "Block Num", "Mix Block Dim": "Mix Block Num"}


def to_op_summary(kernel_details, dst) -> Path:
    """Write ``kernel_details`` (a torch_npu kernel_details.csv) as raw msprof's op_summary file
    ``dst``: the same rows, headers renamed by :data:`MSPROF_HEADER`, the Step Id column
    dropped, cells and line ends unchanged. Returns ``dst``."""
    header, rows, crlf = _read_csv(Path(kernel_details))
    keep = [i for i, h in enumerate(header) if h != "Step Id"]
    dst = Path(dst)
    _write_csv(dst, [MSPROF_HEADER.get(header[i], header[i]) for i in keep], [[r[i] for i in keep] for r in rows], crlf)
    return dst


def set_duration(output_dir, row: int, dur_us: float) -> None:
    """Set ``Duration(us)`` of data row ``row`` (1-based) in kernel_details.csv only."""
    kd = Path(output_dir) / "kernel_details.csv"
    header, rows, crlf = _read_csv(kd)
    rows[row - 1][_col(header, "dur_us")] = f"{dur_us:.3f}"
    _write_csv(kd, header, rows, crlf)


def duplicate_row(output_dir, row: int) -> None:
    """Append an exact copy of data row ``row`` (same start, same stream) to kernel_details.csv."""
    kd = Path(output_dir) / "kernel_details.csv"
    header, rows, crlf = _read_csv(kd)
    rows.append(list(rows[row - 1]))
    _write_csv(kd, header, rows, crlf)


def truncate(path, keep_fraction: float = 0.5) -> int:
    """Cut a file to a fraction of its bytes (an unfinished export); returns the new size."""
    p = Path(path)
    data = p.read_bytes()
    n = int(len(data) * keep_fraction)
    p.write_bytes(data[:n])
    return n


def header_only(path) -> None:
    """Keep only the header line of a CSV file."""
    p = Path(path)
    first = p.read_bytes().split(b"\n", 1)[0] + b"\n"
    p.write_bytes(first)
