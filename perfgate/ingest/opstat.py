"""Reader for op_statistic.csv (torch_npu) / op_statistic_<ts>.csv (raw msprof): SCHEMAS.md §3.

The export aggregates the kernel tasks it wrote to kernel_details.csv / op_summary by
(``OP Type``, ``Core Type``): ``Count`` tasks, ``Total Time(us)`` their summed Duration (µs,
3 decimals), ``Min`` / ``Avg`` / ``Max`` / ``Ratio(%)`` (not read). Communication tasks
(``hcom_*``, core HCCL / COMMUNICATION) are not in it (every real capture: SOURCES.md 1a-1e, 3).
It is a witness of the kernel table's rows, not of their times' meaning: the self-check
``op_statistic_vs_kernels`` (:func:`perfgate.metrics.selfcheck.op_statistic_checks`) uses it to
prove that no compute row was lost or added after the export.

Output table, one row per (op_type, core_type): ``row`` (1-based data row), ``op_type``,
``core_type`` (str), ``count`` (int64), ``total_us`` (float64, µs).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import OP_STATISTIC_ALIASES, OP_STATISTIC_REQUIRED
from perfgate.ingest.csvread import cell_error, read_header, read_string_table, resolve_columns, to_float


def read_op_statistic(path: Path) -> pd.DataFrame:
    """Read op_statistic.csv (columns above).

    Raises:
        InvalidCaptureError: empty / header-only / malformed file, a required column (OP Type,
            Core Type, Count, Total Time(us)) missing, a Count that is not a non-negative
            integer, a Total Time that is not a finite non-negative number, an empty OP Type /
            Core Type, the same (OP Type, Core Type) on two rows, or more than one Device_id
            (names file, row, column and cell)."""
    path = Path(path)
    header = read_header(path)
    cols = resolve_columns(header, OP_STATISTIC_ALIASES, OP_STATISTIC_REQUIRED, path)
    raw = read_string_table(path, cols, len(header), numeric={"count", "total_us"})
    for c in ("op_type", "core_type"):
        empty = raw[c].isna() | (raw[c].astype("string").str.strip() == "")
        if empty.any():
            i = int(np.argmax(empty.to_numpy()))
            raise cell_error(path, int(raw["row"].iloc[i]), cols[c], raw[c].iloc[i], "is empty")
    count = raw["count"].astype("string").str.strip()
    bad = ~count.fillna("").str.fullmatch(r"[0-9]+")
    if bad.any():
        i = int(np.argmax(bad.to_numpy()))
        raise cell_error(path, int(raw["row"].iloc[i]), cols["count"], raw["count"].iloc[i],
                         "is not a non-negative integer")
    total = to_float(raw["total_us"], path=path, column=cols["total_us"], rows=raw["row"], allow_null=False)
    neg = total < 0
    if neg.any():
        i = int(np.argmax(neg.to_numpy()))
        raise cell_error(path, int(raw["row"].iloc[i]), cols["total_us"], raw["total_us"].iloc[i], "is negative")
    if "device_id" in cols:
        devs = sorted(set(raw["device_id"].dropna().astype(str).str.strip()))
        if len(devs) > 1:
            raise InvalidCaptureError(f"holds {len(devs)} devices ({', '.join(devs[:4])}): one rank folder is one "
                                      f"device", path=path, hint="split the capture per device")
    out = pd.DataFrame({"row": raw["row"].to_numpy(), "op_type": raw["op_type"].astype(str).str.strip().to_numpy(),
                        "core_type": raw["core_type"].astype(str).str.strip().to_numpy(),
                        "count": count.astype("int64").to_numpy(), "total_us": total.to_numpy()})
    dup = out.duplicated(["op_type", "core_type"])
    if dup.any():
        i = int(np.argmax(dup.to_numpy()))
        raise InvalidCaptureError(f"({out['op_type'].iloc[i]}, {out['core_type'].iloc[i]}) appears twice",
                                  path=path, row=int(out["row"].iloc[i]),
                                  hint="op_statistic holds one row per (OP Type, Core Type); re-export the run")
    return out
