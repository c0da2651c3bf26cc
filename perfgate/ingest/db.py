"""Reader for the torch_npu DB export (``_export_type: db``; SCHEMAS.md §7).

``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_<rank>.db`` (SQLite, META_DATA
SCHEMA_VERSION 1.x) and ``analysis.db`` are read **read-only** (``mode=ro``, ``immutable``)
into the same canonical tables as the text export:

* kernel table (see :mod:`perfgate.ingest.kernels`): TASK ⋈ COMPUTE_TASK_INFO (compute
  kernels: name, opType, taskType = core type, waitNs) plus COMMUNICATION_OP (one row per
  collective, as kernel_details.csv has); strings resolved through STRING_IDS; steps from
  STEP_TIME windows (a task belongs to the step whose [startNs, endNs] holds its start);
  ``row`` numbers the kernels in time order (evidence names the DB and table);
* trace summary: OVERLAP_ANALYSIS (type 0 Computing, 1 Communication, 2 Communication(Not
  Overlapped), 3 Free; verified against analysis.db StepTraceTime) and STEP_TIME windows;
* step_trace_time: analysis.db StepTraceTime (µs, like the CSV);
* communication.json: analysis.db CommAnalyzerTime (ms -> µs) and CommAnalyzerBandwidth
  (one row per op and link; the per-package-size repetitions are collapsed).
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.errors import InvalidCaptureError
from perfgate.ingest.comm import LINK_COLUMNS, OP_COLUMNS, CommData
from perfgate.ingest.csvread import shown_cell
from perfgate.ingest.kernels import IMPLICIT_STEP, KernelTable, refuse_control_characters
from perfgate.ingest.steps import SIGNED_COLUMNS, TIME_COLUMNS, refuse_repeated_steps
from perfgate.ingest.trace import TraceSummary

SUPPORTED_MAJOR = "1"
_OVERLAP_TYPES = {0: "computing", 1: "comm", 2: "comm_not_overlapped", 3: "free"}
_NA = {"N/A", "", None}


def _connect(path: Path) -> sqlite3.Connection:
    """A read-only connection to an export database, opened ``immutable`` (no lock, no journal:
    the capture may sit on a read-only mount). The path is given as a percent-encoded ``file:``
    URI, so a ``#``, ``?`` or ``%`` in a folder name is part of the path.

    Raises:
        InvalidCaptureError: not a readable SQLite database, or a non-empty ``<db>-wal`` beside
            it: changes the exporter wrote but never checkpointed into the file (it was killed
            or is still writing), which an immutable open would silently leave out."""
    wal = path.with_name(path.name + "-wal")
    try:
        wal_bytes = wal.stat().st_size
    except OSError:
        wal_bytes = 0
    if wal_bytes:
        raise InvalidCaptureError(
            f"{wal.name} ({wal_bytes:,} bytes) holds changes not yet written into {path.name}: the export did "
            f"not finish (the exporter was stopped or is still writing), so the database alone is incomplete",
            path=wal, hint="re-export the capture, or let the exporter finish; perfgate reads exports read-only "
                           "and never applies a write-ahead log")
    try:
        con = sqlite3.connect(f"{Path(path).absolute().as_uri()}?mode=ro&immutable=1", uri=True)
        con.execute("select count(*) from sqlite_master").fetchone()
        return con
    except sqlite3.DatabaseError as e:
        raise InvalidCaptureError(f"not a readable SQLite database: {e}", path=path) from None


def _tables(con) -> set:
    return {r[0] for r in con.execute("select name from sqlite_master where type='table'")}


def _columns(con, table) -> set:
    return {r[1] for r in con.execute(f'pragma table_info("{table}")')}


def schema_version(con, path: Path) -> str:
    """META_DATA SCHEMA_VERSION; raises InvalidCaptureError for a missing or unknown major."""
    if "META_DATA" not in _tables(con):
        raise InvalidCaptureError("no META_DATA table: cannot tell the DB schema version", path=path)
    row = con.execute("select value from META_DATA where name='SCHEMA_VERSION'").fetchone()
    if not row:
        raise InvalidCaptureError("META_DATA has no SCHEMA_VERSION", path=path)
    version = str(row[0])
    if version.split(".")[0] != SUPPORTED_MAJOR:
        raise InvalidCaptureError(f"DB schema version {version} is not supported (perfgate reads "
                                  f"{SUPPORTED_MAJOR}.x)", path=path,
                                  hint="export text as well (export_type ['text', 'db'])")
    return version


# storage-class checks of the numeric columns read (SQLite keeps whatever a writer put in a
# column: text, NULL, a real in an INTEGER column). "ns": an integer (int64 by construction);
# "int": an integer id / number; "number": an integer or a finite real. ``required``: NULL refused.
_INT64_MAX = 9223372036854775807


def _bad_number_sql(column: str, kind: str, required: bool, non_negative: bool = False) -> str:
    c = f'"{column}"'
    if kind in ("ns", "int"):
        bad = f"typeof({c}) not in ('integer', 'null')"
    else:
        bad = (f"typeof({c}) in ('text', 'blob') or (typeof({c}) = 'real' and "
               f"({c} > 1.7976931348623157e308 or {c} < -1.7976931348623157e308))")
    if required:
        bad += f" or typeof({c}) = 'null'"
    if non_negative:
        bad += f" or (typeof({c}) in ('integer', 'real') and {c} < 0)"
    return f"({bad})"


def _stored(value, storage: str) -> str:
    """A stored value as a message quotes it, with its SQLite storage class."""
    if storage == "blob":
        return f"blob x'{bytes(value)[:30].hex()}' ({len(value)} bytes)"
    if storage == "text":
        return f"text {shown_cell(value)}"
    return f"{storage} {value!r}"


def _refuse_bad_numbers(con, path: Path, table: str, specs, where: str = "") -> None:
    """Every value perfgate reads from a numeric column of ``table`` has the storage class it
    needs: ``specs`` is ``[(column, kind, required, non_negative)]`` with kind ``"ns"`` (an
    integer number of nanoseconds), ``"int"`` (an integer: an id, a stream, a type code) or
    ``"number"`` (an integer or a finite real); ``required``: NULL is refused too (else it
    means "none"); ``non_negative``: a value below 0 is refused. Columns absent from the table
    are skipped. ``where``: an SQL condition restricting the rows checked (those read). One
    scan of the table when every value is fine.

    Raises:
        InvalidCaptureError: naming the DB file, the table, the rowid, the column and the value
            as stored (with its storage class: ``text 'abc'``, ``real 1.5e+30``, NULL), and
            how many rows of that column are bad."""
    present = _columns(con, table)
    specs = [s for s in specs if s[0] in present]
    if not specs:
        return
    conds = {s[0]: _bad_number_sql(*s) for s in specs}
    scope = f" and ({where})" if where else ""
    if con.execute(f'select 1 from "{table}" where ({" or ".join(conds.values())}){scope} limit 1').fetchone() is None:
        return
    for column, kind, required, non_negative in specs:
        q = f'from "{table}" where {conds[column]}{scope}'
        hit = con.execute(f'select rowid, "{column}", typeof("{column}") {q} order by rowid limit 1').fetchone()
        if hit is None:
            continue
        rowid, value, storage = hit
        count = con.execute(f"select count(*) {q}").fetchone()[0]
        unit = {"ns": "an integer number of ns", "int": "an integer", "number": "a finite number"}[kind]
        if storage == "null":
            what = f"is NULL: a value is required ({unit})"
        elif storage == "real" and kind in ("ns", "int") and abs(value) > _INT64_MAX:
            what = f"holds {_stored(value, storage)}: outside the int64 range, not {unit}"
        elif storage in ("integer", "real") and non_negative and value < 0:
            what = f"holds {_stored(value, storage)}: negative (no profiler writes a negative {column})"
        else:
            what = f"holds {_stored(value, storage)}, not {unit}"
        more = f" ({count} such row(s))" if count > 1 else ""
        raise InvalidCaptureError(f"{table}.{column} at rowid {rowid} {what}{more}", path=path,
                                  hint="the database was edited or damaged after export: re-export the profiling data")


#: the columns perfgate reads from each table of the exports (a renamed or dropped one crashed:
#: "OperationalError: no such column", exit 70, or read as 0; fresh-user report)
REQUIRED_COLUMNS = {
    "TASK": ("globalTaskId", "startNs", "endNs"),
    "COMPUTE_TASK_INFO": ("globalTaskId", "name"),
    "STRING_IDS": ("id", "value"),
    "COMMUNICATION_OP": ("startNs", "endNs", "opName"),
    "STEP_TIME": ("id", "startNs", "endNs"),
    "OVERLAP_ANALYSIS": ("startNs", "endNs", "type"),
    "StepTraceTime": ("step", "computing", "communication_not_overlapped", "communication", "free"),
    "CommAnalyzerTime": ("step", "type", "hccl_op_name", "group_name", "start_timestamp", "elapse_time",
                         "transit_time", "wait_time", "synchronization_time", "idle_time"),
    "CommAnalyzerBandwidth": ("step", "type", "hccl_op_name", "transport_type", "transit_size", "transit_time"),
}


def require_columns(con, path: Path, table: str) -> None:
    """``table`` of the DB at ``path`` has every column perfgate reads (:data:`REQUIRED_COLUMNS`).

    Raises:
        InvalidCaptureError: naming the DB, the table, the missing column(s) and the columns the
            table has."""
    have = _columns(con, table)
    missing = [c for c in REQUIRED_COLUMNS.get(table, ()) if c not in have]
    if missing:
        raise InvalidCaptureError(
            f"table {table} has no column {', '.join(missing)} (it has: {', '.join(sorted(have))[:300]}): "
            f"not a schema perfgate reads", path=path,
            hint="the database was edited after export, or another exporter wrote it: re-export the profiling data")


def _refuse_dangling_ids(con, path: Path, table: str, columns, where: str = "") -> None:
    """Every string id of ``columns`` in ``table`` (the rows read: ``where``) names a row of
    STRING_IDS: a dangling id would read as a NULL name, type or core type, silently (a kernel
    without a family, a row counted under no type).

    Raises:
        InvalidCaptureError: naming the DB, the table, the rowid, the column and the id, and how
            many rows hold a dangling id there."""
    present = _columns(con, table)
    scope = f" and ({where})" if where else ""
    for column in (c for c in columns if c in present):
        q = (f'from "{table}" where "{column}" is not null and "{column}" not in (select id from STRING_IDS)'
             f"{scope}")
        hit = con.execute(f'select rowid, "{column}" {q} order by rowid limit 1').fetchone()
        if hit is None:
            continue
        count = con.execute(f"select count(*) {q}").fetchone()[0]
        raise InvalidCaptureError(
            f"{table}.{column} at rowid {hit[0]} is STRING_IDS id {hit[1]!r}, which STRING_IDS does not hold"
            + (f" ({count} such row(s))" if count > 1 else "") + ": its text is lost", path=path,
            hint="the database was edited or damaged after export: re-export the profiling data")


def _assign(starts: np.ndarray, windows: list) -> np.ndarray:
    if not windows:
        return np.full(len(starts), IMPLICIT_STEP, dtype=object)
    out = np.full(len(starts), None, dtype=object)
    for step, s, e in windows:
        out[(starts >= s) & (starts <= e) & (out == None)] = step  # noqa: E711
    return out


def read_db_kernels(path: Path, windows: list) -> tuple[KernelTable, sqlite3.Connection]:
    """Kernel table from ascend_pytorch_profiler_<rank>.db (see module docstring).

    Raises:
        InvalidCaptureError: not a readable SQLite database, an unsupported schema version, a
            required table missing, no kernel, a kernel string (name, type, core type, shapes)
            holding a control character (:func:`_refuse_control_strings`), a task ending
            before it starts, or a number read (TASK startNs / endNs / streamId,
            COMPUTE_TASK_INFO string ids and waitNs, COMMUNICATION_OP startNs / endNs / opName /
            opType / waitNs) that is text, NULL where a value is required, or a real where an
            integer (ns, id) is expected (:func:`_refuse_bad_numbers`: names the table, rowid,
            column and the value as stored)."""
    con = _connect(path)
    try:
        return _read_kernels(con, path, windows), con
    except BaseException:
        con.close()
        raise


def _read_kernels(con, path: Path, windows: list) -> KernelTable:
    version = schema_version(con, path)
    tabs = _tables(con)
    for need in ("TASK", "STRING_IDS", "COMPUTE_TASK_INFO"):
        if need not in tabs:
            raise InvalidCaptureError(f"table {need} missing from the DB export", path=path)
        require_columns(con, path, need)
    if "COMMUNICATION_OP" in tabs:
        require_columns(con, path, "COMMUNICATION_OP")
    _refuse_bad_numbers(con, path, "TASK", [("startNs", "ns", True, False), ("endNs", "ns", True, False),
                                            ("streamId", "int", False, False)],
                        where="globalTaskId in (select globalTaskId from COMPUTE_TASK_INFO)")
    _refuse_bad_numbers(con, path, "COMPUTE_TASK_INFO", [
        ("name", "int", True, False), ("opType", "int", False, False), ("taskType", "int", False, False),
        ("inputShapes", "int", False, False), ("waitNs", "number", False, False)],
        where="globalTaskId in (select globalTaskId from TASK)")
    if "COMMUNICATION_OP" in tabs:
        _refuse_bad_numbers(con, path, "COMMUNICATION_OP", [
            ("startNs", "ns", True, False), ("endNs", "ns", True, False), ("opName", "int", True, False),
            ("opType", "int", False, False), ("waitNs", "number", False, False)])
    _refuse_dangling_ids(con, path, "COMPUTE_TASK_INFO", ("name", "opType", "taskType", "inputShapes"),
                         where="globalTaskId in (select globalTaskId from TASK)")
    if "COMMUNICATION_OP" in tabs:
        _refuse_dangling_ids(con, path, "COMMUNICATION_OP", ("opName", "opType"))
    strings = dict(con.execute("select id, value from STRING_IDS"))
    wait = "c.waitNs" if "waitNs" in _columns(con, "COMPUTE_TASK_INFO") else "NULL"
    comp = pd.read_sql_query(
        f"select t.startNs as start_ns, t.endNs as end_ns, t.streamId as stream_id, c.name as name, "
        f"c.opType as op_type, c.taskType as core_type, c.inputShapes as input_shapes, {wait} as wait_ns "
        f"from TASK t join COMPUTE_TASK_INFO c on c.globalTaskId = t.globalTaskId", con)
    comp["is_comm"] = False
    frames = [comp]
    if "COMMUNICATION_OP" in tabs:
        comm = pd.read_sql_query(
            "select startNs as start_ns, endNs as end_ns, opName as name, opType as op_type, "
            "waitNs as wait_ns from COMMUNICATION_OP", con) if "waitNs" in _columns(con, "COMMUNICATION_OP") else \
            pd.read_sql_query("select startNs as start_ns, endNs as end_ns, opName as name, opType as op_type "
                              "from COMMUNICATION_OP", con)
        comm["core_type"] = None
        comm["stream_id"] = None
        comm["is_comm"] = True
        frames.append(comm)
    if comp.empty:   # communication ops alone: no compute kernel, not a rank's capture
        raise InvalidCaptureError(
            f"the DB export holds no compute kernel (TASK ⋈ COMPUTE_TASK_INFO is empty; TASK has "
            f"{con.execute('select count(*) from TASK').fetchone()[0]:,} row(s))", path=path,
            hint="the export was cut or edited: re-export the profiling data")
    df = pd.concat(frames, ignore_index=True)

    def text(col):
        vals = df[col].map(lambda v: strings.get(v) if v is not None and not pd.isna(v) else None)
        return vals.map(lambda v: None if v in _NA else v).astype("string")

    out = pd.DataFrame({
        "start_ns": df["start_ns"].astype("int64"),
        "dur_ns": (df["end_ns"] - df["start_ns"]).astype("int64"),
    })
    out["name"] = text("name")
    out["op_type"] = text("op_type")
    out["core_type"] = text("core_type")
    out.loc[df["is_comm"].to_numpy(), "core_type"] = "COMMUNICATION"
    out["stream_id"] = df["stream_id"].map(lambda v: None if v is None or pd.isna(v) else str(int(v))).astype("string")
    out["input_shapes"] = text("input_shapes") if "input_shapes" in df else pd.NA
    out["wait_us"] = pd.to_numeric(df.get("wait_ns"), errors="coerce").astype("float64") / 1000.0
    out["is_comm"] = df["is_comm"].astype(bool).to_numpy()
    out = out.sort_values(["start_ns", "dur_ns"], kind="stable").reset_index(drop=True)
    # exact duplicates (same start, duration, name, stream), as the text exports' rows are: counted
    # once, with a warning (a TASK table whose rows were inserted twice doubled every count)
    dup = out.duplicated(subset=["start_ns", "dur_ns", "name", "stream_id"], keep="first").to_numpy()
    warnings = []
    if dup.any():
        warnings.append(f"{path.name}: {int(dup.sum()):,} exact duplicate task(s) (same start, stream, name, "
                        f"duration) counted once")
        out = out.loc[~dup].reset_index(drop=True)
    out["step"] = pd.array(_assign(out["start_ns"].to_numpy(), windows), dtype="string")
    out.insert(0, "row", np.arange(1, len(out) + 1, dtype=np.int64))
    out["end_ns"] = out["start_ns"] + out["dur_ns"]
    out = out[["row", "step", "name", "op_type", "core_type", "stream_id", "start_ns", "dur_ns", "wait_us",
               "input_shapes", "end_ns", "is_comm"]]
    _refuse_control_strings(path, out, strings)
    bad = (out["dur_ns"] < 0).to_numpy()
    if bad.any():   # as a negative Duration(us) in the CSV exports: a value no profiler writes
        r = out.iloc[int(np.argmax(bad))]
        raise InvalidCaptureError(
            f"task {r['name']!r} (stream {r['stream_id']}) ends before it starts: startNs {int(r['start_ns'])}, "
            f"endNs {int(r['end_ns'])} ({int(bad.sum())} such task(s))", path=path,
            hint="the database was edited or damaged after export: re-export the profiling data")
    nameless = out["name"].isna().to_numpy()
    if nameless.any():   # as an empty Name cell of the CSV exports: every task is named
        r = out.iloc[int(np.argmax(nameless))]
        raise InvalidCaptureError(
            f"a task has no name (its name id is missing from STRING_IDS, or the string is empty or N/A): "
            f"startNs {int(r['start_ns'])}, stream {r['stream_id']} ({int(nameless.sum())} such task(s))",
            path=path, hint="the database was edited or damaged after export: re-export the profiling data")
    invalid = ()
    compute = ~out["is_comm"]
    unassigned = int(out["step"].isna().sum())
    if unassigned:
        warnings.append(f"{path.name}: {unassigned} task(s) outside every STEP_TIME window (unassigned bucket)")
    kt = KernelTable(path=path, df=out, columns={"source": "TASK+COMPUTE_TASK_INFO+COMMUNICATION_OP"},
                     variant=f"db/schema {version}", ncols=0,
                     type_available=bool(out.loc[compute, "op_type"].notna().any()),
                     core_available=bool(out.loc[compute, "core_type"].notna().any()),
                     invalid_rows=invalid, unassigned_rows=unassigned, warnings=tuple(warnings))
    return kt


# the kernel table's text columns and where the DB holds them: (COMPUTE_TASK_INFO column,
# COMMUNICATION_OP column), each an id into STRING_IDS
_TEXT_SOURCES = {"name": ("name", "opName"), "op_type": ("opType", "opType"), "core_type": ("taskType", None),
                 "input_shapes": ("inputShapes", None)}


def _refuse_control_strings(path: Path, out: pd.DataFrame, strings: dict) -> None:
    """The kernel text columns resolved through STRING_IDS hold no control character (NUL, ESC,
    DEL, ...: :func:`perfgate.ingest.kernels.refuse_control_characters`, the check of the text
    exports' cells).

    Raises:
        InvalidCaptureError: naming the DB, the kernel row (``row``: kernels in start-time
            order), the table and column, the STRING_IDS id and the value (repr-escaped)."""
    for c, (compute, comm) in _TEXT_SOURCES.items():
        def error(i, value, compute=compute, comm=comm):
            r = out.iloc[i]
            table, column = ("COMMUNICATION_OP", comm) if r["is_comm"] else ("COMPUTE_TASK_INFO", compute)
            sid = next((k for k, v in strings.items() if v == value), None)
            return InvalidCaptureError(
                f"{table}.{column} holds a control character (no profiler writes one): {shown_cell(value)} "
                f"(STRING_IDS id {sid}; rows number the kernels in start-time order)",
                path=path, row=int(r["row"]))
        refuse_control_characters(path, out[c], c, error)


def step_windows(con, path: Path) -> list:
    """[(step label, start_ns, end_ns)] from STEP_TIME (empty when the table is absent).

    Raises:
        InvalidCaptureError: an id, startNs or endNs that is NULL, text or a real (not an
            integer; :func:`_refuse_bad_numbers`), naming ``path``, the rowid and the value."""
    if "STEP_TIME" not in _tables(con):
        return []
    require_columns(con, path, "STEP_TIME")
    _refuse_bad_numbers(con, path, "STEP_TIME", [("id", "int", True, False), ("startNs", "ns", True, False),
                                                 ("endNs", "ns", True, False)])
    return [(str(i), int(s), int(e)) for i, s, e in con.execute("select id, startNs, endNs from STEP_TIME")]


def check_db_identity(con, path: Path, rank: int, rank_source: str) -> None:
    """The rank and device a DB export says it holds agree with the rank folder's: the file name's
    ``ascend_pytorch_profiler_<rank>.db``, every RANK_DEVICE_MAP ``rankId`` (when the table exists)
    and one TASK ``deviceId``. Two ranks' ASCEND_PROFILER_OUTPUT folders swapped were read as
    each other's (rank 1's warnings reported as rank 0's), and TASK rows of two devices were summed
    (the text export refuses both, so the DB export does too).

    Raises:
        InvalidCaptureError: the file name or RANK_DEVICE_MAP names another rank than ``rank``
            (from ``rank_source``), or TASK holds several devices."""
    from perfgate.ingest.discover import DB_FILE_RE
    m = DB_FILE_RE.fullmatch(path.name)
    named = int(m.group(1)) if m else None
    tabs = _tables(con)
    mapped = []
    if "RANK_DEVICE_MAP" in tabs and {"rankId"} <= _columns(con, "RANK_DEVICE_MAP"):
        mapped = sorted({int(r) for (r,) in con.execute("select distinct rankId from RANK_DEVICE_MAP")
                         if isinstance(r, int) and r >= 0})
    said = [f"its file name says rank {named}"] if named is not None and named != rank else []
    if mapped and rank not in mapped:
        said.append(f"RANK_DEVICE_MAP says rank {', '.join(map(str, mapped))}")
    if said:
        raise InvalidCaptureError(
            f"holds another rank than its folder: {'; '.join(said)}, the folder rank {rank} ({rank_source})",
            path=path, hint="the ASCEND_PROFILER_OUTPUT folders of two ranks were moved or swapped: restore "
                            "each rank's own export")
    if "TASK" in tabs and "deviceId" in _columns(con, "TASK"):
        devices = [d for (d,) in con.execute("select distinct deviceId from TASK where deviceId is not null limit 3")]
        if len(devices) > 1:
            raise InvalidCaptureError(
                f"TASK holds {len(devices)}{'+' if len(devices) == 3 else ''} devices in one rank folder "
                f"(deviceId {', '.join(map(str, sorted(devices, key=str)))}): perfgate fingerprints one device per "
                f"rank and never sums devices", path=path,
                hint="profile one NPU per process (one rank folder per device)")


def read_db_trace(con, path: Path, windows: list) -> TraceSummary:
    """OVERLAP_ANALYSIS + STEP_TIME as a :class:`TraceSummary` (overlap empty when absent).

    Raises:
        InvalidCaptureError: an OVERLAP_ANALYSIS startNs, endNs or type that is NULL, text or
            a real (:func:`_refuse_bad_numbers`), naming ``path``, the rowid and the value."""
    rows = []
    if "OVERLAP_ANALYSIS" in _tables(con):
        require_columns(con, path, "OVERLAP_ANALYSIS")
        _refuse_bad_numbers(con, path, "OVERLAP_ANALYSIS", [("startNs", "ns", True, False),
                                                            ("endNs", "ns", True, False), ("type", "int", True, False)])
        for s, e, t in con.execute("select startNs, endNs, type from OVERLAP_ANALYSIS"):
            if t in _OVERLAP_TYPES:
                rows.append((_OVERLAP_TYPES[t], int(s), int(e) - int(s)))
    overlap = pd.DataFrame(rows, columns=["kind", "start_ns", "dur_ns"]).astype({"start_ns": "int64", "dur_ns": "int64"})
    overlap["end_ns"] = overlap["start_ns"] + overlap["dur_ns"]
    steps = pd.DataFrame(windows, columns=["step", "start_ns", "end_ns"]).astype({"start_ns": "int64", "end_ns": "int64"})
    return TraceSummary(path=path, n_events=len(rows), processes={}, overlap=overlap, steps=steps,
                        dropped_negative=0)


_STEP_TRACE_NAMES = {"computing": "computing_us", "communication_not_overlapped": "comm_not_overlapped_us",
                     "overlapped": "overlapped_us", "communication": "comm_us", "free": "free_us",
                     "stage": "stage_us", "bubble": "bubble_us",
                     "communication_not_overlapped_and_exclude_receive": "comm_not_overlapped_excl_recv_us",
                     "preparing": "preparing_us"}
_COMM_TIME_COLUMNS = ("start_timestamp", "elapse_time", "transit_time", "wait_time", "synchronization_time",
                      "idle_time")


def read_analysis_db(path: Path) -> tuple[pd.DataFrame | None, CommData | None]:
    """analysis.db -> (step_trace table like :func:`read_step_trace`, CommData) or Nones.

    Raises:
        InvalidCaptureError: not a readable SQLite database, or a CommAnalyzerTime /
            CommAnalyzerBandwidth op, group, type or link name holding a control character
            (:func:`perfgate.ingest.kernels.refuse_control_characters`; ``row``: the table's
            row in read order), or a StepTraceTime time, CommAnalyzerTime time or
            CommAnalyzerBandwidth transit size / time that is text, NULL or not finite, or a
            negative StepTraceTime time other than overlapped / preparing
            (:func:`_refuse_bad_numbers`: names the table, rowid, column and value as stored),
            or a StepTraceTime step on two rows
            (:func:`perfgate.ingest.steps.refuse_repeated_steps`)."""
    con = _connect(path)
    try:
        return _read_analysis(con, path)
    finally:
        con.close()


def _read_analysis(con, path: Path) -> tuple[pd.DataFrame | None, CommData | None]:
    tabs = _tables(con)
    st = None
    if "StepTraceTime" in tabs:
        require_columns(con, path, "StepTraceTime")
        cols = _columns(con, "StepTraceTime")
        _refuse_bad_numbers(con, path, "StepTraceTime", [(src, "number", True, dst not in SIGNED_COLUMNS)
                                                         for src, dst in _STEP_TRACE_NAMES.items()])
        df = pd.read_sql_query("select * from StepTraceTime", con)
        names = _STEP_TRACE_NAMES
        st = pd.DataFrame({"row": np.arange(1, len(df) + 1)})
        st["step"] = df["step"].map(lambda v: IMPLICIT_STEP if v in _NA else str(v).lstrip("0") or "0").astype("string")
        st["device_id"] = df["deviceId"].astype("string") if "deviceId" in cols else pd.NA
        for src, dst in names.items():
            st[dst] = pd.to_numeric(df[src], errors="coerce").astype("float64") if src in cols else np.nan
        st = st[["row", "step", "device_id", *TIME_COLUMNS]]
        refuse_repeated_steps(path, st, "StepTraceTime ")
    comm = None
    if "CommAnalyzerTime" in tabs:
        require_columns(con, path, "CommAnalyzerTime")
        # non-negative, as communication.json's fields are (perfgate.ingest.comm: "a finite non-negative number")
        _refuse_bad_numbers(con, path, "CommAnalyzerTime", [(c, "number", True, True) for c in _COMM_TIME_COLUMNS])
        t = pd.read_sql_query("select * from CommAnalyzerTime", con)
        ops = pd.DataFrame({
            "step": t["step"].astype(str).str.replace("step", "", regex=False).replace("", IMPLICIT_STEP),
            "kind": t["type"].astype(str), "op": t["hccl_op_name"].astype(str), "group": t["group_name"].astype(str),
            "start_us": pd.to_numeric(t["start_timestamp"], errors="coerce"),
            "elapse_us": t["elapse_time"].astype(float) * 1000, "transit_us": t["transit_time"].astype(float) * 1000,
            "wait_us": t["wait_time"].astype(float) * 1000, "sync_us": t["synchronization_time"].astype(float) * 1000,
            "idle_us": t["idle_time"].astype(float) * 1000})[OP_COLUMNS]
        links = pd.DataFrame(columns=LINK_COLUMNS)
        if "CommAnalyzerBandwidth" in tabs:
            require_columns(con, path, "CommAnalyzerBandwidth")
            _refuse_bad_numbers(con, path, "CommAnalyzerBandwidth", [("transit_size", "number", True, True),
                                                                     ("transit_time", "number", True, True)])
            b = pd.read_sql_query("select * from CommAnalyzerBandwidth", con)
            b = b.drop_duplicates(subset=["step", "type", "hccl_op_name", "transport_type"])
            links = pd.DataFrame({"step": b["step"].astype(str).str.replace("step", "", regex=False),
                                  "kind": b["type"].astype(str), "op": b["hccl_op_name"].astype(str),
                                  "link": b["transport_type"].astype(str),
                                  "size_mb": b["transit_size"].astype(float),
                                  "time_us": b["transit_time"].astype(float) * 1000})[LINK_COLUMNS]
        for df, col, table, column in ((ops, "op", "CommAnalyzerTime", "hccl_op_name"),
                                       (ops, "group", "CommAnalyzerTime", "group_name"),
                                       (ops, "kind", "CommAnalyzerTime", "type"),
                                       (links, "op", "CommAnalyzerBandwidth", "hccl_op_name"),
                                       (links, "link", "CommAnalyzerBandwidth", "transport_type")):
            refuse_control_characters(path, df[col], column, lambda i, v, df=df, table=table, column=column: (
                InvalidCaptureError(f"{table}.{column} holds a control character (no profiler writes one): "
                                    f"{shown_cell(v)}", path=path, row=int(df.index[i]) + 1)))
        comm = CommData(path=path, ops=ops, links=links)
    return st, comm
