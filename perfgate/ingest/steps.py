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

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import STEP_TRACE_ALIASES, STEP_TRACE_REQUIRED
from perfgate.ingest.csvread import cell_error, read_header, read_string_table, resolve_columns, to_float
from perfgate.ingest.kernels import IMPLICIT_STEP

TIME_COLUMNS = ("computing_us", "comm_not_overlapped_us", "overlapped_us", "comm_us", "free_us",
                "stage_us", "bubble_us", "comm_not_overlapped_excl_recv_us", "preparing_us")


def read_step_trace(path: Path) -> pd.DataFrame:
    """Read step_trace_time.csv.

    Raises:
        InvalidCaptureError: empty / header-only / malformed file, a required column
            (Step, Computing, Communication(Not Overlapped), Communication, Free) missing, or a
            time cell that is not a finite number (``N/A``, empty, ``nan``, ``inf``, text; names
            file, data row, CSV row counting the header as 1, column and cell).
    """
    path = Path(path)
    header = read_header(path)
    cols = resolve_columns(header, STEP_TRACE_ALIASES, STEP_TRACE_REQUIRED, path)
    raw = read_string_table(path, cols, len(header), numeric={c for c in TIME_COLUMNS if c in cols})
    out = pd.DataFrame({"row": raw["row"]})
    step = raw["step"].astype("string").fillna(IMPLICIT_STEP)
    out["step"] = step.where(~step.str.fullmatch(r"\d+").fillna(False).astype(bool),
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
        else:
            out[c] = np.nan
    if "overlapped_us" not in cols:
        out["overlapped_us"] = out["comm_us"] - out["comm_not_overlapped_us"]
    refuse_several_devices(path, out["device_id"], out["row"], cols.get("device_id"))
    return out


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
