"""Loading a capture's ranks: each rank's files (kernel table, step_trace_time.csv,
communication.json, timeline, or the DB export) read into a :class:`RankCapture`.
Re-exported by :mod:`perfgate.ingest`; entry point :func:`load_capture`."""
from __future__ import annotations

import re

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.errors import InvalidCaptureError, PerfgateError
from perfgate.terms import TraceMode
from perfgate.ingest.comm import read_communication
from perfgate.ingest.discover import RankLocation, discover, mixed_levels_warning, present_file
from perfgate.ingest.kernels import IMPLICIT_STEP, KernelTable, read_kernels
from perfgate.ingest.opstat import known_layout, read_op_statistic
from perfgate.ingest.steps import read_step_trace
from perfgate.ingest.trace import TraceSummary, read_trace
from perfgate.ingest import traceahead
from perfgate.ingest import validity

__all__ = ["Capture", "RankCapture", "load_capture", "load_rank", "as_capture_error", "AUTO_TRACE_BYTES",
           "TRACE_AHEAD_BYTES", "trace_worth_reading_ahead"]

# with_trace="auto": a trace_view.json larger than this is skipped when step_trace_time.csv
# already carries what the self-checks need (streaming runs at ~15-30 MB/s).
AUTO_TRACE_BYTES = 256 << 20

# the tables a partial rank may hold without kernel_details.csv (MindSpeed --profile-ranks-style
# subsets: SOURCES.md 1e rank 1); such a rank contributes its step and communication metrics only
PARTIAL_TABLES = ("step_trace_time.csv", "communication.json")
# tables the export derives from the same kernel tasks as kernel_details.csv: beside them a missing
# kernel table was lost (an interrupted export, a deleted file), never a partial rank (the real
# partial rank holds none of them)
KERNEL_DERIVED = ("op_statistic.csv", "operator_details.csv", "l2_cache.csv")


@dataclass(frozen=True)
class RankCapture:
    """One rank's parsed files. Optional files are None when absent (see ``missing``).
    ``kernels`` is None for a partial rank (only :data:`PARTIAL_TABLES`); :attr:`tables`
    lists what the rank holds (the coverage recorded in the fingerprint)."""
    rank: int
    location: RankLocation
    kernels: KernelTable | None
    step_trace: pd.DataFrame | None
    step_trace_path: Path | None
    comm: pd.DataFrame | None
    comm_path: Path | None
    trace: TraceSummary | None
    trace_path: Path | None
    missing: tuple = ()
    warnings: tuple = ()
    host_clock_ok: bool = True  # False: the timeline's host step windows are on another time base
    lost_launches: dict = field(default_factory=dict)  # validity.lost_launches: {step: counts}
    op_statistic: pd.DataFrame | None = None   # perfgate.ingest.opstat (text / raw msprof exports)
    op_statistic_path: Path | None = None

    @property
    def tables(self) -> tuple:
        """Tables this rank holds, by role: ``kernels``, ``step_trace``, ``comm``, ``trace``."""
        return tuple(t for t, v in (("kernels", self.kernels), ("step_trace", self.step_trace),
                                    ("comm", self.comm), ("trace", self.trace)) if v is not None)


@dataclass(frozen=True)
class Capture:
    """A whole capture: its root and ranks (sorted by rank id)."""
    path: Path
    ranks: tuple
    warnings: tuple = field(default_factory=tuple)

    @property
    def world_size(self) -> int:
        return len(self.ranks)


def _kernel_source(out: Path, layout: str) -> tuple[str, list]:
    """Which export to read for a rank: ``("text", [csv files])`` or ``("db", [db file])``.

    Rule when both exist: the text export is read and the DB ignored (a warning says so), so
    nothing is ever counted twice. ``("partial", [])``: a torch_npu rank the profiler left with
    only its summary tables (:data:`PARTIAL_TABLES`; SOURCES.md 1e rank 1) and no timeline nor
    ``*.done`` marker that would say the kernel export was expected, nor a table derived from the
    kernel tasks (:data:`KERNEL_DERIVED`).

    Raises:
        InvalidCaptureError: nothing usable (no kernel table, no summary table), or a timeline /
            ``*.done`` marker / kernel-derived table without the kernel table (an interrupted
            export, a lost file).
    """
    if layout == "torch_npu":
        p = out / "kernel_details.csv"
        if p.is_file():
            return "text", [p]
    slices = sorted(out.glob("op_summary*.csv"), key=_slice_key)
    if slices:
        _refuse_mixed_exports(out, slices)
        return "text", slices
    dbs = sorted(out.glob("ascend_pytorch_profiler*.db"))
    if dbs:
        return "db", dbs[:1]
    done = [p.name for p in out.parent.glob("*.done")] + [p.name for p in out.glob("*.done")]
    derived = [f for f in KERNEL_DERIVED if (out / f).is_file()]
    if layout == "torch_npu" and not done and not derived and not (out / "trace_view.json").is_file() \
            and any((out / f).is_file() for f in PARTIAL_TABLES):
        return "partial", []
    extra = (f" although {done[0]} says the analysis finished" if done else
             f" although {', '.join(derived)} (derived from the same kernel tasks) "
             f"{'is' if len(derived) == 1 else 'are'} present" if derived else "")
    raise InvalidCaptureError(
        f"incomplete profile: no kernel_details.csv{extra}", path=out,
        hint="the export did not produce the kernel table; re-run the profiler's analyse step")


_SLICE = re.compile(r"^op_summary_slice_(\d+)_(\d+)\.csv$")
_UNSLICED = re.compile(r"^op_summary_(\d{14})\.csv$")   # CANN >= 8.0.RC1: op_summary_<YYYYMMDDhhmmss>.csv
_STAT_STAMP = re.compile(r"^op_statistic_(\d{14})\.csv$")   # raw msprof op_statistic_<YYYYMMDDhhmmss>.csv


def _refuse_mixed_exports(out: Path, files: list) -> None:
    """Several op_summary files in one output folder are read as one table only when their names
    say they are the slices of one export, with none lost. msprof (``FileSliceHelper``) writes a
    summary of more than ``CSV_LIMIT`` (1,000,000) rows as ``op_summary_slice_<k>_<ts>.csv`` for
    k = 0, 1, 2, ... (one generation names the first file ``op_summary_<ts>.csv`` and numbers the
    rest from 1), full slices first and the remainder last, each file stamped with the time it
    was written: the stamps of one export rise with ``k`` and may differ by seconds.

    Refused: two exports (``op_summary_<ts1>.csv`` and ``<ts2>``: read together, every call
    counts twice, a false REGRESSION), repeated slice numbers, a missing slice number (the
    table would be read without a third of its rows and could be saved as a baseline), and stamps
    that fall as ``k`` rises (not written in one pass). The slices' row counts are checked after
    reading (:func:`_refuse_uneven_slices`). Names of other generations (CANN 7.0
    ``op_summary_<dev>_<model>_<ts>.csv``) are read as before.

    Raises:
        InvalidCaptureError: the files are provably from more than one export, or a slice is
            missing (names them)."""
    if len(files) < 2:
        return
    sliced = {f.name: _SLICE.match(f.name) for f in files if _SLICE.match(f.name)}
    whole = [f.name for f in files if _UNSLICED.match(f.name)]
    ks = sorted(int(m.group(1)) for m in sliced.values())
    why = missing = None
    if len(whole) > 1:
        why = f"{len(whole)} exports ({', '.join(whole[:3])})"
    elif sliced and whole and 0 in ks:
        why = f"a sliced export ({sorted(sliced)[0]}) beside an unsliced one ({whole[0]})"
    elif sliced:
        if len(set(ks)) < len(ks):
            why = f"slice numbers repeated ({ks})"
        else:
            first = 1 if whole else 0   # op_summary_<ts>.csv is slice 0 of the generation that numbers from 1
            missing = sorted(set(range(first, ks[-1] + 1)) - set(ks))
            stamps = ([_UNSLICED.match(whole[0]).group(1)] if whole else []) + \
                [m.group(2) for m in sorted(sliced.values(), key=lambda m: int(m.group(1)))]
            fall = next((i for i in range(1, len(stamps)) if stamps[i] < stamps[i - 1]), None)
            if not missing and fall is not None:
                why = (f"slice stamps that fall as the slice number rises ({stamps[fall - 1]} then "
                       f"{stamps[fall]}): not written in one pass")
    if missing:
        present = (["op_summary_<ts>.csv as slice 0"] if whole else []) + [str(k) for k in ks]
        raise InvalidCaptureError(
            f"op_summary slice{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing[:8]))} "
            f"missing (slices present: {', '.join(present[:12])}): the kernel table would be read "
            f"without its rows", path=out,
            hint="msprof numbers the slices of one export 0, 1, 2, ... with none left out; restore the "
                 "missing file or re-export the run")
    if why:
        raise InvalidCaptureError(
            f"op_summary files of more than one export in one folder: {why}; they would be summed as "
            f"one capture's slices", path=out,
            hint="keep one export's op_summary files (op_summary_<ts>.csv, or op_summary_slice_<k>_<ts>.csv "
                 "numbered from 0) and move the others out; re-export if unsure which belongs to this run")


def _refuse_uneven_slices(tables: list) -> None:
    """The slices of one export (:func:`_refuse_mixed_exports`) hold the same number of data rows
    each (msprof's ``CSV_LIMIT``, 1,000,000), but the last, which holds the remainder (no more).
    Checked on the rows as written (invalid and repeated rows included), only when every name is
    ``op_summary_slice_<k>_<ts>.csv`` or (slice 0 of one generation) ``op_summary_<ts>.csv``.

    Raises:
        InvalidCaptureError: a slice other than the last holds another number of rows than the
            first, or the last holds more (names the file and both counts)."""
    if len(tables) < 2 or not all(_SLICE.match(t.path.name) or _UNSLICED.match(t.path.name) for t in tables):
        return
    counts = [len(t.df) + len(t.invalid_rows) + len(t.duplicate_rows) for t in tables]
    full = counts[0]
    for t, n, last in zip(tables, counts, [False] * (len(tables) - 1) + [True]):
        if (n > full) if last else (n != full):
            raise InvalidCaptureError(
                f"op_summary slice {t.path.name} holds {n:,} rows where {tables[0].path.name} holds {full:,}: "
                f"slices of one export are full ({full:,} rows each) but the last, so these are not one "
                f"export's slices, or a slice was cut short", path=t.path,
                hint="msprof writes full slices and the remainder last; re-export the run")


def _refuse_foreign_headers(files: list) -> None:
    """The files read as one kernel table (the slices of one export) share one header: msprof
    writes every slice of an export with the same columns. A slice whose header differs (another
    export's, e.g. a 37-column L2Cache op_summary among 46-column PipeUtilization slices) would be
    read as rows of this table, its columns matched by name.

    Raises:
        InvalidCaptureError: naming the slice, both column counts and the first column that
            differs."""
    from perfgate.ingest.csvread import read_header
    if len(files) < 2:
        return
    first = read_header(files[0])
    for f in files[1:]:
        h = read_header(f)
        if h != first:
            i = next((i for i, (a, b) in enumerate(zip(first, h)) if a != b), min(len(first), len(h)))
            theirs = repr(h[i]) if i < len(h) else "nothing"
            mine = repr(first[i]) if i < len(first) else "nothing"
            raise InvalidCaptureError(
                f"op_summary slice {f.name} has a {len(h)}-column header where {files[0].name} has {len(first)} "
                f"columns (column {i + 1}: {theirs} where {files[0].name} has {mine}): slices of one export "
                f"share one header, so this file is another export's", path=f,
                hint="keep one export's op_summary files in the folder, or re-export the run")


def _refuse_slices_of_other_devices(tables: list) -> None:
    """The slices of one kernel table name one ``Device_id`` (each slice alone is checked by
    :func:`perfgate.ingest.kernels.read_kernels`; a rank folder is one device).

    Raises:
        InvalidCaptureError: naming the first slice on another device and both devices."""
    named = [t for t in tables if t.device is not None]
    for t in named[1:]:
        if t.device != named[0].device:
            raise InvalidCaptureError(
                f"op_summary slice {t.path.name} runs on Device_id {t.device}, {named[0].path.name} on Device_id "
                f"{named[0].device}: one rank folder is one device, so these are not one export's slices",
                path=t.path, hint="keep one device's export in the folder, or re-export the run")


def _slice_key(p: Path):
    """op_summary_slice_<k>_<ts>.csv sort by k numerically; unsliced files first."""
    import re
    m = re.search(r"slice_(\d+)", p.name)
    return (int(m.group(1)) if m else -1, p.name)


def _read_slices(files: list, pmu: bool | str = False, shapes: bool = False) -> KernelTable:
    """One kernel table from msprof op_summary slices, in slice order. Rows keep one running
    number; a warning maps row ranges to slice files. Exact duplicates across slices are
    reported and counted once (same rule as within one file).

    Raises:
        InvalidCaptureError: a slice cannot be read (:func:`read_kernels`), the slices are not
            one export's (:func:`_refuse_foreign_headers`, :func:`_refuse_slices_of_other_devices`,
            :func:`_refuse_uneven_slices`), or every row of the table has Duration 0
            (no device time)."""
    _refuse_foreign_headers(files)
    tables = [read_kernels(f, pmu=pmu, shapes=shapes) for f in files]
    _refuse_slices_of_other_devices(tables)
    if not any(bool(t.df["dur_ns"].to_numpy().any()) for t in tables):
        # every share would be 0 / 0 (read as 0 %) and every time 0: not a capture of any work.
        # Judged on the whole table: one slice of zero-duration rows is possible in a real export
        t = tables[0]
        n = sum(len(x.df) for x in tables)
        raise InvalidCaptureError(f"every one of its {n:,} row(s) has {t.columns['dur_us']} 0: no device time "
                                  f"was recorded", path=t.path if len(tables) == 1 else t.path.parent,
                                  hint="the export lost the task durations; re-export the run")
    if len(tables) == 1:
        return tables[0]
    _refuse_uneven_slices(tables)
    import pandas as _pd
    frames, spans, offset = [], [], 0
    for t in tables:
        d = t.df.copy()
        d["row"] = d["row"] + offset
        spans.append(f"{t.path.name} rows {offset + 1}-{offset + int(t.df['row'].max())}")
        offset += int(t.df["row"].max())
        frames.append(d)
    df = _pd.concat(frames, ignore_index=True)
    dup = df.duplicated(subset=["start_ns", "dur_ns", "name", "stream_id"], keep="first")
    warnings = [w for t in tables for w in t.warnings]
    warnings.append(f"{len(files)} op_summary slices read in order: " + "; ".join(spans))
    dups = tuple(int(r) for r in df.loc[dup, "row"])
    if dups:
        warnings.append(f"{len(dups)} row(s) repeated across slices counted once (rows {dups[:8]})")
        df = df.loc[~dup].reset_index(drop=True)
    first = tables[0]
    return KernelTable(path=first.path, df=df, columns=first.columns, variant=first.variant + f"/{len(files)} slices",
                       ncols=first.ncols, type_available=all(t.type_available for t in tables),
                       core_available=all(t.core_available for t in tables),
                       invalid_rows=tuple(r for t in tables for r in t.invalid_rows),
                       duplicate_rows=tuple(r for t in tables for r in t.duplicate_rows) + dups,
                       unassigned_rows=int(df["step"].isna().sum()), warnings=tuple(warnings),
                       device=next((t.device for t in tables if t.device is not None), None),
                       slices=tuple(t.path.name for t in tables))


def load_rank(loc: RankLocation, *, with_trace=TraceMode.READ, pmu: bool | str = False, shapes: bool = False,
              trace_pool=None, while_scanning=None, after_kernels=None) -> RankCapture:
    """Read one rank's files (text export, raw msprof summaries, or the DB export).

    ``trace_pool``: an optional ``concurrent.futures.Executor`` of other *processes* (the
    caller owns it; :func:`perfgate.app.run.local_pool`). When given, a trace_view.json of at least
    :data:`TRACE_AHEAD_BYTES` that will be read is scanned there while this process reads the
    kernel table and the other files: the same :func:`~perfgate.ingest.trace.read_trace`, the
    same result and errors, raised at the same point as a serial read (a kernel-table error is
    still reported first). A pool that breaks (its process killed) falls back to reading here.
    ``while_scanning``: called with the :class:`KernelTable` once everything but the timeline
    is read, when the timeline is being scanned in ``trace_pool`` (work that needs only the
    kernel table fills the wait); it must not raise.
    ``after_kernels``: called with the :class:`KernelTable` as soon as it is read and its values
    checked, before the rank's other files are read (work on the kernel table can start beside
    them, e.g. :func:`perfgate.metrics.fingerprint.structure_beside`); it must not raise.

    Raises:
        InvalidCaptureError: kernel table missing or unreadable, or any present optional file
            (step_trace_time.csv, communication.json, trace_view.json, analysis.db) unreadable,
            or the rank's tables do not fit in the memory available (MemoryError / Arrow out
            of memory): a clear error naming the rank's files and sizes, never a partial or
            empty table. trace_view.json itself is streamed in bounded memory.
    """
    try:
        _check_memory(loc)
        rank = _load_rank(loc, with_trace=TraceMode.of(with_trace), pmu=pmu, shapes=shapes, trace_pool=trace_pool,
                          while_scanning=while_scanning, after_kernels=after_kernels)
        if loc.warnings:   # what discovery noticed about the rank folder (identical profiler_info copies)
            rank = replace(rank, warnings=tuple(loc.warnings) + tuple(rank.warnings))
        return rank
    except MemoryError as e:
        found = []
        for f in loc.output_dir.glob("*"):
            try:
                if f.is_file():
                    found.append((f.stat().st_size, f.name))
            except OSError:
                pass
        sizes = [f"{name} {size / 2**20:,.1f} MiB" for size, name in sorted(found, reverse=True)[:3]]
        raise InvalidCaptureError(
            f"rank {loc.rank} does not fit in the memory available to this process "
            f"({', '.join(sizes) or 'files'}{'; ' + str(e) if str(e) else ''}): nothing was compared, and nothing was written to baselines or history",
            path=loc.output_dir,
            hint="kernel_details.csv needs about 60 bytes per row in memory; raise the memory limit, use "
                 "fewer --workers, or fingerprint the ranks on a dask cluster (--scheduler)") from None


def memory_budget() -> int | None:
    """Bytes this process can still allocate: the smallest of RLIMIT_AS − VmSize, the cgroup
    v2 ``memory.max − memory.current`` and ``MemAvailable``; None when none is known."""
    import resource
    out = []
    try:
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
            out.append(soft - vm)
    except (OSError, StopIteration, ValueError):
        pass
    try:
        mx = open("/sys/fs/cgroup/memory.max").read().strip()
        if mx != "max":
            out.append(int(mx) - int(open("/sys/fs/cgroup/memory.current").read()))
    except (OSError, ValueError):
        pass
    try:
        out.append(next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable")))
    except (OSError, StopIteration, ValueError):
        pass
    return min(out) if out else None


def memory_needed(csv_bytes: int) -> int:
    """Heuristic peak memory (bytes) to parse a kernel table of ``csv_bytes``: 1.2 x the file
    plus 160 MiB of Arrow block buffers, measured on synthetic 0.3M and 1M-row files (peak RSS
    +225 MiB for 101 MiB, +373 MiB for 336 MiB)."""
    return int(1.2 * csv_bytes) + (160 << 20)


def _check_memory(loc: RankLocation) -> None:
    """Raise MemoryError before parsing when the rank's kernel table cannot fit (see
    :func:`memory_needed`): Arrow aborts the whole process when an allocation inside its
    reader threads fails, so the budget is checked first."""
    files = [loc.output_dir / "kernel_details.csv", *loc.output_dir.glob("op_summary*.csv")]
    size = 0
    for f in files:
        try:
            size += f.stat().st_size
        except OSError:
            pass
    if not size:
        return
    budget = memory_budget()
    if budget is not None and memory_needed(size) > budget:
        raise MemoryError(f"needs about {memory_needed(size) / 2**20:,.0f} MiB, {max(budget, 0) / 2**20:,.0f} MiB left")


def _refuse_unlabelled_kernels(kernels, step_trace, st_path) -> None:
    """A kernel table without a Step Id column forms one implicit step; when the rank's
    step_trace_time.csv lists real ProfilerStep ids the two files disagree (not one export, or
    the table was written without steps), and per-step counts from the one block would be N
    steps' worth: fail closed instead of judging them.

    Raises:
        InvalidCaptureError: naming the kernel file and the steps step_trace_time.csv lists.
    """
    step = kernels.df["step"]
    if not hasattr(step, "cat") or len(step.cat.categories) != 1 or step.cat.categories[0] != IMPLICIT_STEP:
        return
    ids = [x for x in step_trace["step"].astype(str).unique() if x != IMPLICIT_STEP]
    if ids:
        shown = ", ".join(ids[:8]) + (" ..." if len(ids) > 8 else "")
        raise InvalidCaptureError(
            f"has no Step Id column, while {st_path.name} lists {len(ids)} step(s) ({shown}): the kernel rows "
            f"cannot be split into those steps, and per-step counts from one unlabelled block would be "
            f"{len(ids)} steps' worth", path=kernels.path,
            hint="re-export the capture (torch_npu writes Step Id whenever the profiler ran with steps)")


def _refuse_other_device(kernels, step_trace, st_path: Path) -> None:
    """step_trace_time.csv and the kernel table of one rank folder describe one device: when both
    name a ``Device_id`` (torch_npu writes it in both from CANN 8.x; raw msprof op_summary) they
    name the same one. Another id in step_trace_time.csv is another device's step summary beside
    this device's kernels (a file copied in from another rank's folder, or an edit): its step
    times would be judged against kernel rows they do not describe.

    Raises:
        InvalidCaptureError: naming step_trace_time.csv's row, its device, and the kernel table's."""
    if kernels.device is None or "device_id" not in step_trace:
        return
    dev = step_trace["device_id"].astype("string").str.strip()
    other = dev.notna() & (dev != "") & (dev != kernels.device)
    if bool(other.any()):
        i = int(np.argmax(other.to_numpy(dtype=bool)))
        raise InvalidCaptureError(
            f"says Device_id {dev.iloc[i]}, while every row of "
            f"{kernels.path.name} runs on Device_id {kernels.device}: the step times are another device's, "
            f"not those of the kernels beside them", path=st_path, row=int(step_trace["row"].iloc[i]),
            hint="keep the step_trace_time.csv the profiler wrote with this rank's kernel table, or re-export the run")


def _timeline_path(loc: RankLocation) -> tuple[Path, list]:
    """The rank's timeline file (trace_view.json; raw msprof: its one msprof_<ts>.json, sliced
    timelines are not read) and the msprof timeline slices found."""
    out = loc.output_dir
    if loc.layout != "msprof":
        return out / "trace_view.json", []
    timelines = sorted(out.glob("msprof_*.json"), key=_slice_key)
    return (timelines[0] if len(timelines) == 1 else out / "msprof.json"), timelines


def _trace_skipped(with_trace: TraceMode, size: int, has_step_trace: bool) -> bool:
    """``--trace auto`` leaves a timeline over :data:`AUTO_TRACE_BYTES` unread when
    step_trace_time.csv carries the Overlap Analysis sums."""
    return with_trace is TraceMode.AUTO and has_step_trace and size > AUTO_TRACE_BYTES


# A timeline at least this large is scanned in another process of ``trace_pool`` while the
# kernel table is read (:func:`load_rank`). Starting that process costs ~0.9 s of CPU (imports,
# on the other core) and ~0.2 s to pickle the summary back; scanning 64 MiB costs ~0.4 s.
TRACE_AHEAD_BYTES = 64 << 20


def trace_worth_reading_ahead(loc: RankLocation, with_trace) -> Path | None:
    """The rank's timeline when it will be read and is at least :data:`TRACE_AHEAD_BYTES`
    (worth scanning in another process, :func:`load_rank` ``trace_pool``), else None."""
    with_trace = TraceMode.of(with_trace)
    if not with_trace.reads:
        return None
    tv_path, _ = _timeline_path(loc)
    try:
        size = tv_path.stat().st_size if tv_path.is_file() else 0
    except OSError:
        return None
    if size < TRACE_AHEAD_BYTES or _trace_skipped(with_trace, size, (loc.output_dir / "step_trace_time.csv").is_file()):
        return None
    return tv_path


def _trace_ahead(pool, loc: RankLocation, with_trace: TraceMode):
    """A future of ``read_trace`` of the rank's timeline running in ``pool``, or None (no
    pool, or :func:`trace_worth_reading_ahead` says no)."""
    tv_path = trace_worth_reading_ahead(loc, with_trace) if pool is not None else None
    if tv_path is None:
        return None
    try:
        return pool.submit(traceahead.scan_file, tv_path)
    except RuntimeError:  # a pool already shut down or broken: read here
        return None


def _trace_result(ahead, tv_path: Path) -> TraceSummary:
    """:func:`read_trace` of the timeline, its byte-level scan taken from the pool when it ran
    there (what it raised is raised where this process would have raised it); a pool whose
    process died (killed, out of memory) is scanned here instead."""
    if ahead is None:
        return read_trace(tv_path)

    def prescan():
        from concurrent.futures.process import BrokenProcessPool
        try:
            return traceahead.expand(ahead.result())
        except BrokenProcessPool:
            return traceahead.expand(traceahead.scan_file(tv_path))
    return read_trace(tv_path, prescan=prescan)


_OPTIONAL_FILES = ("step_trace_time.csv", "communication.json", "trace_view.json", "analysis.db")
# the files of a rank found by pattern: kernel table slices, the DB export, msprof timelines
_FOUND_FILES = ("op_summary*.csv", "ascend_pytorch_profiler*.db", "msprof_*.json")


def _require_regular(out: Path, layout: str = "torch_npu") -> None:
    """Every file of the rank perfgate reads (kernel_details.csv, :data:`_OPTIONAL_FILES`, and
    whatever :data:`_FOUND_FILES` match) is either absent or a regular file (through a symbolic
    link): a folder, a FIFO, a symbolic link loop or a link to nothing under that name is not
    "not present" (the run would pass without what it holds, or say the kernel table is
    missing) but an unreadable file (:func:`perfgate.ingest.discover.present_file`).

    Raises:
        InvalidCaptureError: naming the path and what is there instead (exit 3)."""
    names = (("kernel_details.csv",) if layout == "torch_npu" else ()) + _OPTIONAL_FILES
    for p in [out / name for name in names] + sorted(p for pat in _FOUND_FILES for p in out.glob(pat)):
        present_file(p)


def _load_rank(loc: RankLocation, *, with_trace, pmu, shapes, trace_pool=None, while_scanning=None,
               after_kernels=None) -> RankCapture:
    out = loc.output_dir
    _require_regular(out, loc.layout)
    kind, files = _kernel_source(out, loc.layout)
    if kind == "db":
        return _load_db_rank(loc, files[0], with_trace=with_trace)
    if kind == "partial":
        if with_trace is TraceMode.ALWAYS:
            raise InvalidCaptureError("partial rank without trace_view.json, and reading the timeline was "
                                      "required (--trace always)", path=loc.output_dir / "trace_view.json",
                                      hint="use --trace auto to accept ranks profiled without a timeline")
        return _load_partial_rank(loc)
    ahead = _trace_ahead(trace_pool, loc, with_trace)
    kernels = _read_slices(files, pmu=pmu, shapes=shapes)
    _check_values(loc, kernels)
    if after_kernels is not None:
        after_kernels(kernels)
    missing = []
    warnings = list(kernels.warnings)
    if any(out.glob("ascend_pytorch_profiler*.db")):
        warnings.append("both the text export and a DB export are present: the text export is read, the "
                        "DB ignored (never both)")
    st_path = out / "step_trace_time.csv"
    step_trace = read_step_trace(st_path) if st_path.is_file() else None
    if step_trace is None:
        missing.append("step_trace_time.csv")
    else:
        _refuse_unlabelled_kernels(kernels, step_trace, st_path)
        _refuse_other_device(kernels, step_trace, st_path)
        window = validity.collection_window(loc.info_path) if loc.layout == "torch_npu" else None
        validity.check_step_trace_values(step_trace, st_path, window,
                                         f"{loc.info_path.name} start_info / end_info" if window else "")
    cm_path = out / "communication.json"
    comm = read_communication(cm_path) if cm_path.is_file() else None
    if comm is None:
        missing.append("communication.json")
    elif comm.ops.empty and bool(kernels.df["is_comm"].any()):
        # a file with no op while the kernel table has communication rows proves nothing about
        # communication: said, never silently missing metrics
        warnings.append(f"{cm_path.name} holds no communication op, while {kernels.path.name} has "
                        f"{int(kernels.df['is_comm'].sum()):,} communication row(s): the communication.json "
                        f"metrics (comm.*) are left out")
    elif loc.layout == "torch_npu":
        cwin = validity.collection_window(loc.info_path)
        validity.check_comm_values(comm, cwin, f"{loc.info_path.name} start_info / end_info" if cwin else "")
    held = _held_steps(kernels)
    _refuse_foreign_comm_steps(comm, cm_path, held, kernels.path.name, step_trace, st_path)
    warnings.extend(_steps_missing(kernels, step_trace, st_path, comm, cm_path, held))
    warnings.extend(_schedule_short(loc, kernels, held))
    tv_path, timelines = _timeline_path(loc)  # raw msprof: msprof_<ts>.json (sliced: msprof_slice_<k>_*)
    if len(timelines) > 1:
        warnings.append(f"{len(timelines)} msprof timeline slices: not read (trace self-checks use "
                        f"step_trace_time.csv when present)")
    trace = None
    if tv_path.is_file() and _trace_skipped(with_trace, tv_path.stat().st_size, step_trace is not None):
        warnings.append(f"{tv_path.name} ({tv_path.stat().st_size / 2**20:,.0f} MiB) not read: step_trace_time.csv "
                        f"carries the Overlap Analysis sums the self-checks need (trace_vs_step_trace is "
                        f"skipped, tail gaps unavailable); use --trace always to read it")
    elif tv_path.is_file() and with_trace.reads:
        if ahead is not None and while_scanning is not None and not ahead.done():
            while_scanning(kernels)
        trace = _trace_result(ahead, tv_path)
        if not trace.has_overlap and trace.steps.empty and len(kernels.df):
            # every torch_npu timeline holds the device Overlap Analysis process and / or host
            # ProfilerStep#N events; one with neither is another file, not this capture's timeline
            raise InvalidCaptureError(
                f"holds {trace.n_events:,} event(s) but no Overlap Analysis process and no ProfilerStep#N "
                f"event, while {kernels.path.name} has {len(kernels.df):,} kernel rows: not the timeline of "
                f"this capture", path=tv_path,
                hint="re-export the profiling data, or pass --trace never to gate without the timeline")
    elif not tv_path.is_file():
        what = "trace_view.json" if loc.layout != "msprof" else "msprof_*.json timeline"
        if with_trace is TraceMode.ALWAYS:
            raise InvalidCaptureError(f"{what} is missing, and reading the timeline was required (--trace always)",
                                      path=tv_path, hint="re-export the profiling data, or use --trace auto")
        missing.append(what)
    if trace is not None and not trace.has_overlap and len(kernels.df):
        # every torch_npu timeline has the device's Overlap Analysis track: without it (events
        # without "ph", the process renamed) the trace checks are skipped, and that is said
        warnings.append(f"{tv_path.name} holds no Overlap Analysis X event (process \"Overlap Analysis\"): the "
                        f"trace self-checks that need it are skipped" + ("; step_trace_time.csv stands in for it"
                                                                        if step_trace is not None else ""))
    lost = validity.lost_launches(tv_path, trace.steps, getattr(trace, "flows", None)) if trace is not None else {}
    clock = validity.host_clock_mismatch(trace, kernels)
    if clock:
        warnings.append(clock)
    if trace is not None and trace.dropped_negative:
        warnings.append(f"{tv_path.name}: {trace.dropped_negative} X event(s) with a negative "
                        f"duration dropped")
    stat_path = _op_statistic_path(out, files)
    if stat_path is not None and (why := known_layout(stat_path)):
        warnings.append(f"{stat_path.name} not used to check {kernels.path.name}'s rows: {why}")
        stat_path = None
    return RankCapture(rank=loc.rank, location=loc, kernels=kernels, step_trace=step_trace,
                       step_trace_path=st_path if step_trace is not None else None,
                       comm=comm, comm_path=cm_path if comm is not None else None,
                       trace=trace, trace_path=tv_path if trace is not None else None,
                       missing=tuple(missing), warnings=tuple(warnings), host_clock_ok=clock is None,
                       lost_launches=lost, op_statistic=read_op_statistic(stat_path) if stat_path else None,
                       op_statistic_path=stat_path)


def _op_statistic_path(out: Path, kernel_files: list) -> Path | None:
    """The op_statistic table of this kernel table's export: ``op_statistic.csv`` beside
    kernel_details.csv, the one ``op_statistic_<ts>.csv`` beside a single raw msprof
    ``op_summary_<ts>.csv`` with the same ``<ts>``, or, beside the slices of one export
    (:func:`_refuse_mixed_exports`), the one ``op_statistic_<ts>.csv`` of the folder: msprof
    stamps each file when it writes it, so its stamp need not be a slice's, and it counts the
    tasks of the whole export (a lost slice is then seen). None otherwise (a single table whose
    stamp differs, several op_statistic files beside slices: not provably this table's)."""
    if kernel_files and kernel_files[0].name == "kernel_details.csv":
        p = out / "op_statistic.csv"
        return p if p.is_file() else None
    if len(kernel_files) == 1:
        m = _UNSLICED.match(kernel_files[0].name)
        p = out / f"op_statistic_{m.group(1)}.csv" if m else None
        return p if p is not None and p.is_file() else None
    if kernel_files and all(_SLICE.match(f.name) or _UNSLICED.match(f.name) for f in kernel_files):
        found = [p for p in out.glob("op_statistic_*.csv") if _STAT_STAMP.match(p.name) and p.is_file()]
        return found[0] if len(found) == 1 else None
    return None


def _held_steps(kernels: KernelTable) -> set[str] | None:
    """The step labels (text) the kernel table has rows in, the implicit step left out; None when
    its step column is not categorical or the table is empty (nothing to compare). One bincount
    over the step codes; the category names read once (an Index item read costs ~10 us each)."""
    import numpy as np
    col = kernels.df["step"]
    if not isinstance(col.dtype, pd.CategoricalDtype) or not len(col):
        return None
    codes = col.cat.codes.to_numpy()
    names = list(map(str, col.cat.categories.tolist()))
    seen = np.bincount(codes[codes >= 0], minlength=len(names)) > 0
    return {c for c, h in zip(names, seen.tolist()) if h and c != IMPLICIT_STEP}


def _listed(steps, limit: int = 8) -> str:
    """Step labels in numeric order, the first ``limit`` and how many more."""
    xs = sorted(steps, key=lambda x: (len(x), x))
    return ", ".join(xs[:limit]) + (f" (+{len(xs) - limit} more)" if len(xs) > limit else "")


def _step_trace_steps(step_trace) -> set[str]:
    """The step labels step_trace_time.csv has rows for (the implicit step and blanks left out)."""
    if step_trace is None or not len(step_trace):
        return set()
    return {str(x) for x in step_trace["step"].tolist() if x == x and x is not None} - {IMPLICIT_STEP, "", "nan", "None"}


def _refuse_foreign_comm_steps(comm, cm_path: Path, held: set | None, kfile: str | None,
                               step_trace, st_path: Path) -> None:
    """communication.json's steps must be steps of the rank's other files: a step neither the
    kernel table (its step labels, when it has any) nor step_trace_time.csv lists is another
    capture's or an edited file's, and its ops were averaged into the communication metrics
    (a step 14 copied into the file would give comm.elapse_us -47 %, "improved", exit 0). Nothing is checked when neither file names its steps.

    Raises:
        InvalidCaptureError: names the file, the foreign step(s) and the steps the others list."""
    if comm is None or not len(comm.ops):
        return
    known: dict[str, set] = {}
    if held:
        known[kfile] = held
    st = _step_trace_steps(step_trace)
    if st:
        known[st_path.name] = st
    if not known:
        return
    steps = {str(x) for x in comm.ops["step"].tolist()} - {IMPLICIT_STEP}
    foreign = steps - set().union(*known.values())
    if foreign:
        named = [f"{name} (steps {_listed(v, 6)})" for name, v in known.items()]
        where = f"neither {' nor '.join(named)} lists" if len(named) > 1 else f"{named[0]} does not list"
        raise InvalidCaptureError(
            f"holds ops in step(s) {_listed(foreign, 6)}, which {where}: not this capture's steps "
            f"(another run's file, or an edited one)", path=cm_path,
            hint="keep the communication.json the profiler wrote with these files, or re-export the run")


def _steps_missing(kernels: KernelTable, step_trace, st_path: Path, comm, cm_path: Path,
                   held: set | None = None) -> list[str]:
    """Warnings for steps of the kernel table another file of the rank leaves out: a
    step_trace_time.csv without a row for it (torch_npu writes one per step: its step metrics
    then come from the other steps), a communication.json without an op in a step where the
    kernel table has communication rows (a step without collectives has none, rightly).
    Second fresh-user round: a deleted row shifted rank 0's exposed communication 114 -> 198 us
    and a rank skew 3 -> 56 % with no note. Columnar: one pass over the step codes."""
    import numpy as np
    steps = _held_steps(kernels) if held is None else held
    if steps is None:
        return []
    k = kernels.df
    col = k["step"]
    cats = col.cat.categories
    codes = col.cat.codes.to_numpy()
    names = list(map(str, cats.tolist()))
    out = []

    if step_trace is not None and len(step_trace):
        traced = _step_trace_steps(step_trace)
        lost = steps - traced
        if lost:
            out.append(f"{st_path.name} has no row for step(s) {_listed(lost)} of {kernels.path.name}: the "
                       f"step metrics from it cover the other steps only (a row deleted or the export cut?)")
        empty = traced - steps if steps else set()
        if empty:
            out.append(f"{kernels.path.name} has no kernel row in step(s) {_listed(empty)} of {st_path.name}: "
                       f"their kernel rows were lost or deleted (every profiled step launches kernels); the "
                       f"kernel metrics cover the other steps only, and a step without Communication leaves "
                       f"step.exposed_comm_ratio out")
    if comm is not None and len(comm.ops):
        comm_codes = codes[k["is_comm"].to_numpy() & (codes >= 0)]
        with_comm = {names[c] for c in np.flatnonzero(np.bincount(comm_codes, minlength=len(cats))).tolist()}
        lost = (with_comm - {IMPLICIT_STEP}) - {str(x) for x in comm.ops["step"].tolist()}
        if lost:
            out.append(f"{cm_path.name} has no op in step(s) {_listed(lost)}, where {kernels.path.name} has "
                       f"communication rows: its metrics cover the other steps only (a step deleted?)")
    return out


def _schedule_short(loc: RankLocation, kernels: KernelTable, held: set | None = None) -> list[str]:
    """A warning when the kernel table holds fewer steps than profiler_info's schedule profiles
    (``active`` × ``repeat``, both integers >= 1; ``repeat`` 0 means until the job ends): steps
    lost at the end (the export cut, files trimmed) or a job that ended before its schedule did.
    Neither the trace nor step_trace_time.csv tells them apart once both lost the same steps."""
    sched = (getattr(loc, "info", None) or {}).get("schedule") or {}
    active, repeat = sched.get("active"), sched.get("repeat")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (active, repeat)):
        return []
    held = _held_steps(kernels) if held is None else held
    if not held or len(held) >= active * repeat:
        return []
    return [f"{kernels.path.name} holds {len(held)} step(s), but {loc.info_path.name}'s schedule profiles "
            f"{active * repeat} (active {active} x repeat {repeat}): steps lost at the end (the export cut, "
            f"files trimmed?) or the job ended before the schedule did; metrics cover the steps present"]


def _check_values(loc: RankLocation, kernels: KernelTable) -> None:
    """Time values bounded by the capture's own span (:func:`perfgate.ingest.validity.check_time_values`)."""
    window = validity.collection_window(loc.info_path) if loc.layout == "torch_npu" else None
    validity.check_time_values(kernels, window, f"{loc.info_path.name} start_info / end_info" if window else "")


def _load_partial_rank(loc: RankLocation) -> RankCapture:
    """A rank holding only :data:`PARTIAL_TABLES` (no kernel table, no timeline)."""
    out = loc.output_dir
    st_path, cm_path = out / "step_trace_time.csv", out / "communication.json"
    step_trace = read_step_trace(st_path) if st_path.is_file() else None
    window = validity.collection_window(loc.info_path)
    validity.check_step_trace_values(step_trace, st_path, window,
                                     f"{loc.info_path.name} start_info / end_info" if window else "")
    comm = read_communication(cm_path) if cm_path.is_file() else None
    validity.check_comm_values(comm, window, f"{loc.info_path.name} start_info / end_info" if window else "")
    _refuse_foreign_comm_steps(comm, cm_path, None, None, step_trace, st_path)
    held = [p.name for p, v in ((st_path, step_trace), (cm_path, comm)) if v is not None]
    missing = ["kernel_details.csv", "trace_view.json"] + [p.name for p, v in ((st_path, step_trace),
                                                                              (cm_path, comm)) if v is None]
    return RankCapture(rank=loc.rank, location=loc, kernels=None, step_trace=step_trace,
                       step_trace_path=st_path if step_trace is not None else None,
                       comm=comm, comm_path=cm_path if comm is not None else None, trace=None, trace_path=None,
                       missing=tuple(missing),
                       warnings=(f"partial rank: of the tables perfgate reads it holds only {', '.join(held)} (no "
                                 f"kernel_details.csv); it contributes its step and "
                                 f"communication metrics, kernel metrics are computed over the other ranks",))


def _load_db_rank(loc: RankLocation, db: Path, *, with_trace: TraceMode) -> RankCapture:
    from perfgate.ingest import db as dbmod
    con = dbmod._connect(db)
    try:
        dbmod.check_db_identity(con, db, loc.rank, loc.rank_source)
        windows = dbmod.step_windows(con, db)
    finally:
        con.close()
    kernels, con = dbmod.read_db_kernels(db, windows)
    _check_values(loc, kernels)
    try:
        trace = dbmod.read_db_trace(con, db, windows) if with_trace.reads else None
    finally:
        con.close()
    missing = []
    adb = loc.output_dir / "analysis.db"
    step_trace, comm = (dbmod.read_analysis_db(adb) if adb.is_file() else (None, None))
    if step_trace is None:
        missing.append("analysis.db StepTraceTime")
    if comm is None:
        missing.append("analysis.db CommAnalyzerTime")
    if trace is not None and not trace.has_overlap:
        if with_trace is TraceMode.ALWAYS:
            raise InvalidCaptureError("has no OVERLAP_ANALYSIS table, and reading the timeline was required "
                                      "(--trace always)", path=db,
                                      hint="export at profiler Level1 or above, or use --trace auto")
        missing.append("OVERLAP_ANALYSIS table")
    return RankCapture(rank=loc.rank, location=loc, kernels=kernels, step_trace=step_trace,
                       step_trace_path=adb if step_trace is not None else None, comm=comm,
                       comm_path=adb if comm is not None else None, trace=trace,
                       trace_path=db if trace is not None else None, missing=tuple(missing),
                       warnings=kernels.warnings)


def as_capture_error(e: Exception, loc: RankLocation) -> InvalidCaptureError:
    """A rank's read failure as an InvalidCaptureError (permission denied, vanished file, ...)."""
    if isinstance(e, InvalidCaptureError):
        return e
    return InvalidCaptureError(f"cannot read file: {getattr(e, 'strerror', None) or e}",
                               path=getattr(e, "filename", None) or loc.output_dir)


def load_capture(path, *, with_trace=TraceMode.READ, pmu: bool | str = False, shapes: bool = False) -> Capture:
    """Discover and read every rank of a capture.

    Args:
        path: capture directory (see :mod:`perfgate.ingest.discover`).
        with_trace: a :class:`perfgate.terms.TraceMode` (or its older spellings True / False /
            ``"require"`` / ``"auto"``, see :meth:`TraceMode.of`): READ (read the timeline when
            present), ALWAYS (a rank without one holding Overlap Analysis is an
            InvalidCaptureError), NEVER, or AUTO (skip a trace above AUTO_TRACE_BYTES when
            step_trace_time.csv is present; a warning says so).
        pmu: also read PMU columns of kernel_details / op_summary: True = the ``*_ratio`` and pipe
            ``*_time(us)`` columns the family view reads, ``"all"`` = every one
            (:func:`perfgate.ingest.kernels.pmu_columns`).
        shapes: also read Input Shapes and Input Data Types (for MFU).

    Raises:
        UsageError: the path is empty.
        InvalidCaptureError: the path does not exist / is not a directory; any rank is incomplete or unreadable. Every rank is read first;
            the error lists all problems found (``problems``), the message names the first.
    """
    locs = discover(path)
    ranks = []
    problems: list[PerfgateError] = []
    for loc in locs:
        try:
            ranks.append(load_rank(loc, with_trace=with_trace, pmu=pmu, shapes=shapes))
        except (InvalidCaptureError, OSError) as e:
            problems.append(as_capture_error(e, loc))
    if problems:
        raise InvalidCaptureError.combine(problems)
    warnings = []
    mixed = mixed_levels_warning({r.location.info.get("profiler_level") for r in ranks})
    if mixed:
        warnings.append(mixed)
    return Capture(path=Path(path), ranks=tuple(ranks), warnings=tuple(warnings))
