"""Reader for kernel_details.csv (torch_npu) and op_summary_*.csv (msprof).

Output table (one row per device task, pandas DataFrame):

==============  ========  ==================================================================
column          dtype     meaning
==============  ========  ==================================================================
row             int64     1-based data row in the source file (header is row 0)
step            category  ProfilerStep id (``"50"``); ``"implicit"`` when the file has no
                          Step Id column; NaN for a blank cell (unassigned, never step 0)
name            category  kernel name (``Name`` / ``Op Name``)
op_type         category  operator type (``Type`` / ``OP Type``); NaN for ``N/A`` (Level0)
core_type       category  ``Accelerator Core`` / ``Task Type`` value; NaN for ``N/A``
stream_id       category  ``Stream ID``; NaN when absent or N/A (communication rows)
start_ns        int64     absolute start, integer nanoseconds (exact, from the µs string)
dur_ns          int64     duration, integer nanoseconds
end_ns          int64     start_ns + dur_ns
wait_us         float64   ``Wait Time(us)``, NaN when absent
is_comm         bool      communication task: core type HCCL/COMMUNICATION or ``hcom_`` name
``*_ratio``     float64   PMU ratio columns (``aic_mac_ratio``, ...), NaN for N/A; which ones:
                          see :func:`pmu_columns` (``pmu=True``: the ones the family view reads,
                          ``pmu="all"``: every one present)
``*_time_us``   float64   PMU pipe times (``aic_mac_time(us)`` -> ``aic_mac_time_us``; with
                          ``pmu="all"`` also ``aicore_time_us`` / ``aiv_time_us``); NaN for N/A
input_shapes    category  ``Input Shapes`` with ``shapes=True`` (``"8,2048;2048,2048"``)
input_dtypes    category  ``Input Data Types`` with ``shapes=True`` (``DT_BF16;DT_BF16``)
==============  ========  ==================================================================

Rows whose Duration is N/A (or empty) are invalid: they are counted, reported and left out
(P06). A negative Duration is a value no profiler writes: an InvalidCaptureError naming file,
row, column and value (raw msprof has no self-check that would catch the changed sums).
``N/A`` and empty are the only not-applicable spellings of a numeric cell
(:data:`~perfgate.ingest.aliases.NA_MARKERS`): a ``Start Time(us)`` / ``Duration(us)`` /
``Wait Time(us)`` cell holding ``nan``, ``NaN``, ``inf``, ``None`` or any other non-number is an
InvalidCaptureError naming file, row, column and cell, on the typed fast path and the string
path alike. Exact duplicates (same start, stream, name and duration) are reported and counted once.
"""
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
from perfgate.ingest.csvread import (DECIMAL_US, DICT_STRING, cell_error, chunks_to_numpy, decimal_to_scaled_int,
                                     exact_scaled_arrow, raw_cell, read_arrow_columns, read_header,
                                     read_typed_columns, resolve_columns, to_float_arrow)
from perfgate.policy.opspec import PIPE_STAGES

IMPLICIT_STEP = "implicit"
_PMU_TIME = re.compile(r"^((?:aic|aiv)_[a-z0-9]+_time|aicore_time|aiv_time)\(us\)$")
_UPPER_TOKEN = re.compile(r"^[A-Z][A-Z0-9_]*$")
_STEP_ID = re.compile(r"-?[0-9]+")          # ASCII digits only (\d takes "٥٠", which int() reads as 50)
_STREAM_ID = re.compile(r"\s*[0-9]+\s*")


def refuse_non_integer_streams(path: Path, streams: pd.Series, column: str) -> None:
    """Every ``Stream ID`` cell is a non-negative integer, or N/A / empty (communication rows):
    every real export writes these (SCHEMAS.md). Another value (``abc``, ``1e300``) would become
    a stream of its own and split the rank's structure (layers counted on the compute stream),
    gated as a regression.

    Raises:
        InvalidCaptureError: the first such cell, naming file, data row, column and the cell."""
    cats = streams.cat.categories.tolist()
    bad = [i for i, c in enumerate(cats) if not _STREAM_ID.fullmatch(str(c))]
    if not bad:
        return
    codes = streams.array.codes
    i = int(np.argmax(np.isin(codes, bad)))
    from perfgate.ingest.csvread import cell_error
    raise cell_error(path, i + 1, column, cats[codes[i]], "is not a stream number (a non-negative integer, or N/A)")


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
    device: str | None = None   # the one Device_id the rows name (None: no such column, or no value)
    slices: tuple = ()   # the op_summary slice files read as this one table, in order (none: one file)


def _prove_core_column(df: pd.DataFrame, header: str, path: Path) -> None:
    col = df["core_type"]
    codes = col.array.codes
    cats = col.cat.categories.tolist()
    vals = {cats[i] for i in np.flatnonzero(np.bincount(codes[codes >= 0], minlength=len(cats)))}
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
    codes = col.array.codes
    counts = np.bincount(codes[codes >= 0], minlength=len(col.cat.categories))
    if counts.sum() == 0:
        return
    core = np.array([c in KNOWN_CORE_TYPES for c in col.cat.categories.tolist()], dtype=bool)
    share_core = counts[core].sum() / counts.sum()  # per distinct value, weighted by its rows
    if share_core > 0.5:
        first = col.cat.categories[codes[np.argmax(codes >= 0)]]
        raise InvalidCaptureError(
            f"column {header!r} should hold operator types (MatMulV2, Cast, ...) but "
            f"{share_core:.0%} of its values are core types such as {first!r}: "
            f"columns look swapped", path=path, row=0)


#: a C0 control character (NUL, ESC, ...; not TAB, LF, CR): no profiler writes one in a name
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def refuse_control_characters(path: Path, col, header: str, error=None) -> None:
    """A text column whose value holds a control character (``\\x00``, ``\\x1b``, DEL; see
    :data:`_CONTROL`: TAB, LF and CR pass) is a damaged file: such a name would reach the
    terminal, the Markdown report and the JUnit XML (which must drop it, and then names a family
    that does not exist). The one check of every reader's names: the kernel tables' text cells
    (name, type, core type, stream, shapes), communication.json's op keys
    (:mod:`perfgate.ingest.comm`), the DB export's kernel strings (:mod:`perfgate.ingest.db`).

    ``col``: a pandas Series of text (a categorical is checked once per distinct value, other
    dtypes once per distinct value after factorizing; missing values pass). ``error(i, value)``:
    the InvalidCaptureError for the first offending position ``i`` (0-based) holding ``value``;
    by default the CSV cell error naming data row ``i + 1``, the column ``header`` and the cell.

    Raises:
        InvalidCaptureError: naming the file, the first such row (or what ``error`` names), the
            column and the value (repr-escaped), with a re-export hint."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats, codes = col.cat.categories, col.array.codes
    else:
        codes, cats = pd.factorize(col)
    bad = [i for i, v in enumerate(cats.tolist()) if isinstance(v, str) and _CONTROL.search(v)]
    if not bad:
        return
    i = int(np.flatnonzero(np.isin(codes, bad))[0])
    if error is None:
        from perfgate.ingest.csvread import cell_error
        err = cell_error(path, i + 1, header, cats[codes[i]], "holds a control character (no profiler writes one)")
    else:
        err = error(i, cats[codes[i]])
    err.hint = "the file was edited or damaged after export: re-export the profiling data"
    raise err


def _categorical(arr) -> pd.Series:
    """Arrow strings -> pandas categorical, trimmed, ``N/A`` missing: names repeat a lot, so
    trimming and every later string operation run once per distinct value, not per row."""
    enc = pc.dictionary_encode(arr)
    if isinstance(enc, pa.ChunkedArray) and enc.num_chunks > 1:
        enc = pa.chunked_array(pa.Table.from_arrays([enc], ["x"]).unify_dictionaries().column(0))
    ser, cats = _one_chunk_categorical(enc)
    if ser is None:
        ser = enc.to_pandas()
        if not isinstance(ser.dtype, pd.CategoricalDtype):
            ser = ser.astype("category")
        cats = [str(c) for c in ser.cat.categories.tolist()]
    trimmed = [c.strip() for c in cats]
    if trimmed != cats or any(t in MISSING_TOKENS for t in trimmed):
        ser = ser.astype(object).map(lambda v: v if not isinstance(v, str) else v.strip())
        ser = ser.where(~ser.isin(MISSING_TOKENS), None).astype("category")
    return ser


_CAT_STR_DTYPE: list = []   # the categories' dtype of ``DictionaryArray.to_pandas()`` (probed once)
_CAT_DTYPES: dict = {}      # categorical dtype per dictionary (tuple of its strings), shared by ranks


def _one_chunk_categorical(enc) -> tuple:
    """``(enc.to_pandas(), its categories as a list of str)`` for a dictionary array of one
    chunk whose dictionary holds distinct non-null strings (at least one), built from its indices and
    dictionary (``Categorical.from_codes``) and a categorical dtype remembered per dictionary:
    the ranks of one job hold the same names, types, core types and steps, so a small rank's
    column costs ~0.07 ms instead of ~0.2-0.4 ms; ``(None, None)`` otherwise (several chunks, another value type), for the caller's
    ``to_pandas``. Same codes (dtype included), categories, dtype and order."""
    ch = enc
    if isinstance(enc, pa.ChunkedArray):
        if enc.num_chunks != 1:
            return None, None
        ch = enc.chunk(0)
    if not isinstance(ch, pa.DictionaryArray) or not pa.types.is_string(ch.dictionary.type) \
            or ch.dictionary.null_count:
        return None, None
    if not _CAT_STR_DTYPE:
        _CAT_STR_DTYPE.append(pa.array(["x"]).dictionary_encode().to_pandas().cat.categories.dtype)
    cats = ch.dictionary.to_pylist()
    if not cats or len(set(cats)) != len(cats):   # no value: to_pandas types the categories object
        return None, None
    codes = ch.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    key = tuple(cats)
    dtype = _CAT_DTYPES.get(key)
    if dtype is None:   # building a dtype types and validates its categories (~0.1-0.2 ms)
        if len(_CAT_DTYPES) >= 512:
            _CAT_DTYPES.clear()
        dtype = _CAT_DTYPES[key] = pd.CategoricalDtype(pd.Index(cats, dtype=_CAT_STR_DTYPE[0]), ordered=False)
    return pd.Series(pd.Categorical.from_codes(codes, dtype=dtype), copy=False), cats


def _exact_duplicates(df: pd.DataFrame) -> np.ndarray:
    """Rows equal to an earlier row in start, duration, name and stream (bool mask). Only rows
    sharing a start time are compared (one lexsort of their four keys and the row position), so
    the usual duplicate-free table costs one pass over the start column."""
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
        idx = np.flatnonzero(same)  # ascending: the first of equal rows sorts first within its group
        keys = (start[idx], df["dur_ns"].to_numpy()[idx], df["name"].array.codes[idx],
                df["stream_id"].array.codes[idx])  # a missing name / stream is code -1: equal
        order = np.lexsort((idx, *keys[::-1]))
        k = [key[order] for key in keys]
        repeat = np.ones(len(idx) - 1, dtype=bool)
        for key in k:
            repeat &= key[1:] == key[:-1]
        out[idx[order[1:][repeat]]] = True
    return out


def _per_category(col: pd.Series, fn) -> np.ndarray:
    """``fn(value)`` per row of a categorical column, evaluated once per category (False for a
    missing value)."""
    flags = np.array([bool(fn(str(v))) for v in col.array.categories.tolist()], dtype=bool)
    codes = col.array.codes
    return np.where(codes >= 0, flags[np.clip(codes, 0, None)] if len(flags) else False, False)


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


# The PipeUtilization ratios the family view reads even where the stage has a time column:
# memory_bound = mte2 / max(mac, vec) of Duration-weighted mean ratios
# (perfgate.metrics.operators._MEMORY_STAGES; tests/ingest/test_pmu_columns.py holds them equal).
MEMORY_RATIO_STAGES = ("aic_mac", "aiv_vec", "aic_mte2", "aiv_mte2")


def pmu_columns(header: list, taken, pmu) -> tuple[list, list]:
    """The PMU header columns to read and those left unread, ``(read, skipped)``: ratios
    first, then times, each in header order (the kernel table's column order).

    ``pmu=False``: none. ``pmu="all"``: every ``*_ratio`` column and every pipe time column
    (``aic_*_time(us)``, ``aiv_*_time(us)``, ``aicore_time(us)``, ``aiv_time(us)``).
    ``pmu=True``: the ones the family view (:mod:`perfgate.metrics.operators`) reads, as it
    reads them:

    - the time column of every pipe stage of :data:`~perfgate.policy.opspec.PIPE_STAGES` (the
      stage time; ``aicore_time(us)`` / ``aiv_time(us)`` are no stage and are skipped);
    - the ratio of a pipe stage that has no time column (stage time = ratio × Duration);
    - the ratios of :data:`MEMORY_RATIO_STAGES` (memory-boundness);
    - every ``*_ratio`` column that is no pipe stage (another aic_metrics group such as
      ArithmeticUtilization's ``aic_mac_fp16_ratio``: the fail-closed message names them).

    So only the ratio of a stage whose time column is present (``aic_mte1``, ``aic_fixpipe``,
    ``aic_scalar``, ``aiv_scalar``, ``aiv_mte3``) and the two core totals are skipped: 7 of
    the 20 PMU columns of a PipeUtilization kernel_details.csv. ``taken``: header columns
    already read as something else (never PMU).
    """
    if pmu not in (False, True, "all"):
        raise ValueError(f"pmu must be False, True or 'all', not {pmu!r}")
    if not pmu:
        return [], []
    taken = set(taken)
    ratios = [h for h in header if h.endswith("_ratio") and h not in taken]
    times = [h for h in header if _PMU_TIME.match(h) and h not in taken]
    every = ratios + times
    if pmu == "all":
        return every, []
    stage_time = {_PMU_TIME.match(h).group(1)[:-len("_time")]: h for h in times}
    read = set()
    for h in times:
        if _PMU_TIME.match(h).group(1)[:-len("_time")] in PIPE_STAGES:
            read.add(h)
    for h in ratios:
        stage = h[:-len("_ratio")]
        if stage not in PIPE_STAGES or stage in MEMORY_RATIO_STAGES or stage not in stage_time:
            read.add(h)
    return [h for h in every if h in read], [h for h in every if h not in read]


def _pipe_seen(df: pd.DataFrame) -> bool:
    """True when a pipe-stage column read (time or ratio) holds a finite value on a compute row
    that belongs to a step: then :func:`perfgate.metrics.operators.pipe_available` is True on
    the step-assigned rows (the rows the family view gets) whether or not the skipped ratios
    were read."""
    rows = ~df["is_comm"].to_numpy() & (df["step"].array.codes >= 0)
    if not rows.any():
        return False
    for s in PIPE_STAGES:
        for col in (f"{s}_time_us", f"{s}_ratio"):
            if col in df and np.isfinite(df[col].to_numpy()[rows]).any():
                return True
    return False


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
            floats = {c: chunks_to_numpy(raw[c], np.float64) for c in ("wait_us", *ratio_cols) if c in raw}
            # pyarrow parses "nan" / "inf" into float64: the string path names such a cell
            if all(int((~np.isfinite(v)).sum()) == raw[c].null_count for c, v in floats.items()):
                return raw, n, start[0], dur[0], dur[1], floats
    numeric = {"start_us", "dur_us", "wait_us", *ratio_cols}
    raw, n = read_arrow_columns(path, wanted, ncols, trim={"step_id", *numeric}, numeric=numeric)
    start, _ = exact_scaled_arrow(raw["start_us"], 1000, path=path, column=cols["start_us"], allow_null=False)
    dur, dur_null = exact_scaled_arrow(raw["dur_us"], 1000, path=path, column=cols["dur_us"])
    # a PMU cell that is neither N/A / empty nor a finite number (text, a NUL byte, nan) is an
    # error naming file, row and column, as in the time columns: never a silent NaN in a ratio
    floats = {h: to_float_arrow(raw[h], path=path, column=h) for h in ratio_cols}
    if "wait_us" in cols:
        floats["wait_us"] = to_float_arrow(raw["wait_us"], path=path, column=cols["wait_us"])
    return raw, n, start, dur, dur_null, floats


def refuse_negative_durations(path: Path, rows: np.ndarray, dur_ns: np.ndarray, dur_null: np.ndarray,
                              column: str) -> None:
    """A negative duration is a value no profiler writes (N/A or empty is how a row says it has
    none, P06): raise for the first one, naming file, data row (``rows``: 1-based, aligned with
    ``dur_ns``), column and the cell as written in the file (:func:`~perfgate.ingest.csvread.raw_cell`,
    e.g. ``' -5'``, repr-escaped and cut at 60 characters; the file is read again for this
    message only; the parsed µs value when the row can no longer be read), and counting the
    others in the hint.

    Raises:
        InvalidCaptureError: some ``dur_ns`` (int64 ns; ``dur_null`` marks N/A cells) is below 0."""
    negative = ~dur_null & (dur_ns < 0)
    if not negative.any():
        return
    i = int(np.argmax(negative))
    row = int(rows[i])
    text = raw_cell(path, row, column)
    err = cell_error(path, row, column, f"{int(dur_ns[i]) / 1000:.3f}" if text is None else text,
                     "is negative (no profiler writes a negative duration; N/A or empty marks a row without one)")
    more = int(negative.sum()) - 1
    err.hint = ((f"{more} more row(s) are negative too; " if more else "")
                + "the file was edited or damaged after export: re-export the profiling data")
    raise err


def refuse_impossible_pmu(path: Path, rows: np.ndarray, floats: dict, columns) -> None:
    """A PMU pipe time or ratio cell read (``columns``: header spellings, keys of ``floats``)
    below 0, or a ``*_ratio`` cell above 1, is a value no profiler writes: a pipe time is a
    share of the kernel's duration and a ratio its fraction (0..1 in every real export, max
    0.997; ``cube_utilization(%)`` is no ``*_ratio`` column and is not read). Such a cell would
    turn memory-boundness negative, shown as an improvement and stored in baselines. Raises for
    the first offending row over the columns (``rows``: 1-based data rows aligned with the
    arrays), naming file, row, column and the cell as written (:func:`~perfgate.ingest.csvread.raw_cell`),
    counting the others in the hint.

    Raises:
        InvalidCaptureError: a negative PMU cell, or a ``*_ratio`` cell above 1."""
    first = None
    count = 0
    for h in columns:
        v = floats[h]
        with np.errstate(invalid="ignore"):
            bad = v < 0
            if h.endswith("_ratio"):
                bad |= v > 1
        if bad.any():
            count += int(bad.sum())
            i = int(np.argmax(bad))
            if first is None or rows[i] < rows[first[1]]:
                first = (h, i)
    if first is None:
        return
    h, i = first
    row, value = int(rows[i]), float(floats[h][i])
    text = raw_cell(path, row, h)
    why = ("is negative (a PMU pipe time or ratio is never below 0; N/A marks a kernel without one)" if value < 0
           else "is above 1 (a *_ratio column is a fraction of the kernel's time, 0..1)")
    err = cell_error(path, row, h, repr(value) if text is None else text, why)
    err.hint = ((f"{count - 1} more PMU cell(s) are out of range too; " if count > 1 else "")
                + "the file was edited or damaged after export: re-export the profiling data")
    raise err


@dataclass(frozen=True)
class _Values:
    """The used columns of one kernel table as :func:`_read_values` returns them: ``raw`` the
    string / dictionary columns, ``n`` rows, ``start`` / ``dur`` exact int64 ns, ``dur_null``
    the rows with an N/A or empty duration, ``floats`` float64 ``wait_us`` and PMU columns."""
    raw: dict
    n: int
    start: np.ndarray
    dur: np.ndarray
    dur_null: np.ndarray
    floats: dict


def read_kernels(path: Path, *, pmu: bool | str = False, shapes: bool = False) -> KernelTable:
    """Read one kernel_details.csv / op_summary_*.csv into a :class:`KernelTable`.

    Only the needed columns are parsed (pyarrow, multithreaded); strings become pandas
    categoricals; times are converted to exact integer ns by Arrow compute kernels.
    ``pmu``: also read PMU columns as float64: True = the ones the family view reads
    (:func:`pmu_columns`), ``"all"`` = every ``*_ratio`` and pipe ``*_time(us)`` column;
    ``shapes``: also read ``Input Shapes``. Both are off by default: the gate does not need them.
    With ``pmu=True`` the family view's results are those of ``pmu="all"``: the columns left
    out are ones it never reads while the columns read are present, and when no pipe-stage
    column read has a finite value on a step-assigned compute row (where ``pipe_available``
    and the fail-closed message of ``require_pipe`` would look at the skipped ratios) the
    file is read again with ``pmu="all"``.

    Raises:
        InvalidCaptureError: empty or header-only file, missing required columns (Name, Type,
            Start Time(us), Duration(us) in any spelling), a truncated/malformed row, a start
            time that is N/A or empty, a Start / Duration / Wait Time cell or (with ``pmu``) a
            PMU ratio / pipe time cell read that is not a finite number (``nan``, ``NaN``, ``inf``, ``None``, text: only ``N/A`` and empty
            mean "not applicable"), a negative Duration or PMU cell read or a ``*_ratio`` cell
            above 1 (:func:`refuse_impossible_pmu`), a column whose values contradict its
            header, or no valid row at all. Messages name the file and row (cells also the column, the cell text
            and the CSV row counting the header as 1).
    """
    path = Path(path)
    header = read_header(path)
    cols = resolve_columns(header, KERNEL_ALIASES, KERNEL_REQUIRED, path)
    ratio_cols, skipped = pmu_columns(header, cols.values(), pmu)
    if not shapes:
        cols.pop("input_shapes", None)
        cols.pop("input_dtypes", None)
    vals = _Values(*_read_values(path, cols, ratio_cols, len(header)))
    warnings: list[str] = []
    data = _kernel_columns(path, cols, vals, ratio_cols, warnings)
    # the categoricals go in as their arrays (all of length n): no index alignment of Series
    df = pd.DataFrame({c: v.array if isinstance(v, pd.Series) else v for c, v in data.items()},
                      index=pd.RangeIndex(vals.n), copy=False)
    _refuse_contradicting_cells(path, cols, vals, data, df)
    refuse_negative_durations(path, np.asarray(data["row"]), vals.dur, vals.dur_null, cols["dur_us"])
    refuse_impossible_pmu(path, np.asarray(data["row"]), vals.floats, ratio_cols)
    df, invalid_rows, duplicate_rows, unassigned = _rows_kept(path, cols, df, vals.dur_null, warnings)
    if skipped and not _pipe_seen(df):  # the skipped ratios might decide pipe_available: read them
        return read_kernels(path, pmu="all", shapes=shapes)

    compute = ~df["is_comm"].to_numpy()
    has_type = df["op_type"].array.codes >= 0
    has_core = df["core_type"].array.codes >= 0
    type_available = bool(has_type[compute].any()) if compute.any() else bool(has_type.any())
    core_available = bool(has_core[compute].any()) if compute.any() else bool(has_core.any())
    block = cols.get("block_dim", "no block column")
    kind = "op_summary" if cols["name"] == "Op Name" else "kernel_details"
    variant = f"{kind}/{len(header)}col/{block}" + ("/Device_id" if "device_id" in cols else "")
    return KernelTable(path=path, df=df, columns=cols, variant=variant, ncols=len(header),
                       type_available=type_available, core_available=core_available,
                       invalid_rows=invalid_rows, duplicate_rows=duplicate_rows,
                       unassigned_rows=unassigned, warnings=tuple(warnings), device=_device_named(cols, vals))


def _device_named(cols: dict, vals: _Values) -> str | None:
    """The one ``Device_id`` the table's rows name (several are refused before:
    :func:`_refuse_contradicting_cells`), trimmed; None without the column or a value in it."""
    if "device_id" not in cols or "device_id" not in vals.raw:
        return None
    cats = _categorical(vals.raw["device_id"]).cat.categories
    return str(cats[0]) if len(cats) else None


def _kernel_columns(path: Path, cols: dict, vals: _Values, ratio_cols: list, warnings: list) -> dict:
    """The table's columns in frame order: ``row`` (1-based), ``step``, ``name``, ``op_type``,
    ``core_type``, ``stream_id`` (categoricals), ``start_ns`` / ``dur_ns`` / ``end_ns`` (int64
    ns), ``wait_us``, the shape columns asked for, the PMU columns (``*_time(us)`` as
    ``*_us``), ``is_comm``. Collected first and framed once by the caller: each
    DataFrame.__setitem__ copies its array (copy-on-write), ~0.5 s for the 28 columns of a
    1M-row table.

    Raises:
        InvalidCaptureError: a Step Id that is not an integer, an empty Name.
    """
    raw, n, start, dur, floats = vals.raw, vals.n, vals.start, vals.dur, vals.floats
    data: dict = {"row": np.arange(1, n + 1, dtype=np.int64)}
    data["step"] = _step_column(path, cols, raw, n, warnings)
    data["name"] = _categorical(raw["name"])
    name_null = data["name"].array.codes < 0   # a categorical's missing values are code -1
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

    data["end_ns"] = start + dur
    data["is_comm"] = (_per_category(data["core_type"], lambda v: v in COMM_CORE_TYPES)
                       | _per_category(data["name"], lambda v: v.lower().startswith("hcom_"))
                       | _per_category(data["op_type"], lambda v: v.lower().startswith("hcom")))
    return data


def _step_column(path: Path, cols: dict, raw: dict, n: int, warnings: list):
    """The ``step`` categorical: the Step Id column with leading zeros dropped ("050" is step
    50), or one implicit step (with a warning) when the file has no Step Id column.

    Raises:
        InvalidCaptureError: a Step Id that is not an integer.
    """
    if "step_id" not in cols:
        warnings.append(f"{path.name}: no Step Id column; all rows form one implicit step")
        return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[IMPLICIT_STEP])
    step = _categorical(raw["step_id"])
    cats = step.cat.categories.tolist()  # tolist: iterating an Arrow-backed Index costs ~2 us per value
    bad = [c for c in cats if not _STEP_ID.fullmatch(str(c))]
    if bad:
        i = int(np.argmax((step == bad[0]).to_numpy()))
        raise InvalidCaptureError(f"{cols['step_id']} is not an integer: {bad[0]!r}", path=path, row=i + 1)
    norm = {c: (str(c).lstrip("0") or "0") for c in cats}  # "050" -> "50"
    if any(norm[c] != c for c in cats):
        step = step.cat.rename_categories(norm) if len(set(norm.values())) == len(cats) else \
            step.astype(object).map(norm).astype("category")
    return step


def _refuse_contradicting_cells(path: Path, cols: dict, vals: _Values, data: dict, df: pd.DataFrame) -> None:
    """The text columns' cells hold no control character, Stream IDs are integers, the rows
    name one device, and the Accelerator Core / Type columns hold what their headers say
    (each check names its own fault, in this order).

    Raises:
        InvalidCaptureError: the first such fault.
    """
    for c in ("name", "op_type", "core_type", "stream_id", "input_shapes", "input_dtypes"):
        if c in cols:
            refuse_control_characters(path, data[c], cols[c])
    if "stream_id" in cols:   # after the control characters, which name their own fault
        refuse_non_integer_streams(path, data["stream_id"], cols["stream_id"])
    if "device_id" in cols and "device_id" in vals.raw:
        dev = _categorical(vals.raw["device_id"])
        if len(dev.cat.categories) > 1:
            from perfgate.ingest.steps import refuse_several_devices
            refuse_several_devices(path, dev, data["row"], cols["device_id"])

    if "core_type" in cols:
        _prove_core_column(df, cols["core_type"], path)
    _prove_type_column(df, cols["op_type"], path)


def _rows_kept(path: Path, cols: dict, df: pd.DataFrame, dur_null: np.ndarray, warnings: list):
    """The rows the metrics count: those with a duration, exact duplicates (same start, stream,
    name, duration) once; each dropped kind and the rows with a blank Step Id (the unassigned
    bucket) said in ``warnings``. Returns (df indexed 0..n-1, invalid rows, duplicate rows,
    unassigned count).

    Raises:
        InvalidCaptureError: no row has a duration.
    """
    invalid = dur_null
    invalid_rows = tuple(df["row"].to_numpy()[invalid].tolist())
    if invalid_rows:
        warnings.append(f"{path.name}: {len(invalid_rows)} row(s) with N/A or empty "
                        f"{cols['dur_us']} left out (rows {_fmt_rows(invalid_rows)})")
        df = df.loc[~invalid]
    if df.empty:
        raise InvalidCaptureError(f"no row has a valid {cols['dur_us']}", path=path)

    dup = _exact_duplicates(df)
    duplicate_rows = tuple(df["row"].to_numpy()[dup].tolist())
    if duplicate_rows:
        warnings.append(f"{path.name}: {len(duplicate_rows)} exact duplicate row(s) (same start, "
                        f"stream, name, duration) counted once (rows {_fmt_rows(duplicate_rows)})")
        df = df.loc[~dup]
    unassigned = int((df["step"].array.codes < 0).sum())   # blank Step Id: code -1
    if unassigned:
        warnings.append(f"{path.name}: {unassigned} row(s) with a blank Step Id are outside every "
                        f"step (unassigned bucket, not step 0)")
    if invalid_rows or duplicate_rows:   # else the index is already 0..n-1
        df = df.reset_index(drop=True)
    return df, invalid_rows, duplicate_rows, unassigned


def _fmt_rows(rows: tuple, limit: int = 8) -> str:
    shown = ", ".join(str(r) for r in rows[:limit])
    return shown + (f", … {len(rows) - limit} more" if len(rows) > limit else "")
