"""Reader for kernel_details.csv (torch_npu) and op_summary_*.csv (msprof).

Output table (one row per device task, pandas DataFrame):

==============  ========  ==================================================================
column          dtype     meaning
==============  ========  ==================================================================
row             int64     1-based data row in the source file (header is row 0)
step            string    ProfilerStep id (``"50"``); ``"implicit"`` when the file has no
                          Step Id column; <NA> for a blank cell (unassigned, never step 0)
name            string    kernel name (``Name`` / ``Op Name``)
op_type         string    operator type (``Type`` / ``OP Type``); <NA> for ``N/A`` (Level0)
core_type       string    ``Accelerator Core`` / ``Task Type`` value; <NA> for ``N/A``
stream_id       string    ``Stream ID``; <NA> when absent or N/A (communication rows)
start_ns        int64     absolute start, integer nanoseconds (exact, from the µs string)
dur_ns          int64     duration, integer nanoseconds
end_ns          int64     start_ns + dur_ns
wait_us         float64   ``Wait Time(us)``, NaN when absent
is_comm         bool      communication task: core type HCCL/COMMUNICATION or ``hcom_`` name
``*_ratio``     float64   every PMU ratio column present (``aic_mac_ratio``, ...), NaN for N/A
==============  ========  ==================================================================

Rows whose Duration is N/A or negative are invalid: they are counted, reported and left out
(P06). Exact duplicates (same start, stream, name and duration) are reported and counted once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import (COMM_CORE_TYPES, KERNEL_ALIASES, KERNEL_REQUIRED,
                                     KNOWN_CORE_TYPES)
from perfgate.ingest.csvread import exact_scaled, read_header, read_string_table, resolve_columns

IMPLICIT_STEP = "implicit"
_UPPER_TOKEN = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class KernelTable:
    """A parsed kernel table plus what was learned while reading it.

    ``columns`` maps canonical name -> header spelling found; ``variant`` names the header
    generation (e.g. ``kernel_details/46col/Block Dim``); ``type_available`` /
    ``core_available`` are True when Type / Accelerator Core carry values on compute rows
    (False on Level0 captures, where they are N/A).
    """
    path: Path
    df: pd.DataFrame
    columns: dict
    variant: str
    ncols: int
    type_available: bool
    core_available: bool
    invalid_rows: tuple = ()
    duplicate_rows: tuple = ()
    unassigned_rows: int = 0
    warnings: tuple = field(default_factory=tuple)


def _prove_core_column(df: pd.DataFrame, header: str, path: Path) -> None:
    vals = set(df["core_type"].dropna().unique())
    if not vals:
        return
    if vals & KNOWN_CORE_TYPES:
        return
    if all(_UPPER_TOKEN.match(v) for v in vals):
        return  # unknown but core-type shaped: kept, reported in the unknown bucket
    sample = ", ".join(sorted(vals)[:5])
    raise InvalidCaptureError(
        f"column {header!r} should hold core types (AI_CORE, AI_VECTOR_CORE, MIX_AIC, HCCL, ...) "
        f"but holds {sample}: the header does not match its values", path=path, row=0)


def _prove_type_column(df: pd.DataFrame, header: str, path: Path) -> None:
    vals = df["op_type"].dropna()
    if vals.empty:
        return
    share_core = vals.isin(KNOWN_CORE_TYPES).mean()
    if share_core > 0.5:
        raise InvalidCaptureError(
            f"column {header!r} should hold operator types (MatMulV2, Cast, ...) but "
            f"{share_core:.0%} of its values are core types such as {vals.iloc[0]!r}: "
            f"columns look swapped", path=path, row=0)


def read_kernels(path: Path) -> KernelTable:
    """Read one kernel_details.csv / op_summary_*.csv into a :class:`KernelTable`.

    Raises:
        InvalidCaptureError: empty or header-only file, missing required columns (Name, Type,
            Start Time(us), Duration(us) in any spelling), a truncated/malformed row, a start
            time that is not a number, a column whose values contradict its header, or no
            valid row at all. Messages name the file and row.
    """
    path = Path(path)
    header = read_header(path)
    cols = resolve_columns(header, KERNEL_ALIASES, KERNEL_REQUIRED, path)
    ratio_cols = [h for h in header if h.endswith("_ratio") and h not in cols.values()]
    raw = read_string_table(path, {**cols, **{h: h for h in ratio_cols}}, len(header))
    warnings: list[str] = []

    df = pd.DataFrame({"row": raw["row"]})
    if "step_id" in cols:
        step = raw["step_id"].astype("string")
        bad = step.notna() & ~step.str.fullmatch(r"-?\d+").fillna(False).astype(bool)
        if bad.any():
            i = bad[bad].index[0]
            raise InvalidCaptureError(f"{cols['step_id']} is not an integer: {step[i]!r}",
                                      path=path, row=int(raw['row'][i]))
        # normalise "050" -> "50"
        step = step.where(step.isna(), step.str.lstrip("0").replace("", "0"))
        df["step"] = step
    else:
        df["step"] = pd.Series([IMPLICIT_STEP] * len(raw), dtype="string")
        warnings.append(f"{path.name}: no Step Id column; all rows form one implicit step")
    df["name"] = raw["name"].astype("string")
    if df["name"].isna().any():
        i = df["name"].isna().idxmax()
        raise InvalidCaptureError(f"{cols['name']} is empty", path=path, row=int(raw['row'][i]))
    df["op_type"] = raw["op_type"].astype("string")
    df["core_type"] = (raw["core_type"].astype("string") if "core_type" in cols
                       else pd.Series(pd.NA, index=raw.index, dtype="string"))
    df["stream_id"] = (raw["stream_id"].astype("string") if "stream_id" in cols
                       else pd.Series(pd.NA, index=raw.index, dtype="string"))
    df["start_ns"] = exact_scaled(raw["start_us"], 1000, path=path, column=cols["start_us"],
                                  rows=raw["row"], allow_null=False)
    dur = exact_scaled(raw["dur_us"], 1000, path=path, column=cols["dur_us"], rows=raw["row"])
    df["dur_ns"] = dur
    if "wait_us" in cols:
        df["wait_us"] = pd.to_numeric(raw["wait_us"], errors="coerce").astype("float64")
    else:
        df["wait_us"] = np.nan
    if "input_shapes" in cols:
        df["input_shapes"] = raw["input_shapes"].astype("string")
    for h in ratio_cols:  # PipeUtilization / ArithmeticUtilization ratios (0..1); N/A -> NaN
        df[h] = pd.to_numeric(raw[h], errors="coerce").astype("float64")

    if "core_type" in cols:
        _prove_core_column(df, cols["core_type"], path)
    _prove_type_column(df, cols["op_type"], path)

    invalid = df["dur_ns"].isna() | (df["dur_ns"].fillna(0) < 0)
    invalid_rows = tuple(int(r) for r in df.loc[invalid, "row"])
    if invalid_rows:
        warnings.append(f"{path.name}: {len(invalid_rows)} row(s) with N/A, empty or negative "
                        f"{cols['dur_us']} left out (rows {_fmt_rows(invalid_rows)})")
        df = df.loc[~invalid]
    if df.empty:
        raise InvalidCaptureError(f"no row has a valid {cols['dur_us']}", path=path)
    df = df.astype({"start_ns": "int64", "dur_ns": "int64"})
    df["end_ns"] = df["start_ns"] + df["dur_ns"]

    core = df["core_type"].fillna("")
    name_l = df["name"].str.lower()
    df["is_comm"] = (core.isin(COMM_CORE_TYPES) | name_l.str.startswith("hcom_")
                     | df["op_type"].fillna("").str.lower().str.startswith("hcom")).astype(bool)

    dup_key = ["start_ns", "dur_ns", "name", "stream_id"]
    dup = df.duplicated(subset=dup_key, keep="first")
    duplicate_rows = tuple(int(r) for r in df.loc[dup, "row"])
    if duplicate_rows:
        warnings.append(f"{path.name}: {len(duplicate_rows)} exact duplicate row(s) (same start, "
                        f"stream, name, duration) counted once (rows {_fmt_rows(duplicate_rows)})")
        df = df.loc[~dup]
    unassigned = int(df["step"].isna().sum())
    if unassigned:
        warnings.append(f"{path.name}: {unassigned} row(s) with a blank Step Id are outside every "
                        f"step (unassigned bucket, not step 0)")
    df = df.reset_index(drop=True)

    compute = ~df["is_comm"]
    type_available = bool(df.loc[compute, "op_type"].notna().any()) if compute.any() else \
        bool(df["op_type"].notna().any())
    core_available = bool(df.loc[compute, "core_type"].notna().any()) if compute.any() else \
        bool(df["core_type"].notna().any())
    block = cols.get("block_dim", "no block column")
    kind = "op_summary" if cols["name"] == "Op Name" else "kernel_details"
    variant = f"{kind}/{len(header)}col/{block}" + ("/Device_id" if "device_id" in cols else "")
    return KernelTable(path=path, df=df, columns=cols, variant=variant, ncols=len(header),
                       type_available=type_available, core_available=core_available,
                       invalid_rows=invalid_rows, duplicate_rows=duplicate_rows,
                       unassigned_rows=unassigned, warnings=tuple(warnings))


def _fmt_rows(rows: tuple, limit: int = 8) -> str:
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f", … {len(rows) - limit} more" if len(rows) > limit else "")
