"""Ingest: profiler files -> typed per-rank tables. The only layer that knows raw headers.

Entry point: :func:`load_capture`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from perfgate.errors import InvalidCaptureError, PerfgateError
from perfgate.ingest.comm import read_communication
from perfgate.ingest.discover import RankLocation, discover
from perfgate.ingest.kernels import KernelTable, read_kernels
from perfgate.ingest.steps import read_step_trace
from perfgate.ingest.trace import TraceSummary, read_trace

__all__ = ["Capture", "RankCapture", "load_capture"]


@dataclass(frozen=True)
class RankCapture:
    """One rank's parsed files. Optional files are None when absent (see ``missing``)."""
    rank: int
    location: RankLocation
    kernels: KernelTable
    step_trace: pd.DataFrame | None
    step_trace_path: Path | None
    comm: pd.DataFrame | None
    comm_path: Path | None
    trace: TraceSummary | None
    trace_path: Path | None
    missing: tuple = ()
    warnings: tuple = ()


@dataclass(frozen=True)
class Capture:
    """A whole capture: its root and ranks (sorted by rank id)."""
    path: Path
    ranks: tuple
    warnings: tuple = field(default_factory=tuple)

    @property
    def world_size(self) -> int:
        return len(self.ranks)


def _kernel_file(out: Path, layout: str) -> Path:
    if layout == "torch_npu":
        p = out / "kernel_details.csv"
        if p.is_file():
            return p
    slices = sorted(out.glob("op_summary*.csv"))
    if len(slices) == 1:
        return slices[0]
    if len(slices) > 1:
        raise InvalidCaptureError(
            f"{len(slices)} op_summary slices ({slices[0].name}, ...): sliced msprof summaries are "
            f"not read yet", path=out, hint="export a single op_summary or use torch_npu output")
    dbs = sorted(out.glob("ascend_pytorch_profiler*.db"))
    if dbs:
        raise InvalidCaptureError(
            f"only a DB export ({dbs[0].name}) is present; perfgate reads the text export",
            path=out, hint="profile with export_type text (or ['text', 'db'])")
    done = [p.name for p in out.parent.glob("*.done")] + [p.name for p in out.glob("*.done")]
    extra = f" although {done[0]} says the analysis finished" if done else ""
    raise InvalidCaptureError(
        f"incomplete profile: no kernel_details.csv{extra}", path=out,
        hint="the export did not produce the kernel table; re-run the profiler's analyse step")


def load_rank(loc: RankLocation, *, with_trace: bool = True) -> RankCapture:
    """Read one rank's files.

    Raises:
        InvalidCaptureError: kernel table missing or unreadable, or any present optional file
            (step_trace_time.csv, communication.json, trace_view.json) unreadable.
    """
    out = loc.output_dir
    kernels = read_kernels(_kernel_file(out, loc.layout))
    missing = []
    warnings = list(kernels.warnings)
    st_path = out / "step_trace_time.csv"
    step_trace = read_step_trace(st_path) if st_path.is_file() else None
    if step_trace is None:
        missing.append("step_trace_time.csv")
    cm_path = out / "communication.json"
    comm = read_communication(cm_path) if cm_path.is_file() else None
    if comm is None:
        missing.append("communication.json")
    tv_path = out / "trace_view.json"
    trace = None
    if tv_path.is_file() and with_trace:
        trace = read_trace(tv_path)
    elif not tv_path.is_file():
        missing.append("trace_view.json")
    if trace is not None and trace.dropped_negative:
        warnings.append(f"trace_view.json: {trace.dropped_negative} X event(s) with a negative "
                        f"duration dropped")
    return RankCapture(rank=loc.rank, location=loc, kernels=kernels, step_trace=step_trace,
                       step_trace_path=st_path if step_trace is not None else None,
                       comm=comm, comm_path=cm_path if comm is not None else None,
                       trace=trace, trace_path=tv_path if trace is not None else None,
                       missing=tuple(missing), warnings=tuple(warnings))


def load_capture(path, *, with_trace: bool = True) -> Capture:
    """Discover and read every rank of a capture.

    Args:
        path: capture directory (see :mod:`perfgate.ingest.discover`).
        with_trace: read trace_view.json when present (needed for the trace self-checks).

    Raises:
        UsageError: the path does not exist / is not a directory.
        InvalidCaptureError: any rank is incomplete or unreadable. Every rank is read first;
            the error lists all problems found (``problems``), the message names the first.
    """
    locs = discover(Path(path))
    ranks = []
    problems: list[PerfgateError] = []
    for loc in locs:
        try:
            ranks.append(load_rank(loc, with_trace=with_trace))
        except InvalidCaptureError as e:
            problems.append(e)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise InvalidCaptureError(first.message + more, path=first.path, row=first.row,
                                  byte_offset=first.byte_offset, hint=first.hint,
                                  problems=[p.to_dict() for p in problems])
    warnings = []
    levels = {r.location.info.get("profiler_level") for r in ranks}
    if len(levels) > 1:
        warnings.append(f"ranks were profiled at different levels: {sorted(map(str, levels))}")
    return Capture(path=Path(path), ranks=tuple(ranks), warnings=tuple(warnings))
