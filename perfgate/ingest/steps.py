"""Reader for step_trace_time.csv (9, 10 or 11 columns; SCHEMAS.md §2).

Output table, one row per (device, step), all times in microseconds (float64; these are
durations, not absolute timestamps, so float64 is exact enough):

``row, step, device_id, computing_us, comm_not_overlapped_us, overlapped_us, comm_us,
free_us, stage_us, bubble_us, comm_not_overlapped_excl_recv_us, preparing_us``

Optional columns absent from older generations (Preparing, Device_id) are NaN / <NA>.
``step`` is the ProfilerStep id as a string, ``"implicit"`` when the cell is empty.
Every time cell must hold a finite number: torch_npu computes each of them
(SCHEMAS.md §2; no real sample has an empty or ``N/A`` one), so ``N/A``, empty, ``nan``,
``inf`` or text in a time column is an invalid capture naming file, row, column and cell.
torch_npu derives every column from the trace's Overlap Analysis events
(``_trace_step_time_parser.py::TraceStepTimeParser``).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import STEP_TRACE_ALIASES, STEP_TRACE_REQUIRED
from perfgate.ingest.csvread import (cell_error, read_arrow_columns, read_header, read_string_table, resolve_columns,
                                     to_float)
from perfgate.ingest.kernels import IMPLICIT_STEP

TIME_COLUMNS = ("computing_us", "comm_not_overlapped_us", "overlapped_us", "comm_us", "free_us",
                "stage_us", "bubble_us", "comm_not_overlapped_excl_recv_us", "preparing_us")
#: the columns torch_npu writes as a difference, which may fall below 0: Overlapped (Communication
#: minus its not-overlapped part, two rounded figures) and Preparing (host step start -> first
#: device task, two clocks). Every other time column is a sum of Overlap Analysis event
#: durations (or the step minus receive time): a negative one is a damaged file.
SIGNED_COLUMNS = ("overlapped_us", "preparing_us")


def read_step_trace(path: Path) -> pd.DataFrame:
    """Read step_trace_time.csv.

    The usual file (every time cell a plain finite number, every Step a decimal integer or
    empty, at most one Device_id) is converted by Arrow compute and framed once, ~1 ms for a
    few steps; anything else is read again by the reference reader
    :func:`read_step_trace_pandas` (pandas, column by column), which gives the same table or
    raises the error naming the cell.

    Raises:
        InvalidCaptureError: empty / header-only / malformed file, a required column
            (Step, Computing, Communication(Not Overlapped), Communication, Free) missing, a
            Step cell that is neither empty nor a decimal integer (``50.0``), or a
            time cell that is not a finite number (``N/A``, empty, ``nan``, ``inf``, text; names
            file, data row, CSV row counting the header as 1, column and cell), or a negative
            one in a column other than :data:`SIGNED_COLUMNS` (Overlapped, Preparing), or the
            same (device, step) on two rows (:func:`refuse_repeated_steps`).
    """
    path = Path(path)
    header = read_header(path)
    cols = resolve_columns(header, STEP_TRACE_ALIASES, STEP_TRACE_REQUIRED, path)
    raw, n = read_arrow_columns(path, cols, len(header), numeric={c for c in TIME_COLUMNS if c in cols})
    out = _step_trace_columns(raw, n, cols)
    if out is None:
        return read_step_trace_pandas(path)
    refuse_repeated_steps(path, out)
    return out


def _step_trace_columns(raw: dict, n: int, cols: dict) -> pd.DataFrame | None:
    """The table of :func:`read_step_trace` from its Arrow string columns, or None when a cell
    needs the reference reader (a null, non-finite, implausible or unparsed time; a Step that
    is not ASCII digits; several devices)."""
    times = {}
    for c in TIME_COLUMNS:
        if c not in cols:
            times[c] = np.full(n, np.nan)
            continue
        arr = raw[c]
        if arr.null_count:
            return None
        try:
            v = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64, copy=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if not np.isfinite(v).all() or (np.abs(v) > 1e12).any() or (c not in SIGNED_COLUMNS and (v < 0).any()):
            return None
        times[c] = v
    if "overlapped_us" not in cols:
        times["overlapped_us"] = times["comm_us"] - times["comm_not_overlapped_us"]
    steps = []
    for v in raw["step"].to_pylist():
        if v is None:
            steps.append(IMPLICIT_STEP)
        elif v.isascii() and v.isdigit():
            steps.append(v.lstrip("0") or "0")
        else:
            return None
    if "device_id" in cols:
        dev = raw["device_id"]
        if len(pc.unique(dev.drop_null())) > 1:
            return None  # several devices: the reference reader refuses them, naming each one's first row
        device = pd.array(dev.to_pylist(), dtype="string")
    else:
        device = pd.NA
    frame = {"row": np.arange(1, n + 1, dtype=np.int64), "step": pd.array(steps, dtype="string"), "device_id": device}
    frame.update((c, times[c]) for c in TIME_COLUMNS)
    return pd.DataFrame(frame)


def read_step_trace_pandas(path: Path) -> pd.DataFrame:
    """The reference reader of step_trace_time.csv (pandas, column by column): what
    :func:`read_step_trace` falls back to for a file its fast path does not take, and the oracle
    of its equivalence tests. Same contract and errors as :func:`read_step_trace`."""
    path = Path(path)
    header = read_header(path)
    cols = resolve_columns(header, STEP_TRACE_ALIASES, STEP_TRACE_REQUIRED, path)
    raw = read_string_table(path, cols, len(header), numeric={c for c in TIME_COLUMNS if c in cols})
    out = pd.DataFrame({"row": raw["row"]})
    step = raw["step"].astype("string").fillna(IMPLICIT_STEP)
    digits = step.str.fullmatch(r"[0-9]+").fillna(False).astype(bool)   # ASCII digits only (\d takes ٥٠)
    bad = ~digits & raw["step"].notna()
    if bad.any():   # "50.0" (a pandas float round trip) was kept as a label no kernel row carries
        i = int(np.argmax(bad.to_numpy()))
        raise cell_error(path, int(raw["row"].iloc[i]), cols["step"], raw["step"].iloc[i],
                         "is not an integer step id (torch_npu writes the N of ProfilerStep#N, or nothing)")
    out["step"] = step.where(~step.str.fullmatch(r"[0-9]+").fillna(False).astype(bool),
                             step.str.lstrip("0").replace("", "0"))
    out["device_id"] = raw["device_id"].astype("string") if "device_id" in cols else pd.NA
    for c in TIME_COLUMNS:
        if c in cols:
            out[c] = to_float(raw[c], path=path, column=cols[c], rows=raw["row"], allow_null=False)
            bad = ~np.isfinite(out[c].fillna(0.0)) | (out[c].abs() > 1e12)
            if bad.any():
                i = int(np.argmax(bad.to_numpy()))
                raise cell_error(path, int(raw["row"].iloc[i]), cols[c], raw[c].iloc[i],
                                 "is not a plausible duration in us")
            if c not in SIGNED_COLUMNS and (out[c] < 0).any():
                i = int(np.argmax((out[c] < 0).to_numpy()))
                raise cell_error(path, int(raw["row"].iloc[i]), cols[c], raw[c].iloc[i],
                                 "is negative: torch_npu writes it as a sum of event durations, never below 0")
        else:
            out[c] = np.nan
    if "overlapped_us" not in cols:
        out["overlapped_us"] = out["comm_us"] - out["comm_not_overlapped_us"]
    refuse_several_devices(path, out["device_id"], out["row"], cols.get("device_id"))
    refuse_repeated_steps(path, out)
    return out


def _distinct_text_pairs(devices: list, steps: list) -> bool:
    """True when every value is a str or missing (None / NaN / pd.NA, the reader's device for a
    file without a Device_id column) and no two rows hold the same (device, step) pair, missing
    as missing: then no key of :func:`refuse_repeated_steps` repeats (the key is the text
    itself). False otherwise, also for any other value type, so that the pandas form decides (a
    small rank's fixed cost: no string Series for the usual case)."""
    def text(v):
        return "" if v is None or v is pd.NA or (type(v) is float and v != v) else v
    pairs = set()
    for d, st in zip(devices, steps):
        d, st = text(d), text(st)
        if type(d) is not str or type(st) is not str or st == "":
            return False
        pairs.add((d, st))
    return len(pairs) == len(steps)


def refuse_repeated_steps(path: Path, table: pd.DataFrame, source: str = "") -> None:
    """torch_npu writes one step_trace_time row per (device, step) (SCHEMAS.md §2): a (device,
    step) on two rows is a repeated line (a concatenated or re-appended export), which would be
    summed into one step and then misdiagnosed as a self-check failure. Several devices each
    with their step are another matter (:func:`refuse_several_devices`). ``table``: the reader's
    output (``row``, ``step``, ``device_id``); ``source``: what the message names before the step
    (``"StepTraceTime "`` for analysis.db).

    Raises:
        InvalidCaptureError: naming the file, the step (and device when the file has a
            Device_id column) and every row holding it."""
    if len(table) < 2 or _distinct_text_pairs(table["device_id"].tolist(), table["step"].tolist()):
        return
    dev = pd.Series(table["device_id"], index=table.index).astype("string").fillna("")
    key = dev + "\x00" + table["step"].astype("string").fillna(IMPLICIT_STEP)
    rep = key.duplicated(keep=False).to_numpy()
    if not rep.any():
        return
    first = key.iloc[int(np.argmax(rep))]
    rows = table["row"].to_numpy()[(key == first).to_numpy()].tolist()
    step = table["step"].to_numpy()[int(np.argmax(rep))]
    device = dev.iloc[int(np.argmax(rep))]
    what = "the step-less row (empty Step)" if step == IMPLICIT_STEP else f"step {step}"
    if device:
        what += f" of device {device}"
    times = "twice" if len(rows) == 2 else f"{len(rows)} times"
    others = int(key[rep].nunique()) - 1
    raise InvalidCaptureError(
        f"{source}{what} appears {times} (rows {', '.join(map(str, rows))}): torch_npu writes one row per device "
        f"and step" + (f" ({others} more step(s) repeated)" if others else ""), path=path, row=int(rows[1]),
        hint="a line was repeated (a concatenated or re-appended export): re-export the profiling data, "
             "or keep one row per step")


def refuse_several_devices(path: Path, device, rows, column: str | None) -> None:
    """One rank folder holding several NPUs (torch_npu single-process multi-device: ``Device_id``
    takes several values; one step_trace_time.csv row per device and step). perfgate's unit is
    one device per rank: summing devices would double step time and every count, and splitting
    them into pseudo-ranks would mix device ids with rank ids (Device_id is never the rank). So
    such a table is refused, naming the devices and each one's first row.

    Raises:
        InvalidCaptureError: ``device`` holds more than one distinct non-null value."""
    if column is None:
        return
    d = pd.Series(device).astype("string")
    ids = [x for x in pd.unique(d.dropna())]
    if len(ids) <= 1:
        return
    rows = np.asarray(rows)
    first = {x: int(rows[int(np.argmax((d == x).fillna(False).to_numpy()))]) for x in ids}
    shown = ", ".join(f"{x} (first row {r})" for x, r in sorted(first.items(), key=lambda kv: kv[1]))
    raise InvalidCaptureError(
        f"holds {len(ids)} devices in one rank folder ({column} {shown}): perfgate fingerprints one device "
        f"per rank and never sums devices", path=path, row=min(first.values()),
        hint="profile one NPU per process (one rank folder per device), or split the export by Device_id")
