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

import re
from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import OP_STATISTIC_ALIASES, OP_STATISTIC_REQUIRED
from perfgate.ingest.csvread import cell_error, read_arrow_columns, read_header, resolve_columns, to_float


def read_op_statistic(path: Path) -> pd.DataFrame:
    """Read op_statistic.csv (columns above).

    An empty or ``N/A`` OP Type / Core Type is the text ``N/A`` (the kernel table's rows without
    one are counted under it); a pair on several rows (a generation keyed by more columns) is
    summed.

    Raises:
        InvalidCaptureError: empty / header-only / malformed file, a required column (OP Type,
            Core Type, Count, Total Time(us)) missing (:func:`known_layout` tells it first), a
            Count that is not a non-negative integer, a Total Time that is not a finite
            non-negative number, or more than one Device_id (names file, row, column and cell)."""
    path = Path(path)
    header = read_header(path)
    cols = resolve_columns(header, OP_STATISTIC_ALIASES, OP_STATISTIC_REQUIRED, path)
    arrays, n = read_arrow_columns(path, cols, len(header), numeric={"count", "total_us"})
    out = _plain_table(arrays, n)
    if out is not None:
        return out
    return _general_table(path, cols, arrays, n)


_DIGITS = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def _plain_table(arrays: dict, n: int) -> pd.DataFrame | None:
    """The table of :func:`read_op_statistic` from the cells' Python strings when the file is
    as the profiler writes it: every Count digits (below 2**63), every Total Time a plain
    non-negative decimal, one Device_id at most, each (OP Type, Core Type) pair on one row and
    no cell with surrounding whitespace. None otherwise: :func:`_general_table` then gives the
    same table or raises the error. A small rank's fixed cost: no pandas string pass per column."""
    count = arrays["count"].to_pylist()
    total = arrays["total_us"].to_pylist()
    if not all(c is not None and _DIGITS.fullmatch(c) and len(c) < 19 for c in count):
        return None
    if not all(t is not None and _DECIMAL.fullmatch(t) and t[0] != "-" for t in total):
        return None
    if "device_id" in arrays:
        devs = {d for d in arrays["device_id"].to_pylist() if d is not None}
        if len(devs) > 1 or any(d != d.strip() for d in devs):
            return None
    texts = []
    for col in ("op_type", "core_type"):
        vals = arrays[col].to_pylist()
        if any(v is not None and v != v.strip() for v in vals):
            return None
        texts.append(["N/A" if v is None or v == "" else v for v in vals])
    if len(set(zip(*texts))) < n:
        return None
    return pd.DataFrame({"row": np.arange(1, n + 1, dtype=np.int64),
                         "op_type": np.array(texts[0], dtype=object), "core_type": np.array(texts[1], dtype=object),
                         "count": np.array([int(c) for c in count], dtype=np.int64),
                         "total_us": np.array([float(t) for t in total], dtype=np.float64)})


def _general_table(path: Path, cols: dict, arrays: dict, n: int) -> pd.DataFrame:
    """:func:`read_op_statistic` for any file: every check by pandas string passes, the errors
    named with their row and cell, pairs on several rows summed."""
    raw = pd.DataFrame({k: v.to_pandas() for k, v in arrays.items()})
    raw.insert(0, "row", np.arange(1, n + 1, dtype=np.int64))
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
    def text(col):   # N/A, empty (a type the export could not name) -> "N/A", as the kernel table's null
        v = raw[col].astype("string").str.strip()
        return v.where(v.notna() & (v != ""), "N/A").astype(str).to_numpy()

    out = pd.DataFrame({"row": raw["row"].to_numpy(), "op_type": text("op_type"), "core_type": text("core_type"),
                        "count": count.astype("int64").to_numpy(), "total_us": total.to_numpy()})
    if out.duplicated(["op_type", "core_type"]).any():
        # a generation keyed by more columns (a model name) splits a pair over rows: summed
        out = out.groupby(["op_type", "core_type"], sort=False, as_index=False).agg(
            row=("row", "first"), count=("count", "sum"), total_us=("total_us", "sum"))[
            ["row", "op_type", "core_type", "count", "total_us"]]
    return out


def known_layout(path: Path) -> str | None:
    """None when op_statistic's header has every column :func:`read_op_statistic` reads, else a
    sentence saying which are missing (a header generation perfgate does not know: the file is
    then left out as a witness, never a reason to refuse the capture).

    Raises:
        InvalidCaptureError: the file is empty or has no header line."""
    header = read_header(Path(path))
    try:
        resolve_columns(header, OP_STATISTIC_ALIASES, OP_STATISTIC_REQUIRED, Path(path))
    except InvalidCaptureError as e:
        return e.message
    return None
