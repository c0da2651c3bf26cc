"""The kernel_details.csv reader as it was before its numpy rewrite (commit c9afc71), kept verbatim as the
oracle of tests/ingest/test_fast_readers.py: the numpy rewrites of its pandas steps
(duplicates, core-type proof, availability flags) must give the same KernelTable."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.aliases import (COMM_CORE_TYPES, KERNEL_ALIASES, KERNEL_REQUIRED,
                                     KNOWN_CORE_TYPES, MISSING_TOKENS)
from perfgate.ingest.csvread import (DECIMAL_US, DICT_STRING, decimal_to_scaled_int, exact_scaled_arrow,
                                     read_arrow_columns, read_header, read_typed_columns, resolve_columns,
                                     to_float_arrow)

IMPLICIT_STEP = "implicit"
_PMU_TIME = re.compile(r"^((?:aic|aiv)_[a-z0-9]+_time|aicore_time|aiv_time)\(us\)$")
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
    device: str | None = None
    slices: tuple = ()   # the op_summary slice files read as this one table, in order (none: one file)


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
    col = df["op_type"]
    codes = col.cat.codes.to_numpy()
    counts = np.bincount(codes[codes >= 0], minlength=len(col.cat.categories))
    if counts.sum() == 0:
        return
    core = np.array([c in KNOWN_CORE_TYPES for c in col.cat.categories], dtype=bool)
    share_core = counts[core].sum() / counts.sum()  # per distinct value, weighted by its rows
    if share_core > 0.5:
        first = col.cat.categories[codes[np.argmax(codes >= 0)]]
        raise InvalidCaptureError(
            f"column {header!r} should hold operator types (MatMulV2, Cast, ...) but "
            f"{share_core:.0%} of its values are core types such as {first!r}: "
            f"columns look swapped", path=path, row=0)


def _categorical(arr) -> pd.Series:
    """Arrow strings -> pandas categorical, trimmed, ``N/A`` missing: names repeat a lot, so
    trimming and every later string operation run once per distinct value, not per row."""
    enc = pc.dictionary_encode(arr)
    if isinstance(enc, pa.ChunkedArray) and enc.num_chunks > 1:
        enc = pa.chunked_array(pa.Table.from_arrays([enc], ["x"]).unify_dictionaries().column(0))
    ser = enc.to_pandas()
    if not isinstance(ser.dtype, pd.CategoricalDtype):
        ser = ser.astype("category")
    cats = [str(c) for c in ser.cat.categories]
    trimmed = [c.strip() for c in cats]
    if trimmed != cats or any(t in MISSING_TOKENS for t in trimmed):
        ser = ser.astype(object).map(lambda v: v if not isinstance(v, str) else v.strip())
        ser = ser.where(~ser.isin(MISSING_TOKENS), None).astype("category")
    return ser


def _exact_duplicates(df: pd.DataFrame) -> np.ndarray:
    """Rows equal to an earlier row in start, duration, name and stream (bool mask). Only rows
    sharing a start time are hashed, so the usual duplicate-free table costs one sort."""
    start = df["start_ns"].to_numpy()
    same = np.zeros(len(start), dtype=bool)
    if len(start) and (start[1:] >= start[:-1]).all():  # already in start order (the usual file): no sort
        eq = np.flatnonzero(start[1:] == start[:-1])
        same[eq] = True
        same[eq + 1] = True
    else:
        order = np.argsort(start, kind="stable")
        eq = start[order][1:] == start[order][:-1]
        same[order[1:][eq]] = True
        same[order[:-1][eq]] = True
    out = np.zeros(len(start), dtype=bool)
    if same.any():
        idx = np.flatnonzero(same)
        key = pd.DataFrame({"s": start[idx], "d": df["dur_ns"].to_numpy()[idx],
                            "n": df["name"].cat.codes.to_numpy()[idx], "t": df["stream_id"].cat.codes.to_numpy()[idx]})
        out[idx] = key.duplicated(keep="first").to_numpy()
    return out


def _null_categorical(n: int) -> pd.Series:
    return pd.Series(pd.Categorical([None] * n, categories=pd.Index([], dtype=object)))


# Columns whose values the gate uses; the others (Model ID, Task ID, OP State, Block Dim, ...)
# only name the header generation and are not parsed.
_VALUE_COLUMNS = ("step_id", "name", "op_type", "core_type", "stream_id", "start_us", "dur_us", "wait_us",
                  "input_shapes", "input_dtypes", "device_id")
_FAST_TYPES = {"step_id": DICT_STRING, "name": DICT_STRING, "op_type": DICT_STRING, "core_type": DICT_STRING,
               "stream_id": DICT_STRING, "input_shapes": DICT_STRING,
               "input_dtypes": DICT_STRING, "device_id": DICT_STRING, "start_us": DECIMAL_US,
               "dur_us": DECIMAL_US, "wait_us": pa.float64()}


def _read_values(path: Path, cols: dict, ratio_cols: list, ncols: int):
    """The used columns of a kernel table: ``(raw, rows, start_ns, dur_ns, dur_null, floats)``.

    ``raw`` holds the string / dictionary columns, ``start_ns`` / ``dur_ns`` exact int64 ns,
    ``floats`` float64 arrays for ``wait_us`` and the PMU ratio columns (N/A -> NaN).
    Fast path: the CSV reader parses µs as decimal128 with 3 decimals (exact) and names as
    dictionaries. Anything it does not take cleanly (more than 3 decimals, N/A start, a
    non-numeric cell, a malformed row) is read again as strings and converted by
    :func:`exact_scaled_arrow`, which gives identical values or the error naming the row.
    """
    used = {c: h for c, h in cols.items() if c in _VALUE_COLUMNS}
    wanted = {**used, **{h: h for h in ratio_cols}}
    fast = read_typed_columns(path, wanted, {**_FAST_TYPES, **{h: pa.float64() for h in ratio_cols}})
    if fast is not None:
        raw, n = fast
        start = decimal_to_scaled_int(raw["start_us"])
        dur = decimal_to_scaled_int(raw["dur_us"])
        if start is not None and dur is not None and not start[1].any():
            floats = {c: raw[c].to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
                      for c in ("wait_us", *ratio_cols) if c in raw}
            # pyarrow parses "nan" / "inf" into float64: the string path names such a cell
            w = floats.get("wait_us")
            if w is None or int((~np.isfinite(w)).sum()) == raw["wait_us"].null_count:
                return raw, n, start[0], dur[0], dur[1], floats
    numeric = {"start_us", "dur_us", "wait_us", *ratio_cols}
    raw, n = read_arrow_columns(path, wanted, ncols, trim={"step_id", *numeric}, numeric=numeric)
    start, _ = exact_scaled_arrow(raw["start_us"], 1000, path=path, column=cols["start_us"], allow_null=False)
    dur, dur_null = exact_scaled_arrow(raw["dur_us"], 1000, path=path, column=cols["dur_us"])
    floats = {h: to_float_arrow(raw[h], path=path, column=h, strict=False) for h in ratio_cols}
    if "wait_us" in cols:
        floats["wait_us"] = to_float_arrow(raw["wait_us"], path=path, column=cols["wait_us"])
    return raw, n, start, dur, dur_null, floats


def read_kernels(path: Path, *, pmu: bool = False, shapes: bool = False) -> KernelTable:
    """Read one kernel_details.csv / op_summary_*.csv into a :class:`KernelTable`.

    Only the needed columns are parsed (pyarrow, multithreaded); strings become pandas
    categoricals; times are converted to exact integer ns by Arrow compute kernels.
    ``pmu``: also read every PMU ``*_ratio`` column (PipeUtilization etc.) as float64;
    ``shapes``: also read ``Input Shapes``. Both are off by default: the gate does not need them.

    Raises:
        InvalidCaptureError: empty or header-only file, missing required columns (Name, Type,
            Start Time(us), Duration(us) in any spelling), a truncated/malformed row, a start
            time that is N/A or empty, a Start / Duration / Wait Time cell that is not a
            finite number (``nan``, ``NaN``, ``inf``, ``None``, text: only ``N/A`` and empty
            mean "not applicable"), a column whose values contradict its header, or no valid
            row at all. Messages name the file and row (cells also the column, the cell text
            and the CSV row counting the header as 1).
    """
    path = Path(path)
    header = read_header(path)
    cols = resolve_columns(header, KERNEL_ALIASES, KERNEL_REQUIRED, path)
    ratio_cols = [h for h in header if h.endswith("_ratio") and h not in cols.values()] if pmu else []
    ratio_cols += [h for h in header if pmu and _PMU_TIME.match(h) and h not in cols.values()]
    if not shapes:
        cols.pop("input_shapes", None)
        cols.pop("input_dtypes", None)
    raw, n, start, dur, dur_null, floats = _read_values(path, cols, ratio_cols, len(header))
    warnings: list[str] = []

    # columns are collected first and framed once: each DataFrame.__setitem__ copies its array
    # (copy-on-write), ~0.5 s for the 28 columns of a 1M-row table
    data: dict = {"row": np.arange(1, n + 1, dtype=np.int64)}
    if "step_id" in cols:
        step = _categorical(raw["step_id"])
        cats = list(step.cat.categories)
        bad = [c for c in cats if not re.fullmatch(r"-?\d+", str(c))]
        if bad:
            i = int(np.argmax((step == bad[0]).to_numpy()))
            raise InvalidCaptureError(f"{cols['step_id']} is not an integer: {bad[0]!r}", path=path, row=i + 1)
        norm = {c: (str(c).lstrip("0") or "0") for c in cats}  # "050" -> "50"
        if any(norm[c] != c for c in cats):
            step = step.cat.rename_categories(norm) if len(set(norm.values())) == len(cats) else \
                step.astype(object).map(norm).astype("category")
        data["step"] = step
    else:
        data["step"] = pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[IMPLICIT_STEP])
        warnings.append(f"{path.name}: no Step Id column; all rows form one implicit step")
    data["name"] = _categorical(raw["name"])
    name_null = data["name"].isna().to_numpy()
    if name_null.any():
        raise InvalidCaptureError(f"{cols['name']} is empty", path=path, row=int(np.argmax(name_null)) + 1)
    data["op_type"] = _categorical(raw["op_type"])
    data["core_type"] = _categorical(raw["core_type"]) if "core_type" in cols else _null_categorical(n)
    data["stream_id"] = _categorical(raw["stream_id"]) if "stream_id" in cols else _null_categorical(n)
    data["start_ns"] = start
    data["dur_ns"] = dur
    data["wait_us"] = floats["wait_us"] if "wait_us" in cols else np.full(n, np.nan)
    for c in ("input_shapes", "input_dtypes"):
        if c in cols:
            data[c] = _categorical(raw[c])
    for h in ratio_cols:  # PipeUtilization / ArithmeticUtilization ratios (0..1) and pipe times; N/A -> NaN
        m = _PMU_TIME.match(h)
        data[f"{m.group(1)}_us" if m else h] = floats[h]

    df = pd.DataFrame(data, copy=False)
    device = None   # the one Device_id the rows name: the first non-empty, non-N/A cell
    if "device_id" in cols and "device_id" in raw:
        named = [v.strip() for v in raw["device_id"].to_pylist() if v is not None and v.strip() not in ("", "N/A")]
        device = named[0] if named else None
        dev = _categorical(raw["device_id"])
        if len(dev.cat.categories) > 1:
            from perfgate.ingest.steps import refuse_several_devices
            refuse_several_devices(path, dev, data["row"], cols["device_id"])

    if "core_type" in cols:
        _prove_core_column(df, cols["core_type"], path)
    _prove_type_column(df, cols["op_type"], path)

    # the rule added after this oracle was written (no profiler writes a negative duration): shared
    from perfgate.ingest.kernels import refuse_negative_durations
    refuse_negative_durations(path, df["row"].to_numpy(), dur, dur_null, cols["dur_us"])
    invalid = dur_null
    invalid_rows = tuple(int(r) for r in df.loc[invalid, "row"])
    if invalid_rows:
        warnings.append(f"{path.name}: {len(invalid_rows)} row(s) with N/A or empty "
                        f"{cols['dur_us']} left out (rows {_fmt_rows(invalid_rows)})")
        df = df.loc[~invalid]
    if df.empty:
        raise InvalidCaptureError(f"no row has a valid {cols['dur_us']}", path=path)
    df["end_ns"] = df["start_ns"] + df["dur_ns"]

    def per_category(col, fn):
        c = df[col]
        flags = np.array([bool(fn(str(v))) for v in c.cat.categories], dtype=bool)
        codes = c.cat.codes.to_numpy()
        return np.where(codes >= 0, flags[np.clip(codes, 0, None)] if len(flags) else False, False)

    df["is_comm"] = (per_category("core_type", lambda v: v in COMM_CORE_TYPES)
                     | per_category("name", lambda v: v.lower().startswith("hcom_"))
                     | per_category("op_type", lambda v: v.lower().startswith("hcom")))

    dup = _exact_duplicates(df)
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
                       unassigned_rows=unassigned, warnings=tuple(warnings), device=device)


def _fmt_rows(rows: tuple, limit: int = 8) -> str:
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f", … {len(rows) - limit} more" if len(rows) > limit else "")
